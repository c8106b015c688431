import Synchronization

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// Starts `body` on a detached OS thread of its own (pthreads: no Foundation, no libdispatch,
/// whose pool adds threads for blocked work only slowly on Linux). `stackSize` nil: the system's
/// default. Returns false when the system has no thread to give: `body` has not run and never
/// will, and the caller decides (stop, run it inline, leave the work queued).
///
/// The thread may be one that ran an earlier body and waited for the next (`ParkedThreads`):
/// the agent starts a reader and a writer for every connection, and a new thread (its stack
/// mapped, then unmapped at its end) cost a one-shot client more than its whole exchange.
public func startThread(stackSize: Int? = nil, _ body: @escaping @Sendable () -> Void) -> Bool {
    if ParkedThreads.shared.hand(body, stackSize: stackSize) { return true }
    let first = ParkedThreads.FirstBody(body)
    return newThread(stackSize: stackSize) { ParkedThreads.shared.run(first, stackSize: stackSize) }
}

private func newThread(stackSize: Int?, _ body: @escaping @Sendable () -> Void) -> Bool {
    final class Box {
        let body: @Sendable () -> Void
        init(_ body: @escaping @Sendable () -> Void) { self.body = body }
    }
    var attributes = pthread_attr_t()
    pthread_attr_init(&attributes)
    defer { pthread_attr_destroy(&attributes) }
    if let stackSize { pthread_attr_setstacksize(&attributes, stackSize) }
    pthread_attr_setdetachstate(&attributes, Int32(PTHREAD_CREATE_DETACHED))
    let context = Unmanaged.passRetained(Box(body)).toOpaque()
    #if canImport(Darwin)
    var thread: pthread_t?
    #else
    var thread = pthread_t()
    #endif
    let result = pthread_create(
        &thread, &attributes,
        { raw in
            Unmanaged<Box>.fromOpaque(raw!).takeRetainedValue().body()
            return nil
        }, context)
    guard result == 0 else {
        Unmanaged<Box>.fromOpaque(context).release()
        return false
    }
    return true
}

/// Threads that finished a body, each waiting a while for the next one of the same stack size
/// before it ends. At most `limit` wait per stack size, each at most `idleTime`: an agent that
/// served a burst of connections gives their threads (and stacks) back within seconds. Each
/// waits on its own condition, so a body wakes exactly one thread.
final class ParkedThreads: Sendable {
    static let shared = ParkedThreads()

    static let limit = 8
    static let idleTime: Duration = .seconds(5)

    /// One waiting thread and the body it is handed.
    private final class Slot: @unchecked Sendable {
        let stackSize: Int?
        let lock = ConditionLock()
        var body: (@Sendable () -> Void)? // guarded by `lock`
        init(stackSize: Int?) { self.stackSize = stackSize }

        func give(_ body: @escaping @Sendable () -> Void) {
            lock.withLock {
                self.body = body
                lock.signal()
            }
        }

        /// The body once given; nil when `deadline` (nil: none) passed first.
        func take(until deadline: timespec?) -> (@Sendable () -> Void)? {
            lock.withLock {
                while body == nil {
                    if let deadline {
                        guard lock.wait(until: deadline) else { return body }
                    } else {
                        lock.wait()
                    }
                }
                return body
            }
        }
    }

    private let waiting = Mutex<[Slot]>([])

    /// How many threads of `stackSize` wait for a body now.
    func waitingCount(stackSize: Int?) -> Int { waiting.withLock { $0.count(where: { $0.stackSize == stackSize }) } }

    /// Hands `body` to a waiting thread of `stackSize`; false when none waits.
    func hand(_ body: @escaping @Sendable () -> Void, stackSize: Int?) -> Bool {
        let slot = waiting.withLock { slots in
            slots.lastIndex(where: { $0.stackSize == stackSize }).map { slots.remove(at: $0) }
        }
        slot?.give(body)
        return slot != nil
    }

    /// A new thread's first body, let go of once it has run (what it captured must not live as
    /// long as the thread).
    final class FirstBody: @unchecked Sendable {
        private var body: (@Sendable () -> Void)? // read once, by the thread it was made for
        init(_ body: @escaping @Sendable () -> Void) { self.body = body }
        func take() -> (@Sendable () -> Void)? { body.take() }
    }

    /// A thread's life: its first body, then the bodies it is handed while it waits, until it
    /// has waited `idleTime` for nothing (or `limit` others of its size already wait). Each body
    /// is let go of before the thread waits: what it captured (a connection and its buffers) is
    /// freed when it ends, not when the next one comes.
    func run(_ first: FirstBody, stackSize: Int?) {
        var next = first.take()
        while next != nil {
            next.take()?()
            next = park(stackSize: stackSize)
        }
    }

    private func park(stackSize: Int?) -> (@Sendable () -> Void)? {
        let slot = Slot(stackSize: stackSize)
        let parked = waiting.withLock { slots in
            guard slots.count(where: { $0.stackSize == stackSize }) < Self.limit else { return false }
            slots.append(slot)
            return true
        }
        guard parked else { return nil }
        if let body = slot.take(until: ConditionLock.deadline(after: Self.idleTime)) { return body }
        // Past the idle time: gone, unless a body is on its way to this slot (taken off the list).
        let gone = waiting.withLock { slots in
            guard let index = slots.firstIndex(where: { $0 === slot }) else { return false }
            slots.remove(at: index)
            return true
        }
        return gone ? nil : slot.take(until: nil)
    }
}

/// Runs blocking `body` (flock, D-Bus, waitpid, sockets) on a new detached
/// thread, so that it never occupies an executor; on the calling thread when
/// no thread can be started (the work is done late rather than never).
public func detachThread(_ body: @escaping @Sendable () -> Void) {
    if !startThread(body) { body() }
}
