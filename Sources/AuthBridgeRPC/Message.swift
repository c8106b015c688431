import AuthBridgeJSON

/// A request id: JSON-RPC allows strings and numbers; AuthBridge accepts
/// strings and integers, as LSP does.
public enum RequestID: Hashable, Sendable, CustomStringConvertible {
    case int(Int64)
    case string(String)

    public var json: JSON {
        switch self {
        case .int(let value): .int(value)
        case .string(let value): .string(value)
        }
    }

    public var description: String {
        switch self {
        case .int(let value): String(value)
        case .string(let value): "\"\(value)\""
        }
    }

    /// The id in a `$/cancelRequest`-style param, or nil when it is not an id.
    /// A number with a zero fraction (`7.0`, `1e3`) is an integer, as in JSON
    /// Schema 2020-12 (bridge-spec's `RequestId`), up to 2^53 where doubles
    /// are exact; it is answered as the integer.
    public init?(_ json: JSON) {
        switch json {
        case .int(let value): self = .int(value)
        case .string(let value): self = .string(value)
        case .double(let value) where value.isFinite && value.rounded() == value && abs(value) <= 9_007_199_254_740_992:
            self = .int(Int64(value))
        default: return nil
        }
    }
}

/// A request: a call that must be answered exactly once.
public struct Request: Sendable {
    public var id: RequestID
    public var method: String
    /// The params object or array; nil when absent.
    public var params: JSON?
    /// Arrival order: the connection numbers requests as it reads them
    /// (1, 2, …), so "newer" can mean "arrived later" even when requests run
    /// concurrently and reach a shared point in another order.
    public var sequence: UInt64

    public init(id: RequestID, method: String, params: JSON?, sequence: UInt64 = 0) {
        self.id = id
        self.method = method
        self.params = params
        self.sequence = sequence
    }
}

/// A notification: a call that is never answered.
public struct Notification: Sendable {
    public var method: String
    public var params: JSON?

    public init(method: String, params: JSON?) {
        self.method = method
        self.params = params
    }
}

/// One frame read from the peer, classified by the JSON-RPC 2.0 rules.
public enum IncomingMessage: Sendable {
    case request(Request)
    case notification(Notification)
    /// A response from the peer (AuthBridge sends no requests, so it is logged and dropped).
    case response(id: RequestID?)
    /// A frame that must be answered with an error. `id` is the request's id
    /// when it could be read, otherwise the answer carries `id: null`.
    case invalid(id: RequestID?, error: RPCError)

    /// Classifies one frame. Batches are not supported: an array is answered
    /// with a single -32600 (see bridge-spec/README.md, "Batches").
    public static func decode(_ frame: UnsafeRawBufferPointer) -> IncomingMessage {
        let value: JSON
        do {
            value = try JSON.parse(frame)
        } catch  where error.isTooDeep {
            // Valid JSON, deeper than the parser goes: read the envelope alone
            // so that a request still gets an answer carrying its id.
            guard let (envelope, _) = try? JSON.parse(frame, truncatingBeyond: 8) else {
                return .invalid(id: nil, error: .parseError(error.description))
            }
            let refusal = RPCError.invalidRequest("the message nests deeper than \(JSON.maximumDepth) levels")
            switch classify(envelope) {
            case .request(let request): return .invalid(id: request.id, error: refusal)
            case .response(let id): return .response(id: id)
            case .invalid(let id, let error): return .invalid(id: id, error: error)
            case .notification: return .invalid(id: nil, error: refusal)
            }
        } catch {
            return .invalid(id: nil, error: .parseError(error.description))
        }
        return classify(value)
    }

    public static func classify(_ value: JSON) -> IncomingMessage {
        guard case .object(let members) = value else {
            if case .array = value {
                return .invalid(id: nil, error: .invalidRequest("batches are not supported; send one message per line"))
            }
            return .invalid(id: nil, error: .invalidRequest("a message must be a JSON object, not \(value.typeName)"))
        }
        // Read the id first so that later errors can echo it.
        var id: RequestID?
        let hasID = members["id"] != nil
        if let rawID = members["id"] {
            guard let parsed = RequestID(rawID) else {
                return .invalid(id: nil, error: .invalidRequest("\"id\" must be a string or an integer, not \(rawID.typeName)"))
            }
            id = parsed
        }
        guard let version = members["jsonrpc"] else {
            return .invalid(id: id, error: .invalidRequest("missing \"jsonrpc\": \"2.0\""))
        }
        guard version == .string("2.0") else {
            return .invalid(id: id, error: .invalidRequest("\"jsonrpc\" must be the string \"2.0\""))
        }
        guard let rawMethod = members["method"] else {
            if hasID, members["result"] != nil || members["error"] != nil { return .response(id: id) }
            return .invalid(id: id, error: .invalidRequest("missing \"method\""))
        }
        guard case .string(let method) = rawMethod else {
            return .invalid(id: id, error: .invalidRequest("\"method\" must be a string, not \(rawMethod.typeName)"))
        }
        let params = members["params"]
        if let params {
            switch params {
            case .object, .array: break
            default:
                return .invalid(id: id, error: .invalidRequest("\"params\" must be an object or an array, not \(params.typeName)"))
            }
        }
        if let id { return .request(Request(id: id, method: method, params: params)) }
        return .notification(Notification(method: method, params: params))
    }
}

/// Builds outgoing frames (one line each, without the trailing newline).
public enum OutgoingFrame {
    public static func result(id: RequestID, _ result: JSON) -> [UInt8] {
        encode(["jsonrpc": "2.0", "id": id.json, "result": result])
    }

    /// A result whose JSON text is already made (an answer kept for reuse).
    public static func result(id: RequestID, serializedResult: [UInt8]) -> [UInt8] {
        var bytes: [UInt8] = Array(#"{"jsonrpc":"2.0","id":"#.utf8)
        bytes.reserveCapacity(bytes.count + serializedResult.count + 32)
        id.json.serialize(into: &bytes)
        bytes.append(contentsOf: #","result":"#.utf8)
        bytes.append(contentsOf: serializedResult)
        bytes.append(UInt8(ascii: "}"))
        return bytes
    }

    public static func error(id: RequestID?, _ error: RPCError) -> [UInt8] {
        encode(["jsonrpc": "2.0", "id": id?.json ?? .null, "error": error.json])
    }

    public static func notification(method: String, params: JSON?) -> [UInt8] {
        var object: [String: JSON] = ["jsonrpc": "2.0", "method": .string(method)]
        if let params { object["params"] = params }
        return encode(.object(object))
    }

    private static func encode(_ value: JSON) -> [UInt8] {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(128)
        value.serialize(into: &bytes)
        return bytes
    }
}
