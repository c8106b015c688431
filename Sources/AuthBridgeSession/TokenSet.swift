import AuthBridgeJSON
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
    public var idToken: String?
    public var scope: String?
    /// Provider-specific values (Salesforce instance_url, Tableau xsrf_token…).
    public var extras: [String: JSON]

    public init(accessToken: String, refreshToken: String? = nil, tokenType: String = "Bearer",
                expiresAt: Int64? = nil, idToken: String? = nil, scope: String? = nil, extras: [String: JSON] = [:]) {
        self.accessToken = accessToken
        self.refreshToken = refreshToken
        self.tokenType = tokenType
        self.expiresAt = expiresAt
        self.idToken = idToken
        self.scope = scope
        self.extras = extras
    }

    /// Reads a plugin's TokenSet JSON; nil when `accessToken` is missing.
    public init?(json: JSON) {
        guard let access = json["accessToken"]?.stringValue, !access.isEmpty else { return nil }
        self.init(accessToken: access,
                  refreshToken: json["refreshToken"]?.stringValue.flatMap { $0.isEmpty ? nil : $0 },
                  tokenType: json["tokenType"]?.stringValue ?? "Bearer",
                  expiresAt: json["expiresAt"]?.intValue,
                  idToken: json["idToken"]?.stringValue,
                  scope: json["scope"]?.stringValue,
                  extras: json["extras"]?.objectValue ?? [:])
    }

    public var json: JSON {
        .compactObject([
            "accessToken": .string(accessToken),
            "refreshToken": refreshToken.map(JSON.string),
            "tokenType": .string(tokenType),
            "expiresAt": expiresAt.map(JSON.int),
            "idToken": idToken.map(JSON.string),
            "scope": scope.map(JSON.string),
            "extras": extras.isEmpty ? nil : .object(extras),
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
        return merged
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

    public init(tokens: TokenSet, account: JSON?) {
        self.tokens = tokens
        self.account = account
    }
}

/// The engine's view of a vault: sessions in, records out.
///
/// The record's secret part holds the tokens, the account and the licence
/// flag; its metadata holds the profile and a short account label, so
/// accounts can be listed without decrypting.
public struct SessionStore: Sendable {
    public let vault: any Vault

    public init(vault: any Vault) { self.vault = vault }

    /// A store that forgets everything when the process ends.
    public static func inMemory() -> SessionStore { SessionStore(vault: MemoryVault()) }

    public var backend: String { vault.backend }
    public var protection: String { vault.protection }

    nonisolated(nonsending) public func load(_ profile: String) async throws -> StoredSession? {
        guard let record = try await vault.load(profile) else { return nil }
        guard let tokens = TokenSet(json: record.secret["tokens"] ?? .null) else {
            throw VaultError(.corruptRecord, "The stored session of \"\(profile)\" has no tokens.")
        }
        var session = StoredSession(tokens: tokens, account: record.secret["account"].flatMap { $0.isNull ? nil : $0 })
        session.licenseRevoked = record.secret["licenseRevoked"]?.boolValue ?? false
        return session
    }

    nonisolated(nonsending) public func save(_ session: StoredSession, for profile: String) async throws {
        let label = session.account?["id"]?.stringValue ?? session.account?["email"]?.stringValue ?? session.account?["name"]?.stringValue
        let secret: JSON = .compactObject(["tokens": session.tokens.json, "account": session.account,
                                           "licenseRevoked": session.licenseRevoked ? true : nil])
        try await vault.save(VaultRecord(profile: profile, account: label, secret: secret))
    }

    nonisolated(nonsending) public func delete(_ profile: String) async throws { try await vault.delete(profile) }

    nonisolated(nonsending) public func profiles() async throws -> [String] { try await vault.profiles() }

    /// Runs `body` holding the profile's cross-process lock.
    nonisolated(nonsending) public func withExclusiveAccess<T: Sendable>(to profile: String, _ body: () async throws -> T) async throws -> T {
        try await vault.withExclusiveAccess(to: profile, body)
    }
}
