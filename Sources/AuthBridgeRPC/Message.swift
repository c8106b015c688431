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

    /// A string or integer id. A `.double` is never one: whether its text was
    /// an integer (`7.0`) or a fraction a double cannot tell from one
    /// (`1e-999` reads as 0) is lost; such ids are read from their text
    /// (`init(_:in:at:)`).
    public init?(_ json: JSON) {
        switch json {
        case .int(let value): self = .int(value)
        case .string(let value): self = .string(value)
        default: return nil
        }
    }

    /// The id `json` is, where it was read from `path` of the frame `text`. A
    /// number with a fraction or an exponent is an id when its text denotes an
    /// integer exactly (`7.0`, `1e3`, `3.14e2`: JSON Schema 2020-12 counts them
    /// as integers, bridge-spec's `RequestId`), and is answered as that
    /// integer: the same number, never a neighbour another request may use.
    public init?(_ json: JSON, in text: UnsafeRawBufferPointer, at path: [String]) {
        guard case .double = json else {
            self.init(json)
            return
        }
        guard let span = JSONText.span(of: path, in: text),
            let value = JSONText.exactInteger(UnsafeRawBufferPointer(rebasing: text[span]))
        else { return nil }
        self = .int(value)
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
            switch classify(envelope, text: frame) {
            case .request(let request): return .invalid(id: request.id, error: refusal)
            case .response(let id): return .response(id: id)
            case .invalid(let id, let error): return .invalid(id: id, error: error)
            case .notification: return .invalid(id: nil, error: refusal)
            }
        } catch {
            return .invalid(id: nil, error: .parseError(error.description))
        }
        return classify(value, text: frame)
    }

    /// Classifies a parsed frame; `text` is the frame it was parsed from,
    /// where a numeric id with a fraction or an exponent is read exactly
    /// (`RequestID.init(_:in:at:)`). Without it such an id is refused.
    public static func classify(_ value: JSON, text: UnsafeRawBufferPointer? = nil) -> IncomingMessage {
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
            let parsed = if let text { RequestID(rawID, in: text, at: ["id"]) } else { RequestID(rawID) }
            guard let parsed else {
                let what = if case .double = rawID { "a number that is not an integer" } else { rawID.typeName }
                return .invalid(id: nil, error: .invalidRequest("\"id\" must be a string or an integer, not \(what)"))
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
        var params = members["params"]
        if let params {
            switch params {
            case .object, .array: break
            default:
                return .invalid(id: id, error: .invalidRequest("\"params\" must be an object or an array, not \(params.typeName)"))
            }
        }
        if let id { return .request(Request(id: id, method: method, params: params)) }
        if method == "$/cancelRequest", case .double(let raw)? = params?["id"] {
            // The connection's own notification, read exactly here while the text is at hand:
            // the integer the id's text denotes, or null (cancels nothing) for any other number.
            let exact = text.flatMap { RequestID(.double(raw), in: $0, at: ["params", "id"]) }
            params = params?.setting("id", exact?.json ?? .null)
        }
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
