@testable import AuthBridgeSession
import Synchronization
import Testing

@Suite("Shared work (single flight with cancellable waiters)")
struct SharedWorkTests {
    /// Work that runs until it is released or cancelled, and records which.
    final class Gate: Sendable {
        let released = Mutex<CheckedContinuation<Void, Never>?>(nil)
        let outcome = Mutex<String?>(nil)
        let started = Mutex<CheckedContinuation<Void, Never>?>(nil)

        func run() async -> Int {
            await withTaskCancellationHandler {
                await withCheckedContinuation { continuation in
                    released.withLock { $0 = continuation }
                    started.withLock { $0.take() }?.resume()
                }
            } onCancel: {
                outcome.withLock { $0 = "cancelled" }
                released.withLock { $0.take() }?.resume()
            }
            if outcome.withLock({ $0 }) == nil { outcome.withLock { $0 = "finished" } }
            return 42
        }

        func waitUntilStarted() async {
            await withCheckedContinuation { continuation in
                let running = released.withLock { $0 != nil }
                if running { continuation.resume() } else { started.withLock { $0 = continuation } }
            }
        }

        func release() { released.withLock { $0.take() }?.resume() }
    }

    @Test func everyWaiterGetsTheOneValue() async {
        let gate = Gate()
        let work = SharedWork(cancelsWhenAbandoned: true) { await gate.run() }
        let first = Task { await work.value() }
        let second = Task { await work.value() }
        await gate.waitUntilStarted()
        gate.release()
        let values = [await first.value, await second.value]
        #expect(values == [42, 42])
        #expect(work.isFinished && gate.outcome.withLock { $0 } == "finished")
    }

    @Test func aCancelledWaiterLeavesAtOnceAndTheOthersStillGetTheValue() async {
        let gate = Gate()
        let work = SharedWork(cancelsWhenAbandoned: true) { await gate.run() }
        let leaving = Task { await work.value() }
        let staying = Task { await work.value() }
        await gate.waitUntilStarted()
        leaving.cancel()
        #expect(await leaving.value == nil)
        #expect(gate.outcome.withLock { $0 } == nil, "someone still waits: the work goes on")
        gate.release()
        #expect(await staying.value == 42)
    }

    @Test func abandonedWorkIsCancelledOnlyWhenItMayBe() async {
        for cancels in [true, false] {
            let gate = Gate()
            let work = SharedWork(cancelsWhenAbandoned: cancels) { await gate.run() }
            let only = Task { await work.value() }
            await gate.waitUntilStarted()
            only.cancel()
            #expect(await only.value == nil)
            if cancels {
                #expect(gate.outcome.withLock { $0 } == "cancelled")
            } else {
                #expect(gate.outcome.withLock { $0 } == nil, "a refresh runs to its end")
                gate.release()
            }
        }
    }
}
