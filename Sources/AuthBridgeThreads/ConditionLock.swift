#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// A mutex with one condition variable: use it where a thread must block
/// until another changes some state (a writer thread waiting for frames, a
/// pool thread waiting for jobs, a reader waiting for room). For a short
/// critical section that never waits use `Synchronization.Mutex`; for state
/// that async code awaits use an actor or a continuation.
///
/// The state it guards lives with the caller (an `@unchecked Sendable` class
/// whose fields are only touched inside `withLock`). The pthread mutex and
/// condition are allocated once and never move: taking `&` of a stored
/// property hands C a temporary address (formally undefined for a pthread
/// object), so none is ever stored inline.
/// (Foundation's NSCondition would pull Foundation onto the start-up path.)
public final class ConditionLock: @unchecked Sendable {
    private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    private let condition = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: 1)

    public init() {
        pthread_mutex_init(mutex, nil)
        pthread_cond_init(condition, nil)
    }

    deinit {
        pthread_cond_destroy(condition)
        pthread_mutex_destroy(mutex)
        condition.deallocate()
        mutex.deallocate()
    }

    public func withLock<T>(_ body: () throws -> T) rethrows -> T {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body()
    }

    /// Waits for a signal; only call inside `withLock`, in a loop that checks
    /// the awaited state (wake-ups may be spurious).
    public func wait() { pthread_cond_wait(condition, mutex) }

    /// Waits for a signal until `deadline` (CLOCK_REALTIME, as the condition
    /// variable's default clock); false once the deadline has passed.
    public func wait(until deadline: timespec) -> Bool {
        var deadline = deadline
        return pthread_cond_timedwait(condition, mutex, &deadline) != ETIMEDOUT
    }

    /// The CLOCK_REALTIME time `duration` from now, for `wait(until:)`.
    public static func deadline(after duration: Duration) -> timespec {
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        let (seconds, attoseconds) = duration.components
        var nanoseconds = Int(now.tv_nsec) + Int(attoseconds / 1_000_000_000)
        var wholeSeconds = Int(now.tv_sec) + Int(seconds)
        if nanoseconds >= 1_000_000_000 {
            nanoseconds -= 1_000_000_000
            wholeSeconds += 1
        }
        return timespec(tv_sec: wholeSeconds, tv_nsec: nanoseconds)
    }

    /// Wakes one waiting thread (any one of them may take the change).
    public func signal() { pthread_cond_signal(condition) }

    /// Wakes every waiting thread (each checks its own condition).
    public func broadcast() { pthread_cond_broadcast(condition) }
}

/// One value handed from one thread to another that blocks until it comes: a
/// C callback's result to a thread that must return it, or "this thread has
/// finished". A `ConditionLock` with its state; put once, taken once.
public final class Handoff<Value: Sendable>: @unchecked Sendable {
    private let lock = ConditionLock()
    private var value: Value? // guarded by `lock`

    public init() {}

    /// Hands `value` over and wakes the taker.
    public func put(_ value: Value) {
        lock.withLock {
            self.value = value
            lock.broadcast()
        }
    }

    /// Blocks the calling thread until `put`, then returns its value.
    public func take() -> Value {
        lock.withLock {
            while value == nil { lock.wait() }
            return value!
        }
    }
}
