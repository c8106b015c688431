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

    private let reader: FrameReader
    private let writer: FrameWriter
    private let logger: Logger
    private let state: SharedState
    private let maxConcurrentRequests: Int
    private let maxBacklogBytes: Int
    private let maxBacklogCount: Int
    private let maxUnreadEventBytes: Int
    /// How long the last frames may wait at the end for a peer that reads
    /// nothing (one that does not read must not keep the host alive).
    private let flushGrace: Duration
    private let ending = EndingBox()
    private let stopper: Stopper
    /// Answers given at once, gathered by the reader thread (and only it) until its read is done.
    private let answeredAtOnce = FrameBatch()
    /// The reader thread's generation, shifted left, and whether it is inside `answerAtOnce` (bit 0).
    private let readerPhase = Atomic<UInt64>(0)
    /// Where the reader that ends the run reports why.
    private let readerEnd = ReaderEnd()
    /// Numbers requests as they are read (`Request.sequence`), shared by the connections of one host.
    private let arrivalOrder: ArrivalOrder
    /// The stop pipe's read end, closed by `close()`.
    private let stopReadEnd: Int32
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

    private final class ReaderEnd: Sendable {
        let continuation = Mutex<CheckedContinuation<Ending, Never>?>(nil)
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
    /// going away. After end of input, running and waiting requests get
    /// `drainGrace` to finish — `echo '{…initialize…}' | authbridge` still
    /// gets its answer — then, as after `exit`, the rest (e.g. a sign-in
    /// waiting for a callback that can no longer arrive) are cancelled and
    /// answered -32800. What is queued is written before `run` returns,
    /// unless the peer reads nothing for `flushGrace`.
    public func run(delegate: ConnectionDelegate, drainGrace: Duration = .seconds(1)) async -> Ending {
        state.lock.withLock { state.delegate = delegate }
        let reason: Ending = await withCheckedContinuation { continuation in
            readerEnd.continuation.withLock { $0 = continuation }
            startReader(generation: 0, delegate: delegate)
        }
        if reason == .endOfInput && drainGrace > .zero { await drain(grace: drainGrace) }
        cancelAll()
        await waitUntilIdle()
        flush()
        return reason
    }

    // MARK: - The reader thread, and its relay

    /// Starts the thread that reads and dispatches frames.
    private func startReader(generation: UInt64, delegate: ConnectionDelegate) {
        // A stack large enough for deep JSON.
        let started = startThread(stackSize: 16 << 20) { [self] in readLoop(generation: generation, delegate: delegate) }
        if !started { fatalError("cannot start the ab-reader thread") }
    }

    private func readLoop(generation: UInt64, delegate: ConnectionDelegate) {
        var exitCode: Int32?
        var replaced = false
        var memo = FrameMemo()
        reader.run(onDrained: flushAnsweredAtOnce) { event in
            switch event {
            case .tooLarge(let count) where count > reader.maxFrameBytes:
                logger.warning("dropped an over-long frame", metadata: ["bytes": "\(count)"])
                answer(error: .invalidRequest("frame of \(count) bytes exceeds the limit of \(reader.maxFrameBytes)"), id: nil)
            case .tooLarge(let count):
                // Within the limit: the unfinished frames of all connections had spent their budget.
                let budget = reader.budget.map { "budget of \($0.limit >> 20) MiB" } ?? "budget"
                logger.warning("dropped a frame: the unfinished frames of all connections hold their \(budget)", metadata: ["bytes": "\(count)"])
                let message = "frame of \(count) bytes dropped: the unfinished frames of all connections hold the host's \(budget)"
                answer(error: .invalidRequest(message + "; send it again"), id: nil)
            case .frame(let bytes):
                if ending.value.withLock({ $0 }) == .peerGone { return false }
                switch dispatch(memo.decode(bytes), size: bytes.count, delegate: delegate, generation: generation) {
                case .proceed: break
                case .exit(let code):
                    exitCode = code
                    return false
                case .replaced:
                    replaced = true
                    return false
                }
            }
            return waitForBacklogRoom()
        }
        // A replaced reader leaves everything to the one that took over, which ends the run.
        guard !replaced else { return }
        flushAnsweredAtOnce()
        let reason: Ending = exitCode.map { .exit(code: $0) } ?? ending.value.withLock { $0 } ?? .endOfInput
        readerEnd.continuation.withLock { continuation in
            continuation?.resume(returning: reason)
            continuation = nil
        }
    }

    /// `answerAtOnce` of the reader of `generation` is taking long (a plugin's
    /// inline hook that blocks): a new reader thread takes over the frames
    /// read and to come, and the stuck one, when its call returns, writes its
    /// answer and ends. Nothing else waits for a call that should have taken
    /// microseconds. Called from another thread (a watchdog); only a reader
    /// still inside that call is replaced.
    private func relayReader(from generation: UInt64, delegate: ConnectionDelegate) {
        let answering = generation << 1 | 1
        guard readerPhase.compareExchange(expected: answering, desired: (generation + 1) << 1, ordering: .acquiringAndReleasing).exchanged
        else { return }
        logger.warning("an answer given on the reader thread is taking long; reading goes on on a new thread")
        startReader(generation: generation + 1, delegate: delegate)
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

    // MARK: - Dispatch (reader thread)

    /// What the reader does after a frame.
    private enum Step {
        case proceed
        case exit(code: Int32)
        /// Another reader took over while this one answered (see `relayReader`).
        case replaced
    }

    private func dispatch(_ message: IncomingMessage, size: Int, delegate: ConnectionDelegate, generation: UInt64) -> Step {
        switch message {
        case .invalid(let id, let error):
            logger.debug("answered an invalid frame", metadata: ["code": "\(error.code.rawValue)"])
            answer(error: error, id: id)
        case .response(let id):
            logger.debug("ignored a response from the peer", metadata: ["id": "\(id.map(String.init(describing:)) ?? "null")"])
        case .notification(let notification):
            // Answers given at once go out before anything a notification does (`exit` ends the reading).
            flushAnsweredAtOnce()
            if notification.method == "$/cancelRequest" {
                cancel(notification.params)
                return .proceed
            }
            if case .exit(let code) = delegate.received(notification) { return .exit(code: code) }
            return .proceed
        case .request(var request):
            // A duplicate is refused before `admit`, so it has no effect at all
            // (a duplicate `shutdown` must not start shutting down).
            let duplicate: Bool = state.lock.withLock {
                request.sequence = arrivalOrder.next()
                guard state.running[request.id] != nil || state.waitingIDs.contains(request.id) else { return false }
                // Queued under the lock that also orders the first request's
                // own answer: this refusal always goes out before that answer.
                answerLocked(OutgoingFrame.error(id: request.id, .invalidRequest("id \(request.id) is already in use by a running request")))
                return true
            }
            if duplicate { return .proceed }
            if let refusal = delegate.admit(request) {
                answer(error: refusal, id: request.id)
                return .proceed
            }
            let answering = generation << 1 | 1
            readerPhase.store(answering, ordering: .releasing)
            let result = delegate.answerAtOnce(request) { [weak self] in self?.relayReader(from: generation, delegate: delegate) }
            let stillReader = readerPhase.compareExchange(expected: answering, desired: generation << 1, ordering: .acquiringAndReleasing)
                .exchanged
            if let result {
                let frame = OutgoingFrame.result(id: request.id, serializedResult: result)
                if stillReader {
                    // No task, no hand-off: batched with the other answers given at once from this
                    // read, and handed to the writer when the read's frames are done.
                    answeredAtOnce.add(frame)
                    if answeredAtOnce.bytes.count >= Self.answeredAtOnceBatch { flushAnsweredAtOnce() }
                } else {
                    // The batch is the new reader's now.
                    state.lock.withLock { answerLocked(frame) }
                }
                if logger.logLevel <= .debug {
                    logger.debug("answered at once", metadata: ["method": "\(request.method)", "id": "\(request.id)", "outcome": "ok"])
                }
                return stillReader ? .proceed : .replaced
            }
            if !stillReader {
                enqueue(request, size: size)
                return .replaced
            }
            enqueue(request, size: size)
        }
        return .proceed
    }

    /// Queues an admitted request to run.
    private func enqueue(_ request: Request, size: Int) {
        state.lock.withLock {
            state.backlog.append(Waiting(request: request, size: size))
            state.backlogBytes += size
            state.waitingIDs.insert(request.id)
            pumpLocked()
        }
    }

    /// Hands the answers given at once so far to the writer (reader thread):
    /// now, or after the answers before them once the output has room.
    private func flushAnsweredAtOnce() {
        guard !answeredAtOnce.bytes.isEmpty else { return }
        state.lock.withLock { flushAnsweredAtOnceLocked() }
    }

    private func flushAnsweredAtOnceLocked() {
        guard !answeredAtOnce.bytes.isEmpty else { return }
        answerLocked(answeredAtOnce.take(), now: true)
    }

    /// How many bytes of answers given at once the reader gathers before it hands them over.
    static let answeredAtOnceBatch = 64 << 10

    /// Blocks the reader while the backlog is past its bound; false when the
    /// peer is gone or the connection is stopped meanwhile.
    ///
    /// It waits in `poll`, not on the lock, so as to watch the input too: once
    /// the peer has closed its end (a pipe's writer gone, a socket shut for
    /// writing), it can write no more, what is left is bounded by the kernel's
    /// buffer, and the reader goes on past the bound to reach `exit` or the end
    /// of input. Issue 26: a frontend that stopped reading and closed the
    /// host's stdin left the host waiting for room for good.
    private func waitForBacklogRoom() -> Bool {
        while true {
            let next: RoomWait = state.lock.withLock {
                state.readerWaiting = false
                guard !state.inputClosed,
                    state.backlogBytes > maxBacklogBytes || state.backlog.count + state.deferred.count > maxBacklogCount
                else { return .room }
                flushAnsweredAtOnceLocked() // before waiting: nothing given at once waits with the reader
                if ending.value.withLock({ $0 }) == .peerGone { return .gone }
                state.readerWaiting = true
                return .wait(signal: state.roomSignal())
            }
            guard case .wait(let signal) = next else { return next == .room }
            var fds = [
                pollfd(fd: reader.fd, events: Self.pollReadHangUp, revents: 0),
                pollfd(fd: stopReadEnd, events: Int16(POLLIN), revents: 0),
                pollfd(fd: signal, events: Int16(POLLIN), revents: 0),
            ]
            // Without a signal pipe (out of descriptors), room is looked for every 50 ms.
            let ready = poll(&fds, signal >= 0 ? 3 : 2, signal >= 0 ? -1 : 50)
            if ready < 0 && errno != EINTR { return false }
            if stopReadEnd >= 0 && fds[1].revents != 0 { return false } // stopped: as at end of input
            if fds[0].revents != 0 { state.lock.withLock { state.inputClosed = true } }
            if signal >= 0 && fds[2].revents != 0 { state.lock.withLock { state.drainRoomSignal() } }
        }
    }

    /// What the reader waiting for backlog room does next.
    private enum RoomWait: Equatable {
        case room
        case gone
        /// Waits for this pipe to be written (or -1: none could be made).
        case wait(signal: Int32)
    }

    /// `POLLRDHUP` (Linux): the peer has shut a socket for writing, or closed
    /// it. A pipe's writer gone is `POLLHUP`, reported whatever is asked.
    /// Swift's Glibc module does not export the constant.
    static let pollReadHangUp: Int16 = 0x2000

    /// Answers what may be answered and starts what may start, in arrival
    /// order. Called with the lock held, whenever room or a slot may have
    /// appeared.
    private func pumpLocked() {
        while !state.deferred.isEmpty, writer.hasRoom, let frame = state.deferred.popFirst() {
            state.backlogBytes -= frame.count
            writer.send(frame)
        }
        while state.deferred.isEmpty, !state.backlog.isEmpty, state.running.count < maxConcurrentRequests,
            !state.closed, writer.hasRoom, let delegate = state.delegate, let next = state.backlog.popFirst()
        {
            state.backlogBytes -= next.size
            state.waitingIDs.remove(next.request.id)
            startLocked(next.request, delegate: delegate)
        }
        state.wakeReaderLocked()
        resumeIdleWaitersLocked()
    }

    private func startLocked(_ request: Request, delegate: ConnectionDelegate) {
        let id = request.id
        // Registered under the lock: the task cannot look its entry up
        // before it has been added.
        let task = Task { [self] in
            let started = logger.logLevel <= .debug ? ContinuousClock.now : nil
            var outcome: RPCError?
            var result: JSON?
            do {
                result = try await delegate.handle(request)
            } catch let error as RPCError {
                outcome = error
            } catch is CancellationError {
                outcome = .cancelled
            } catch {
                // Unclassified errors may carry provider text: keep it in the log only.
                logger.error("request failed", metadata: ["method": "\(request.method)", "error": "\(type(of: error))"])
                outcome = .internalError
            }
            finish(id, method: request.method, result: result, error: outcome, started: started)
        }
        state.running[id] = Running(task: task)
    }

    /// Answers a finished request. A result always stands — its effect
    /// happened, even if a `$/cancelRequest` arrived meanwhile; an error is
    /// answered -32800 when the peer cancelled the request before it ended.
    private func finish(_ id: RequestID, method: String, result: JSON?, error: RPCError?, started: ContinuousClock.Instant?) {
        var outcome = error
        state.lock.withLock {
            let cancelled = state.running[id]?.cancelRequested ?? false
            if result == nil, cancelled { outcome = .cancelled }
            state.running[id] = nil
            // Under the lock, so that a duplicate of this id read before
            // this point is refused before this answer goes out.
            writer.send(result.map { OutgoingFrame.result(id: id, $0) } ?? OutgoingFrame.error(id: id, outcome ?? .internalError))
            pumpLocked()
        }
        if let started {
            // Method, id, time and outcome only: never params or results.
            let elapsed = ContinuousClock.now - started
            let milliseconds = elapsed.components.seconds * 1000 + elapsed.components.attoseconds / 1_000_000_000_000_000
            logger.debug(
                "answered",
                metadata: [
                    "method": "\(method)", "id": "\(id)", "ms": "\(milliseconds)",
                    "outcome": "\(outcome.map { String($0.code.rawValue) } ?? "ok")",
                ])
        }
    }

    private func cancel(_ params: JSON?) {
        guard let raw = params?["id"], let id = RequestID(raw) else {
            logger.debug("$/cancelRequest without a valid id")
            return
        }
        let task: Task<Void, Never>? = state.lock.withLock {
            if let waiting = state.backlog.removeFirst(where: { $0.request.id == id }) {
                // Never started: answered at once.
                state.backlogBytes -= waiting.size
                state.waitingIDs.remove(id)
                answerLocked(OutgoingFrame.error(id: id, .cancelled))
                pumpLocked()
                return nil
            }
            // A finished request is no longer here: its answer stands.
            guard var running = state.running[id] else { return nil }
            running.cancelRequested = true
            state.running[id] = running
            return running.task
        }
        // Outside the lock: cancellation handlers run synchronously.
        task?.cancel()
    }

    /// Stops starting requests, answers the waiting ones -32800 and cancels
    /// the running ones (`exit`, end of input past its grace).
    private func cancelAll() {
        let tasks: [Task<Void, Never>] = state.lock.withLock {
            state.closed = true
            while let waiting = state.backlog.popFirst() {
                answerLocked(OutgoingFrame.error(id: waiting.request.id, .cancelled))
            }
            state.waitingIDs.removeAll()
            state.backlogBytes = state.deferred.elements.reduce(0) { $0 + $1.count }
            for (id, running) in state.running {
                var marked = running
                marked.cancelRequested = true
                state.running[id] = marked
            }
            resumeIdleWaitersLocked()
            return state.running.values.map(\.task)
        }
        for task in tasks { task.cancel() }
    }

    /// Returns once no request runs or waits.
    private func waitUntilIdle() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            state.lock.withLock {
                state.idleWaiters.append(continuation)
                resumeIdleWaitersLocked()
            }
        }
    }

    private func resumeIdleWaitersLocked() {
        guard state.running.isEmpty, state.backlog.isEmpty, !state.idleWaiters.isEmpty else { return }
        for waiter in state.idleWaiters { waiter.resume() }
        state.idleWaiters.removeAll()
    }

    /// An answer given without running anything (parse errors, refusals):
    /// written now, or after the answers before it once the output has room.
    private func answer(error: RPCError, id: RequestID?) {
        state.lock.withLock { answerLocked(OutgoingFrame.error(id: id, error)) }
    }

    /// `now`: the reader's own answers, written on its thread when the writer is idle (`sendNow`).
    private func answerLocked(_ frame: [UInt8], now: Bool = false) {
        if state.deferred.isEmpty, writer.hasRoom {
            if now { writer.sendNow(frame) } else { writer.send(frame) }
        } else {
            state.deferred.append(frame)
            state.backlogBytes += frame.count
        }
    }
}

/// Frames gathered to be written as one: newline-separated, without the last newline
/// (`FrameWriter.send` adds it). Used by one thread only.
private final class FrameBatch: @unchecked Sendable {
    private(set) var bytes: [UInt8] = []

    func add(_ frame: [UInt8]) {
        if !bytes.isEmpty { bytes.append(0x0A) }
        bytes.append(contentsOf: frame)
    }

    func take() -> [UInt8] {
        defer { bytes.removeAll(keepingCapacity: true) }
        return bytes
    }
}

/// A request read but not started yet.
private struct Waiting {
    var request: Request
    /// Its frame's size: what it weighs in the backlog's bound.
    var size: Int
}

private struct Running {
    var task: Task<Void, Never>
    /// The peer cancelled it (or the connection is ending) before it finished.
    var cancelRequested = false
}

/// The connection's mutable state, behind one lock (a condition variable,
/// because the reader thread waits on it).
private final class SharedState: @unchecked Sendable {
    let lock = ConditionLock()
    var delegate: ConnectionDelegate?
    var running: [RequestID: Running] = [:]
    var backlog = FIFO<Waiting>()
    var waitingIDs: Set<RequestID> = []
    /// Answers waiting for room in the output, in arrival order.
    var deferred = FIFO<[UInt8]>()
    /// What the backlog and the deferred answers weigh.
    var backlogBytes = 0
    /// After `exit` or the end of input's grace: nothing more starts.
    var closed = false
    var idleWaiters: [CheckedContinuation<Void, Never>] = []
    /// Runs the pump (set once the connection exists; called by the writer).
    var wake: (@Sendable () -> Void)?
    /// The reader waits in `waitForBacklogRoom` for `roomPipe` to be written.
    var readerWaiting = false
    /// The peer has closed its end of the input: reading goes on past the backlog's bound.
    var inputClosed = false
    /// Written to wake the reader waiting for room (made on its first wait: most connections never wait).
    private var roomPipe: (read: Int32, write: Int32) = (-1, -1)
    private var pipeClosed = false

    /// The pipe's read end for the waiting reader to poll; -1 when none can be made.
    func roomSignal() -> Int32 {
        if roomPipe.read < 0 && !pipeClosed {
            var fds: [Int32] = [-1, -1]
            if pipe(&fds) == 0 {
                for fd in fds {
                    _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
                    _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
                }
                roomPipe = (fds[0], fds[1])
            }
        }
        return roomPipe.read
    }

    /// Wakes the reader if it waits for backlog room (with the lock held): room,
    /// a request finished, or the end has come.
    func wakeReaderLocked() {
        guard readerWaiting, roomPipe.write >= 0 else { return }
        readerWaiting = false
        var byte: UInt8 = 1
        _ = write(roomPipe.write, &byte, 1)
    }

    func drainRoomSignal() {
        var bytes = [UInt8](repeating: 0, count: 64)
        while roomPipe.read >= 0, read(roomPipe.read, &bytes, bytes.count) > 0 {}
    }

    /// Once `run` has returned (`Connection.close`).
    func closeRoomSignal() {
        pipeClosed = true
        for fd in [roomPipe.read, roomPipe.write] where fd >= 0 { _ = close(fd) }
        roomPipe = (-1, -1)
    }
}

/// A first-in first-out queue with O(1) removal at the front (Array's
/// `removeFirst` is O(n), and the backlog may hold tens of thousands).
struct FIFO<Element> {
    private var storage: [Element] = []
    private var head = 0

    var isEmpty: Bool { head == storage.count }
    var count: Int { storage.count - head }
    var first: Element? { head < storage.count ? storage[head] : nil }
    var elements: ArraySlice<Element> { storage[head...] }

    mutating func append(_ element: Element) { storage.append(element) }

    mutating func popFirst() -> Element? {
        guard head < storage.count else { return nil }
        let element = storage[head]
        head += 1
        if head == storage.count {
            storage.removeAll(keepingCapacity: storage.count <= 4096)
            head = 0
        } else if head >= 4096, head * 2 >= storage.count {
            storage.removeFirst(head)
            head = 0
        }
        return element
    }

    /// Removes and returns the first element that matches.
    mutating func removeFirst(where matches: (Element) -> Bool) -> Element? {
        guard let index = storage[head...].firstIndex(where: matches) else { return nil }
        return storage.remove(at: index)
    }
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

private final class EndingBox: Sendable {
    let value = Mutex<Connection.Ending?>(nil)
}
