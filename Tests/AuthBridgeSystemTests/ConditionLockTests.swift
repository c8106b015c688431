import AuthBridgeSystem
import Testing

/// State a spawned thread and the test share, guarded by `lock`.
private final class Shared: @unchecked Sendable {
    let lock = ConditionLock()
    var waiting = false
    var ready = false
}

@Suite("ConditionLock and threads")
struct ConditionLockTests {
    /// The spawned thread is inside `wait` (it let the lock go) before the change it waits for is made.
    @Test func aSpawnedThreadBlockedInWaitWakesWhenTheStateChanges() {
        let shared = Shared()
        let answer = Handoff<String>()
        let started = startThread {
            shared.lock.withLock {
                shared.waiting = true
                shared.lock.broadcast()
                while !shared.ready { shared.lock.wait() }
            }
            answer.put("woken")
        }
        #expect(started)
        shared.lock.withLock {
            while !shared.waiting { shared.lock.wait() }
            shared.ready = true
            shared.lock.signal()
        }
        #expect(answer.take() == "woken")
    }

    @Test func aTimedWaitNobodySignalsEndsAtItsDeadline() {
        let lock = ConditionLock()
        let clock = ContinuousClock()
        let began = clock.now
        let deadline = ConditionLock.deadline(after: .milliseconds(20))
        lock.withLock {
            while lock.wait(until: deadline) {} // a wake-up may be spurious: only the deadline ends it
        }
        #expect(clock.now - began >= .milliseconds(19))
    }

    @Test func aHandoffPutBeforeTheTakeIsKept() {
        let handoff = Handoff<Int>()
        handoff.put(7)
        #expect(handoff.take() == 7)
    }

    @Test func detachThreadRunsTheBodyOnAnotherThread() {
        let caller = pthread_self()
        let answer = Handoff<Bool>()
        detachThread { answer.put(pthread_equal(pthread_self(), caller) != 0) }
        #expect(answer.take() == false)
    }
}

#if canImport(Glibc)
import Glibc
#endif
