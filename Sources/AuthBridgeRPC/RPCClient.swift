import AuthBridgeJSON
import AuthBridgeSystem
import Logging
import Synchronization

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// The calling side of JSON-RPC 2.0 on one descriptor (a connected socket): how the command
/// line talks to `authbridge agent`. Requests get ids of their own and their answers find them
/// whatever order they come in; notifications go to `onNotification`, on the reader thread, in
/// the order they arrive (a request's events before its answer); a call whose task is cancelled
/// sends `$/cancelRequest` and waits for the answer that ends it.
public final class RPCClient: Sendable {
    /// Why a call failed.
    public enum Failure: Error, Sendable {
        /// The peer answered with this error.
        case error(RPCError)
        /// The connection ended before the answer.
        case closed
    }

    private let fd: Int32
    private let writer: FrameWriter
    private let logger: Logger
    private let state = Mutex(State())
    private let onNotification: @Sendable (String, JSON) -> Void

    private struct State {
        var nextID: Int64 = 1
        var pending: [Int64: CheckedContinuation<Result<JSON, Failure>, Never>] = [:]
        var ended = false
    }

    /// Starts reading `fd` at once; `close()` ends the client (the caller closes `fd` after it).
    public init(fd: Int32, logger: Logger, onNotification: @escaping @Sendable (_ method: String, _ params: JSON) -> Void = { _, _ in }) {
        self.fd = fd
        self.logger = logger
        self.onNotification = onNotification
        self.writer = FrameWriter(fd: fd)
        let started = startThread(stackSize: 4 << 20) { [self] in readLoop() }
        if !started { endAll() }
    }

    /// Calls `method` and returns its result. Cancelling the calling task sends
    /// `$/cancelRequest`; the call then ends with the peer's answer (-32800, or a result
    /// that won the race).
    public func call(_ method: String, _ params: JSON = [:]) async throws(Failure) -> JSON {
        let id = state.withLock { state -> Int64 in
            defer { state.nextID += 1 }
            return state.nextID
        }
        let result = await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Result<JSON, Failure>, Never>) in
                let ended = state.withLock { state -> Bool in
                    if state.ended { return true }
                    state.pending[id] = continuation
                    return false
                }
                if ended {
                    continuation.resume(returning: .failure(.closed))
                    return
                }
                writer.send(OutgoingFrame.request(id: .int(id), method: method, params: params))
                // Cancelled before it was sent: the handler's notice went first, so again.
                if Task.isCancelled { notify("$/cancelRequest", ["id": .int(id)]) }
            }
        } onCancel: {
            notify("$/cancelRequest", ["id": .int(id)])
        }
        return try result.get()
    }

    /// Sends a notification.
    public func notify(_ method: String, _ params: JSON? = nil) {
        writer.send(OutgoingFrame.notification(method: method, params: params))
    }

    /// Ends the client: the connection is shut down (the peer sees end of input), calls still
    /// waiting end with `.closed`, and the writer's thread stops. The caller closes the descriptor.
    public func close() {
        writer.flush(timeout: .seconds(2))
        _ = shutdown(fd, Int32(SHUT_RDWR))
        writer.stop()
        endAll()
    }

    private func readLoop() {
        let reader = FrameReader(fd: fd)
        reader.run { event in
            guard case .frame(let bytes) = event, let frame = try? JSON.parse(bytes), case .object(let members) = frame else {
                logger.debug("the agent wrote a frame that is not a JSON object")
                return true
            }
            if case .string(let method)? = members["method"] {
                onNotification(method, members["params"] ?? .null)
                return true
            }
            guard let id = members["id"]?.intValue, let waiting = state.withLock({ $0.pending.removeValue(forKey: id) }) else {
                return true
            }
            if let error = members["error"] {
                waiting.resume(returning: .failure(.error(RPCError(wire: error))))
            } else {
                waiting.resume(returning: .success(members["result"] ?? .null))
            }
            return true
        }
        endAll()
    }

    private func endAll() {
        let waiting = state.withLock { state in
            state.ended = true
            defer { state.pending.removeAll() }
            return Array(state.pending.values)
        }
        for continuation in waiting { continuation.resume(returning: .failure(.closed)) }
    }
}

extension RPCError {
    /// An error object as a peer sent it (a code outside the known ones kept as it is).
    public init(wire: JSON) {
        let code = wire["code"]?.intValue.map { Code(Int($0)) } ?? .internalError
        self.init(code, wire["message"]?.stringValue ?? "error \(code.rawValue)", data: wire["data"])
    }
}

extension OutgoingFrame {
    /// A request frame (what a client sends).
    public static func request(id: RequestID, method: String, params: JSON?) -> [UInt8] {
        var object: [String: JSON] = ["jsonrpc": "2.0", "id": id.json, "method": .string(method)]
        if let params { object["params"] = params }
        var bytes: [UInt8] = []
        JSON.object(object).serialize(into: &bytes)
        return bytes
    }
}
