@testable import AuthBridgePluginHost
import Dispatch
#if canImport(Glibc)
import Glibc
#endif
import Synchronization
import Testing

@Suite("Hook threads")
struct HookThreadsTests {
    /// Every job blocks until all have started: this finishes only if each
    /// got a thread of its own at once (the deadline is a bound, not a wait).
    @Test func blockedJobsEachGetAThreadAtOnce() async throws {
        let pool = HookThreads(maximum: 64)
        let count = 40
        let started = Atomic<Int>(0)
        let allStarted = DispatchSemaphore(value: 0)
        let done = DispatchSemaphore(value: 0)
        for _ in 0..<count {
            pool.submit {
                if started.add(1, ordering: .acquiringAndReleasing).newValue == count {
                    for _ in 0..<count { allStarted.signal() }
                }
                _ = allStarted.wait(timeout: .now() + 10)
                done.signal()
            }
        }
        for _ in 0..<count { #expect(done.wait(timeout: .now() + 15) == .success) }
        #expect(started.load(ordering: .acquiring) == count)
        #expect(pool.threadCount == count)
    }

    @Test func idleThreadsAreReused() {
        let pool = HookThreads(maximum: 64)
        for _ in 0..<100 {
            let done = DispatchSemaphore(value: 0)
            pool.submit { done.signal() }
            #expect(done.wait(timeout: .now() + 10) == .success)
            // The job has run; its thread goes back to waiting (bounded: 10 s).
            let deadline = DispatchTime.now() + 10
            while pool.idleCount == 0 && DispatchTime.now() < deadline { sched_yield() }
        }
        #expect(pool.threadCount == 1, "one idle thread serves every job in turn")
    }

    @Test func theMaximumIsHonouredAndQueuedJobsStillRun() {
        let pool = HookThreads(maximum: 2)
        let done = DispatchSemaphore(value: 0)
        for _ in 0..<20 { pool.submit { done.signal() } }
        for _ in 0..<20 { #expect(done.wait(timeout: .now() + 10) == .success) }
        #expect(pool.threadCount <= 2)
    }
}
