import AuthBridgeCrypto
import AuthBridgeRedaction
import AuthBridgeURL

/// Proof Key for Code Exchange (RFC 7636), S256 only: a fresh verifier for
/// every sign-in attempt.
public struct PKCE: Sendable {
    public let verifier: String
    public let challenge: String
    public let method = "S256"

    public init() {
        var generator = SystemRandomNumberGenerator()
        let bytes = (0..<32).map { _ in UInt8.random(in: .min ... .max, using: &generator) }
        verifier = Base64URL.encode(bytes) // 43 characters
        challenge = Base64URL.encode(SHA256.hash(Array(verifier.utf8)))
        KnownSecrets.shared.remember(verifier)
    }

    /// A random URL-safe value for `state` and `nonce` (128 bits).
    public static func randomToken() -> String {
        // Two 64-bit draws, not sixteen of one byte: each draw is a getrandom call (a DPoP proof's jti is on the hot path).
        var generator = SystemRandomNumberGenerator()
        let (high, low) = (generator.next(), generator.next())
        return Base64URL.encode((0..<16).map { UInt8(truncatingIfNeeded: ($0 < 8 ? high : low) >> (UInt64($0 % 8) * 8)) })
    }
}
