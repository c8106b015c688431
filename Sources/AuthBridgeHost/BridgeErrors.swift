import AuthBridgeJSON
import AuthBridgePluginHost
import AuthBridgeRPC
import AuthBridgeSession

/// AuthBridge's application error codes (bridge-spec/README.md, "Error codes").
extension RPCError.Code {
    public static let notSignedIn = RPCError.Code(-32001)
    public static let providerUnknown = RPCError.Code(-32003)
    public static let providerRefused = RPCError.Code(-32004)
    public static let userCancelled = RPCError.Code(-32005)
    public static let timeout = RPCError.Code(-32006)
    public static let providerUnavailable = RPCError.Code(-32007)
    public static let pluginError = RPCError.Code(-32008)
    public static let unsupported = RPCError.Code(-32009)
    public static let unsupportedProtocolVersion = RPCError.Code(-32010)
    public static let storageError = RPCError.Code(-32011)
    public static let noPendingSignIn = RPCError.Code(-32012)
    public static let configurationError = RPCError.Code(-32013)
}

extension RPCError {
    /// The wire form of a session failure. The message was written for people
    /// and never holds a token; `data` carries provider, reason and retryable.
    init(_ error: SessionError) {
        let code: Code
        switch error.kind {
        case .notSignedIn: code = .notSignedIn
        case .providerUnknown: code = .providerUnknown
        case .providerRefused: code = .providerRefused
        case .userCancelled: code = .userCancelled
        case .timeout: code = .timeout
        case .providerUnavailable: code = .providerUnavailable
        case .pluginError: code = .pluginError
        case .unsupported: code = .unsupported
        case .storageError: code = .storageError
        case .noPendingSignIn: code = .noPendingSignIn
        case .configurationError: code = .configurationError
        case .invalidParams: code = .invalidParams
        }
        // Held to bridge-spec's ErrorObject whatever produced the error: a
        // message for people, a reason that is a word, a real HTTP status.
        var data = error.data
        if let reason = data["reason"]?.stringValue, !ProviderFailure.isWord(reason) { data = data.setting("reason", "pluginError") }
        if let status = data["status"]?.intValue, !(100...599).contains(status) { data = data.setting("status", nil) }
        let message = error.message.allSatisfy(\.isWhitespace) ? "The request failed (\(error.reason ?? error.kind.rawValue))." : error.message
        self.init(code, message, data: data)
    }
}
