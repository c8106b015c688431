import AuthBridgeJSON
import Crypto
import CryptoExtras
import Foundation
import JWTKit

/// The claims a test provider signs; nil members are left out of the token.
struct TestClaims: JWTPayload {
    var iss: IssuerClaim? = "https://id.example.com"
    var sub: SubjectClaim? = "user-4711"
    var aud: AudienceClaim? = "client-a"
    var azp: String?
    var exp: ExpirationClaim? = ExpirationClaim(value: TestProvider.now.addingTimeInterval(300))
    var iat: IssuedAtClaim? = IssuedAtClaim(value: TestProvider.now.addingTimeInterval(-10))
    var nonce: String? = "n-0S6_WzA2Mj"
    var name: String? = "Ada Lovelace"

    func verify(using algorithm: some JWTAlgorithm) async throws {}
}

/// An OpenID provider with real keys: signs ID tokens with jwt-kit (or swift-crypto, for what jwt-kit
/// will not make) and publishes their JWKS.
enum TestProvider {
    static let issuer = "https://id.example.com"
    static let clientID = "client-a"
    static let nowMs: Int64 = 1_800_000_000_000
    static let now = Date(timeIntervalSince1970: Double(nowMs) / 1000)

    // RSA key generation is slow in a debug build: each key is made once per run.
    static let rsaBacking = try! _RSA.Signing.PrivateKey(keySize: .bits2048)
    static let rsa = try! JWTKit.Insecure.RSA.PrivateKey(backing: rsaBacking)
    static let otherRSA = makeRSAKey()
    static let ec = ES256PrivateKey()
    static let ec384 = ES384PrivateKey()
    static let ec521 = ES512PrivateKey()
    static let ed = try! EdDSA.PrivateKey()

    static func makeRSAKey() -> JWTKit.Insecure.RSA.PrivateKey {
        try! JWTKit.Insecure.RSA.PrivateKey(backing: _RSA.Signing.PrivateKey(keySize: .bits2048))
    }

    /// The provider's JWKS: the RSA key as "rsa-1" (with alg), the P-256 key as "ec-1"
    /// (without alg), the Ed25519 key as "ed-1", and an encryption key jwt-kit cannot read.
    static var jwks: JSON {
        [
            "keys": [
                rsaJWK(rsa.publicKey, kid: "rsa-1"),
                [
                    "kty": "EC", "crv": "P-256", "kid": "ec-1", "use": "sig",
                    "x": .string(ec.parameters!.x), "y": .string(ec.parameters!.y),
                ],
                [
                    "kty": "OKP", "crv": "Ed25519", "kid": "ed-1", "alg": "EdDSA",
                    "x": .string(base64URL(ed.publicKey.rawRepresentation)),
                ],
                ["kty": "RSA", "kid": "enc-1", "use": "enc", "alg": "RSA-OAEP-256", "n": "AQAB", "e": "AQAB"],
            ]
        ]
    }

    static func rsaJWK(_ key: JWTKit.Insecure.RSA.PublicKey, kid: String, alg: String = "RS256") -> JSON {
        let primitives = try! key.getKeyPrimitives()
        return [
            "kty": "RSA", "kid": .string(kid), "use": "sig", "alg": .string(alg),
            "n": .string(base64URL(primitives.modulus)), "e": .string(base64URL(primitives.publicExponent)),
        ]
    }

    /// The JWK of a jwt-kit ECDSA key on `crv`, without alg.
    static func ecJWK(_ parameters: ECDSAParameters?, crv: String, kid: String) -> JSON {
        ["kty": "EC", "crv": .string(crv), "kid": .string(kid), "x": .string(parameters!.x), "y": .string(parameters!.y)]
    }

    /// The provider's claims as JSON, for tokens this test signs itself.
    static var claimsJSON: [String: JSON] {
        [
            "iss": .string(issuer), "sub": "user-4711", "aud": .string(clientID), "exp": .int(nowMs / 1000 + 300),
            "iat": .int(nowMs / 1000 - 10), "nonce": "n-0S6_WzA2Mj",
        ]
    }

    /// A token over `header` and `claims` with the signature `sign` makes of its signing input.
    static func token(header: JSON, claims: JSON, sign: (Data) throws -> Data) rethrows -> String {
        let input = base64URL(Data(header.serialized())) + "." + base64URL(Data(claims.serialized()))
        return input + "." + base64URL(try sign(Data(input.utf8)))
    }

    static func sign(pss digest: DigestAlgorithm, kid: JWKIdentifier) async throws -> String {
        let keys = JWTKeyCollection()
        await keys.add(pss: rsa, digestAlgorithm: digest, kid: kid)
        return try await keys.sign(TestClaims(), kid: kid)
    }

    static func signES384(kid: JWKIdentifier = "ec-384") async throws -> String {
        let keys = JWTKeyCollection()
        await keys.add(ecdsa: ec384, kid: kid)
        return try await keys.sign(TestClaims(), kid: kid)
    }

    static func signES512(kid: JWKIdentifier = "ec-521") async throws -> String {
        let keys = JWTKeyCollection()
        await keys.add(ecdsa: ec521, kid: kid)
        return try await keys.sign(TestClaims(), kid: kid)
    }

    static func sign(
        _ claims: TestClaims = TestClaims(), rsa key: JWTKit.Insecure.RSA.PrivateKey = TestProvider.rsa,
        digest: DigestAlgorithm = .sha256, kid: JWKIdentifier? = "rsa-1"
    ) async throws -> String {
        let keys = JWTKeyCollection()
        await keys.add(rsa: key, digestAlgorithm: digest, kid: kid)
        return try await keys.sign(claims, kid: kid)
    }

    static func signES256(_ claims: TestClaims = TestClaims(), kid: JWKIdentifier = "ec-1") async throws -> String {
        let keys = JWTKeyCollection()
        await keys.add(ecdsa: ec, kid: kid)
        return try await keys.sign(claims, kid: kid)
    }

    static func signEdDSA(_ claims: TestClaims = TestClaims()) async throws -> String {
        let keys = JWTKeyCollection()
        await keys.add(eddsa: ed, kid: "ed-1")
        return try await keys.sign(claims, kid: "ed-1")
    }

    static func signHS256(_ claims: TestClaims = TestClaims(), secret: String) async throws -> String {
        let keys = JWTKeyCollection()
        await keys.add(hmac: HMACKey(from: secret), digestAlgorithm: .sha256, kid: "rsa-1")
        return try await keys.sign(claims, kid: "rsa-1")
    }

    /// A token with `header` and `claims` and an empty signature, as an attacker would send "none".
    static func unsigned(header: JSON, claims: JSON) -> String {
        base64URL(Data(header.serialized())) + "." + base64URL(Data(claims.serialized())) + "."
    }

    /// The host's request for `token` with the provider's settings.
    static func request(
        _ token: String, nonce: String? = "n-0S6_WzA2Mj", jwks: JSON = TestProvider.jwks,
        audience: String = TestProvider.clientID, nowMs: Int64 = TestProvider.nowMs,
        extra: [String: JSON] = [:]
    ) -> JSON {
        var request: [String: JSON] = [
            "token": .string(token), "jwks": jwks, "issuer": .string(issuer),
            "audience": .string(audience), "nowMs": .int(nowMs),
        ]
        if let nonce { request["nonce"] = .string(nonce) }
        request.merge(extra) { _, new in new }
        return .object(request)
    }

    static func base64URL(_ data: Data) -> String {
        data.base64EncodedString()
            .replacingOccurrences(of: "+", with: "-")
            .replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }
}
