import AuthBridgeSystem
import Logging
import Synchronization

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// The reading side of a `Connection`: the reader thread and its relay, dispatch in arrival
/// order, the answers given at once, and the wait for backlog room.
extension Connection {
    // MARK: - The reader thread, and its relay

    /// Starts the thread that reads and dispatches frames.
    func startReader(generation: UInt64, delegate: ConnectionDelegate) {
        // A stack large enough for deep JSON.
        let started = startThread(stackSize: 16 << 20) { [self] in readLoop(generation: generation, delegate: delegate) }
        if !started { fatalError("cannot start the ab-reader thread") }
    }

    func readLoop(generation: UInt64, delegate: ConnectionDelegate) {
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
        readerEnd.end(reason)
    }

    /// `answerAtOnce` of the reader of `generation` is taking long (a plugin's
    /// inline hook that blocks): a new reader thread takes over the frames
    /// read and to come, and the stuck one, when its call returns, writes its
    /// answer and ends. Nothing else waits for a call that should have taken
    /// microseconds. Called from another thread (a watchdog); only a reader
    /// still inside that call is replaced.
    func relayReader(from generation: UInt64, delegate: ConnectionDelegate) {
        let answering = generation << 1 | 1
        guard readerPhase.compareExchange(expected: answering, desired: (generation + 1) << 1, ordering: .acquiringAndReleasing).exchanged
        else { return }
        logger.warning("an answer given on the reader thread is taking long; reading goes on on a new thread")
        startReader(generation: generation + 1, delegate: delegate)
    }
    // MARK: - Dispatch (reader thread)

    /// What the reader does after a frame.
    enum Step {
        case proceed
        case exit(code: Int32)
        /// Another reader took over while this one answered (see `relayReader`).
        case replaced
    }

    func dispatch(_ message: IncomingMessage, size: Int, delegate: ConnectionDelegate, generation: UInt64) -> Step {
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
    func enqueue(_ request: Request, size: Int) {
        state.lock.withLock {
            state.backlog.append(Waiting(request: request, size: size))
            state.backlogBytes += size
            state.waitingIDs.insert(request.id)
            pumpLocked()
        }
    }

    /// Hands the answers given at once so far to the writer (reader thread):
    /// now, or after the answers before them once the output has room.
    func flushAnsweredAtOnce() {
        guard !answeredAtOnce.bytes.isEmpty else { return }
        state.lock.withLock { flushAnsweredAtOnceLocked() }
    }

    func flushAnsweredAtOnceLocked() {
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
    func waitForBacklogRoom() -> Bool {
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
    enum RoomWait: Equatable {
        case room
        case gone
        /// Waits for this pipe to be written (or -1: none could be made).
        case wait(signal: Int32)
    }

    /// `POLLRDHUP` (Linux): the peer has shut a socket for writing, or closed
    /// it. A pipe's writer gone is `POLLHUP`, reported whatever is asked.
    /// Swift's Glibc module does not export the constant.
    static let pollReadHangUp: Int16 = 0x2000
}

/// Frames gathered to be written as one: newline-separated, without the last newline
/// (`FrameWriter.send` adds it). Used by one thread only.
final class FrameBatch: @unchecked Sendable {
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
