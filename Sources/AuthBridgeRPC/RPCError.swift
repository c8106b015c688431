import AuthBridgeJSON

/// A JSON-RPC error object: what a failed request answers.
///
/// An extensible struct rather than an enum, so that modules above can add
/// their own codes (see `RPCError.Code`). The message is for people and never
/// contains a token; machines read `code` and `data`.
public struct RPCError: Error, Sendable, Equatable, CustomStringConvertible {
    public var code: Code
    public var message: String
    public var data: JSON?

    public init(_ code: Code, _ message: String, data: JSON? = nil) {
        self.code = code
        self.message = message
        self.data = data
    }

    public var description: String { "RPCError(\(code.rawValue)): \(message)" }

    /// The error object as sent on the wire.
    public var json: JSON {
        var object: [String: JSON] = ["code": .int(Int64(code.rawValue)), "message": .string(message)]
        if let data { object["data"] = data }
        return .object(object)
    }

    /// A stable numeric error code.
    public struct Code: RawRepresentable, Hashable, Sendable {
        public var rawValue: Int
        public init(rawValue: Int) { self.rawValue = rawValue }
        public init(_ rawValue: Int) { self.rawValue = rawValue }

        // JSON-RPC 2.0
        public static let parseError = Code(-32700)
        public static let invalidRequest = Code(-32600)
        public static let methodNotFound = Code(-32601)
        public static let invalidParams = Code(-32602)
        public static let internalError = Code(-32603)
        // LSP lifecycle and cancellation
        public static let serverNotInitialized = Code(-32002)
        public static let requestCancelled = Code(-32800)
    }
}

extension RPCError {
    public static func parseError(_ detail: String) -> RPCError {
        RPCError(.parseError, "Parse error: \(detail)")
    }
    public static func invalidRequest(_ detail: String) -> RPCError {
        RPCError(.invalidRequest, "Invalid request: \(detail)")
    }
    public static func methodNotFound(_ method: String) -> RPCError {
        RPCError(.methodNotFound, "Method not found: \(method)", data: ["method": .string(method)])
    }
    /// Params that fail the schema. `field` is a JSON pointer-like path ("provider", "headers.Accept").
    public static func invalidParams(field: String, _ detail: String) -> RPCError {
        RPCError(.invalidParams, "Invalid params: \(field): \(detail)", data: ["field": .string(field)])
    }
    public static let cancelled = RPCError(.requestCancelled, "Request cancelled")
    public static let internalError = RPCError(.internalError, "Internal error")
}
