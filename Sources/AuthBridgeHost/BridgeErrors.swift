import AuthBridgeJSON
import AuthBridgePluginHost
import AuthBridgeProtocol
import AuthBridgeRPC
import AuthBridgeSession

extension RPCError.Code {
    /// A code of bridge-spec's catalogue (`BridgeErrorCode`, generated from it): the numbers are
    /// written once, there; JSON-RPC's and LSP's own are also AuthBridgeRPC's constants.
    init(_ code: BridgeErrorCode) { self.init(code.rawValue) }
}

extension RPCError {
    /// The wire form of a session failure. The message was written for people
    /// and never holds a token; `data` carries provider, reason and retryable.
    init(_ error: SessionError) {
        // Held to bridge-spec's ErrorObject whatever produced the error: a
        // message for people, a reason that is a word, a real HTTP status.
        var data = error.data
        if let reason = data["reason"]?.stringValue, !ProviderFailure.isWord(reason) { data = data.setting("reason", "pluginError") }
        if let status = data["status"]?.intValue, !(100...599).contains(status) { data = data.setting("status", nil) }
        let message = error.message.allSatisfy(\.isWhitespace) ? "The request failed (\(error.reason ?? error.kind.name))." : error.message
        self.init(Code(error.kind), message, data: data)
    }
}

extension SessionError {
    /// A bridge error as the engine would have raised it: what a client of
    /// the agent (the command line) reports as if its own engine had failed.
    public init(_ error: RPCError) {
        // The codes an engine raises come back as they are; a cancelled request is a cancelled
        // sign-in or call (-32005), and what only the protocol says (-32600, -32601…) a failure.
        let kind: Kind
        switch BridgeErrorCode(rawValue: error.code.rawValue) ?? .internalError {
        case .requestCancelled: kind = .userCancelled
        case .parseError, .invalidRequest, .methodNotFound, .internalError, .serverNotInitialized, .unsupportedProtocolVersion:
            kind = .pluginError
        case let code: kind = code
        }
        let data = error.data ?? .null
        self.init(
            kind, error.message, provider: data["provider"]?.stringValue,
            reason: data["reason"]?.stringValue ?? (error.code == .requestCancelled ? "cancelled" : nil), field: data["field"]?.stringValue,
            status: data["status"]?.intValue.map(Int.init))
    }
}
