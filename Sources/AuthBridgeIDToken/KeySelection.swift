import AuthBridgeCrypto
import AuthBridgeJSON
import AuthBridgeURL

/// The JWS algorithms this verifier can check, and which JWK each one needs.
///
/// HMAC and "none" are absent on purpose: a JWKS holds public keys only, so an
/// HMAC token "verified" with one is forgeable by anyone who read the JWKS.
enum SignatureAlgorithm {
    /// Every algorithm that verifies with a public JWK (Nettle's, through `JWSSignature`).
    static let supported: Set<String> = JWSSignature.algorithms

    /// Accepted when the request names no allow-list.
    static let defaultAllowed: Set<String> = ["RS256", "RS384", "RS512", "PS256", "ES256", "ES384", "EdDSA"]

    /// The JWK `kty` (and `crv`, where it matters) that `algorithm` needs.
    static func keyShape(for algorithm: String) -> (kty: String, crv: String?)? {
        switch algorithm {
        case "RS256", "RS384", "RS512", "PS256", "PS384", "PS512": ("RSA", nil)
        case "ES256": ("EC", "P-256")
        case "ES384": ("EC", "P-384")
        case "ES512": ("EC", "P-521")
        case "EdDSA": ("OKP", "Ed25519")
        default: nil
        }
    }
}

/// Picks the provider's keys that may have signed a token and reads their public members.
///
/// Key by key, so that keys this verifier cannot read (encryption keys, "oct", unknown `alg`
/// values that real JWKS documents carry) are passed over rather than spoiling the set, an
/// unknown `kid` never falls back to another key, and the token's `alg` must be the key's own.
enum KeySelection {
    /// The JWKS members that match the token's `kid` (when it has one) and can verify `algorithm`.
    static func candidates(in jwks: JSON, kid: String?, algorithm: String) throws(Rejection) -> [JSON] {
        guard let keys = jwks["keys"]?.arrayValue else {
            throw Rejection(.badJWKS, "the provider's key set has no \"keys\" array")
        }
        guard let shape = SignatureAlgorithm.keyShape(for: algorithm) else { return [] }
        return keys.filter { key in
            guard key.objectValue != nil,
                key["kty"]?.stringValue == shape.kty,
                shape.crv == nil || key["crv"]?.stringValue == shape.crv
            else { return false }
            if let kid, key["kid"]?.stringValue != kid { return false }
            if let use = key["use"], use.stringValue != "sig" { return false }
            if let keyAlgorithm = key["alg"], keyAlgorithm.stringValue != algorithm { return false }
            return true
        }
    }

    /// The public key of `key` for `JWSSignature`, its members decoded from base64url.
    ///
    /// Private members (`d`, `p`, `q`) are never read: a JWKS that leaks them still only verifies.
    /// Nil when a member is missing or not base64url (the key is then not tried).
    static func publicKey(_ key: JSON) -> JWSSignature.PublicKey? {
        func member(_ name: String) -> [UInt8]? {
            key[name]?.stringValue.flatMap { Base64URL.decode($0.utf8) }
        }
        switch key["kty"]?.stringValue {
        case "RSA":
            guard let n = member("n"), let e = member("e") else { return nil }
            return .rsa(modulus: n, exponent: e)
        case "EC":
            guard let curve = key["crv"]?.stringValue, let x = member("x"), let y = member("y") else { return nil }
            return .ec(curve: curve, x: x, y: y)
        case "OKP":
            guard let curve = key["crv"]?.stringValue, let x = member("x") else { return nil }
            return .okp(curve: curve, x: x)
        default:
            return nil
        }
    }
}
