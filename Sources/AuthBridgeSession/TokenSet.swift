import AuthBridgeJSON
import Synchronization

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

/// Where sessions are kept. The memory store is the only one until the
/// vault lands; the engine depends on this protocol alone.
public protocol SessionStore: Sendable {
    /// "memory", "encrypted-file", "secret-service".
    var backend: String { get }
    /// "none" (memory only), "encrypted", "keyring".
    var protection: String { get }
    // nonisolated(nonsending): runs on the caller's executor (the engine
    // actor), so a store that needs no executor of its own costs no hop.
    nonisolated(nonsending) func load(_ profile: String) async throws -> StoredSession?
    nonisolated(nonsending) func save(_ session: StoredSession, for profile: String) async throws
    nonisolated(nonsending) func delete(_ profile: String) async throws
    nonisolated(nonsending) func profiles() async throws -> [String]
}

/// Sessions that live as long as the process: nothing touches the disk.
public final class MemorySessionStore: SessionStore {
    private let sessions = Mutex<[String: StoredSession]>([:])
    public let backend = "memory"
    public let protection = "none"

    public init() {}

    nonisolated(nonsending) public func load(_ profile: String) async -> StoredSession? { sessions.withLock { $0[profile] } }
    nonisolated(nonsending) public func save(_ session: StoredSession, for profile: String) async { sessions.withLock { $0[profile] = session } }
    nonisolated(nonsending) public func delete(_ profile: String) async { sessions.withLock { $0[profile] = nil } }
    nonisolated(nonsending) public func profiles() async -> [String] { sessions.withLock { $0.keys.sorted() } }
}
