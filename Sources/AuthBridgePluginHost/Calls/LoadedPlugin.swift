import AuthBridgeJSON
import AuthBridgeSystem
import CAuthBridgePlugin
import Logging
import Synchronization

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// A plugin that passed every check and whose `init` succeeded.
///
/// What a hook call means is decided here, wherever the plugin runs (its
/// `backend`: in this process or in its runner): every call has a deadline
/// (`HookDeadlines`) and is answered by then even if the hook never returns
/// (`pluginTimeout`); a cancelled call is answered within `cancelGrace`; the
/// plugin's faults are counted (`PluginHealth`) and a refused plugin fails
/// every call at once.
///
/// Threading: `invoke` may be called from any task; a hook runs on a thread of
/// `HookThreads` (never on the cooperative pool, since hooks may block on
/// HTTP) or in the runner, as the ABI's thread rules promise. Inline hooks run
/// on the caller's thread.
public final class LoadedPlugin: @unchecked Sendable {
    public let manifest: PluginManifest
    /// The plugin's `describe` answer (id, displayName, flows, settings schema…).
    /// Set once by the loader before the plugin is shared.
    public internal(set) var descriptor: JSON = .null {
        didSet {
            let named = Set(descriptor["inlineHooks"]?.arrayValue?.compactMap(\.stringValue) ?? [])
            let hooks = Set(PluginHook.allCases.filter { $0.isPure || named.contains($0.description) })
            inline.withLock { $0 = hooks }
        }
    }

    /// What loading noticed without refusing the plugin (a description that differs from the
    /// manifest's): shown in its `PluginStatus` and logged. Set once by the loader, like `descriptor`.
    public internal(set) var loadWarnings: [String] = []

    /// Hooks that never block, run on the caller's thread: the pure ones
    /// (authorize_request, classify_response) and those the plugin lists in
    /// its descriptor's `inlineHooks`. `host->http` fails inside them. Only
    /// in-process plugins run hooks inline; a plugin whose inline hook ran
    /// over `HookDeadlines.inlineMark` loses them all for good.
    public var inlineHooks: Set<PluginHook> { inline.withLock { $0 } }
    public let libraryPath: String
    /// The plugin's version (its manifest's).
    public let version: String
    /// Where the plugin's code runs.
    public var isolation: PluginIsolation { backend.isolation }
    /// How its runner is confined (isolated plugins; the latest runner's).
    public var confinement: RunnerConfinement? { backend.confinement }
    /// Why the plugin was refused after it loaded (repeated faults), if it was:
    /// every call then fails at once with this reason.
    public var refusal: PluginLoadError? { health.refusal }

    let backend: any PluginBackend
    let health: PluginHealth
    let deadlines: HookDeadlines
    private let logger: Logger
    private let watchdog: HookWatchdog
    private let inlineSlot: InlineSlot
    private let inline = Mutex<Set<PluginHook>>(Set(PluginHook.allCases.filter(\.isPure)))
    /// Hooks running now, abandoned ones included: `shutdown` waits for none.
    private let running = Atomic<Int>(0)
    private let isShutDown = Atomic<Bool>(false)

    init(
        manifest: PluginManifest, libraryPath: String, backend: any PluginBackend, health: PluginHealth? = nil,
        deadlines: HookDeadlines = HookDeadlines(), logger: Logger, watchdog: HookWatchdog = .shared, inlineSlot: InlineSlot = .shared
    ) {
        self.manifest = manifest
        self.libraryPath = libraryPath
        self.version = manifest.version
        self.backend = backend
        self.health = health ?? PluginHealth(pluginID: manifest.id)
        self.deadlines = deadlines
        self.logger = logger
        self.watchdog = watchdog
        self.inlineSlot = inlineSlot
    }

    /// An in-process plugin whose library `PluginEntry.open` opened.
    convenience init(
        manifest: PluginManifest, libraryPath: String, version: String,
        vtable: UnsafePointer<ab_plugin_vtable>, state: OpaquePointer?, logger: Logger
    ) {
        let backend = InProcessBackend(manifest: manifest, vtable: vtable, state: state, logger: logger)
        self.init(manifest: manifest, libraryPath: libraryPath, backend: backend, logger: logger)
    }

    /// True when the plugin implements `hook` itself.
    public func implements(_ hook: PluginHook) -> Bool { backend.implements(hook) }

    /// Runs a hook and answers by its deadline. Task cancellation sets the
    /// call's cancelled flag (and aborts its HTTP requests); the call is
    /// answered `cancelled` within the grace even if the hook goes on.
    public func invoke(_ hook: PluginHook, input: JSON, environment: HookEnvironment) async -> HookOutcome {
        if let refused = health.refusalFailure { return .failure(refused) }
        guard backend.implements(hook) else { return .useDefault }
        let runsInline = backend.isolation == .none && inlineHooks.contains(hook)
        let call = HookCall(pluginID: manifest.id, hook: hook, logger: logger, environment: environment, mayBlock: !runsInline)
        guard begin() else { return .failure(InProcessBackend.shutDownFailure(manifest.id)) }
        // One inline call at a time host-wide: a blocking one pins at most one pool thread.
        if runsInline, inlineSlot.acquire() {
            defer { inlineSlot.release() }
            return runInline(hook, input: input, call: call)
        }
        let pending = PendingCall(deadlineAt: .now + deadlines[hook], watchdog: watchdog)
        return await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                start(hook, input: input, call: call, pending: pending)
                pending.deliver { continuation.resume(returning: $0) }
            }
        } onCancel: {
            cancelled(call, pending: pending)
        }
    }

    /// Runs `hook` inline on the caller's thread when it can right now (an
    /// in-process plugin's inline hook, the inline slot free, the plugin not
    /// refused); nil when it cannot, and then nothing ran. For answers given
    /// without a task (the connection's reader thread).
    /// `ifBlocked` is called (from the watchdog's thread) when the hook runs
    /// past the inline mark, besides the plugin losing its inline hooks.
    public func invokeInlineNow(
        _ hook: PluginHook, input: JSON, inputText: [UInt8]? = nil, environment: HookEnvironment, ifBlocked: (@Sendable () -> Void)? = nil
    ) -> HookOutcome? {
        guard health.refusalFailure == nil, backend.isolation == .none, backend.implements(hook), inlineHooks.contains(hook),
            begin()
        else { return nil }
        guard inlineSlot.acquire() else {
            running.subtract(1, ordering: .sequentiallyConsistent)
            return nil
        }
        defer { inlineSlot.release() }
        let call = HookCall(pluginID: manifest.id, hook: hook, logger: logger, environment: environment, mayBlock: false)
        return runInline(hook, input: input, inputText: inputText, call: call, ifBlocked: ifBlocked)
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

    /// Runs a hook and blocks the current thread for its outcome, under the
    /// same deadline (load time `describe`, tests).
    public func invokeBlocking(_ hook: PluginHook, input: JSON, environment: HookEnvironment) -> HookOutcome {
        if let refused = health.refusalFailure { return .failure(refused) }
        guard backend.implements(hook) else { return .useDefault }
        let call = HookCall(pluginID: manifest.id, hook: hook, logger: logger, environment: environment)
        guard begin() else { return .failure(InProcessBackend.shutDownFailure(manifest.id)) }
        let pending = PendingCall(deadlineAt: .now + deadlines[hook], watchdog: watchdog)
        start(hook, input: input, call: call, pending: pending)
        let answer = Handoff<HookOutcome>()
        pending.deliver { answer.put($0) }
        return answer.take()
    }

    /// True once `shutdown` ran.
    public var hasShutDown: Bool { isShutDown.load(ordering: .sequentiallyConsistent) }

    /// The number of hooks running now, abandoned ones included.
    public var runningHooks: Int { running.load(ordering: .sequentiallyConsistent) }

    /// Calls the plugin's shutdown once — unless a hook still runs in this
    /// process (one that ran past its deadline, say): the ABI promises no hook
    /// runs during `shutdown`, so the plugin is then left as it is (the
    /// process is ending). An isolated plugin's runner is always stopped, and
    /// what it started with it: `shutdown` when it is idle, else at once.
    public func shutdown() {
        guard !isShutDown.exchange(true, ordering: .sequentiallyConsistent) else { return }
        let busy = running.load(ordering: .sequentiallyConsistent)
        guard busy == 0 else {
            if backend.isolation == .process {
                backend.shutdown(within: .zero)
                return
            }
            isShutDown.store(false, ordering: .sequentiallyConsistent)
            logger.warning("plugin not shut down: hooks still run", metadata: ["plugin": "\(manifest.id)", "hooks": "\(busy)"])
            return
        }
        backend.shutdown(within: .seconds(1))
    }

    /// Shuts `plugins` down in parallel (each runner gets its own grace) and
    /// returns when all are done.
    public static func shutDown(_ plugins: [LoadedPlugin]) {
        guard !plugins.isEmpty else { return }
        let remaining = Atomic<Int>(plugins.count)
        let done = Handoff<Bool>()
        for plugin in plugins {
            detachThread {
                plugin.shutdown()
                if remaining.subtract(1, ordering: .acquiringAndReleasing).newValue == 0 { done.put(true) }
            }
        }
        _ = done.take()
    }

    // MARK: - Calls

    /// Counts a hook in; false after shutdown. Paired with `shutdown`'s
    /// flag-then-count (both sequentially consistent), no hook starts once
    /// `shutdown` has seen none running.
    private func begin() -> Bool {
        running.add(1, ordering: .sequentiallyConsistent)
        guard !isShutDown.load(ordering: .sequentiallyConsistent) else {
            running.subtract(1, ordering: .sequentiallyConsistent)
            return false
        }
        return true
    }

    private func start(_ hook: PluginHook, input: JSON, call: HookCall, pending: PendingCall) {
        let deadline = deadlines[hook]
        pending.guarded(by: watchdog.arm(at: pending.deadlineAt) { [self] in expired(call, pending: pending, after: deadline) })
        backend.start(hook, input: input, call: call, inline: false) { [self] outcome in
            running.subtract(1, ordering: .sequentiallyConsistent)
            if !pending.resume(outcome) {
                logger.notice(
                    "a hook answered after its call was answered; its outcome is dropped", metadata: ["plugin": "\(manifest.id)", "hook": "\(hook)"])
            }
        }
    }

    /// The deadline passed: the caller gets `pluginTimeout` now, the hook is
    /// asked to stop and given up. An in-process hook's overrun is a fault
    /// (an isolated plugin's backend counts its own, once per runner kill).
    private func expired(_ call: HookCall, pending: PendingCall, after deadline: Duration) {
        let timeout = HookOutcome.failure(.pluginTimeout(plugin: manifest.id, hook: call.hook, after: deadline))
        // Given up and counted before the caller hears of it.
        pending.resume(timeout) { [self] in
            logger.warning(
                "hook ran past its deadline; the call was answered",
                metadata: ["plugin": "\(manifest.id)", "hook": "\(call.hook)", "deadline": "\(HookDeadlines.words(deadline))"])
            call.cancel()
            backend.abandon(call, because: .deadline)
            if backend.isolation == .none, health.record(.timedOut(hook: call.hook, after: deadline)) == .refuse {
                logger.error("plugin refused after repeated failures", metadata: ["plugin": "\(manifest.id)"])
            }
        }
    }

    /// The caller cancelled: the hook sees `is_cancelled`, and the call is
    /// answered `cancelled` when the hook returns or at the grace's end.
    private func cancelled(_ call: HookCall, pending: PendingCall) {
        call.cancel()
        pending.guarded(
            by: watchdog.arm(at: .now + deadlines.cancelGrace) { [self] in
                pending.resume(.failure(ProviderFailure.cancelled)) {
                    self.backend.abandon(call, because: .cancelled(deadlineAt: pending.deadlineAt))
                }
            })
    }

    /// An inline hook, on the caller's thread: it cannot be answered before it
    /// returns (its continuation would be resumed under its own body), so one
    /// that runs over the inline mark costs the plugin its inline hooks.
    private func runInline(
        _ hook: PluginHook, input: JSON, inputText: [UInt8]? = nil, call: HookCall, ifBlocked: (@Sendable () -> Void)? = nil
    ) -> HookOutcome {
        let mark = watchdog.arm(at: .now + deadlines.inlineMark) { [self] in
            demote(hook)
            ifBlocked?()
        }
        let answer = Mutex<HookOutcome?>(nil)
        if let inputText, let outcome = backend.runInline(hook, text: inputText, call: call) {
            answer.withLock { $0 = outcome }
        } else {
            backend.start(hook, input: input, call: call, inline: true) { outcome in answer.withLock { $0 = outcome } }
        }
        watchdog.disarm(mark)
        running.subtract(1, ordering: .sequentiallyConsistent)
        return answer.withLock { $0 }
            ?? .failure(ProviderFailure(.internal, reason: "pluginError", message: "The \(manifest.id) plugin did not answer \(hook)."))
    }

    private func demote(_ hook: PluginHook) {
        let wasInline = inline.withLock { hooks in
            defer { hooks = [] }
            return !hooks.isEmpty
        }
        guard wasInline else { return }
        logger.warning(
            "plugin \(manifest.id): inline hook \(hook) ran over \(HookDeadlines.words(deadlines.inlineMark)); its hooks now run on worker threads with their deadlines"
        )
    }
}

/// One hook call's answer, given once: by the hook, its deadline or the
/// cancellation grace, whichever comes first. The others find it answered
/// (a late hook outcome is dropped). Answering disarms the call's deadlines.
final class PendingCall: Sendable {
    let deadlineAt: ContinuousClock.Instant
    private let watchdog: HookWatchdog
    private struct State {
        var answered = false
        var outcome: HookOutcome?
        var receiver: (@Sendable (HookOutcome) -> Void)?
        var tickets: [HookWatchdog.Ticket] = []
    }
    private let state = Mutex(State())

    init(deadlineAt: ContinuousClock.Instant, watchdog: HookWatchdog) {
        self.deadlineAt = deadlineAt
        self.watchdog = watchdog
    }

    /// Answers the call; false when it was answered already. `first` runs
    /// once the call is known to be this answer's, before the caller hears it.
    @discardableResult
    func resume(_ outcome: HookOutcome, first: (() -> Void)? = nil) -> Bool {
        let taken = state.withLock { state -> (receiver: (@Sendable (HookOutcome) -> Void)?, tickets: [HookWatchdog.Ticket])? in
            guard !state.answered else { return nil }
            state.answered = true
            defer {
                state.receiver = nil
                state.tickets = []
            }
            if state.receiver == nil { state.outcome = outcome }
            return (state.receiver, state.tickets)
        }
        guard let taken else { return false }
        for ticket in taken.tickets { watchdog.disarm(ticket) }
        first?()
        taken.receiver?(outcome)
        return true
    }

    /// Hands the answer to `receiver`, now if it came already.
    func deliver(to receiver: @escaping @Sendable (HookOutcome) -> Void) {
        let outcome = state.withLock { state -> HookOutcome? in
            if let outcome = state.outcome {
                state.outcome = nil
                return outcome
            }
            state.receiver = receiver
            return nil
        }
        if let outcome { receiver(outcome) }
    }

    /// A deadline of this call, disarmed when it is answered (at once if it was).
    func guarded(by ticket: HookWatchdog.Ticket) {
        let answered = state.withLock { state in
            if !state.answered { state.tickets.append(ticket) }
            return state.answered
        }
        if answered { watchdog.disarm(ticket) }
    }

    var isAnswered: Bool { state.withLock { $0.answered } }
}

/// Lets one inline hook run at a time host-wide; a call that finds it taken
/// runs on a hook thread instead. The cooperative pool is as wide as the CPU
/// count, so an inline hook that blocks after all pins at most one of its threads.
///
/// Inline hooks take microseconds, so a taken slot is nearly always free again
/// a moment later: a caller yields and retries for up to `patience` before it
/// takes the hook-thread path. Without that wait, pipelined requests on two
/// cores sent about half their inline calls through a thread hand-off (the
/// throughput bench ran 70 % slower); only a blocking inline hook makes a
/// caller wait the whole `patience`, and that hook loses its inline status at
/// the 50 ms mark.
final class InlineSlot: Sendable {
    static let shared = InlineSlot()
    private let taken = Atomic<Bool>(false)
    let patience: Duration

    init(patience: Duration = .microseconds(100)) {
        self.patience = patience
    }

    func acquire() -> Bool {
        if take() { return true }
        let giveUpAt = ContinuousClock.now + patience
        repeat {
            sched_yield()
            if take() { return true }
        } while ContinuousClock.now < giveUpAt
        return false
    }

    func release() { taken.store(false, ordering: .releasing) }

    private func take() -> Bool { taken.compareExchange(expected: false, desired: true, ordering: .acquiring).exchanged }
}
