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

    /// Gated work with `waiters` tasks waiting for its value, once the work has started.
    func startedWork(
        waiters: Int, cancelsWhenAbandoned: Bool = true
    ) async
        -> (gate: Gate, work: SharedWork<Int>, waiters: [Task<Int?, Never>])
    {
        let gate = Gate()
        let work = SharedWork(cancelsWhenAbandoned: cancelsWhenAbandoned) { await gate.run() }
        let tasks = (0..<waiters).map { _ in Task { await work.value() } }
        await gate.waitUntilStarted()
        return (gate, work, tasks)
    }

    @Test func everyWaiterGetsTheOneValue() async {
        let (gate, work, waiters) = await startedWork(waiters: 2)
        gate.release()
        let values = [await waiters[0].value, await waiters[1].value]
        #expect(values == [42, 42])
        #expect(work.isFinished && gate.outcome.withLock { $0 } == "finished")
    }

    @Test func aCancelledWaiterLeavesAtOnceAndTheOthersStillGetTheValue() async {
        let (gate, _, waiters) = await startedWork(waiters: 2)
        let (leaving, staying) = (waiters[0], waiters[1])
        leaving.cancel()
        #expect(await leaving.value == nil)
        #expect(gate.outcome.withLock { $0 } == nil, "someone still waits: the work goes on")
        gate.release()
        #expect(await staying.value == 42)
    }

    @Test func abandonedWorkIsCancelledOnlyWhenItMayBe() async {
        for cancels in [true, false] {
            let (gate, _, waiters) = await startedWork(waiters: 1, cancelsWhenAbandoned: cancels)
            let only = waiters[0]
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
