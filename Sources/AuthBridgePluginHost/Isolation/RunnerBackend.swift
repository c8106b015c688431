import AuthBridgeJSON
import AuthBridgeRPC
import AuthBridgeRedaction
import AuthBridgeSystem
import Logging
import Synchronization

/// A started runner, as `RunnerBackend`'s `launch` gives it.
struct RunnerHandle: Sendable {
    /// The host's end of the channel; the backend owns (and closes) it from now on.
    let channelFD: Int32
    /// Blocks until the runner process has ended and returns how, in words ("killed by signal 11
    /// (SIGSEGV)"); its process group is killed and it is reaped first. nil when the runner is not a
    /// process (tests run `PluginRunnerServer` on a thread): the channel's end is the runner's.
    let waitForEnd: (@Sendable () -> String)?
    /// Kills the runner and what it started. Safe at any time, also after it ended (the pid is
    /// never signalled once reaped).
    let kill: @Sendable () -> Void
    /// How the runner confined itself (its first line); nil when it is not a process.
    var confinement: RunnerConfinement? = nil
}

/// How a runner ended, for the plugin's health (WP-B's `PluginHealth` counts the faults).
enum RunnerEnding: Sendable, Equatable {
    /// It crashed, exited, closed its channel or broke the protocol: `detail` says which.
    case crashed(detail: String)
    /// It was killed because a call of `hook` ran past its deadline (and the kill grace).
    case killedAfterTimeout(hook: PluginHook)
    /// The host shut it down.
    case shutDown
}

/// A plugin whose hooks run in its own runner process (`authbridge plugin-runner`): a crash,
/// a hang or stray output there cannot take the host down.
///
/// The host keeps, per runner, the calls in flight (`call` number → the host's `HookCall` and
/// its `done`). The runner's `http` and `standard` requests run on the host's hook threads
/// through that call's environment, at most `maxServicesInFlight` at once; `emit` and `log` go
/// to the call's environment and logger (logs redacted again). When the runner ends — the
/// reaper saw it die, or the channel ended or carried something malformed, after which it is
/// killed — every call in flight is answered `pluginCrashed` with how it ended. The next call
/// starts a new runner (after `holdRestarts(until:)`, the back-off the health policy chose).
///
/// Threading: any method from any thread; the channel's reader answers calls; nothing blocks
/// but `load` and `shutdown(within:)`.
final class RunnerBackend: PluginBackend {
    let isolation = PluginIsolation.process
    /// At most this many `http`/`standard` requests of one runner run at once; more are answered
    /// `tooManyRequests` (a runner cannot occupy every host thread).
    static let maxServicesInFlight = 32

    typealias Launch = @Sendable (VettedLibrary) throws(PluginLoadError) -> RunnerHandle

    let library: VettedLibrary
    private let logger: Logger
    private let launch: Launch
    private let onEnding: @Sendable (RunnerEnding) -> Void

    private struct Queued {
        let hook: PluginHook
        let input: JSON
        let call: HookCall
        let done: @Sendable (HookOutcome) -> Void
    }

    private struct State {
        var runner: Runner?
        var implemented: Set<PluginHook> = []
        /// Calls waiting for a runner to (re)start.
        var queued: [Queued] = []
        var restarting = false
        var restartNotBefore: ContinuousClock.Instant?
        var shutDown = false
        /// Set when the plugin was refused after repeated faults: every call fails with it.
        var refusal: ProviderFailure?
        var nextCall: Int64 = 1
        /// The latest runner's.
        var confinement: RunnerConfinement?
    }
    private let state = Mutex(State())
    /// Wakes a restart waiting out its back-off when the host shuts down.
    private let restartLock = ConditionLock()

    /// `launch`: starts a runner for `library` (default: spawn `authbridge plugin-runner`);
    /// `onEnding`: told how each runner ended (crashes count towards refusal).
    init(
        library: VettedLibrary, logger: Logger, launch: @escaping Launch,
        onEnding: @escaping @Sendable (RunnerEnding) -> Void = { _ in }
    ) {
        self.library = library
        self.logger = logger
        self.launch = launch
        self.onEnding = onEnding
    }

    var pluginID: String { library.manifest.id }

    // MARK: PluginBackend

    func load() throws(PluginLoadError) {
        let runner = try startRunner()
        state.withLock { $0.runner = runner }
    }

    func implements(_ hook: PluginHook) -> Bool {
        state.withLock { $0.implemented.contains(hook) }
    }

    func start(_ hook: PluginHook, input: JSON, call: HookCall, inline: Bool, done: @escaping @Sendable (HookOutcome) -> Void) {
        enum Next {
            case send(Runner, Int64)
            case shutDown
            case refused(ProviderFailure)
            case wait(startRestart: Bool)
        }
        let next = state.withLock { state -> Next in
            if let refusal = state.refusal { return .refused(refusal) }
            if state.shutDown { return .shutDown }
            if let runner = state.runner, !runner.hasEnded {
                defer { state.nextCall += 1 }
                return .send(runner, state.nextCall)
            }
            state.runner = nil
            state.queued.append(Queued(hook: hook, input: input, call: call, done: done))
            defer { state.restarting = true }
            return .wait(startRestart: !state.restarting)
        }
        switch next {
        case .send(let runner, let number):
            runner.send(number, hook: hook, input: input, call: call, done: done)
        case .shutDown:
            done(.failure(ProviderFailure(.internal, reason: "pluginShutDown", message: "The \(pluginID) plugin has shut down.")))
        case .refused(let failure):
            done(.failure(failure))
        case .wait(let startRestart):
            if startRestart { HookThreads.shared.submit { [self] in restart() } }
        }
    }

    func abandon(_ call: HookCall, because reason: Abandonment) {
        // A call still waiting for a runner is simply dropped.
        let queued = state.withLock { state -> Queued? in
            guard let index = state.queued.firstIndex(where: { $0.call === call }) else { return nil }
            return state.queued.remove(at: index)
        }
        if let queued {
            queued.done(.failure(ProviderFailure.cancelled))
            return
        }
        guard let runner = state.withLock({ $0.runner }) else { return }
        let killAt: ContinuousClock.Instant =
            switch reason {
            case .deadline: .now + HookDeadlines().killGrace
            case .cancelled(let deadlineAt): deadlineAt + HookDeadlines().killGrace
            }
        runner.killIfStillRunning(call, at: killAt)
    }

    func shutdown(within grace: Duration) {
        let (runner, queued) = state.withLock { state -> (Runner?, [Queued]) in
            state.shutDown = true
            defer { state.queued.removeAll() }
            return (state.runner, state.queued)
        }
        restartLock.withLock { restartLock.broadcast() }
        for item in queued {
            item.done(.failure(ProviderFailure(.internal, reason: "pluginShutDown", message: "The \(pluginID) plugin has shut down.")))
        }
        runner?.shutdown(within: grace)
    }

    /// Refuses the plugin after repeated faults: no runner starts again, the
    /// calls waiting for one and every later call fail with `failure`.
    func refuse(_ failure: ProviderFailure?) {
        let failure = failure ?? ProviderFailure(.internal, reason: "pluginCrashed", message: "The \(pluginID) plugin was stopped.")
        let (runner, queued) = state.withLock { state -> (Runner?, [Queued]) in
            state.refusal = failure
            defer {
                state.queued.removeAll()
                state.runner = nil
            }
            return (state.runner, state.queued)
        }
        restartLock.withLock { restartLock.broadcast() }
        for item in queued { item.done(.failure(failure)) }
        runner?.shutdown(within: .zero)
    }

    /// Holds the next runner start until `instant` (the back-off after a crash).
    func holdRestarts(until instant: ContinuousClock.Instant) {
        state.withLock { $0.restartNotBefore = instant }
    }

    /// The running runner's pid (tests, logs).
    var runnerProcessID: Int32? { state.withLock { $0.runner?.processID } }

    var confinement: RunnerConfinement? { state.withLock { $0.confinement } }

    // MARK: Starting

    /// Starts a runner and loads the plugin in it, within the load deadline.
    private func startRunner() throws(PluginLoadError) -> Runner {
        let handle = try launch(library)
        let runner = Runner(
            handle: handle, pluginID: pluginID, logger: logger,
            ended: { [weak self] runner, ending in self?.runnerEnded(runner, ending) })
        let hooks = try runner.load(
            RunnerProtocol.loadParams(manifest: library.manifest, logLevel: logger.logLevel.rawValue, clockOffsetMs: HostClock.offsetMilliseconds),
            within: HookDeadlines().load)
        state.withLock {
            $0.implemented = hooks
            $0.confinement = handle.confinement
        }
        return runner
    }

    /// Starts a new runner for the calls that wait for one (on a hook thread).
    private func restart() {
        // The back-off: wait it out, unless the host shuts down meanwhile.
        if let notBefore = state.withLock({ $0.restartNotBefore }), notBefore > .now {
            let wait = ConditionLock.deadline(after: notBefore - .now)
            restartLock.withLock {
                while !state.withLock({ $0.shutDown || $0.refusal != nil }) && restartLock.wait(until: wait) {}
            }
        }
        let result: Result<Runner, PluginLoadError>
        if let refusal = state.withLock({ $0.refusal }) {
            result = .failure(PluginLoadError(.pluginCrashed, refusal.message))
        } else if state.withLock({ $0.shutDown }) {
            result = .failure(PluginLoadError(.loadFailed, "the host is shutting down"))
        } else {
            do throws(PluginLoadError) { result = .success(try startRunner()) } catch { result = .failure(error) }
        }
        let (queued, numbers) = state.withLock { state -> ([Queued], [Int64]) in
            state.restarting = false
            if case .success(let runner) = result, !state.shutDown { state.runner = runner }
            defer { state.queued.removeAll() }
            let numbers = state.queued.indices.map { state.nextCall + Int64($0) }
            state.nextCall += Int64(state.queued.count)
            return (state.queued, numbers)
        }
        switch result {
        case .success(let runner):
            if state.withLock({ $0.shutDown }) { runner.shutdown(within: .zero) }
            for (item, number) in zip(queued, numbers) {
                runner.send(number, hook: item.hook, input: item.input, call: item.call, done: item.done)
            }
        case .failure(let error):
            logger.error("plugin runner could not be restarted", metadata: ["plugin": "\(pluginID)", "detail": "\(error.message)"])
            for item in queued {
                item.done(
                    .failure(ProviderFailure.pluginCrashed(plugin: pluginID, hook: item.hook, detail: "could not be restarted: \(error.message)")))
            }
        }
    }

    private func runnerEnded(_ runner: Runner, _ ending: RunnerEnding) {
        state.withLock { state in
            if state.runner === runner { state.runner = nil }
        }
        if case .crashed(let detail) = ending {
            logger.error("plugin runner stopped", metadata: ["plugin": "\(pluginID)", "detail": "\(detail)"])
        }
        onEnding(ending)
    }
}
