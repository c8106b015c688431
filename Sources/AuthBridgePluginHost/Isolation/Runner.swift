import AuthBridgeJSON
import AuthBridgeRPC
import AuthBridgeRedaction
import AuthBridgeSystem
import Logging
import Synchronization

/// One runner process and the calls in flight in it.
final class Runner: Sendable {
    private struct Pending {
        let call: HookCall
        let done: @Sendable (HookOutcome) -> Void
        let startedAt: ContinuousClock.Instant
    }

    private struct State {
        var calls: [Int64: Pending] = [:]
        var servicesInFlight = 0
        /// Set before the runner is killed on purpose, or when it broke the protocol.
        var violation: String?
        /// The hook whose overrun got the runner killed.
        var killedAfterTimeout: PluginHook?
        var shuttingDown = false
        var hasEnded = false
        var processID: Int32?
    }

    private let handle: RunnerHandle
    private let channel: RunnerChannel
    private let pluginID: String
    private let logger: Logger
    private let state = Mutex(State())
    private let channelEnded = Handoff<Bool>()
    private let finished = Finished()
    private let ended: @Sendable (Runner, RunnerEnding) -> Void

    init(handle: RunnerHandle, pluginID: String, logger: Logger, ended: @escaping @Sendable (Runner, RunnerEnding) -> Void) {
        self.handle = handle
        self.channel = RunnerChannel(fd: handle.channelFD, idPrefix: nil)
        self.pluginID = pluginID
        self.logger = logger
        self.ended = ended
        let started = channel.start(
            RunnerChannel.Handlers(
                onRequest: { [self] id, method, params in request(id, method, params) },
                onNotification: { [self] method, params in notification(method, params) },
                onEnd: { [self] end in channelEnd(end) }))
        if !started { handle.kill() }
        if let waitForEnd = handle.waitForEnd {
            // The reaper: death is seen by the process's status, never only by the channel
            // (a child the plugin forked may hold the runner's end open).
            detachThread { [self] in
                let status = waitForEnd()
                channel.close()
                _ = channelEnded.take()
                finish(status)
            }
        }
    }

    var hasEnded: Bool { state.withLock { $0.hasEnded } }
    var processID: Int32? { state.withLock { $0.processID } }

    /// Sends `load` and waits for its answer: the hooks the plugin implements.
    func load(_ params: JSON, within deadline: Duration) throws(PluginLoadError) -> Set<PluginHook> {
        let answer = TimedHandoff<Result<JSON, RunnerError>>()
        channel.request(RunnerProtocol.Method.load, params) { answer.put($0) }
        guard let reply = answer.take(within: deadline) else {
            kill(afterTimeoutOf: .describe) // at load: `init` is the plugin's first code
            throw PluginLoadError(
                PluginLoadError.Reason.pluginTimeout, "the plugin did not load within \(deadline) (spawn, dlopen and init); it was stopped")
        }
        switch reply {
        case .success(let result):
            guard let hooks = RunnerProtocol.implementedHooks(result) else {
                violate("sent a malformed answer to load")
                throw PluginLoadError(PluginLoadError.Reason.pluginCrashed, "the plugin runner sent a malformed answer to load; it was stopped")
            }
            state.withLock { $0.processID = result["pid"]?.intValue.map(Int32.init(truncatingIfNeeded:)) }
            return hooks
        case .failure(let error) where error.code == RunnerChannel.closedCode:
            let detail = finished.wait(within: .seconds(2)) ?? "closed its channel"
            throw PluginLoadError(PluginLoadError.Reason.pluginCrashed, "the plugin runner stopped while loading the plugin (\(detail))")
        case .failure(let error):
            shutdown(within: .seconds(1))
            throw RunnerProtocol.loadRefusal(error)
        }
    }

    func send(_ number: Int64, hook: PluginHook, input: JSON, call: HookCall, done: @escaping @Sendable (HookOutcome) -> Void) {
        let accepted = state.withLock { state -> Bool in
            guard !state.hasEnded else { return false }
            state.calls[number] = Pending(call: call, done: done, startedAt: .now)
            return true
        }
        guard accepted else {
            return done(.failure(ProviderFailure.pluginCrashed(plugin: pluginID, hook: hook, detail: "had stopped")))
        }
        channel.request(
            RunnerProtocol.Method.hook,
            RunnerProtocol.hookParams(call: number, hook: hook, input: input, clockOffsetMs: HostClock.offsetMilliseconds)
        ) { [self] reply in
            switch reply {
            case .success(let answer):
                guard let outcome = RunnerProtocol.outcome(answer) else { return violate("sent a malformed answer to \(hook)") }
                complete(number, outcome)
            case .failure(let error) where error.code == RunnerChannel.closedCode:
                break // the runner's end answers it
            case .failure(let error):
                complete(
                    number,
                    .failure(
                        ProviderFailure.pluginCrashed(plugin: pluginID, hook: hook, detail: "refused the call: \(Redaction.redact(error.message))"))
                )
            }
        }
        // After the request: the channel keeps order, so the runner knows the call when the cancel comes.
        call.onCancel { [channel] in channel.notify(RunnerProtocol.Method.cancel, ["call": .int(number)]) }
    }

    private func complete(_ number: Int64, _ outcome: HookOutcome) {
        state.withLock { $0.calls.removeValue(forKey: number) }?.done(outcome)
    }

    /// Kills the runner at `instant` if `call` is still running in it then.
    func killIfStillRunning(_ call: HookCall, at instant: ContinuousClock.Instant) {
        detachThread { [self] in
            let lock = ConditionLock()
            let deadline = ConditionLock.deadline(after: max(.zero, instant - .now))
            lock.withLock { while lock.wait(until: deadline) {} }
            let running = state.withLock { state in state.calls.values.contains { $0.call === call } }
            if running {
                logger.error("plugin hook ran past its deadline; stopping its runner", metadata: ["plugin": "\(pluginID)", "hook": "\(call.hook)"])
                kill(afterTimeoutOf: call.hook)
            }
        }
    }

    /// Sends `shutdown`, waits up to `grace` for the runner to end, then kills it and waits.
    func shutdown(within grace: Duration) {
        let alreadyEnded = state.withLock { state -> Bool in
            state.shuttingDown = true
            return state.hasEnded
        }
        guard !alreadyEnded else { return }
        channel.notify(RunnerProtocol.Method.shutdown, [:])
        if finished.wait(within: grace) == nil {
            handle.kill()
            channel.close()
            _ = finished.wait(within: .seconds(5))
        }
    }

    private func kill(afterTimeoutOf hook: PluginHook) {
        state.withLock { $0.killedAfterTimeout = $0.killedAfterTimeout ?? hook }
        handle.kill()
        channel.close()
    }

    /// The runner broke the protocol: it is stopped, and its calls are answered with `detail`.
    private func violate(_ detail: String) {
        state.withLock { if $0.violation == nil { $0.violation = detail } }
        logger.error("plugin runner broke the protocol; stopping it", metadata: ["plugin": "\(pluginID)", "detail": "\(detail)"])
        handle.kill()
        channel.close()
    }

    private func channelEnd(_ end: RunnerChannel.End) {
        if case .violation(let detail) = end {
            state.withLock { if $0.violation == nil { $0.violation = detail } }
            logger.error("plugin runner broke the protocol; stopping it", metadata: ["plugin": "\(pluginID)", "detail": "\(detail)"])
        }
        if handle.waitForEnd == nil {
            finish("closed its channel")
        } else {
            handle.kill()
            channelEnded.put(true)
        }
    }

    /// The runner has ended (reaped, or its channel closed when it is no process): every call
    /// in flight is answered.
    private func finish(_ status: String) {
        let (calls, violation, timedOut, shuttingDown) = state.withLock { state in
            state.hasEnded = true
            defer { state.calls.removeAll() }
            return (Array(state.calls.values), state.violation, state.killedAfterTimeout, state.shuttingDown)
        }
        let detail = violation ?? status
        for pending in calls.sorted(by: { $0.startedAt < $1.startedAt }) {
            let hook = pending.call.hook
            let failure: ProviderFailure =
                if shuttingDown {
                    ProviderFailure(.internal, reason: "pluginShutDown", message: "The \(pluginID) plugin has shut down.")
                } else if timedOut != nil {
                    ProviderFailure.pluginTimeout(plugin: pluginID, hook: hook, after: .now - pending.startedAt)
                } else {
                    ProviderFailure.pluginCrashed(plugin: pluginID, hook: hook, detail: detail)
                }
            pending.done(.failure(failure))
        }
        finished.put(detail)
        ended(self, shuttingDown ? .shutDown : timedOut.map { .killedAfterTimeout(hook: $0) } ?? .crashed(detail: detail))
    }

    // MARK: The runner's requests and notifications

    private func proxyCall(_ params: JSON) -> HookCall? {
        guard let number = params["call"]?.intValue else { return nil }
        return state.withLock { $0.calls[number]?.call }
    }

    private func request(_ id: RequestID, _ method: String, _ params: JSON) {
        guard method == RunnerProtocol.Method.http || method == RunnerProtocol.Method.standard else {
            return channel.respond(id, .failure(RunnerError(code: RunnerProtocol.methodNotFound, message: "no method \(method) in the host")))
        }
        guard let call = proxyCall(params) else {
            return channel.respond(id, .failure(RunnerError(code: RunnerProtocol.invalidParams, message: "no call \(params["call"] ?? .null) runs")))
        }
        let service: @Sendable () -> Result<JSON, ProviderFailure>
        if method == RunnerProtocol.Method.http {
            guard let request = params["request"] else { return violate("sent an http request without a request") }
            guard call.mayBlock else {
                call.logger.error("plugin called http in a non-blocking hook", metadata: ["plugin": "\(pluginID)", "hook": "\(call.hook)"])
                return channel.respond(
                    id,
                    .success(
                        RunnerProtocol.serviceAnswer(
                            .failure(ProviderFailure(.internal, reason: "invalidCall", message: "HTTP is not allowed in \(call.hook).")))))
            }
            service = { call.environment.http(request, call: call) }
        } else {
            guard let hook = params["hook"]?.stringValue.flatMap(PluginHook.init(name:)), let input = params["input"] else {
                return violate("sent a malformed standard request")
            }
            service = { call.environment.standard(hook, input: input, call: call) }
        }
        let admitted = state.withLock { state -> Bool in
            guard state.servicesInFlight < RunnerBackend.maxServicesInFlight else { return false }
            state.servicesInFlight += 1
            return true
        }
        guard admitted else {
            let failure = ProviderFailure(
                .internal, reason: "tooManyRequests",
                message: "The \(pluginID) plugin has more than \(RunnerBackend.maxServicesInFlight) host requests in flight.")
            return channel.respond(id, .success(RunnerProtocol.serviceAnswer(.failure(failure))))
        }
        HookThreads.shared.submit { [self] in
            let answer = service()
            state.withLock { $0.servicesInFlight -= 1 }
            channel.respond(id, .success(RunnerProtocol.serviceAnswer(answer)))
        }
    }

    private func notification(_ method: String, _ params: JSON) {
        switch method {
        case RunnerProtocol.Method.emit:
            guard let event = params["event"], case .object = event else { return violate("sent an event that is not an object") }
            // A call already answered (abandoned) has nobody to tell.
            guard let call = proxyCall(params) else { return }
            call.environment.emit(event, from: call)
        case RunnerProtocol.Method.log:
            guard let message = params["message"]?.stringValue else { return violate("sent a log without a message") }
            let level = params["level"]?.stringValue.flatMap(Logger.Level.init(rawValue:)) ?? .info
            let text = Redaction.redact(message)
            if let call = proxyCall(params) {
                call.logger.log(level: level, "\(text)", metadata: ["plugin": "\(pluginID)", "hook": "\(call.hook)"])
            } else {
                // Outside a call (`init`), as an in-process plugin's log.
                HostAPI.pluginLogger.log(level: level, "\(text)", metadata: ["plugin": "\(pluginID)"])
            }
        default:
            break
        }
    }
}

/// A value put once by one thread and waited for, with a bound, by others.
private final class TimedHandoff<Value: Sendable>: @unchecked Sendable {
    private let lock = ConditionLock()
    private var value: Value? // guarded by `lock`

    func put(_ value: Value) {
        lock.withLock {
            if self.value == nil { self.value = value }
            lock.broadcast()
        }
    }

    /// The value, or nil when it did not come within `duration`.
    func take(within duration: Duration) -> Value? {
        let deadline = ConditionLock.deadline(after: duration)
        return lock.withLock {
            while value == nil { if !lock.wait(until: deadline) { break } }
            return value
        }
    }
}

/// How a runner ended, once it has: the words its calls were answered with.
private typealias Finished = TimedHandoff<String>

extension TimedHandoff where Value == String {
    func wait(within duration: Duration) -> String? { take(within: duration) }
}
