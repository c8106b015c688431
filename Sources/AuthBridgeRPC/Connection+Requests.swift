import AuthBridgeJSON
import AuthBridgeSystem
import Logging

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// The requests of a `Connection`: the backlog and the table of running requests behind one
/// lock, how they start, finish and are cancelled, and the answers waiting for output room.
extension Connection {
    /// Answers what may be answered and starts what may start, in arrival
    /// order. Called with the lock held, whenever room or a slot may have
    /// appeared.
    func pumpLocked() {
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

    func startLocked(_ request: Request, delegate: ConnectionDelegate) {
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
    func finish(_ id: RequestID, method: String, result: JSON?, error: RPCError?, started: ContinuousClock.Instant?) {
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

    func cancel(_ params: JSON?) {
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
    func cancelAll() {
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
    func waitUntilIdle() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            state.lock.withLock {
                state.idleWaiters.append(continuation)
                resumeIdleWaitersLocked()
            }
        }
    }

    func resumeIdleWaitersLocked() {
        guard state.running.isEmpty, state.backlog.isEmpty, !state.idleWaiters.isEmpty else { return }
        for waiter in state.idleWaiters { waiter.resume() }
        state.idleWaiters.removeAll()
    }

    /// An answer given without running anything (parse errors, refusals):
    /// written now, or after the answers before it once the output has room.
    func answer(error: RPCError, id: RequestID?) {
        state.lock.withLock { answerLocked(OutgoingFrame.error(id: id, error)) }
    }

    /// `now`: the reader's own answers, written on its thread when the writer is idle (`sendNow`).
    func answerLocked(_ frame: [UInt8], now: Bool = false) {
        if state.deferred.isEmpty, writer.hasRoom {
            if now { writer.sendNow(frame) } else { writer.send(frame) }
        } else {
            state.deferred.append(frame)
            state.backlogBytes += frame.count
        }
    }
}

/// A request read but not started yet.
struct Waiting {
    var request: Request
    /// Its frame's size: what it weighs in the backlog's bound.
    var size: Int
}

struct Running {
    var task: Task<Void, Never>
    /// The peer cancelled it (or the connection is ending) before it finished.
    var cancelRequested = false
}

/// The connection's mutable state, behind one lock (a condition variable,
/// because the reader thread waits on it).
final class SharedState: @unchecked Sendable {
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
