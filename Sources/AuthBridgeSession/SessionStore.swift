// How sessions are kept: one vault record per signed-in account
// (StoredSession under a SessionKey), and each profile's last resolved
// configuration (ResolvedProfile), both through SessionStore.

import AuthBridgeJSON
import AuthBridgeProtocol
@_exported import AuthBridgeVault

/// One stored session: tokens plus who they belong to.
struct StoredSession: Sendable, Equatable {
    var tokens: TokenSet
    var account: JSON?
    /// Set while a license is revoked (MarketSharp) and sign-out is pending.
    var licenseRevoked: Bool = false
    /// The provider's words about the lost license, shown until the sign-out.
    var licenseMessage: String?
    /// When the pending license sign-out is due (ms): kept in the record so a
    /// host that stops during the grace period still signs the account out.
    var licenseSignOutAt: Int64?
    /// When the user signed in (ms): the latest sign-in is the profile's
    /// current account when a call names none.
    var signedInAt: Int64?
    /// The client the tokens were issued to; nil in records made before it was kept.
    var client: SessionClient?
    /// The key the tokens are bound to (RFC 9449 DPoP): kept only here, in the sealed record.
    var dpopKey: DPoPKey?
    /// Tokens for other scopes, resources or audiences than the session's own (`TokenPurpose`),
    /// by the purpose's key: access tokens only, obtained with the session's grant.
    var derived: [String: TokenSet] = [:]
    /// How the session was granted: nil for a user's sign-in, "clientCredentials" for a client's own
    /// (renewed by a new grant, having no refresh token).
    var grant: String?
    /// The scopes the sign-in asked for (nil: the profile's), and the protected resources it is for
    /// (nil: the profile's `resources`): what later refresh grants ask for again.
    var signInScopes: [String]?
    var resources: [String]?

    /// The most derived tokens a session keeps; past it, the one obtained first is dropped.
    static let derivedLimit = 32

    /// The token type frontends are told: "DPoP" when the access token is bound to the session's key.
    var sessionTokenType: String { StandardSteps.normalisedTokenType(tokens.tokenType) }

    /// The account's key among the profile's sessions ("" when the provider names no account).
    var accountKey: String { account?["id"]?.stringValue ?? "" }
    /// The account as bridge-spec's `Account` (the engine keeps only its members: `SessionEngine.account`).
    var wireAccount: Account? { account.flatMap { try? Account(wire: $0) } }

    init(tokens: TokenSet, account: JSON?) {
        self.tokens = tokens
        self.account = account
    }
}

/// The client a session's tokens were issued to: the `issuer` and `clientId` of the profile's
/// resolved configuration at sign-in (nil where a plugin's configuration has none). Kept in the
/// session's record, so that every process that reads it — the CLI, the agent, another host on a
/// shared vault — can tell a session of a client the profile no longer names (issue 27 §3).
struct SessionClient: Sendable, Equatable {
    var issuer: String?
    var clientId: String?

    init(config: JSON) {
        issuer = config["issuer"]?.stringValue
        clientId = config["clientId"]?.stringValue
    }

    init?(json: JSON) {
        guard case .object = json else { return nil }
        issuer = json["issuer"]?.stringValue
        clientId = json["clientId"]?.stringValue
    }

    var json: JSON { .compactObject(["issuer": issuer.map(JSON.string), "clientId": clientId.map(JSON.string)]) }

    /// What differs from `now`, in words for the user; nil when it is the same client.
    func change(to now: SessionClient) -> String? {
        if clientId != now.clientId {
            return "its client id changed from \(Self.quoted(clientId)) to \(Self.quoted(now.clientId)) since the sign-in"
        }
        if issuer != now.issuer { return "its issuer changed from \(Self.quoted(issuer)) to \(Self.quoted(now.issuer)) since the sign-in" }
        return nil
    }

    private static func quoted(_ text: String?) -> String { text.map { "\"\($0)\"" } ?? "none" }
}

/// Which stored session a call means: a profile and one of its accounts.
///
/// Each account is a vault record of its own (key `profile` for an account
/// the provider does not name, else `profile` + U+001F + account id), so
/// accounts of one profile refresh, lock and sign out independently.
struct SessionKey: Hashable, Sendable, CustomStringConvertible {
    var profile: String
    var account: String

    init(profile: String, account: String) {
        self.profile = profile
        self.account = account
    }

    init(vaultKey: String) {
        let (profile, account) = VaultKey.split(vaultKey)
        self.init(profile: profile, account: account)
    }

    var vaultKey: String { VaultKey.make(profile: profile, account: account) }

    var description: String { account.isEmpty ? profile : "\(profile) (\(account))" }
}

/// The engine's view of a vault: sessions in, records out.
///
/// The record's secret part holds the tokens, the account and the license
/// flag; its metadata holds the profile key and a short account label, so
/// accounts can be listed without decrypting.
public struct SessionStore: Sendable {
    let vault: any Vault
    /// Answers given from what was read, invalidated by every write made here.
    let answers = AnswerCache()

    public init(vault: any Vault) { self.vault = vault }

    /// A store that forgets everything when the process ends.
    public static func inMemory() -> SessionStore { SessionStore(vault: MemoryVault()) }

    public var backend: String { vault.backend }
    public var protection: String { vault.protection }

    nonisolated(nonsending) func load(_ key: SessionKey) async throws -> StoredSession? {
        // A record without tokens cannot be used: the vault keeps it aside (corruptRecord, once).
        guard
            let record = try await vault.load(
                key.vaultKey,
                validate: { record in
                    TokenSet(json: record.secret["tokens"] ?? .null) == nil ? "it holds no tokens" : nil
                })
        else { return nil }
        guard let tokens = TokenSet(json: record.secret["tokens"] ?? .null) else {
            throw VaultError(.corruptRecord, "The stored session of \"\(key)\" has no tokens.")
        }
        var session = StoredSession(tokens: tokens, account: record.secret["account"].flatMap { $0.isNull ? nil : $0 })
        session.licenseRevoked = record.secret["licenseRevoked"]?.boolValue ?? false
        session.licenseMessage = record.secret["licenseMessage"]?.stringValue
        session.licenseSignOutAt = record.secret["licenseSignOutAt"]?.intValue
        session.signedInAt = record.secret["signedInAt"]?.intValue
        session.client = record.secret["client"].flatMap(SessionClient.init(json:))
        session.dpopKey = record.secret["dpopKey"].flatMap(DPoPKey.init(json:))
        session.derived = (record.secret["derived"]?.objectValue ?? [:]).compactMapValues { TokenSet(json: $0) }
        session.grant = record.secret["grant"]?.stringValue
        session.signInScopes = record.secret["signInScopes"]?.arrayValue?.compactMap(\.stringValue)
        session.resources = record.secret["resources"]?.arrayValue?.compactMap(\.stringValue)
        return session
    }

    nonisolated(nonsending) func save(_ session: StoredSession, for key: SessionKey) async throws {
        let label = session.account?["id"]?.stringValue ?? session.account?["email"]?.stringValue ?? session.account?["name"]?.stringValue
        let secret: JSON = .compactObject([
            "tokens": session.tokens.json, "account": session.account,
            "licenseRevoked": session.licenseRevoked ? true : nil,
            "licenseMessage": session.licenseMessage.map(JSON.string),
            "licenseSignOutAt": session.licenseSignOutAt.map(JSON.int),
            "signedInAt": session.signedInAt.map(JSON.int),
            "client": session.client?.json,
            "dpopKey": session.dpopKey?.json,
            "derived": session.derived.isEmpty ? nil : .object(session.derived.mapValues(\.json)),
            "grant": session.grant.map(JSON.string),
            "signInScopes": session.signInScopes.map { .array($0.map(JSON.string)) },
            "resources": session.resources.map { .array($0.map(JSON.string)) },
        ])
        let record = VaultRecord(profile: key.vaultKey, account: label, secret: secret)
        try await answers.invalidating { try await vault.save(record) }
    }

    nonisolated(nonsending) func delete(_ key: SessionKey) async throws { try await answers.invalidating { try await vault.delete(key.vaultKey) } }

    /// How to tell whether the session of `key` changed since it was read (see `AnswerCache`).
    func changeProbe(_ key: SessionKey) -> ChangeProbe? { vault.changeProbe(for: key.vaultKey) }

    /// How to tell whether any of the profile's sessions changed (which one is current).
    func changeProbe(recordsOf profile: String) -> ChangeProbe? { vault.changeProbe(forRecordsOf: profile) }

    /// Every stored session's key, from metadata only.
    nonisolated(nonsending) func keys() async throws -> [SessionKey] {
        try await vault.profiles().map(SessionKey.init(vaultKey:)).filter { !ResolvedProfile.isReserved($0.profile) }
    }

    /// The profile's last good resolved configuration, or nil.
    nonisolated(nonsending) func resolvedProfile(_ profile: String) async throws -> ResolvedProfile? {
        guard let record = try await vault.load(ResolvedProfile.vaultKey(profile)) else { return nil }
        return ResolvedProfile(record.secret)
    }

    nonisolated(nonsending) func save(_ resolved: ResolvedProfile, for profile: String) async throws {
        let record = VaultRecord(profile: ResolvedProfile.vaultKey(profile), account: nil, secret: resolved.json)
        try await answers.invalidating { try await vault.save(record) }
    }

    nonisolated(nonsending) func deleteResolvedProfile(_ profile: String) async throws {
        try await answers.invalidating { try await vault.delete(ResolvedProfile.vaultKey(profile)) }
    }

    /// The client AuthBridge registered at `issuer` (RFC 7591), or nil.
    nonisolated(nonsending) func registration(at issuer: String) async throws -> ClientRegistration? {
        guard let record = try await vault.load(ClientRegistration.vaultKey(issuer)) else { return nil }
        return ClientRegistration(json: record.secret)
    }

    nonisolated(nonsending) func save(_ registration: ClientRegistration) async throws {
        let record = VaultRecord(profile: ClientRegistration.vaultKey(registration.issuer), account: nil, secret: registration.json)
        try await answers.invalidating { try await vault.save(record) }
    }

    nonisolated(nonsending) func deleteRegistration(at issuer: String) async throws {
        try await answers.invalidating { try await vault.delete(ClientRegistration.vaultKey(issuer)) }
    }

    /// Runs `body` holding the cross-process lock of the registration at `issuer`.
    nonisolated(nonsending) func withRegistrationLock<T: Sendable>(_ issuer: String, _ body: () async throws -> T) async throws -> T {
        try await vault.withExclusiveAccess(to: ClientRegistration.vaultKey(issuer), body)
    }

    /// The accounts stored for one profile.
    nonisolated(nonsending) func keys(of profile: String) async throws -> [SessionKey] {
        try await vault.keys(of: profile).map(SessionKey.init(vaultKey:))
    }

    /// Runs `body` holding the session's cross-process lock.
    nonisolated(nonsending) func withExclusiveAccess<T: Sendable>(to key: SessionKey, _ body: () async throws -> T) async throws -> T {
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
struct ResolvedProfile: Sendable, Equatable {
    /// Which plugin, plugin version and settings it was resolved for; a
    /// change of any makes it unusable.
    var fingerprint: String
    var config: JSON
    /// The JWKS document at the configuration's `jwksUri`, when known.
    var signingKeys: JSON?
    /// When it was resolved (host clock, ms).
    var resolvedAt: Int64

    init(fingerprint: String, config: JSON, signingKeys: JSON?, resolvedAt: Int64) {
        self.fingerprint = fingerprint
        self.config = config
        self.signingKeys = signingKeys
        self.resolvedAt = resolvedAt
    }

    init?(_ json: JSON) {
        guard let fingerprint = json["fingerprint"]?.stringValue, let config = json["config"], case .object = config,
            let resolvedAt = json["resolvedAt"]?.intValue
        else { return nil }
        self.init(fingerprint: fingerprint, config: config, signingKeys: json["signingKeys"], resolvedAt: resolvedAt)
    }

    var json: JSON {
        .compactObject([
            "fingerprint": .string(fingerprint), "config": config, "signingKeys": signingKeys,
            "resolvedAt": .int(resolvedAt),
        ])
    }

    static let reservedPrefix: Character = "\u{1E}"

    static func vaultKey(_ profile: String) -> String {
        VaultKey.make(profile: String(reservedPrefix) + "resolved", account: profile)
    }

    static func isReserved(_ vaultProfile: String) -> Bool { vaultProfile.first == reservedPrefix }
}
