import AuthBridgeCrypto
import AuthBridgeSession
import AuthBridgeURL
import Testing

@Suite("PKCE")
struct PKCETests {
    private static let unreserved = Set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")

    @Test func verifierIs43UnreservedCharacters() {
        let pkce = PKCE()
        #expect(pkce.verifier.count == 43)
        #expect(pkce.verifier.allSatisfy(Self.unreserved.contains))
        #expect(pkce.method == "S256")
    }

    @Test func challengeIsTheBase64urlSHA256OfTheVerifier() {
        let pkce = PKCE()
        #expect(pkce.challenge.count == 43)
        #expect(pkce.challenge == Base64URL.encode(SHA256.hash(Array(pkce.verifier.utf8))))
    }

    /// RFC 7636 Appendix B (SHA-256 itself: Tests/AuthBridgeCryptoTests).
    @Test func rfc7636AppendixB() {
        let verifier = "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk"
        #expect(Base64URL.encode(SHA256.hash(Array(verifier.utf8))) == "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM")
    }

    @Test func everyValueIsFresh() {
        let values = (0..<8).map { _ in PKCE() }
        #expect(Set(values.map(\.verifier)).count == 8)
        #expect(Set(values.map(\.challenge)).count == 8)
        let tokens = (0..<8).map { _ in PKCE.randomToken() }
        #expect(Set(tokens).count == 8)
        #expect(tokens.allSatisfy { $0.count == 22 && $0.allSatisfy(Self.unreserved.contains) })
    }
}
