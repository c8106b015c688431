import AuthBridgeJSON
import AuthBridgeSystem
import Logging
import Synchronization

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// What the application behind a `Connection` provides.
///
/// Threading: `admit`, `answerAtOnce` and `received` run on the reader thread,
/// one frame at a time, in arrival order — use them for ordering-sensitive
/// state such as the lifecycle. `handle` runs in its own task, concurrently
/// with other requests.
public protocol ConnectionDelegate: AnyObject, Sendable {
    /// Decides, in arrival order, whether a request may run. Return an error to
    /// answer it at once (e.g. -32002 before `initialize`).
    func admit(_ request: Request) -> RPCError?
    /// Runs one request. Throw `RPCError` to answer with an error; task
    /// cancellation (by `$/cancelRequest`) answers -32800.
    func handle(_ request: Request) async throws -> JSON
    /// A notification other than `$/cancelRequest`. Never answered.
    func received(_ notification: Notification) -> Connection.Disposition
    /// The result of an admitted request when it is known at once, without
    /// suspending (an answer from a cache, say), as JSON text; nil to run
    /// `handle`. Runs on the reader thread: every frame behind it waits. A
    /// call that runs code which may block (a plugin's inline hook) arranges
    /// for `ifBlocked` to be called from another thread once it has taken too
    /// long: reading then goes on on a new thread, and this call's answer is
    /// still written when it returns.
    func answerAtOnce(_ request: Request, ifBlocked: @escaping @Sendable () -> Void) -> [UInt8]?
}

extension ConnectionDelegate {
    public func answerAtOnce(_ request: Request, ifBlocked: @escaping @Sendable () -> Void) -> [UInt8]? { nil }
}

/// A JSON-RPC 2.0 peer on a pair of file descriptors, after sourcekit-lsp's
/// connection: one reader thread, one serialized writer, a table of running
/// requests, and cancellation mapped to task cancellation.
///
/// Every request gets exactly one response; responses go out as requests
/// finish, so they may be out of order.
///
/// Bounds, and why the reader keeps reading: at most `maxConcurrentRequests`
/// run at once, and no new one starts while the writer's queue is past its
/// bound (a peer that does not read its input). Requests read meanwhile wait
/// in a backlog, in arrival order, and answers the reader gives at once
/// (parse errors, refusals) wait with them when the output is full. The
/// reader goes on reading, so `$/cancelRequest` (a waiting request is
/// answered -32800 at once), `exit` and end of input are always seen; it
/// only pauses while the backlog itself is past `maxBacklogBytes` (a peer
/// that writes without end and never reads), until the backlog shrinks or
/// the peer closes its end of the input — then what is left to read is
/// bounded by the kernel's buffer, and reading goes on to reach `exit` or the
/// end of input. Memory is thus bounded by the running requests, the
/// writer's bound and the backlog's.
public final class Connection: Sendable {
    /// What the reader does after a notification.
    public enum Disposition: Sendable {
        case proceed
        /// Stop reading and end the connection with this process exit code.
        case exit(code: Int32)
    }

    /// Why `run` returned.
    public enum Ending: Sendable, Equatable {
        case endOfInput
        case exit(code: Int32)
        case peerGone
    }

    let reader: FrameReader
    let writer: FrameWriter
    let logger: Logger
    let state: SharedState
    let maxConcurrentRequests: Int
    let maxBacklogBytes: Int
    let maxBacklogCount: Int
    private let maxUnreadEventBytes: Int
    /// How long the last frames may wait at the end for a peer that reads
    /// nothing (one that does not read must not keep the host alive).
    private let flushGrace: Duration
    let ending = EndingBox()
    private let stopper: Stopper
    /// Answers given at once, gathered by the reader thread (and only it) until its read is done.
    let answeredAtOnce = FrameBatch()
    /// The reader thread's generation, shifted left, and whether it is inside `answerAtOnce` (bit 0).
    let readerPhase = Atomic<UInt64>(0)
    /// Where the reader that ends the run reports why.
    let readerEnd = ReaderEnd()
    /// Numbers requests as they are read (`Request.sequence`), shared by the connections of one host.
    let arrivalOrder: ArrivalOrder
    /// The stop pipe's read end, closed by `close()`.
    let stopReadEnd: Int32
    private let closed = Atomic<Bool>(false)
    private let dropped = Atomic<Bool>(false)

    /// How many bytes of events (notifications) a peer may leave unread before
    /// it is dropped (`notify`). Events come from elsewhere — a sign-out in
    /// another app, a refresh — whether or not this peer reads, so unlike
    /// answers nothing upstream stops them: without this bound an app that
    /// never reads grows the host with every event (issue 26: 200 such apps
    /// and 3,000 `session/changed` grew the agent by 70 MiB). 64 KiB is some
    /// 300 `session/changed` events unread on top of what the kernel's buffer
    /// already holds for the peer (a pipe's 64 KiB, a socket's ~200 KiB):
    /// no app that reads falls that far behind, and 256 connections that
    /// never read hold at most 16 MiB of events in the agent.
    public static let maxUnreadEventBytes = 64 << 10

    /// How the reader's end reaches `ended`: the continuation it waits on, or the reason, kept
    /// when the reader ended before anyone waited.
    final class ReaderEnd: Sendable {
        private enum State {
            case waiting(CheckedContinuation<Ending, Never>?)
            case ended(Ending)
        }

        private let state = Mutex(State.waiting(nil))

        /// Called once, by the reader that ends the run.
        func end(_ reason: Ending) {
            let waiter: CheckedContinuation<Ending, Never>? = state.withLock { state in
                defer { state = .ended(reason) }
                if case .waiting(let continuation) = state { return continuation }
                return nil
            }
            waiter?.resume(returning: reason)
        }

        func wait() async -> Ending {
            await withCheckedContinuation { continuation in
                let ended: Ending? = state.withLock { state in
                    if case .ended(let reason) = state { return reason }
                    state = .waiting(continuation)
                    return nil
                }
                if let ended { continuation.resume(returning: ended) }
            }
        }
    }

    /// Closes the stop pipe's write end, once, from whichever side asks first.
    private final class Stopper: Sendable {
        private let writeEnd: Int32
        private let fired = Atomic<Bool>(false)
        init(writeEnd: Int32) { self.writeEnd = writeEnd }
        func fire() {
            guard writeEnd >= 0, !fired.exchange(true, ordering: .acquiringAndReleasing) else { return }
            _ = Glibc.close(writeEnd)
        }
    }

    public init(
        input: Int32, output: Int32, logger: Logger, maxFrameBytes: Int = 64 << 20, maxConcurrentRequests: Int = 256,
        maxQueuedOutputBytes: Int = 4 << 20, maxBacklogBytes: Int = 8 << 20, maxBacklogCount: Int = 65_536,
        maxUnreadEventBytes: Int = Connection.maxUnreadEventBytes, flushGrace: Duration = .seconds(2),
        arrivalOrder: ArrivalOrder = ArrivalOrder(), frameBudget: FrameBudget? = nil
    ) {
        self.arrivalOrder = arrivalOrder
        self.maxUnreadEventBytes = max(1, maxUnreadEventBytes)
        self.maxConcurrentRequests = max(1, maxConcurrentRequests)
        self.maxBacklogBytes = max(1, maxBacklogBytes)
        self.maxBacklogCount = max(1, maxBacklogCount)
        self.flushGrace = flushGrace
        // A pipe whose write end is closed when the peer is gone (by the
        // writer) or the host is asked to stop (`stopReading`), to wake the
        // reader from a blocked read.
        var stop: [Int32] = [-1, -1]
        if pipe(&stop) == 0 {
            for fd in stop { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
        } else {
            stop = [-1, -1]
        }
        self.reader = FrameReader(fd: input, maxFrameBytes: maxFrameBytes, stopFD: stop[0] >= 0 ? stop[0] : nil, budget: frameBudget)
        self.stopReadEnd = stop[0]
        let stopper = Stopper(writeEnd: stop[1])
        self.stopper = stopper
        self.logger = logger
        let state = SharedState()
        self.state = state
        let endingBox = self.ending
        self.writer = FrameWriter(
            fd: output, maxQueuedBytes: maxQueuedOutputBytes,
            onFailure: { _ in
                endingBox.value.withLock { if $0 == nil { $0 = .peerGone } }
                stopper.fire()
                // A reader waiting for the backlog to shrink must see the end too.
                state.lock.withLock { state.wakeReaderLocked() }
            }, onWritten: { state.wake?() })
        state.wake = { [weak self] in
            guard let self else { return }
            self.state.lock.withLock { self.pumpLocked() }
        }
    }

    /// Reads and dispatches frames until end of input, `exit`, or the peer
    /// going away: `start`, then `ended`.
    public func run(delegate: ConnectionDelegate, drainGrace: Duration = .seconds(1)) async -> Ending {
        start(delegate: delegate)
        return await ended(drainGrace: drainGrace)
    }

    /// Starts reading and dispatching frames, on the reader thread, from the calling thread: the
    /// agent's accepting thread starts a connection's reader itself, with no task in between
    /// (the first frames of a one-shot client are read at once). Once per connection.
    public func start(delegate: ConnectionDelegate) {
        state.lock.withLock { state.delegate = delegate }
        startReader(generation: 0, delegate: delegate)
    }

    /// Waits for the end of what `start` began: end of input, `exit`, or the peer going away.
    /// After end of input, running and waiting requests get `drainGrace` to finish — `echo
    /// '{…initialize…}' | authbridge` still gets its answer — then, as after `exit`, the rest
    /// (e.g. a sign-in waiting for a callback that can no longer arrive) are cancelled and
    /// answered -32800. What is queued is written before it returns, unless the peer reads
    /// nothing for `flushGrace`.
    public func ended(drainGrace: Duration = .seconds(1)) async -> Ending {
        let reason = await readerEnd.wait()
        if reason == .endOfInput && drainGrace > .zero { await drain(grace: drainGrace) }
        cancelAll()
        await waitUntilIdle()
        flush()
        return reason
    }

    /// Stops reading as at end of input (the host was asked to end, by
    /// SIGTERM say): running requests get the drain grace, then `run` returns
    /// `.endOfInput`. Safe from any thread, any number of times.
    public func stopReading() { stopper.fire() }

    /// Releases what the connection holds, once `run` has returned: the
    /// writer's thread ends (what is still queued is dropped) and the stop
    /// pipe is closed. A process that serves many connections calls it for
    /// each (`authbridge agent`); the descriptors it was given stay open for
    /// their owner to close — a socket after `shutdown(2)`, which ends a write
    /// blocked on a peer that reads nothing. Safe to call more than once.
    public func close() {
        guard !closed.exchange(true, ordering: .acquiringAndReleasing) else { return }
        stopper.fire()
        writer.stop()
        if stopReadEnd >= 0 { _ = Glibc.close(stopReadEnd) }
        state.lock.withLock {
            // The delegate (a BridgeServer) holds this connection: let go of it, or neither is freed.
            state.delegate = nil
            state.closeRoomSignal()
        }
    }

    /// Lets running and waiting requests finish, for at most `grace`.
    private func drain(grace: Duration) async {
        await withTaskGroup(of: Void.self) { group in
            group.addTask { await self.waitUntilIdle() }
            group.addTask {
                // A deadline, not synchronisation: past it, what still runs is cancelled.
                guard (try? await Task.sleep(for: grace)) != nil else { return }
                self.cancelAll()
            }
            await group.next()
            group.cancelAll()
        }
    }

    /// Sends a notification to the peer.
    public func notify(_ method: String, _ params: JSON?) {
        notify(frame: OutgoingFrame.notification(method: method, params: params))
    }

    /// Sends a notification already encoded (one event for many connections
    /// is encoded once). A peer that has left more than `maxUnreadEventBytes`
    /// of events unread is dropped instead: it does not read, and an event,
    /// unlike an answer, is not held back by its own requests.
    public func notify(frame: [UInt8]) {
        guard !writer.sendEvent(frame, limit: maxUnreadEventBytes) else { return }
        drop(because: "it has left more than \(maxUnreadEventBytes >> 10) KiB of events unread (it does not read its input)")
    }

    /// Ends the connection at once (a peer that does not read, or that never
    /// started its session): what is queued for it is let go, nothing more
    /// starts, its reader stops, and `run` returns `.peerGone` once its
    /// running requests are cancelled. Logged once, with `reason`, by the
    /// connection's logger (the agent's names the connection and its pid).
    /// Safe from any thread, any number of times.
    public func drop(because reason: String) {
        guard !dropped.exchange(true, ordering: .acquiringAndReleasing) else { return }
        logger.warning("dropped the connection: \(reason)")
        ending.value.withLock { if $0 == nil { $0 = .peerGone } }
        writer.abandon()
        stopper.fire()
        state.lock.withLock {
            state.closed = true
            state.wakeReaderLocked()
        }
    }

    /// Writes out everything queued, giving up once the peer has read nothing
    /// for the flush grace.
    public func flush() {
        state.lock.withLock {
            while let frame = state.deferred.popFirst() { writer.send(frame) }
            state.backlogBytes = state.backlog.elements.reduce(0) { $0 + $1.size }
        }
        if !writer.flush(timeout: flushGrace) {
            logger.warning("the peer did not read the last frames; exiting without them", metadata: ["bytes": "\(writer.queuedBytes)"])
        }
    }

    /// The bytes waiting to be written to the peer.
    public var queuedOutputBytes: Int { writer.queuedBytes }

    /// The number of requests running now.
    public var pendingCount: Int { state.lock.withLock { state.running.count } }
}

/// Arrival order of requests (1, 2, …), for one connection or shared by the
/// connections of one host, so that "newer" (a sign-in superseding another)
/// means "read later" whichever connection read it.
public final class ArrivalOrder: Sendable {
    private let last = Atomic<UInt64>(0)

    public init() {}

    /// The next number.
    public func next() -> UInt64 { last.wrappingAdd(1, ordering: .relaxed).newValue }
}

final class EndingBox: Sendable {
    let value = Mutex<Connection.Ending?>(nil)
}
