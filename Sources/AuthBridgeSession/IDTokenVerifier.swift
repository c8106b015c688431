import AuthBridgeIDToken
import AuthBridgeJSON
import AuthBridgeNetwork
import AuthBridgePluginHost
import Synchronization

/// Verifies OpenID Connect ID tokens (OIDC Core §3.1.3.7): the signature
/// against the provider's JWKS, then `iss`, `aud`/`azp`, `exp`, `iat` and
/// `nonce` with a clock skew.
///
/// The checks are AuthBridgeIDToken's, the signature GNU Nettle's in
/// `libAuthBridgeNettle.so`, dlopened on first use (no Foundation, no jwt-kit: issue 32).
/// JWKS documents are cached per URI and fetched again once when a token
/// names a key the cache does not hold (key rotation).
public final class IDTokenVerifier: Sendable {
    public static let shared = IDTokenVerifier()

    public static let defaultClockSkewSeconds: Int64 = 60

    private let keySets = Mutex<[String: JSON]>([:])

    public init() {}

    /// What the relying party expects of the token.
    public struct Expectation: Sendable {
        public var issuer: String
        public var clientID: String
        public var jwksURI: String
        /// Required to match when set (sign-in); nil on refresh (OIDC §12.2).
        public var nonce: String?
        public var clockSkewSeconds: Int64

        public init(
            issuer: String, clientID: String, jwksURI: String, nonce: String?, clockSkewSeconds: Int64 = IDTokenVerifier.defaultClockSkewSeconds
        ) {
            self.issuer = issuer
            self.clientID = clientID
            self.jwksURI = jwksURI
            self.nonce = nonce
            self.clockSkewSeconds = clockSkewSeconds
        }
    }

    /// The verified claims, or a definitive failure whose reason names the
    /// check that failed (`invalidSignature`, `audienceMismatch`, `expired`…).
    public func verify(_ token: String, expecting expectation: Expectation, http: HTTPClient) async -> Result<JSON, ProviderFailure> {
        var refetched = false
        var keys: JSON
        if let cached = keySets.withLock({ $0[expectation.jwksURI] }) {
            keys = cached
        } else {
            switch await fetchKeys(expectation.jwksURI, http: http) {
            case .success(let value):
                keys = value
                refetched = true
            case .failure(let failure): return .failure(failure)
            }
        }
        while true {
            let request: JSON = .compactObject([
                "token": .string(token), "jwks": keys, "issuer": .string(expectation.issuer),
                "audience": .string(expectation.clientID), "nonce": expectation.nonce.map(JSON.string),
                "nowMs": .int(HostClock.nowMilliseconds()), "leewaySeconds": .int(expectation.clockSkewSeconds),
            ])
            let answer = IDTokenCheck.verify(request: request)
            if let claims = answer["claims"], case .object = claims { return .success(claims) }
            let reason = answer["error"]?["reason"]?.stringValue ?? "invalidIdToken"
            if reason == "noCryptoLibrary" {
                let message = answer["error"]?["message"]?.stringValue ?? "The cryptography library is not installed next to authbridge."
                return .failure(ProviderFailure(.internal, reason: "noJWTLibrary", message: message))
            }
            if reason == "unknownKey" && !refetched {
                // The provider may have rotated its keys since they were cached.
                refetched = true
                switch await fetchKeys(expectation.jwksURI, http: http) {
                case .success(let value):
                    keys = value
                    continue
                case .failure(let failure): return .failure(failure)
                }
            }
            let message = answer["error"]?["message"]?.stringValue ?? "The ID token could not be verified."
            return .failure(ProviderFailure(.definitive, reason: reason, message: "The provider's ID token was refused: \(message)"))
        }
    }

    /// The JWKS document cached for `uri`, if any (kept with the profile).
    public func keys(for uri: String) -> JSON? { keySets.withLock { $0[uri] } }

    /// Seeds the cache with keys kept from an earlier run, unless newer ones
    /// are already cached. A token naming a key they lack still refetches.
    public func remember(_ keys: JSON, for uri: String) {
        guard keys["keys"]?.arrayValue != nil else { return }
        keySets.withLock { if $0[uri] == nil { $0[uri] = keys } }
    }

    private func fetchKeys(_ uri: String, http: HTTPClient) async -> Result<JSON, ProviderFailure> {
        switch await http.perform(["method": "GET", "url": .string(uri), "timeoutMs": 15_000]) {
        case .failure(let failure):
            return .failure(failure)
        case .success(let response):
            guard response["status"]?.intValue == 200, let document = try? JSON.parse(response["body"]?.stringValue ?? ""),
                document["keys"]?.arrayValue != nil
            else {
                return .failure(ProviderFailure(.transient, reason: "badJWKS", message: "The provider's signing keys (jwks_uri) could not be read."))
            }
            keySets.withLock { $0[uri] = document }
            return .success(document)
        }
    }
}
