import AuthBridgeJSON
import CAuthBridgePlugin
import Synchronization

// The words of `authbridge/plugin.h` in Swift, once: the hooks (`ab_hook`) and the failure a hook
// or a host service reports (the ABI's error JSON). The plugin host speaks them to plugins and the
// session engine; the Swift SDK speaks them to plugin authors. plugin.h stays the source of truth:
// these types only name what it defines.

/// The ABI's hooks (`ab_hook`). Their numbers, names and function-table slots are plugin.h's,
/// taken from the header through one table (`header`), not copied: the numbers never change.
public enum PluginHook: RawRepresentable, Sendable, Hashable, CaseIterable, CustomStringConvertible {
    case describe, configure, beginSignIn, completeSignIn, refresh, revoke, checkSession, authorizeRequest, classifyResponse, exchangeToken

    /// plugin.h's entry of the hook: its `ab_hook` number, its name in the function table
    /// (`begin_sign_in`…, as manifests, logs and descriptors spell it) and its slot there.
    private var header: (number: ab_hook, name: String, slot: WritableKeyPath<ab_plugin_vtable, ab_hook_fn?>) {
        switch self {
        case .describe: (AB_HOOK_DESCRIBE, "describe", \.describe)
        case .configure: (AB_HOOK_CONFIGURE, "configure", \.configure)
        case .beginSignIn: (AB_HOOK_BEGIN_SIGN_IN, "begin_sign_in", \.begin_sign_in)
        case .completeSignIn: (AB_HOOK_COMPLETE_SIGN_IN, "complete_sign_in", \.complete_sign_in)
        case .refresh: (AB_HOOK_REFRESH, "refresh", \.refresh)
        case .revoke: (AB_HOOK_REVOKE, "revoke", \.revoke)
        case .checkSession: (AB_HOOK_CHECK_SESSION, "check_session", \.check_session)
        case .authorizeRequest: (AB_HOOK_AUTHORIZE_REQUEST, "authorize_request", \.authorize_request)
        case .classifyResponse: (AB_HOOK_CLASSIFY_RESPONSE, "classify_response", \.classify_response)
        case .exchangeToken: (AB_HOOK_EXCHANGE_TOKEN, "exchange_token", \.exchange_token)
        }
    }

    /// The hook's `ab_hook` number.
    public var rawValue: Int32 { Int32(truncatingIfNeeded: header.number.rawValue) }

    public init?(rawValue: Int32) {
        guard let hook = Self.allCases.first(where: { $0.rawValue == rawValue }) else { return nil }
        self = hook
    }

    /// The hook named as in plugin.h's function table (`begin_sign_in`…), nil for another name.
    public init?(name: String) {
        guard let hook = Self.allCases.first(where: { $0.description == name }) else { return nil }
        self = hook
    }

    /// The hook as the C ABI passes it (`ab_host_api.standard`).
    public var number: ab_hook { header.number }

    /// The hook's function in `ab_plugin_vtable`.
    public var slot: WritableKeyPath<ab_plugin_vtable, ab_hook_fn?> { header.slot }

    /// Hooks that must not perform I/O by the ABI's definition.
    public var isPure: Bool { self == .authorizeRequest || self == .classifyResponse }

    /// The hook's name in plugin.h's function table (`begin_sign_in`…), as logs and descriptors spell it.
    public var description: String { header.name }
}

/// A failure a hook, a host service or a standard step classified: the ABI's error JSON
/// (`{"kind", "reason", "message", "status"?}`, plugin.h's `set_error`).
public struct ProviderFailure: Error, Sendable, Equatable {
    public enum Kind: String, Sendable {
        /// The provider said no for good: revoked, invalid grant, license removed. The session ends.
        case definitive
        /// Might work later: network, timeout, 5xx, garbage answers. The session is kept.
        case transient
        /// The profile's settings are wrong.
        case configuration
        /// The plugin itself misbehaved.
        case `internal`
        /// The user (or frontend) cancelled.
        case cancelled
    }

    public var kind: Kind
    /// A stable word: "invalid_grant", "revoked", "licenseRevoked", "timeout"…
    public var reason: String
    /// A user-facing sentence; never a token.
    public var message: String
    /// The provider's own HTTP status, when there was one.
    public var status: Int?
    /// The OAuth error code (RFC 6749 §5.2) the provider's answer carried, when it caused this
    /// failure and is a word: what a frontend can tell apart when `reason` is the host's own word.
    public var oauthError: String?

    public init(_ kind: Kind, reason: String, message: String, status: Int? = nil, oauthError: String? = nil) {
        self.kind = kind
        self.reason = reason
        self.message = Self.messageFilter.withLock { $0 }.map { $0(message) } ?? message
        self.status = status
        self.oauthError = oauthError.flatMap { Self.isWord($0) ? $0 : nil }
    }

    /// The provider said no for good: the session ends.
    public static func definitive(_ reason: String, _ message: String, status: Int? = nil, oauthError: String? = nil) -> ProviderFailure {
        ProviderFailure(.definitive, reason: reason, message: message, status: status, oauthError: oauthError)
    }

    /// Might work later: the session is kept.
    public static func transient(_ reason: String, _ message: String, status: Int? = nil, oauthError: String? = nil) -> ProviderFailure {
        ProviderFailure(.transient, reason: reason, message: message, status: status, oauthError: oauthError)
    }

    /// OAuth errors by which a server says the failure is its own and passing (RFC 6749 §4.1.2.1).
    static let serverTroubleErrors: Set<String> = ["temporarily_unavailable", "server_error"]

    /// The reason of a refresh the provider refused with something other than `invalid_grant`.
    public static let refreshRefusedReason = "refreshRefused"

    /// This failure of a refresh grant as the provider meant it. RFC 6749 §5.2 answers a refused
    /// grant with 400 (401 for client authentication), so a 400 or 401 from the token endpoint to a
    /// refresh is the provider's definitive answer about this grant, whatever its body: glewlwyd
    /// refuses a revoked or rotated-away refresh token with a bodyless 400, idpyoidc with
    /// `invalid_request`. Kept transient, such a session would sit `offline` forever instead of
    /// telling the user to sign in again. Network errors, timeouts, 408, 429 and 5xx stay
    /// transient; failures already definitive (`invalid_grant` …) keep their reason.
    public var asRefreshRefusal: ProviderFailure {
        guard kind == .transient, let status, status == 400 || status == 401 else { return self }
        // Except where the server itself says the trouble is its own and passing: RFC 6749's
        // `temporarily_unavailable` and `server_error` (some servers send them with a 400).
        if let oauthError, Self.serverTroubleErrors.contains(oauthError) { return self }
        let said = oauthError == nil ? ", with no OAuth error" : ": \(message)"
        return ProviderFailure(
            .definitive, reason: Self.refreshRefusedReason,
            message: "The provider refused to renew the session (HTTP \(status)\(said)); sign in again.", status: status,
            oauthError: oauthError)
    }

    /// A cancelled request (`$/cancelRequest`, `exit`, the end of the input, or a hook that saw
    /// `is_cancelled`): the one failure, and so the one sentence, the plugin host, the session
    /// engine and the Swift SDK answer it with.
    public static let cancelled = ProviderFailure(.cancelled, reason: "cancelled", message: "The request was cancelled.")

    /// The profile's settings are wrong.
    public static func configuration(_ reason: String, _ message: String) -> ProviderFailure {
        ProviderFailure(.configuration, reason: reason, message: message)
    }

    /// A Failure as the other side of the ABI sent it, held to the ABI's schema, because its members
    /// reach a frontend (`error.data`, events): a `reason` that is not a word (bridge-spec's `Reason`)
    /// makes it a plugin error (`internal` `pluginError`, as any malformed answer); an empty
    /// `message` gets one; a `status` that is not an HTTP status is dropped; an unknown `kind` is
    /// `internal`.
    public init(json: JSON) {
        let given = json["message"]?.stringValue ?? ""
        let message = given.allSatisfy(\.isWhitespace) ? nil : given
        let status = json["status"]?.intValue.flatMap { (100...599).contains($0) ? Int($0) : nil }
        let reason = json["reason"]?.stringValue ?? "unspecified"
        guard Self.isWord(reason) else {
            self.init(
                .internal, reason: "pluginError",
                message: message ?? "The provider plugin reported an error with an invalid reason.", status: status)
            return
        }
        let kind = json["kind"]?.stringValue.flatMap(Kind.init(rawValue:)) ?? .internal
        self.init(
            kind, reason: reason, message: message ?? "the provider plugin reported an error", status: status,
            oauthError: json["oauthError"]?.stringValue)
    }

    /// bridge-spec's `Reason`: `^[A-Za-z][A-Za-z0-9_.-]*$`, a stable machine word.
    public static func isWord(_ text: String) -> Bool {
        func isLetter(_ byte: UInt8) -> Bool { (65...90).contains(byte) || (97...122).contains(byte) }
        guard let first = text.utf8.first, isLetter(first) else { return false }
        return text.utf8.allSatisfy {
            isLetter($0) || (48...57).contains($0) || $0 == UInt8(ascii: "_") || $0 == UInt8(ascii: ".") || $0 == UInt8(ascii: "-")
        }
    }

    /// The ABI's error JSON.
    public var json: JSON {
        .compactObject([
            "kind": .string(kind.rawValue), "reason": .string(reason), "message": .string(message),
            "status": status.map { .int(Int64($0)) }, "oauthError": oauthError.map(JSON.string),
        ])
    }

    /// What every message passes through as a failure is made. The host installs one that masks
    /// the secrets it holds (`KnownSecrets`), so that a provider echoing a token in its text never
    /// carries it further; a plugin's copy of this module has none (it holds no such list).
    private static let messageFilter = Mutex<(@Sendable (String) -> String)?>(nil)

    /// Installs the message filter (the host does, once, before it holds any secret).
    public static func filterMessages(with filter: @escaping @Sendable (String) -> String) {
        messageFilter.withLock { $0 = filter }
    }
}
