import AuthBridgeJSON

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

// The seam between what a plugin's hooks mean (`LoadedPlugin`: deadlines,
// health, inline hooks) and where they run: in this process or in the
// plugin's own runner process (`authbridge plugin-runner`). Issue 14 builds
// both sides; this file is the contract they share.

/// Where a plugin's code runs (bridge-spec PluginStatus.isolation).
public enum PluginIsolation: String, Sendable, CaseIterable {
    /// In its own runner process: a crash, a hang or stray output cannot take the host down.
    case process
    /// Inside the host, on its hook threads.
    case none
}

/// A plugin library checked through an open descriptor, so that what was
/// checked is what runs (no window between the check and `dlopen`).
///
/// `fd` stays open for the life of the process: glibc matches `dlopen` names,
/// so a reused `/proc/self/fd/N` would name another library, and a runner
/// restarted after a crash loads from the same descriptor.
struct VettedLibrary: Sendable {
    let fd: Int32
    let path: String
    let manifest: PluginManifest
    let elf: ELFCheck.Library
    /// The descriptor's `fstat`: the file `path` must still name when it is opened.
    let info: stat

    init(fd: Int32, path: String, manifest: PluginManifest, elf: ELFCheck.Library, info: stat = stat()) {
        self.fd = fd
        self.path = path
        self.manifest = manifest
        self.elf = elf
        self.info = info
    }
}

/// Why a call was given up before its hook returned.
enum Abandonment: Sendable {
    /// The hook ran past its deadline.
    case deadline
    /// The caller cancelled and the hook did not return within the grace; the
    /// hook's own deadline still bounds it.
    case cancelled(deadlineAt: ContinuousClock.Instant)
}

/// How a plugin's hooks run: in this process or in its runner.
///
/// Threading: every method may be called from any thread. `start` never
/// blocks (except an inline call, which runs on the caller's thread), and its
/// `done` runs exactly once — with `.failure` for a runner that died.
protocol PluginBackend: AnyObject, Sendable {
    var isolation: PluginIsolation { get }
    /// Opens the library and runs the plugin's `init`: `dlopen` on a hook
    /// thread, or spawning the runner and its `load`. Bounded by the load deadline.
    func load() throws(PluginLoadError)
    /// True when the plugin implements `hook` itself (else: the host's standard step).
    func implements(_ hook: PluginHook) -> Bool
    /// Starts one hook call; `done` receives its outcome exactly once.
    func start(_ hook: PluginHook, input: JSON, call: HookCall, inline: Bool, done: @escaping @Sendable (HookOutcome) -> Void)
    /// Runs an inline hook on the caller's thread with input already made as
    /// JSON text (kept by the caller for calls that repeat); nil when this
    /// backend cannot (only plugins in the host run hooks inline).
    func runInline(_ hook: PluginHook, text: [UInt8], call: HookCall) -> HookOutcome?
    /// Gives up a call whose outcome will no longer be waited for.
    func abandon(_ call: HookCall, because: Abandonment)
    /// Ends the plugin: its `shutdown` when no hook runs, then (isolated) the runner, within `grace`.
    func shutdown(within grace: Duration)
    /// How the plugin's runner is confined; nil in the host (and for a runner that is no process).
    var confinement: RunnerConfinement? { get }
}

extension PluginBackend {
    func runInline(_ hook: PluginHook, text: [UInt8], call: HookCall) -> HookOutcome? { nil }
    var confinement: RunnerConfinement? { nil }
}
