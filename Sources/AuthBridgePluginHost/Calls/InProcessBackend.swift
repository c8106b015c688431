import AuthBridgeJSON
import AuthBridgeSystem
import CAuthBridgePlugin
import Logging
import Synchronization

/// Runs a plugin's hooks inside the host: on `HookThreads` (blocking hooks
/// may wait on the network), or on the caller's thread for inline ones.
///
/// A hook past its deadline cannot be stopped in-process: its call is
/// answered by `LoadedPlugin`, and its thread is abandoned here (counted, and
/// its late outcome dropped when it returns).
final class InProcessBackend: PluginBackend {
    let isolation = PluginIsolation.none

    /// The library's table and state: read-only once `init` returned, and the
    /// ABI lets hooks run on any thread.
    private struct Loaded: @unchecked Sendable {
        let vtable: UnsafePointer<ab_plugin_vtable>
        let state: OpaquePointer?
    }
    private struct State {
        var loaded: Loaded?
        var shutDown = false
        /// Calls given up while their hook still runs.
        var abandoned: Set<ObjectIdentifier> = []
    }
    private let state: Mutex<State>
    private let dlopenPath: String?
    private let manifest: PluginManifest
    private let loadDeadline: Duration
    private let logger: Logger

    /// A library still to be opened by `load`: `dlopenPath` is vetted (or `/proc/self/fd/N`).
    init(dlopenPath: String, manifest: PluginManifest, loadDeadline: Duration = HookDeadlines().load, logger: Logger) {
        self.dlopenPath = dlopenPath
        self.manifest = manifest
        self.loadDeadline = loadDeadline
        self.logger = logger
        state = Mutex(State())
    }

    /// A library already opened and initialised (`PluginEntry.open`).
    init(manifest: PluginManifest, vtable: UnsafePointer<ab_plugin_vtable>, state: OpaquePointer?, logger: Logger) {
        self.dlopenPath = nil
        self.manifest = manifest
        self.loadDeadline = HookDeadlines().load
        self.logger = logger
        self.state = Mutex(State(loaded: Loaded(vtable: vtable, state: state)))
    }

    /// Opens the library and runs `init` on a hook thread; an `init` that
    /// does not return within the load deadline refuses the plugin (its
    /// thread is abandoned).
    func load() throws(PluginLoadError) {
        guard let dlopenPath, state.withLock({ $0.loaded == nil }) else { return }
        let manifest = self.manifest
        let answer = Mutex<Result<Loaded, PluginLoadError>?>(nil)
        let done = Handoff<Bool>()
        HookThreads.shared.submit {
            let result: Result<Loaded, PluginLoadError>
            do throws(PluginLoadError) {
                let (vtable, state) = try PluginEntry.open(dlopenPath: dlopenPath, manifest: manifest, host: HostAPI.table)
                result = .success(Loaded(vtable: vtable, state: state))
            } catch {
                result = .failure(error)
            }
            let first = answer.withLock { stored in
                guard stored == nil else { return false }
                stored = result
                return true
            }
            if first { done.put(true) } else { HookThreads.shared.lateReturns.add(1, ordering: .relaxed) }
        }
        let timer = HookWatchdog.shared.arm(at: .now + loadDeadline) {
            let first = answer.withLock { stored in
                guard stored == nil else { return false }
                stored = .failure(
                    PluginLoadError(.pluginTimeout, "loading did not finish within \(HookDeadlines.words(self.loadDeadline)) (dlopen or init)"))
                return true
            }
            if first {
                HookThreads.shared.abandoned.add(1, ordering: .relaxed)
                done.put(false)
            }
        }
        _ = done.take()
        HookWatchdog.shared.disarm(timer)
        switch answer.withLock({ $0 })! {
        case .success(let loaded): state.withLock { $0.loaded = loaded }
        case .failure(let error): throw error
        }
    }

    func implements(_ hook: PluginHook) -> Bool {
        guard let vtable = state.withLock({ $0.loaded?.vtable }) else { return false }
        return PluginEntry.function(for: hook, in: vtable) != nil
    }

    func start(_ hook: PluginHook, input: JSON, call: HookCall, inline: Bool, done: @escaping @Sendable (HookOutcome) -> Void) {
        let (loaded, shutDown) = state.withLock { ($0.loaded, $0.shutDown) }
        guard !shutDown, let loaded, let function = PluginEntry.function(for: hook, in: loaded.vtable) else {
            done(shutDown ? .failure(Self.shutDownFailure(manifest.id)) : .useDefault)
            return
        }
        let input = input.serialized()
        if inline {
            done(run(function, state: loaded.state, call: call, input: input))
            return
        }
        HookThreads.shared.submit { [self] in
            let outcome = run(function, state: loaded.state, call: call, input: input)
            if state.withLock({ $0.abandoned.remove(ObjectIdentifier(call)) != nil }) {
                let late = HookThreads.shared.lateReturns.add(1, ordering: .relaxed).newValue
                logger.notice("an abandoned hook returned", metadata: ["plugin": "\(manifest.id)", "hook": "\(hook)", "lateReturns": "\(late)"])
            }
            done(outcome)
        }
    }

    func runInline(_ hook: PluginHook, text: [UInt8], call: HookCall) -> HookOutcome? {
        let (loaded, shutDown) = state.withLock { ($0.loaded, $0.shutDown) }
        guard !shutDown, let loaded, let function = PluginEntry.function(for: hook, in: loaded.vtable) else { return nil }
        return run(function, state: loaded.state, call: call, input: text)
    }

    func abandon(_ call: HookCall, because: Abandonment) {
        state.withLock { _ = $0.abandoned.insert(ObjectIdentifier(call)) }
        let count = HookThreads.shared.abandoned.add(1, ordering: .relaxed).newValue
        logger.warning("\(count) hook threads abandoned", metadata: ["plugin": "\(manifest.id)", "hook": "\(call.hook)"])
    }

    /// Calls the plugin's `shutdown` once (the library stays mapped: never `dlclose`).
    func shutdown(within grace: Duration) {
        let loaded = state.withLock { state -> Loaded? in
            guard !state.shutDown else { return nil }
            state.shutDown = true
            return state.loaded
        }
        if let loaded, let shutdown = loaded.vtable.pointee.shutdown { shutdown(loaded.state) }
    }

    static func shutDownFailure(_ plugin: String) -> ProviderFailure {
        ProviderFailure(.internal, reason: "pluginShutDown", message: "The \(plugin) plugin has shut down.")
    }

    private func run(_ function: ab_hook_fn, state: OpaquePointer?, call: HookCall, input: [UInt8]) -> HookOutcome {
        let pointer = OpaquePointer(Unmanaged.passUnretained(call).toOpaque())
        let status = input.withUnsafeBytes { bytes in
            function(state, pointer, ab_json(data: bytes.baseAddress!.assumingMemoryBound(to: CChar.self), length: bytes.count))
        }
        return withExtendedLifetime(call) { call.outcome(status: status) }
    }
}
