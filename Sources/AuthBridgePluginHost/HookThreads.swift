#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

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
final class HookThreads: @unchecked Sendable {
    static let shared = HookThreads(maximum: 256)

    let maximum: Int
    private var mutex = pthread_mutex_t()
    private var wake = pthread_cond_t()
    // Guarded by `mutex`.
    private var jobs: [@Sendable () -> Void] = []
    private var next = 0
    private var idle = 0
    private var threads = 0

    init(maximum: Int) {
        self.maximum = maximum
        pthread_mutex_init(&mutex, nil)
        pthread_cond_init(&wake, nil)
    }

    /// Runs `job` on a pool thread.
    func submit(_ job: @escaping @Sendable () -> Void) {
        pthread_mutex_lock(&mutex)
        jobs.append(job)
        let waiting = jobs.count - next
        let start = waiting > idle && threads < maximum
        if start { threads += 1 }
        pthread_cond_signal(&wake)
        pthread_mutex_unlock(&mutex)
        if start { startThread() }
    }

    /// The number of threads started so far (for tests).
    var threadCount: Int {
        pthread_mutex_lock(&mutex)
        defer { pthread_mutex_unlock(&mutex) }
        return threads
    }

    /// The number of threads waiting for a job (for tests).
    var idleCount: Int {
        pthread_mutex_lock(&mutex)
        defer { pthread_mutex_unlock(&mutex) }
        return idle
    }

    private func startThread() {
        final class Box { let pool: HookThreads; init(_ pool: HookThreads) { self.pool = pool } }
        var attributes = pthread_attr_t()
        pthread_attr_init(&attributes)
        pthread_attr_setdetachstate(&attributes, Int32(PTHREAD_CREATE_DETACHED))
        defer { pthread_attr_destroy(&attributes) }
        var thread = pthread_t()
        let context = Unmanaged.passRetained(Box(self)).toOpaque()
        let started = pthread_create(&thread, &attributes, { context in
            Unmanaged<Box>.fromOpaque(context!).takeRetainedValue().pool.work()
            return nil
        }, context)
        if started != 0 {
            // No thread: the job stays queued for a busy thread to take.
            Unmanaged<Box>.fromOpaque(context).release()
            pthread_mutex_lock(&mutex)
            threads -= 1
            pthread_mutex_unlock(&mutex)
        }
    }

    private func work() {
        pthread_mutex_lock(&mutex)
        while true {
            idle += 1
            while next == jobs.count { pthread_cond_wait(&wake, &mutex) }
            idle -= 1
            let job = jobs[next]
            next += 1
            if next == jobs.count {  // drained: reclaim the array's space
                jobs.removeAll(keepingCapacity: true)
                next = 0
            } else if next >= 1_024 {  // never drained under steady load: compact
                jobs.removeFirst(next)
                next = 0
            }
            pthread_mutex_unlock(&mutex)
            job()
            pthread_mutex_lock(&mutex)
        }
    }
}
