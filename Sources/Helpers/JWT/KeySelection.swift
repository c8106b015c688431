import AuthBridgeJSON
import JWTKit

/// The JWS algorithms this verifier can check, and which JWK each one needs.
///
/// HMAC and "none" are absent on purpose: a JWKS holds public keys only, so an
/// HMAC token "verified" with one is forgeable by anyone who read the JWKS.
enum SignatureAlgorithm {
    /// Every algorithm jwt-kit verifies with a public JWK.
    static let supported: Set<String> = [
        "RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA",
    ]

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

/// Picks the provider's keys that may have signed a token and turns them into jwt-kit JWKs.
///
/// Done here rather than by `JWTKeyCollection.add(jwks:)` over the whole set:
/// that call fails on any key jwt-kit cannot read (encryption keys, "oct",
/// unknown `alg` values that real JWKS documents carry), and the collection
/// falls back to its default key when the token's `kid` is unknown and signs
/// with the JWK's own `alg` whatever the header says.
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

    /// A public-only jwt-kit JWK for `key`, pinned to the token's `algorithm`.
    ///
    /// Private members (`d`, `p`, `q`) are never copied: a JWKS that leaks them
    /// still only verifies. The `kid` is required by `JWTKeyCollection.add(jwk:)`,
    /// so a key without one gets a placeholder (the collection holds only this key).
    static func makeJWK(_ key: JSON, algorithm: String) throws(Rejection) -> JWK {
        let unusable = Rejection(.badJWKS, "the provider's signing key is incomplete or invalid")
        guard let jwkAlgorithm = JWK.Algorithm(rawValue: algorithm) else { throw unusable }
        let identifier = JWKIdentifier(string: key["kid"]?.stringValue ?? "selected")
        switch key["kty"]?.stringValue {
        case "RSA":
            guard let n = key["n"]?.stringValue, let e = key["e"]?.stringValue else { throw unusable }
            return .rsa(jwkAlgorithm, identifier: identifier, modulus: n, exponent: e)
        case "EC":
            guard let x = key["x"]?.stringValue, let y = key["y"]?.stringValue,
                let curve = key["crv"]?.stringValue.flatMap(ECDSACurve.init(rawValue:))
            else { throw unusable }
            return .ecdsa(jwkAlgorithm, identifier: identifier, x: x, y: y, curve: curve)
        case "OKP":
            guard let x = key["x"]?.stringValue,
                let curve = key["crv"]?.stringValue.flatMap(EdDSACurve.init(rawValue:))
            else { throw unusable }
            return .octetKeyPair(jwkAlgorithm, identifier: identifier, x: x, y: nil, curve: curve)
        default:
            throw unusable
        }
    }
}
