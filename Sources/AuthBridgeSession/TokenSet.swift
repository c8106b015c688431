import AuthBridgeJSON
import AuthBridgePluginHost
import AuthBridgeRedaction
import AuthBridgeURL

/// The credentials of one signed-in session, as plugins exchange them
/// (bridge-spec: TokenSet). Never printed: `description` is redacted.
public struct TokenSet: Sendable, Equatable, CustomStringConvertible {
    public var accessToken: String
    public var refreshToken: String?
    public var tokenType: String
    /// Milliseconds since the epoch; nil when the provider does not say
    /// (Salesforce): expiry is then learnt from a 401.
    public var expiresAt: Int64?
    /// When the host received these tokens (ms); with `expiresAt` it gives
    /// the lifetime, from which the refresh-ahead point is computed.
    public var obtainedAt: Int64?
    public var idToken: String?
    public var scope: String?
    /// Provider-specific values (Salesforce instance_url, Tableau xsrf_token…), kept in the host.
    public var extras: [String: JSON]
    /// Non-secret provider facts frontends may see (bridge-spec SessionDetails):
    /// flat values under plain names, never a token (see `safeDetails`).
    public var details: [String: JSON]

    public init(
        accessToken: String, refreshToken: String? = nil, tokenType: String = "Bearer",
        expiresAt: Int64? = nil, obtainedAt: Int64? = nil, idToken: String? = nil, scope: String? = nil,
        extras: [String: JSON] = [:], details: [String: JSON] = [:]
    ) {
        self.accessToken = accessToken
        self.refreshToken = refreshToken
        self.tokenType = tokenType
        self.expiresAt = expiresAt
        self.obtainedAt = obtainedAt
        self.idToken = idToken
        self.scope = scope
        self.extras = extras
        self.details = details
        self.details = safeDetails(details)
        for secret in [accessToken, refreshToken, idToken] { KnownSecrets.shared.remember(secret) }
    }

    /// Reads a plugin's TokenSet JSON; nil when `accessToken` is missing.
    public init?(json: JSON) {
        guard let access = json["accessToken"]?.stringValue, !access.isEmpty else { return nil }
        self.init(
            accessToken: access,
            refreshToken: json["refreshToken"]?.stringValue.flatMap { $0.isEmpty ? nil : $0 },
            tokenType: json["tokenType"]?.stringValue ?? "Bearer",
            expiresAt: json["expiresAt"]?.intValue,
            obtainedAt: json["obtainedAt"]?.intValue,
            idToken: json["idToken"]?.stringValue,
            scope: json["scope"]?.stringValue,
            extras: json["extras"]?.objectValue ?? [:],
            details: json["details"]?.objectValue ?? [:])
    }

    public var json: JSON {
        .compactObject([
            "accessToken": .string(accessToken),
            "refreshToken": refreshToken.map(JSON.string),
            "tokenType": .string(tokenType),
            "expiresAt": expiresAt.map(JSON.int),
            "obtainedAt": obtainedAt.map(JSON.int),
            "idToken": idToken.map(JSON.string),
            "scope": scope.map(JSON.string),
            "extras": extras.isEmpty ? nil : .object(extras),
            "details": details.isEmpty ? nil : .object(details),
        ])
    }

    /// A refresh answer replaces what it carries and keeps the rest: a
    /// provider that does not rotate (Salesforce) omits the refresh token.
    public func updated(with fresh: TokenSet) -> TokenSet {
        var merged = fresh
        if merged.refreshToken == nil { merged.refreshToken = refreshToken }
        if merged.idToken == nil { merged.idToken = idToken }
        if merged.scope == nil { merged.scope = scope } // RFC 6749 §5.1: omitted = unchanged
        merged.extras = extras.merging(fresh.extras, uniquingKeysWith: { _, new in new })
        merged.details = merged.safeDetails(details.merging(fresh.details, uniquingKeysWith: { _, new in new }))
        return merged
    }

    /// What of a plugin's `details` may reach a frontend: scalar values under
    /// names that do not name a secret, and no value that is, contains or
    /// looks like a credential. A safety net, as `Redaction` is: plugins must
    /// not put secrets there in the first place.
    func safeDetails(_ candidates: [String: JSON]) -> [String: JSON] {
        // A value equal to a token, or containing one long enough not to match by chance.
        let secrets = [accessToken, refreshToken, idToken].compactMap { $0 }.filter { !$0.isEmpty }
        func holdsSecret(_ text: String) -> Bool {
            secrets.contains { text == $0 || ($0.count >= 8 && text.hasSubstring($0)) }
        }
        return candidates.filter { name, value in
            guard let first = name.unicodeScalars.first, first.properties.isAlphabetic, first.isASCII,
                name.unicodeScalars.allSatisfy({ $0.isASCII && ($0.properties.isAlphabetic || $0.properties.numericType != nil || $0 == "_") }),
                !Redaction.isSecretName(name.lowercased())
            else { return false }
            switch value {
            case .string(let text):
                return Redaction.redact(text) == text && !holdsSecret(text)
            case .null, .bool, .int, .double: return true
            default: return false
            }
        }
    }

    /// The most the host keeps of one provider answer: any one token, and the
    /// whole token set with its account. Far below the vault's record limit,
    /// so that whatever a provider sends, the record it makes can be read
    /// back; real tokens are a few kilobytes (a JWT with many claims ~16 KiB).
    public static let maximumTokenBytes = 64 << 10
    public static let maximumAnswerBytes = 256 << 10

    /// Why a plugin's TokenSet (and account) is too big to keep, or nil.
    public static func sizeProblem(_ tokens: JSON?, account: JSON?) -> String? {
        guard let tokens else { return nil }
        for key in ["accessToken", "refreshToken", "idToken"] {
            if let text = tokens[key]?.stringValue, text.utf8.count > maximumTokenBytes {
                return "its \(key) is \(text.utf8.count) bytes (at most \(maximumTokenBytes) are kept)"
            }
        }
        let size = JSON.array([tokens, account ?? .null]).serialized().count
        return size > maximumAnswerBytes ? "it is \(size) bytes (at most \(maximumAnswerBytes) are kept)" : nil
    }

    /// How close to expiry the token may be before a caller asking for
    /// `requested` milliseconds of validity gets a refresh: `requested`, but
    /// never more than half the token's own lifetime. A provider that issues
    /// 5-second tokens would otherwise be asked for a new one on every call
    /// under the default 60-second minimum (and by every process sharing the
    /// vault); `forceRefresh` still renews at once.
    public func effectiveMinimumValidity(_ requested: Int64) -> Int64 {
        guard let expiresAt, let obtainedAt, expiresAt > obtainedAt else { return requested }
        return min(requested, (expiresAt - obtainedAt) / 2)
    }

    /// The refresh-ahead point: three quarters into the token's lifetime
    /// (nil when the lifetime is unknown).
    public var refreshAheadAt: Int64? {
        guard let expiresAt, let obtainedAt, expiresAt > obtainedAt else { return nil }
        return obtainedAt + (expiresAt - obtainedAt) * 3 / 4
    }

    /// Whether the access token may be handed out as it is.
    public enum Freshness: Sendable {
        /// Valid for the caller's need and not yet at its refresh-ahead point.
        case usable
        /// Still valid for the caller, but past three quarters of its lifetime: hand it out and renew it in the background.
        case refreshAhead
        /// Valid for less than the caller needs: renew it first.
        case renew
    }

    /// `getAccessToken`'s rule at `now` for a caller that needs `minimumValidity`
    /// milliseconds: the engine follows it, and answers given from its cache too.
    public func freshness(at now: Int64, minimumValidity: Int64) -> Freshness {
        if let expiresAt, expiresAt - now < effectiveMinimumValidity(minimumValidity) { return .renew }
        if let ahead = refreshAheadAt, now >= ahead, refreshToken != nil { return .refreshAhead }
        return .usable
    }

    /// `checkSignInStatus`'s clock rule (a plugin without `check_session`): expired at `now`.
    public func isExpired(at now: Int64) -> Bool { expiresAt.map { $0 <= now } ?? false }

    public var description: String {
        "TokenSet(accessToken: [REDACTED], refreshToken: \(refreshToken == nil ? "nil" : "[REDACTED]"), expiresAt: \(expiresAt.map(String.init) ?? "nil"))"
    }
}
