import AuthBridgeJSON
import Logging
import Synchronization

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// What the application behind a `Connection` provides.
///
/// Threading: `admit` and `received` run on the reader thread, one frame at a
/// time, in arrival order — use them for ordering-sensitive state such as the
/// lifecycle. `handle` runs in its own task, concurrently with other requests.
public protocol ConnectionDelegate: AnyObject, Sendable {
    /// Decides, in arrival order, whether a request may run. Return an error to
    /// answer it at once (e.g. -32002 before `initialize`).
    func admit(_ request: Request) -> RPCError?
    /// Runs one request. Throw `RPCError` to answer with an error; task
    /// cancellation (by `$/cancelRequest`) answers -32800.
    func handle(_ request: Request) async throws -> JSON
    /// A notification other than `$/cancelRequest`. Never answered.
    func received(_ notification: Notification) -> Connection.Disposition
}

/// A JSON-RPC 2.0 peer on a pair of file descriptors, after sourcekit-lsp's
/// connection: one reader thread, one serialized writer, a table of pending
/// requests, and cancellation mapped to task cancellation.
///
/// Every request gets exactly one response; responses go out as requests
/// finish, so they may be out of order.
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
    private let pending = Mutex<[RequestID: Task<Void, Never>]>([:])
    /// Requests running at once; the reader waits for a free slot, so a
    /// client that pipelines faster than requests finish cannot make the
    /// host's memory grow without bound (notifications still need a slot-free
    /// reader only between requests, so cancellation keeps working).
    private let slots: RequestSlots
    private let ending = EndingBox()

    public init(input: Int32, output: Int32, logger: Logger, maxFrameBytes: Int = 64 << 20, maxConcurrentRequests: Int = 256) {
        self.slots = RequestSlots(limit: maxConcurrentRequests)
        // A pipe whose write end the writer closes when the peer is gone, to
        // wake the reader from a blocked read.
        var stop: [Int32] = [-1, -1]
        if pipe(&stop) == 0 {
            for fd in stop { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
        } else {
            stop = [-1, -1]
        }
        self.reader = FrameReader(fd: input, maxFrameBytes: maxFrameBytes, stopFD: stop[0] >= 0 ? stop[0] : nil)
        self.logger = logger
        let endingBox = self.ending
        let stopWriter = stop[1]
        self.writer = FrameWriter(fd: output, onFailure: { _ in
            endingBox.value.withLock { if $0 == nil { $0 = .peerGone } }
            if stopWriter >= 0 { close(stopWriter) }
        })
    }

    /// Reads and dispatches frames until end of input, `exit`, or the peer
    /// going away. After end of input, running requests get `drainGrace` to
    /// finish — `echo '{…initialize…}' | authbridge` still gets its answer —
    /// then, as after `exit`, the rest (e.g. a sign-in waiting for a callback
    /// that can no longer arrive) are cancelled and answered -32800.
    /// Everything queued is written before `run` returns.
    public func run(delegate: ConnectionDelegate, drainGrace: Duration = .seconds(1)) async -> Ending {
        let reason: Ending = await withCheckedContinuation { continuation in
            startThread(name: "ab-reader") { [self] in
                var exitCode: Int32?
                reader.run { event in
                    switch event {
                    case .tooLarge(let count):
                        logger.warning("dropped an over-long frame", metadata: ["bytes": "\(count)"])
                        send(error: .invalidRequest("frame of \(count) bytes exceeds the limit of \(reader.maxFrameBytes)"), id: nil)
                        return true
                    case .frame(let bytes):
                        if ending.value.withLock({ $0 }) == .peerGone { return false }
                        switch dispatch(IncomingMessage.decode(bytes), delegate: delegate) {
                        case .proceed: return true
                        case .exit(let code): exitCode = code; return false
                        }
                    }
                }
                let reason: Ending = exitCode.map { .exit(code: $0) } ?? ending.value.withLock { $0 } ?? .endOfInput
                continuation.resume(returning: reason)
            }
        }
        if reason == .endOfInput && drainGrace > .zero { await drain(grace: drainGrace) }
        await cancelPending()
        writer.flush()
        return reason
    }

    /// Waits for running requests to finish, at most `grace`.
    private func drain(grace: Duration) async {
        let tasks = pending.withLock { Array($0.values) }
        guard !tasks.isEmpty else { return }
        await withTaskGroup(of: Void.self) { group in
            group.addTask { for task in tasks { await task.value } }
            group.addTask {
                // A deadline, not synchronisation: past it, what still runs is cancelled.
                guard (try? await Task.sleep(for: grace)) != nil else { return }
                for task in tasks { task.cancel() }
            }
            await group.next()
            group.cancelAll()
        }
    }

    /// Sends a notification to the peer.
    public func notify(_ method: String, _ params: JSON?) {
        writer.send(OutgoingFrame.notification(method: method, params: params))
    }

    /// Writes out everything queued.
    public func flush() { writer.flush() }

    /// The number of requests running now.
    public var pendingCount: Int { pending.withLock { $0.count } }

    // MARK: - Dispatch (reader thread)

    private func dispatch(_ message: IncomingMessage, delegate: ConnectionDelegate) -> Disposition {
        switch message {
        case .invalid(let id, let error):
            logger.debug("answered an invalid frame", metadata: ["code": "\(error.code.rawValue)"])
            send(error: error, id: id)
        case .response(let id):
            logger.debug("ignored a response from the peer", metadata: ["id": "\(id.map(String.init(describing:)) ?? "null")"])
        case .notification(let notification):
            if notification.method == "$/cancelRequest" {
                cancel(notification.params)
                return .proceed
            }
            return delegate.received(notification)
        case .request(let request):
            if let refusal = delegate.admit(request) {
                send(error: refusal, id: request.id)
                return .proceed
            }
            start(request, delegate: delegate)
        }
        return .proceed
    }

    private func start(_ request: Request, delegate: ConnectionDelegate) {
        let id = request.id
        slots.acquire()
        let accepted = pending.withLock { table -> Bool in
            guard table[id] == nil else { return false }
            // Registered under the lock: the task cannot remove its entry
            // before it has been added.
            table[id] = Task { [self] in
                let started = logger.logLevel <= .debug ? ContinuousClock.now : nil
                let frame: [UInt8]
                var outcome: RPCError?
                do {
                    let result = try await delegate.handle(request)
                    if Task.isCancelled { outcome = .cancelled }
                    frame = outcome.map { OutgoingFrame.error(id: id, $0) } ?? OutgoingFrame.result(id: id, result)
                } catch let error as RPCError {
                    outcome = Task.isCancelled ? .cancelled : error
                    frame = OutgoingFrame.error(id: id, outcome!)
                } catch is CancellationError {
                    outcome = .cancelled
                    frame = OutgoingFrame.error(id: id, .cancelled)
                } catch {
                    // Unclassified errors may carry provider text: keep it in the log only.
                    logger.error("request failed", metadata: ["method": "\(request.method)", "error": "\(type(of: error))"])
                    outcome = Task.isCancelled ? .cancelled : .internalError
                    frame = OutgoingFrame.error(id: id, outcome!)
                }
                if let started {
                    // Method, id, time and outcome only: never params or results.
                    logger.debug("answered", metadata: ["method": "\(request.method)", "id": "\(id)",
                                                        "ms": "\((ContinuousClock.now - started).components.attoseconds / 1_000_000_000_000_000 + (ContinuousClock.now - started).components.seconds * 1000)",
                                                        "outcome": "\(outcome.map { String($0.code.rawValue) } ?? "ok")"])
                }
                pending.withLock { _ = $0.removeValue(forKey: id) }
                writer.send(frame)
                slots.release()
            }
            return true
        }
        if !accepted {
            slots.release()
            send(error: .invalidRequest("id \(id) is already in use by a running request"), id: id)
        }
    }

    private func cancel(_ params: JSON?) {
        guard let raw = params?["id"], let id = RequestID(raw) else {
            logger.debug("$/cancelRequest without a valid id")
            return
        }
        let task = pending.withLock { $0[id] }
        task?.cancel()
    }

    private func cancelPending() async {
        let tasks = pending.withLock { Array($0.values) }
        for task in tasks { task.cancel() }
        for task in tasks { await task.value }
    }

    private func send(error: RPCError, id: RequestID?) {
        writer.send(OutgoingFrame.error(id: id, error))
    }
}

private final class EndingBox: Sendable {
    let value = Mutex<Connection.Ending?>(nil)
}

/// A counting semaphore the reader thread blocks on (never a task).
private final class RequestSlots: Sendable {
    private let lock = ConditionLock()
    private let limit: Int
    nonisolated(unsafe) private var used = 0

    init(limit: Int) { self.limit = max(1, limit) }

    func acquire() {
        lock.withLock {
            while used >= limit { lock.wait() }
            used += 1
        }
    }

    func release() {
        lock.withLock {
            used -= 1
            lock.broadcast()
        }
    }
}
