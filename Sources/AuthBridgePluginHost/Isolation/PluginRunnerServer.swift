import AuthBridgeJSON
import AuthBridgeRPC
import AuthBridgeSystem
import CAuthBridgePlugin
import Logging
import Synchronization

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// The runner's side of the channel (`authbridge plugin-runner`): loads one plugin library from
/// the descriptor the host vetted and runs its hooks for the host.
///
/// `load` opens the library through `/proc/self/fd/N` (what was vetted is what runs), checks
/// its entry point and runs `init`. Each `hook` runs on a `HookThreads` thread with a `HookCall`
/// whose services are a `RunnerEnvironment`; `cancel` cancels it. `shutdown` calls the plugin's
/// `shutdown` when no hook runs. End of input ends the process (`_exit`, even with a hook hung);
/// so does `shutdown`. In tests (`exitsProcess` false) `run` returns instead.
///
/// Threading: the channel's reader thread dispatches; hooks and `load` run on hook threads.
public final class PluginRunnerServer: Sendable {
    private struct Loaded: @unchecked Sendable {
        let manifest: PluginManifest
        let vtable: UnsafePointer<ab_plugin_vtable>
        let state: OpaquePointer?
        let logLevel: Logger.Level
    }

    private struct State {
        var loaded: Loaded?
        var loading = false
        /// The calls running, by the host's number.
        var calls: [Int64: HookCall] = [:]
        var shutDown = false
    }

    private let channel: RunnerChannel
    private let libraryFD: Int32
    private let exitsProcess: Bool
    private let setClockOffset: @Sendable (Int64) -> Void
    private let state = Mutex(State())
    private let ended = Handoff<Bool>()

    /// `channelFD`: the runner's end of the channel (3 in a runner process); `libraryFD`: the
    /// vetted library (4).
    public convenience init(channelFD: Int32, libraryFD: Int32) {
        self.init(channelFD: channelFD, libraryFD: libraryFD, exitsProcess: true, setClockOffset: HostClock.setOffset)
    }

    /// Tests run the server on a thread of their own process, whose clock the host side already
    /// shares: `setClockOffset` records the host's offset instead of moving the shared clock.
    init(channelFD: Int32, libraryFD: Int32, exitsProcess: Bool, setClockOffset: @escaping @Sendable (Int64) -> Void) {
        self.channel = RunnerChannel(fd: channelFD, idPrefix: "r")
        self.libraryFD = libraryFD
        self.exitsProcess = exitsProcess
        self.setClockOffset = setClockOffset
    }

    /// Serves the host until the channel ends; in a runner process it never returns.
    public func run() {
        let started = channel.start(
            RunnerChannel.Handlers(
                onRequest: { [self] id, method, params in request(id, method, params) },
                onNotification: { [self] method, params in notification(method, params) },
                onEnd: { [self] _ in end() }))
        if started { _ = ended.take() }
        if exitsProcess { _exit(0) }
    }

    private func end() {
        if exitsProcess { _exit(0) }
        ended.put(true)
    }

    private func request(_ id: RequestID, _ method: String, _ params: JSON) {
        switch method {
        case RunnerProtocol.Method.load:
            let first = state.withLock { state -> Bool in
                defer { state.loading = true }
                return !state.loading
            }
            guard first else {
                return channel.respond(id, .failure(RunnerError(code: RunnerProtocol.invalidParams, message: "the plugin is already loaded")))
            }
            HookThreads.shared.submit { [self] in channel.respond(id, load(params)) }
        case RunnerProtocol.Method.hook:
            hook(id, params)
        default:
            channel.respond(id, .failure(RunnerError(code: RunnerProtocol.methodNotFound, message: "no method \(method) in a plugin runner")))
        }
    }

    private func notification(_ method: String, _ params: JSON) {
        switch method {
        case RunnerProtocol.Method.cancel:
            guard let callID = params["call"]?.intValue else { return }
            state.withLock { $0.calls[callID] }?.cancel()
        case RunnerProtocol.Method.shutdown:
            shutdown()
        default:
            break
        }
    }

    private func load(_ params: JSON) -> Result<JSON, RunnerError> {
        guard params["protocol"]?.intValue == RunnerProtocol.version, let manifestJSON = params["manifest"] else {
            return .failure(RunnerError(code: RunnerProtocol.invalidParams, message: "load needs protocol 1 and a manifest"))
        }
        let level = params["logLevel"]?.stringValue.flatMap(Logger.Level.init(rawValue:)) ?? .info
        setClockOffset(params["clockOffsetMs"]?.intValue ?? 0)
        // Logs outside a call (`init`'s) go to the host too (in a runner process: in tests the
        // host's logger is this process's).
        if exitsProcess { HostAPI.pluginLogger = logger(callID: nil, level: level) }
        do throws(PluginLoadError) {
            let manifest = try PluginManifest(json: manifestJSON)
            let (vtable, pluginState) = try PluginEntry.open(
                dlopenPath: "/proc/self/fd/\(libraryFD)", manifest: manifest, host: HostAPI.table)
            state.withLock { $0.loaded = Loaded(manifest: manifest, vtable: vtable, state: pluginState, logLevel: level) }
            let hooks = PluginHook.allCases.filter { PluginEntry.function(for: $0, in: vtable) != nil }
            return .success(RunnerProtocol.loadResult(implements: hooks, pid: RunnerConfinement.hostProcessID()))
        } catch {
            return .failure(RunnerProtocol.loadError(error))
        }
    }

    private func hook(_ id: RequestID, _ params: JSON) {
        guard let callID = params["call"]?.intValue, let hook = params["hook"]?.stringValue.flatMap(PluginHook.init(name:)),
            let input = params["input"]
        else {
            return channel.respond(id, .failure(RunnerError(code: RunnerProtocol.invalidParams, message: "hook needs call, hook and input")))
        }
        if let offset = params["clockOffsetMs"]?.intValue { setClockOffset(offset) }
        guard let loaded = state.withLock({ $0.shutDown ? nil : $0.loaded }) else {
            return channel.respond(id, .failure(RunnerError(message: "the plugin is not loaded")))
        }
        guard let function = PluginEntry.function(for: hook, in: loaded.vtable) else {
            return channel.respond(id, .success(RunnerProtocol.outcomeJSON(.useDefault)))
        }
        // Pure hooks may not block (as in the host); inline hooks mean nothing here.
        let call = HookCall(
            pluginID: loaded.manifest.id, hook: hook, logger: logger(callID: callID, level: loaded.logLevel),
            environment: RunnerEnvironment(channel: channel, callID: callID), mayBlock: !hook.isPure)
        state.withLock { $0.calls[callID] = call }
        let text = input.serialized()
        HookThreads.shared.submit { [self] in
            let pointer = OpaquePointer(Unmanaged.passUnretained(call).toOpaque())
            let status = text.withUnsafeBytes { bytes in
                function(loaded.state, pointer, ab_json(data: bytes.baseAddress!.assumingMemoryBound(to: CChar.self), length: bytes.count))
            }
            let outcome = withExtendedLifetime(call) { call.outcome(status: status) }
            state.withLock { _ = $0.calls.removeValue(forKey: callID) }
            channel.respond(id, .success(RunnerProtocol.outcomeJSON(outcome)))
        }
    }

    /// The plugin's `shutdown` when no hook runs (the ABI: never during a hook), then the end.
    private func shutdown() {
        let loaded = state.withLock { state -> Loaded? in
            state.shutDown = true
            return state.calls.isEmpty ? state.loaded : nil
        }
        if let loaded, let shutdown = loaded.vtable.pointee.shutdown { shutdown(loaded.state) }
        if exitsProcess {
            // A hook still running may hold locks `exit`'s handlers need.
            if loaded != nil { exit(0) } else { _exit(0) }
        }
        channel.close()
    }

    private func logger(callID: Int64?, level: Logger.Level) -> Logger {
        let channel = channel
        return Logger(label: "authbridge.plugin") { _ in ChannelLogHandler(channel: channel, callID: callID, logLevel: level) }
    }
}
