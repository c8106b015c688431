import AuthBridgeJSON
import AuthBridgePluginHost
@_exported import AuthBridgeVault

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

    public init(accessToken: String, refreshToken: String? = nil, tokenType: String = "Bearer",
                expiresAt: Int64? = nil, obtainedAt: Int64? = nil, idToken: String? = nil, scope: String? = nil,
                extras: [String: JSON] = [:], details: [String: JSON] = [:]) {
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
        self.init(accessToken: access,
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
        if merged.scope == nil { merged.scope = scope }  // RFC 6749 §5.1: omitted = unchanged
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
            secrets.contains { text == $0 || ($0.count >= 8 && text.contains($0)) }
        }
        return candidates.filter { name, value in
            guard let first = name.unicodeScalars.first, first.properties.isAlphabetic, first.isASCII,
                  name.unicodeScalars.allSatisfy({ $0.isASCII && ($0.properties.isAlphabetic || $0.properties.numericType != nil || $0 == "_") }),
                  !Redaction.isSecretName(name.lowercased()) else { return false }
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

    public var description: String {
        "TokenSet(accessToken: [REDACTED], refreshToken: \(refreshToken == nil ? "nil" : "[REDACTED]"), expiresAt: \(expiresAt.map(String.init) ?? "nil"))"
    }
}

/// One stored session: tokens plus who they belong to.
public struct StoredSession: Sendable, Equatable {
    public var tokens: TokenSet
    public var account: JSON?
    /// Set while a licence is revoked (MarketSharp) and sign-out is pending.
    public var licenseRevoked: Bool = false
    /// The provider's words about the lost licence, shown until the sign-out.
    public var licenseMessage: String?
    /// When the pending licence sign-out is due (ms): kept in the record so a
    /// host that stops during the grace period still signs the account out.
    public var licenseSignOutAt: Int64?
    /// When the user signed in (ms): the latest sign-in is the profile's
    /// current account when a call names none.
    public var signedInAt: Int64?

    /// The account's key among the profile's sessions ("" when the provider names no account).
    public var accountKey: String { account?["id"]?.stringValue ?? "" }

    public init(tokens: TokenSet, account: JSON?) {
        self.tokens = tokens
        self.account = account
    }
}

/// Which stored session a call means: a profile and one of its accounts.
///
/// Each account is a vault record of its own (key `profile` for an account
/// the provider does not name, else `profile` + U+001F + account id), so
/// accounts of one profile refresh, lock and sign out independently.
public struct SessionKey: Hashable, Sendable, CustomStringConvertible {
    public var profile: String
    public var account: String

    public init(profile: String, account: String) {
        self.profile = profile
        self.account = account
    }

    init(vaultKey: String) {
        let (profile, account) = VaultKey.split(vaultKey)
        self.init(profile: profile, account: account)
    }

    var vaultKey: String { VaultKey.make(profile: profile, account: account) }

    public var description: String { account.isEmpty ? profile : "\(profile) (\(account))" }
}

/// The engine's view of a vault: sessions in, records out.
///
/// The record's secret part holds the tokens, the account and the licence
/// flag; its metadata holds the profile key and a short account label, so
/// accounts can be listed without decrypting.
public struct SessionStore: Sendable {
    public let vault: any Vault

    public init(vault: any Vault) { self.vault = vault }

    /// A store that forgets everything when the process ends.
    public static func inMemory() -> SessionStore { SessionStore(vault: MemoryVault()) }

    public var backend: String { vault.backend }
    public var protection: String { vault.protection }

    nonisolated(nonsending) public func load(_ key: SessionKey) async throws -> StoredSession? {
        // A record without tokens cannot be used: the vault keeps it aside (corruptRecord, once).
        guard let record = try await vault.load(key.vaultKey, validate: { record in
            TokenSet(json: record.secret["tokens"] ?? .null) == nil ? "it holds no tokens" : nil
        }) else { return nil }
        guard let tokens = TokenSet(json: record.secret["tokens"] ?? .null) else {
            throw VaultError(.corruptRecord, "The stored session of \"\(key)\" has no tokens.")
        }
        var session = StoredSession(tokens: tokens, account: record.secret["account"].flatMap { $0.isNull ? nil : $0 })
        session.licenseRevoked = record.secret["licenseRevoked"]?.boolValue ?? false
        session.licenseMessage = record.secret["licenseMessage"]?.stringValue
        session.licenseSignOutAt = record.secret["licenseSignOutAt"]?.intValue
        session.signedInAt = record.secret["signedInAt"]?.intValue
        return session
    }

    nonisolated(nonsending) public func save(_ session: StoredSession, for key: SessionKey) async throws {
        let label = session.account?["id"]?.stringValue ?? session.account?["email"]?.stringValue ?? session.account?["name"]?.stringValue
        let secret: JSON = .compactObject(["tokens": session.tokens.json, "account": session.account,
                                           "licenseRevoked": session.licenseRevoked ? true : nil,
                                           "licenseMessage": session.licenseMessage.map(JSON.string),
                                           "licenseSignOutAt": session.licenseSignOutAt.map(JSON.int),
                                           "signedInAt": session.signedInAt.map(JSON.int)])
        try await vault.save(VaultRecord(profile: key.vaultKey, account: label, secret: secret))
    }

    nonisolated(nonsending) public func delete(_ key: SessionKey) async throws { try await vault.delete(key.vaultKey) }

    /// Every stored session's key, from metadata only.
    nonisolated(nonsending) public func keys() async throws -> [SessionKey] {
        try await vault.profiles().map(SessionKey.init(vaultKey:)).filter { !ResolvedProfile.isReserved($0.profile) }
    }

    /// The profile's last good resolved configuration, or nil.
    nonisolated(nonsending) public func resolvedProfile(_ profile: String) async throws -> ResolvedProfile? {
        guard let record = try await vault.load(ResolvedProfile.vaultKey(profile)) else { return nil }
        return ResolvedProfile(record.secret)
    }

    nonisolated(nonsending) public func save(_ resolved: ResolvedProfile, for profile: String) async throws {
        try await vault.save(VaultRecord(profile: ResolvedProfile.vaultKey(profile), account: nil, secret: resolved.json))
    }

    nonisolated(nonsending) public func deleteResolvedProfile(_ profile: String) async throws {
        try await vault.delete(ResolvedProfile.vaultKey(profile))
    }

    /// The accounts stored for one profile.
    nonisolated(nonsending) public func keys(of profile: String) async throws -> [SessionKey] {
        try await vault.keys(of: profile).map(SessionKey.init(vaultKey:))
    }

    /// Runs `body` holding the session's cross-process lock.
    nonisolated(nonsending) public func withExclusiveAccess<T: Sendable>(to key: SessionKey, _ body: () async throws -> T) async throws -> T {
        try await vault.withExclusiveAccess(to: key.vaultKey, body)
    }
}

/// A profile's last good resolved configuration — what its plugin's
/// `configure` answered (endpoints from the provider's discovery document)
/// — and the provider's signing keys, kept with the profile's sessions so
/// that tokens the host holds stay usable while the provider is down.
///
/// Stored in the vault (sealed like a session: the configuration may carry
/// a client secret) under a key no profile can have: a control character
/// (U+001E) cannot be part of a profile name.
public struct ResolvedProfile: Sendable, Equatable {
    /// Which plugin, plugin version and settings it was resolved for; a
    /// change of any makes it unusable.
    public var fingerprint: String
    public var config: JSON
    /// The JWKS document at the configuration's `jwksUri`, when known.
    public var signingKeys: JSON?
    /// When it was resolved (host clock, ms).
    public var resolvedAt: Int64

    public init(fingerprint: String, config: JSON, signingKeys: JSON?, resolvedAt: Int64) {
        self.fingerprint = fingerprint
        self.config = config
        self.signingKeys = signingKeys
        self.resolvedAt = resolvedAt
    }

    init?(_ json: JSON) {
        guard let fingerprint = json["fingerprint"]?.stringValue, let config = json["config"], case .object = config,
              let resolvedAt = json["resolvedAt"]?.intValue else { return nil }
        self.init(fingerprint: fingerprint, config: config, signingKeys: json["signingKeys"], resolvedAt: resolvedAt)
    }

    var json: JSON {
        .compactObject(["fingerprint": .string(fingerprint), "config": config, "signingKeys": signingKeys,
                        "resolvedAt": .int(resolvedAt)])
    }

    static let reservedPrefix: Character = "\u{1E}"

    static func vaultKey(_ profile: String) -> String {
        VaultKey.make(profile: String(reservedPrefix) + "resolved", account: profile)
    }

    static func isReserved(_ vaultProfile: String) -> Bool { vaultProfile.first == reservedPrefix }
}
