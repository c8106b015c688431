import AuthBridgeSystem
import Synchronization

/// The threads blocking hooks run on: an idle one is reused, and when every
/// thread is busy a new one starts at once (up to `maximum`), so a provider
/// that answers slowly never queues another profile's calls behind it.
///
/// Why not libdispatch: on Linux it adds threads for blocked work only about
/// twice a second, so 20 concurrent session checks over the network took
/// ~10 s (measured through the bridge with the Tableau simulator). Why not a
/// thread per call: the hot path (a plugin's `check_session`) would pay a
/// thread start per request. Threads are never stopped: the pool stays at its
/// peak concurrency, which the in-flight request bound keeps small.
///
/// A hook that runs past its deadline is answered without it; its thread is
/// abandoned (counted in `abandoned`) and, being busy, no longer counts as
/// idle, so new work gets another thread.
final class HookThreads: @unchecked Sendable {
    static let shared = HookThreads(maximum: 256)

    let maximum: Int
    /// Threads left inside a hook that ran past its deadline or ignored cancellation.
    let abandoned = Atomic<Int>(0)
    /// Abandoned hooks that returned after all (their outcome was dropped).
    let lateReturns = Atomic<Int>(0)
    /// Idle threads wait on it for a job.
    private let lock = ConditionLock()
    // Guarded by `lock`.
    private var jobs: [@Sendable () -> Void] = []
    private var next = 0
    private var idle = 0
    private var threads = 0

    init(maximum: Int) {
        self.maximum = maximum
    }

    /// Runs `job` on a pool thread.
    func submit(_ job: @escaping @Sendable () -> Void) {
        let start = lock.withLock {
            jobs.append(job)
            let waiting = jobs.count - next
            let start = waiting > idle && threads < maximum
            if start { threads += 1 }
            lock.signal()
            return start
        }
        if start { startWorker() }
    }

    /// The number of threads started so far (for tests).
    var threadCount: Int {
        lock.withLock { threads }
    }

    /// The number of threads waiting for a job (for tests).
    var idleCount: Int {
        lock.withLock { idle }
    }

    private func startWorker() {
        if !startThread({ [self] in self.work() }) {
            // No thread: the job stays queued for a busy thread to take.
            lock.withLock { threads -= 1 }
        }
    }

    private func work() {
        while true {
            let job = lock.withLock {
                idle += 1
                while next == jobs.count { lock.wait() }
                idle -= 1
                let job = jobs[next]
                next += 1
                if next == jobs.count { // drained: reclaim the array's space
                    jobs.removeAll(keepingCapacity: true)
                    next = 0
                } else if next >= 1_024 { // never drained under steady load: compact
                    jobs.removeFirst(next)
                    next = 0
                }
                return job
            }
            job()
        }
    }
}
