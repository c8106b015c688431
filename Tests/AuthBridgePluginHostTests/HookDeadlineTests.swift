import AuthBridgeJSON
@testable import AuthBridgePluginHost
import Synchronization
import TestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// A plugin backend whose hooks do what each test says: never answer, answer
/// when the test says, or block the caller's thread (inline).
final class FakeBackend: PluginBackend {
    struct Started: Sendable {
        let hook: PluginHook
        let call: HookCall
        let inline: Bool
        let done: @Sendable (HookOutcome) -> Void
    }
    enum Behaviour: Sendable {
        /// Keeps `done` for the test (`started`).
        case hold
        /// Answers at once.
        case answer(HookOutcome)
        /// Blocks the calling thread until `release` (or `until` holds), then answers.
        case block(HookOutcome, until: @Sendable () -> Bool)
    }

    let isolation: PluginIsolation
    private struct State {
        var started: [Started] = []
        var abandoned: [(PluginHook, Abandonment)] = []
        var shutdowns = 0
        var released = false
        var waiters: [(count: Int, continuation: CheckedContinuation<Void, Never>)] = []
    }
    private let state = Mutex(State())
    private let behaviour: Mutex<@Sendable (PluginHook) -> Behaviour>

    init(isolation: PluginIsolation = .none, _ behaviour: @escaping @Sendable (PluginHook) -> Behaviour = { _ in .hold }) {
        self.isolation = isolation
        self.behaviour = Mutex(behaviour)
    }

    func load() throws(PluginLoadError) {}
    func implements(_ hook: PluginHook) -> Bool { true }

    func start(_ hook: PluginHook, input: JSON, call: HookCall, inline: Bool, done: @escaping @Sendable (HookOutcome) -> Void) {
        let started = Started(hook: hook, call: call, inline: inline, done: done)
        let ready = state.withLock { state in
            state.started.append(started)
            let count = state.started.count
            let ready = state.waiters.filter { $0.count <= count }
            state.waiters.removeAll { $0.count <= count }
            return ready
        }
        for waiter in ready { waiter.continuation.resume() }
        switch behaviour.withLock({ $0 })(hook) {
        case .hold: break
        case .answer(let outcome): done(outcome)
        case .block(let outcome, let until):
            // Bounded: a test that fails must not pin the thread for good.
            for _ in 0..<10_000 where !(until() || state.withLock({ $0.released })) { usleep(1_000) }
            done(outcome)
        }
    }

    func abandon(_ call: HookCall, because: Abandonment) { state.withLock { $0.abandoned.append((call.hook, because)) } }
    func shutdown(within grace: Duration) { state.withLock { $0.shutdowns += 1 } }

    var started: [Started] { state.withLock { $0.started } }
    var abandoned: [(PluginHook, Abandonment)] { state.withLock { $0.abandoned } }
    var shutdowns: Int { state.withLock { $0.shutdowns } }
    func release() { state.withLock { $0.released = true } }

    /// Returns once `count` hooks have started.
    func waitForStarts(_ count: Int) async {
        await withCheckedContinuation { continuation in
            let now = state.withLock { state in
                if state.started.count >= count { return true }
                state.waiters.append((count, continuation))
                return false
            }
            if now { continuation.resume() }
        }
    }
}

let fakeManifest = try! PluginManifest(json: ["id": "fake", "version": "1.0.0", "abi": "1.0", "library": "libfake.so"])

func fakePlugin(
    _ backend: FakeBackend, deadlines: HookDeadlines = HookDeadlines(), inlineSlot: InlineSlot = InlineSlot(), health: PluginHealth? = nil
) -> LoadedPlugin {
    LoadedPlugin(
        manifest: fakeManifest, libraryPath: "/nowhere/libfake.so", backend: backend, health: health, deadlines: deadlines,
        logger: quietLogger, inlineSlot: inlineSlot)
}

/// Short deadlines: 100 ms for check_session, a 100 ms cancel grace.
var shortDeadlines: HookDeadlines {
    var deadlines = HookDeadlines(overrides: [.checkSession: .milliseconds(100)])
    deadlines.cancelGrace = .milliseconds(100)
    return deadlines
}

let valid: HookOutcome = .result(["state": "valid"])

@Suite("Hook deadlines, cancellation and health", .serialized)
struct HookDeadlineTests {
    /// Issue 14: a hook that never returns left its request unanswered for good.
    @Test func aHookThatNeverReturnsIsAnsweredAtItsDeadline() async throws {
        let backend = FakeBackend()
        let plugin = fakePlugin(backend, deadlines: shortDeadlines)
        let outcome = try #require(
            await answered(within: .seconds(10)) { await plugin.invoke(.checkSession, input: [:], environment: StubEnvironment()) },
            "a hook that never returns was never answered")
        let failure = try #require(outcome.failure)
        #expect(failure.kind == .internal && failure.reason == "pluginTimeout" && failure.isPluginFault)
        #expect(failure.message.contains("check_session") && failure.message.contains("100 ms"))
        #expect(backend.started.first?.call.isCancelled == true, "the hook is asked to stop")
        #expect(backend.abandoned.count == 1)
        if case .deadline? = backend.abandoned.first?.1 {} else { Issue.record("abandoned for \(backend.abandoned)") }
        #expect(plugin.runningHooks == 1, "the abandoned hook still counts as running")
        #expect(plugin.health.refusal == nil, "one fault does not refuse the plugin")

        // The hook returns at last: its outcome is dropped, nothing is answered twice.
        backend.started.first?.done(valid)
        #expect(plugin.runningHooks == 0)
    }

    /// Issue 14: `$/cancelRequest` did not answer a request whose hook blocked.
    @Test func aCancelledCallIsAnsweredAfterTheGraceEvenIfItsHookGoesOn() async throws {
        let backend = FakeBackend()
        var deadlines = HookDeadlines() // check_session: 90 s, far beyond the test
        deadlines.cancelGrace = .milliseconds(100)
        let plugin = fakePlugin(backend, deadlines: deadlines)
        let task = Task { await plugin.invoke(.checkSession, input: [:], environment: StubEnvironment()) }
        await backend.waitForStarts(1)
        task.cancel()
        let outcome = try #require(await answered(within: .seconds(10)) { await task.value }, "a cancelled call was never answered")
        #expect(outcome.failure?.kind == .cancelled)
        #expect(backend.started.first?.call.isCancelled == true)
        guard case .cancelled(let deadlineAt)? = backend.abandoned.first?.1 else {
            Issue.record("abandoned for \(backend.abandoned)")
            return
        }
        #expect(deadlineAt > .now + .seconds(60), "the hook's own deadline still stands")
        #expect(plugin.health.refusal == nil, "a cancellation is not a fault")
        backend.started.first?.done(valid)
    }

    @Test func aHookThatHonoursCancellationAnswersAtOnce() async throws {
        let backend = FakeBackend()
        let plugin = fakePlugin(backend) // a 2 s grace: the hook answers well before
        let task = Task { await plugin.invoke(.refresh, input: [:], environment: StubEnvironment()) }
        await backend.waitForStarts(1)
        let started = try #require(backend.started.first)
        started.call.onCancel { started.done(.failure(ProviderFailure.cancelled)) }
        task.cancel()
        #expect(await task.value.failure?.kind == .cancelled)
        #expect(backend.abandoned.isEmpty)
    }

    @Test func threeTimeoutsRefuseThePluginAndLaterCallsFailFast() async throws {
        let backend = FakeBackend()
        let plugin = fakePlugin(backend, deadlines: shortDeadlines)
        for round in 1...3 {
            let outcome = await answered(within: .seconds(10)) { await plugin.invoke(.checkSession, input: [:], environment: StubEnvironment()) }
            #expect(outcome?.failure?.reason == "pluginTimeout", "round \(round)")
        }
        let refusal = try #require(plugin.refusal)
        #expect(refusal.reason == .pluginTimeout)
        #expect(refusal.message.contains("3 failures within 5 minutes"))
        let fast = await plugin.invoke(.configure, input: [:], environment: StubEnvironment())
        #expect(fast.failure?.reason == "pluginTimeout" && fast.failure?.isPluginFault == true)
        #expect(backend.started.count == 3, "a refused plugin's hooks no longer run")

        // listProviders shows it refused, with the reason.
        let report = PluginReport(id: "fake", manifestPath: "/p/fake.json", status: .loaded(plugin)).json
        #expect(report["status"] == "refused" && report["reason"] == "pluginTimeout" && report["id"] == "fake")
        #expect(report["path"] == "/p/fake.json")
        for started in backend.started { started.done(valid) }
    }

    @Test func anIsolatedPluginsTimeoutsAreCountedByItsBackend() async throws {
        let backend = FakeBackend(isolation: .process)
        let plugin = fakePlugin(backend, deadlines: shortDeadlines)
        for _ in 1...3 {
            #expect(await plugin.invoke(.checkSession, input: [:], environment: StubEnvironment()).failure?.reason == "pluginTimeout")
        }
        #expect(plugin.refusal == nil, "the runner backend counts once per kill, not LoadedPlugin")
        #expect(backend.abandoned.count == 3)
        for started in backend.started { started.done(valid) }
    }

    @Test func invokeBlockingHasTheSameDeadline() throws {
        let backend = FakeBackend()
        let plugin = fakePlugin(backend, deadlines: HookDeadlines(overrides: [.describe: .milliseconds(100)]))
        #expect(plugin.invokeBlocking(.describe, input: [:], environment: StubEnvironment()).failure?.reason == "pluginTimeout")
        backend.started.first?.done(valid)
    }

    @Test func shutdownIsSkippedWhileAnAbandonedHookRuns() async throws {
        let backend = FakeBackend()
        let plugin = fakePlugin(backend, deadlines: shortDeadlines)
        #expect(await plugin.invoke(.checkSession, input: [:], environment: StubEnvironment()).failure?.reason == "pluginTimeout")
        plugin.shutdown()
        #expect(backend.shutdowns == 0 && !plugin.hasShutDown, "no shutdown under a running hook")
        backend.started.first?.done(valid)
        plugin.shutdown()
        #expect(backend.shutdowns == 1 && plugin.hasShutDown)
        #expect(await plugin.invoke(.checkSession, input: [:], environment: StubEnvironment()).failure?.reason == "pluginShutDown")
    }

    @Test func anInlineHookRunsOnTheCallersThreadOneAtATime() async throws {
        let slot = InlineSlot()
        let backend = FakeBackend { hook in
            hook == .checkSession ? .block(valid, until: { false }) : .answer(.result(["inline": true]))
        }
        var deadlines = shortDeadlines
        deadlines.inlineMark = .seconds(600) // no demotion here: the next test's
        let plugin = fakePlugin(backend, deadlines: deadlines, inlineSlot: slot)
        plugin.descriptor = ["inlineHooks": ["check_session"]]
        #expect(plugin.inlineHooks == [.checkSession, .authorizeRequest, .classifyResponse])
        // The first inline call holds the slot (its hook blocks until released)…
        let first = Task { await plugin.invoke(.checkSession, input: [:], environment: StubEnvironment()) }
        await backend.waitForStarts(1)
        #expect(backend.started[0].inline && !backend.started[0].call.mayBlock)
        // …so another inline call goes through a hook thread, still as an inline hook (may not block).
        #expect(await plugin.invoke(.authorizeRequest, input: [:], environment: StubEnvironment()).result == ["inline": true])
        #expect(!backend.started[1].inline && !backend.started[1].call.mayBlock)
        backend.release()
        #expect(await first.value.result == ["state": "valid"])
        // The slot is free again.
        _ = await plugin.invoke(.authorizeRequest, input: [:], environment: StubEnvironment())
        #expect(backend.started[2].inline)
    }

    @Test func anInlineHookOverTheMarkLosesThePluginItsInlineHooks() async throws {
        let slot = InlineSlot()
        let box = Mutex<LoadedPlugin?>(nil)
        let backend = FakeBackend { hook in
            // Returns only once the plugin was demoted (bounded by the fake).
            hook == .checkSession ? .block(valid, until: { box.withLock { $0 }?.inlineHooks.isEmpty == true }) : .hold
        }
        let plugin = fakePlugin(backend, deadlines: shortDeadlines, inlineSlot: slot)
        box.withLock { $0 = plugin }
        plugin.descriptor = ["inlineHooks": ["check_session"]]
        // The blocked inline call is answered when its hook returns: it cannot be answered early.
        #expect(await plugin.invoke(.checkSession, input: [:], environment: StubEnvironment()).result == ["state": "valid"])
        #expect(plugin.inlineHooks.isEmpty)
        #expect(backend.started[0].inline)
        // From now on the plugin's hooks run on hook threads, under their deadlines.
        #expect(await plugin.invoke(.checkSession, input: [:], environment: StubEnvironment()).result == ["state": "valid"])
        #expect(!backend.started[1].inline && backend.started[1].call.mayBlock)
    }

    @Test func isolatedPluginsNeverRunHooksInline() async throws {
        let backend = FakeBackend(isolation: .process) { _ in .answer(valid) }
        let plugin = fakePlugin(backend)
        plugin.descriptor = ["inlineHooks": ["check_session"]]
        _ = await plugin.invoke(.authorizeRequest, input: [:], environment: StubEnvironment())
        _ = await plugin.invoke(.checkSession, input: [:], environment: StubEnvironment())
        #expect(backend.started.allSatisfy { !$0.inline })
    }
}

@Suite("Restart policy")
struct RestartPolicyTests {
    @Test func backOffDoublesAndTheThirdFaultWithinFiveMinutesRefuses() {
        var policy = RestartPolicy()
        let start = ContinuousClock.now
        #expect(policy.record(at: start) == .restart(after: .milliseconds(500)))
        #expect(policy.record(at: start + .seconds(10)) == .restart(after: .seconds(1)))
        #expect(policy.record(at: start + .seconds(20)) == .refuse)
    }

    @Test func faultsOlderThanTheWindowAreForgotten() {
        var policy = RestartPolicy()
        let start = ContinuousClock.now
        #expect(policy.record(at: start) == .restart(after: .milliseconds(500)))
        #expect(policy.record(at: start + .seconds(200)) == .restart(after: .seconds(1)))
        // The first fault is 5 minutes old: two in the window, not three.
        #expect(policy.record(at: start + .seconds(300)) == .restart(after: .seconds(1)))
        #expect(policy.record(at: start + .seconds(310)) == .refuse)
    }

    @Test func theBackOffIsCapped() {
        var policy = RestartPolicy(limit: 10)
        let start = ContinuousClock.now
        let backOffs = (0..<9).map { policy.record(at: start + .seconds($0)) }
        #expect(backOffs.last == .restart(after: .seconds(8)))
        #expect(backOffs[4] == .restart(after: .seconds(8)))
        #expect(backOffs[3] == .restart(after: .seconds(4)))
    }

    @Test func healthRefusesWithTheLastFaultsReason() {
        let health = PluginHealth(pluginID: "p")
        let start = ContinuousClock.now
        health.record(.timedOut(hook: .refresh, after: .seconds(90)), at: start)
        health.record(.timedOut(hook: .refresh, after: .seconds(90)), at: start + .seconds(1))
        #expect(health.refusal == nil)
        #expect(health.record(.crashed(detail: "killed by signal 11 (SIGSEGV) in check_session"), at: start + .seconds(2)) == .refuse)
        #expect(health.refusal?.reason == .pluginCrashed)
        #expect(health.refusal?.message.contains("last: killed by signal 11 (SIGSEGV) in check_session") == true)
        #expect(health.refusalFailure?.isPluginFault == true)
    }

    @Test func pluginFaultsAreInternalFailuresWithTheirReasons() {
        let crashed = ProviderFailure.pluginCrashed(plugin: "p", hook: .checkSession, detail: "exited with status 3")
        #expect(crashed.kind == .internal && crashed.reason == "pluginCrashed" && crashed.isPluginFault)
        #expect(crashed.message.contains("sessions are kept"))
        let timeout = ProviderFailure.pluginTimeout(plugin: "p", hook: .refresh, after: .seconds(90))
        #expect(timeout.reason == "pluginTimeout" && timeout.isPluginFault && timeout.message.contains("90 s"))
        #expect(!ProviderFailure(.internal, reason: "pluginError", message: "m").isPluginFault)
        #expect(!ProviderFailure(.transient, reason: "pluginTimeout", message: "m").isPluginFault)
    }

    @Test func defaultDeadlines() {
        let deadlines = HookDeadlines(overrides: [.checkSession: .seconds(2)])
        #expect(deadlines[.checkSession] == .seconds(2))
        #expect(deadlines[.refresh] == .seconds(90) && deadlines[.describe] == .seconds(10))
        #expect(deadlines[.authorizeRequest] == .seconds(10))
        #expect(deadlines.cancelGrace == .seconds(2) && deadlines.inlineMark == .milliseconds(50) && deadlines.load == .seconds(10))
    }
}

@Suite("Hook watchdog")
struct HookWatchdogTests {
    @Test func anArmedActionRunsAndADisarmedOneNever() async {
        let watchdog = HookWatchdog(tick: .milliseconds(5))
        let fired = Mutex<[Int]>([])
        let disarmed = watchdog.arm(at: .now + .milliseconds(10)) { fired.withLock { $0.append(1) } }
        watchdog.disarm(disarmed)
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            watchdog.arm(at: .now + .milliseconds(30)) {
                fired.withLock { $0.append(2) }
                continuation.resume()
            }
        }
        #expect(fired.withLock { $0 } == [2])
        #expect(watchdog.armedCount == 0)
    }

    /// Hook calls one after the other arm and disarm a deadline each: that must not wake the
    /// watchdog's thread every time (it did: a futex wake and a context switch per hook call).
    /// (Awake for 100,000 ticks: the thousand calls must all land while it is, on a busy machine too.)
    @Test func callsOneAfterTheOtherWakeNoThread() async throws {
        let watchdog = HookWatchdog(tick: .milliseconds(5), idleTicks: 100_000)
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            watchdog.arm(at: .now) { continuation.resume() }
        }
        for _ in 0..<1000 { watchdog.disarm(watchdog.arm(at: .now + .seconds(90)) {}) }
        #expect(watchdog.sleepState.signals == 0)
    }

    /// Once nothing has been armed for a while the thread sleeps; the next arm wakes it.
    @Test func anArmAfterTheThreadFellAsleepStillFires() async throws {
        let watchdog = HookWatchdog(tick: .milliseconds(1), idleTicks: 2)
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            watchdog.arm(at: .now) { continuation.resume() }
        }
        let asleep = await eventually(within: .seconds(20)) { watchdog.sleepState.asleep }
        #expect(asleep)
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            watchdog.arm(at: .now + .milliseconds(1)) { continuation.resume() }
        }
        #expect(watchdog.sleepState.signals == 1)
    }

    @Test func actionsRunInDeadlineOrderAndMayArmAgain() async {
        let watchdog = HookWatchdog()
        let fired = Mutex<[Int]>([])
        let now = ContinuousClock.now
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            watchdog.arm(at: now + .milliseconds(2)) { fired.withLock { $0.append(2) } }
            watchdog.arm(at: now + .milliseconds(1)) {
                fired.withLock { $0.append(1) }
                watchdog.arm(at: now + .milliseconds(3)) {
                    fired.withLock { $0.append(3) }
                    continuation.resume()
                }
            }
        }
        #expect(fired.withLock { $0 } == [1, 2, 3])
    }
}

@Suite("In-process backend")
struct InProcessBackendTests {
    /// The Swift test plugin opened by the backend itself (`load`: dlopen,
    /// entry checks and `init` on a hook thread), run through LoadedPlugin.
    @Test func aRealHookPastItsDeadlineIsAnsweredAndItsThreadCounted() async throws {
        let folder = try TemporaryFolder()
        defer { folder.remove() }
        try installSwiftTestPlugin(into: folder.path)
        let manifest = try PluginManifest(json: ["id": "swifttest", "version": "1.0.0", "abi": "1.0", "library": "libauthbridge-testplugin-swift.so"])
        let backend = InProcessBackend(dlopenPath: folder.path + "/libauthbridge-testplugin-swift.so", manifest: manifest, logger: quietLogger)
        try backend.load()
        #expect(backend.implements(.refresh))
        let plugin = LoadedPlugin(
            manifest: manifest, libraryPath: folder.path + "/libauthbridge-testplugin-swift.so", backend: backend,
            deadlines: HookDeadlines(overrides: [.completeSignIn: .milliseconds(100)]), logger: quietLogger)
        let abandoned = HookThreads.shared.abandoned.load(ordering: .relaxed)
        let late = HookThreads.shared.lateReturns.load(ordering: .relaxed)
        // "slow" runs up to 30 s unless cancelled: past the deadline it is answered, then told to stop.
        let outcome = await plugin.invoke(.completeSignIn, input: ["flow": "session", "sessionId": "slow"], environment: StubEnvironment())
        #expect(outcome.failure?.reason == "pluginTimeout")
        #expect(HookThreads.shared.abandoned.load(ordering: .relaxed) > abandoned)
        // The hook sees the cancellation and returns: a late return, dropped (bounded wait).
        for _ in 0..<1_000 where plugin.runningHooks > 0 { try await Task.sleep(for: .milliseconds(10)) }
        #expect(plugin.runningHooks == 0)
        #expect(HookThreads.shared.lateReturns.load(ordering: .relaxed) > late)
        // A normal call still works.
        let signedIn = await plugin.invoke(.completeSignIn, input: ["flow": "session", "sessionId": "s"], environment: StubEnvironment())
        #expect(signedIn.result?["account"]?["id"] == "s")
        plugin.shutdown()
        #expect(plugin.hasShutDown)
    }
}
