import AuthBridgePluginABI
import AuthBridgeJSON
import CAuthBridgePlugin
import Dispatch
import Logging
import Synchronization

/// A plugin that passed every check and whose `init` succeeded.
///
/// Threading: `invoke` may be called from any task; the hook itself runs on
/// a thread of `HookThreads` (never on the cooperative pool,
/// since hooks may block on HTTP), as the ABI's thread rules promise.
public final class LoadedPlugin: @unchecked Sendable {
    public let manifest: PluginManifest
    /// The plugin's `describe` answer (id, displayName, flows, settings schema…).
    /// Set once by the loader before the plugin is shared.
    public internal(set) var descriptor: JSON = .null {
        didSet {
            let named = Set(descriptor["inlineHooks"]?.arrayValue?.compactMap(\.stringValue) ?? [])
            inlineHooks = Set(PluginHook.allCases.filter { $0.isPure || named.contains($0.description) })
        }
    }

    /// Hooks that never block, run on the caller's thread: the pure ones
    /// (authorize_request, classify_response) and those the plugin lists in
    /// its descriptor's `inlineHooks`. `host->http` fails inside them.
    public private(set) var inlineHooks: Set<PluginHook> = Set(PluginHook.allCases.filter(\.isPure))
    public let libraryPath: String
    /// The plugin's version as its entry point reports it.
    public let version: String

    private let vtable: UnsafePointer<ab_plugin_vtable>
    private let state: OpaquePointer?
    private let logger: Logger
    private let isShutDown = Atomic<Bool>(false)

    init(
        manifest: PluginManifest, libraryPath: String, version: String,
        vtable: UnsafePointer<ab_plugin_vtable>, state: OpaquePointer?, logger: Logger
    ) {
        self.manifest = manifest
        self.libraryPath = libraryPath
        self.version = version
        self.vtable = vtable
        self.state = state
        self.logger = logger
    }

    /// True when the plugin implements `hook` itself.
    public func implements(_ hook: PluginHook) -> Bool { function(for: hook) != nil }

    /// Runs a hook on a worker thread. Task cancellation sets the call's
    /// cancelled flag (and aborts its HTTP requests).
    public func invoke(_ hook: PluginHook, input: JSON, environment: HookEnvironment) async -> HookOutcome {
        guard let function = function(for: hook) else { return .useDefault }
        if inlineHooks.contains(hook) {
            let call = HookCall(pluginID: manifest.id, hook: hook, logger: logger, environment: environment, mayBlock: false)
            return run(function, call: call, input: input.serialized())
        }
        let call = HookCall(pluginID: manifest.id, hook: hook, logger: logger, environment: environment)
        let inputText = input.serialized()
        return await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                HookThreads.shared.submit { [self] in
                    continuation.resume(returning: run(function, call: call, input: inputText))
                }
            }
        } onCancel: {
            call.cancel()
        }
    }

    /// Runs one of the host's own steps (a standard hook implementation) for
    /// this plugin the way hooks run: on a worker thread, with a `HookCall`
    /// whose HTTP requests task cancellation aborts.
    public func runHostStep(
        _ hook: PluginHook, environment: HookEnvironment,
        _ body: @escaping @Sendable (HookCall) -> Result<JSON, ProviderFailure>
    ) async -> Result<JSON, ProviderFailure> {
        let call = HookCall(pluginID: manifest.id, hook: hook, logger: logger, environment: environment)
        return await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                HookThreads.shared.submit { continuation.resume(returning: body(call)) }
            }
        } onCancel: {
            call.cancel()
        }
    }

    /// Runs a hook on the current thread (load time, tests).
    public func invokeBlocking(_ hook: PluginHook, input: JSON, environment: HookEnvironment) -> HookOutcome {
        guard let function = function(for: hook) else { return .useDefault }
        let call = HookCall(pluginID: manifest.id, hook: hook, logger: logger, environment: environment)
        return run(function, call: call, input: input.serialized())
    }

    private func run(_ function: ab_hook_fn, call: HookCall, input: [UInt8]) -> HookOutcome {
        if isShutDown.load(ordering: .acquiring) {
            return .failure(ProviderFailure(.internal, reason: "pluginShutDown", message: "The \(manifest.id) plugin has shut down."))
        }
        let pointer = OpaquePointer(Unmanaged.passUnretained(call).toOpaque())
        let status = input.withUnsafeBytes { bytes in
            function(state, pointer, ab_json(data: bytes.baseAddress!.assumingMemoryBound(to: CChar.self), length: bytes.count))
        }
        return withExtendedLifetime(call) { call.outcome(status: status) }
    }

    /// True once `shutdown` ran.
    public var hasShutDown: Bool { isShutDown.load(ordering: .acquiring) }

    /// Calls the plugin's shutdown once. The library stays mapped (never dlclose).
    public func shutdown() {
        guard !isShutDown.exchange(true, ordering: .acquiringAndReleasing) else { return }
        if let shutdown = vtable.pointee.shutdown { shutdown(state) }
    }

    private func function(for hook: PluginHook) -> ab_hook_fn? {
        let table = vtable.pointee
        let keyPath: KeyPath<ab_plugin_vtable, ab_hook_fn?>
        switch hook {
        case .describe: keyPath = \.describe
        case .configure: keyPath = \.configure
        case .beginSignIn: keyPath = \.begin_sign_in
        case .completeSignIn: keyPath = \.complete_sign_in
        case .refresh: keyPath = \.refresh
        case .revoke: keyPath = \.revoke
        case .checkSession: keyPath = \.check_session
        case .authorizeRequest: keyPath = \.authorize_request
        case .classifyResponse: keyPath = \.classify_response
        }
        // Append-only table: an entry past the plugin's `size` is absent.
        guard let offset = MemoryLayout<ab_plugin_vtable>.offset(of: keyPath),
            offset + MemoryLayout<ab_hook_fn?>.size <= Int(table.size)
        else { return nil }
        return table[keyPath: keyPath]
    }
}
