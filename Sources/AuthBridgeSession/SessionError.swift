import AuthBridgeJSON
import AuthBridgePluginHost
import AuthBridgeProtocol
import AuthBridgeRedaction

/// Why a session operation failed, with the stable error code the bridge
/// sends (bridge-spec, "Error codes"). The message is for people and never
/// contains a token.
public struct SessionError: Error, Sendable, CustomStringConvertible {
    /// The codes are bridge-spec's own, generated (`BridgeErrorCode`): the engine raises
    /// `notSignedIn`, `providerRefused` (the provider refused for good), `providerUnavailable`
    /// (network, 5xx, garbage: try again later; nothing was lost), `invalidParams` (`field`
    /// names the parameter)… and the bridge sends the code as it is.
    public typealias Kind = BridgeErrorCode

    public var kind: Kind
    public var message: String
    public var provider: String?
    /// A stable word: "invalid_grant", "timeout", "noTokens"…
    public var reason: String?
    public var field: String?
    /// The provider's HTTP status, when its answer caused the failure.
    public var status: Int?
    /// The provider's OAuth error code, when its answer carried one and `reason` is another word
    /// (`refreshRefused` after `invalid_request`, say).
    public var oauthError: String?
    /// Scopes a token was asked for that the session's grant does not cover (`insufficientScope`).
    public var missingScopes: [String]?

    public init(
        _ kind: Kind, _ message: String, provider: String? = nil, reason: String? = nil, field: String? = nil,
        status: Int? = nil, oauthError: String? = nil
    ) {
        self.kind = kind
        self.message = KnownSecrets.shared.scrub(message)
        self.provider = provider
        self.reason = reason
        self.field = field
        self.status = status
        self.oauthError = oauthError
    }

    public var description: String { "\(kind.name): \(message)" }

    /// A cancelled request, in `ProviderFailure.cancelled`'s words.
    static func cancelled(provider: String?) -> SessionError {
        SessionError(.userCancelled, ProviderFailure.cancelled.message, provider: provider, reason: ProviderFailure.cancelled.reason)
    }

    /// A profile names a plugin that did not load: where the host looked, and how to learn
    /// why (a missing plugin and a refused one look the same from here).
    static func pluginNotLoaded(profile: String, plugin: String, folders: [String]) -> SessionError {
        SessionError(
            .pluginError, "Profile \"\(profile)\" uses plugin \"\(plugin)\", which is not loaded \(whereLooked(folders))",
            provider: profile, reason: "pluginNotLoaded")
    }

    /// `configureProfile` names a plugin that did not load.
    static func unknownPlugin(profile: String, plugin: String, folders: [String]) -> SessionError {
        SessionError(
            .providerUnknown, "No loaded plugin has the id \"\(plugin)\" \(whereLooked(folders))",
            provider: profile, reason: "unknownPlugin", field: "plugin")
    }

    private static func whereLooked(_ folders: [String]) -> String {
        let searched = folders.isEmpty ? "no plugin folder was searched" : "searched: \(folders.joined(separator: ", "))"
        return "(\(searched)). Run `authbridge plugins` to see which plugins loaded and why others were refused."
    }

    /// True when the same call may succeed later without the user doing anything.
    public var retryable: Bool { kind == .providerUnavailable || kind == .timeout }

    /// `error.data` on the wire.
    public var data: JSON {
        .compactObject([
            "provider": provider.map(JSON.string),
            "reason": reason.map(JSON.string),
            "field": field.map(JSON.string),
            "retryable": .bool(retryable),
            "status": status.map { JSON.int(Int64($0)) },
            "oauthError": oauthError == reason ? nil : oauthError.map(JSON.string),
            "missingScopes": missingScopes.map { .array($0.map(JSON.string)) },
        ])
    }

    /// Maps a classified provider failure onto the bridge's error kinds.
    init(_ failure: ProviderFailure, provider: String) {
        let kind: Kind
        switch failure.kind {
        case .definitive: kind = .providerRefused
        case .transient: kind = failure.reason == "timeout" || failure.reason == "accountBusy" ? .timeout : .providerUnavailable
        case .configuration: kind = failure.reason == "unsupported" ? .unsupported : .configurationError
        case .internal: kind = .pluginError
        case .cancelled: kind = .userCancelled
        }
        // The transport names the URL (without its query); the profile tells people which of theirs.
        let message =
            Self.transportReasons.contains(failure.reason) && !failure.message.hasPrefix("Profile \"")
            ? "Profile \"\(provider)\": \(failure.message)" : failure.message
        self.init(kind, message, provider: provider, reason: failure.reason, status: failure.status, oauthError: failure.oauthError)
    }

    /// The reasons the HTTP transport gives when no answer came (bridge-spec Reason).
    static let transportReasons: Set<String> = ["timeout", "refused", "dns", "tls", "reset", "protocol", "network", "tooLarge"]
}
