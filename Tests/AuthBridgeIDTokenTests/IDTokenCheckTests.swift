@testable import AuthBridgeIDToken
import AuthBridgeJSON
import Foundation
import JWTKit
import Testing

/// Verifies `request` and expects the rejection `reason`; its message must not leak the token or claims.
func expectRejected(_ request: JSON, _ reason: String, sourceLocation: SourceLocation = #_sourceLocation) {
    let answer = IDTokenCheck.verify(request: request)
    #expect(answer["claims"] == nil, sourceLocation: sourceLocation)
    #expect(answer["error"]?["reason"]?.stringValue == reason, sourceLocation: sourceLocation)
    let message = answer["error"]?["message"]?.stringValue ?? ""
    #expect(!message.isEmpty, sourceLocation: sourceLocation)
    let token = request["token"]?.stringValue ?? ""
    for secret in [token, "user-4711", "Ada Lovelace", "n-0S6_WzA2Mj"] where !secret.isEmpty {
        #expect(!message.contains(secret), "message leaks \(secret.prefix(12))…", sourceLocation: sourceLocation)
    }
}

/// Verifies `request` and returns the claims, recording an issue if it was refused.
func expectAccepted(_ request: JSON, sourceLocation: SourceLocation = #_sourceLocation) -> JSON? {
    let answer = IDTokenCheck.verify(request: request)
    #expect(answer["error"] == nil, "refused: \(answer["error"]?.description ?? "")", sourceLocation: sourceLocation)
    return answer["claims"]
}

@Suite("ID-token verification")
struct IDTokenCheckTests {
    // MARK: Valid tokens

    @Test func validRS256TokenGivesAllClaims() async throws {
        let claims = expectAccepted(TestProvider.request(try await TestProvider.sign()))
        #expect(claims?["sub"]?.stringValue == "user-4711")
        #expect(claims?["name"]?.stringValue == "Ada Lovelace")
        #expect(claims?["iss"]?.stringValue == TestProvider.issuer)
        #expect(claims?["aud"]?.stringValue == TestProvider.clientID)
        #expect(claims?["exp"]?.intValue == TestProvider.nowMs / 1000 + 300)
    }

    @Test func validES256TokenFromKeyWithoutAlg() async throws {
        let claims = expectAccepted(TestProvider.request(try await TestProvider.signES256()))
        #expect(claims?["sub"]?.stringValue == "user-4711")
    }

    @Test func validEdDSAToken() async throws {
        let claims = expectAccepted(TestProvider.request(try await TestProvider.signEdDSA()))
        #expect(claims?["sub"]?.stringValue == "user-4711")
    }

    @Test func tokenWithoutKidUsesTheOnlyFittingKey() async throws {
        let token = try await TestProvider.sign(kid: nil)
        let jwks: JSON = ["keys": [TestProvider.rsaJWK(TestProvider.rsa.publicKey, kid: "rsa-1")]]
        #expect(expectAccepted(TestProvider.request(token, jwks: jwks)) != nil)
    }

    // MARK: Signature

    @Test func tamperedSignatureIsRefused() async throws {
        let token = try await TestProvider.sign()
        var parts = token.split(separator: ".").map(String.init)
        var signature = Array(parts[2])
        signature[10] = signature[10] == "A" ? "B" : "A"
        parts[2] = String(signature)
        expectRejected(TestProvider.request(parts.joined(separator: ".")), "invalidSignature")
    }

    @Test func tamperedPayloadIsRefused() async throws {
        let token = try await TestProvider.sign()
        let parts = token.split(separator: ".").map(String.init)
        var claims = TestClaims()
        claims.sub = "admin"
        let forged = try await TestProvider.sign(claims).split(separator: ".")[1]
        expectRejected(TestProvider.request("\(parts[0]).\(forged).\(parts[2])"), "invalidSignature")
    }

    @Test func anotherKeyWithTheSameKidIsRefused() async throws {
        let token = try await TestProvider.sign(rsa: TestProvider.otherRSA, kid: "rsa-1")
        expectRejected(TestProvider.request(token), "invalidSignature")
    }

    @Test func unknownKidIsRefused() async throws {
        let token = try await TestProvider.sign(kid: "rsa-2")
        expectRejected(TestProvider.request(token), "unknownKey")
    }

    @Test func kidOfAKeyOfAnotherTypeIsRefused() async throws {
        let token = try await TestProvider.sign(kid: "ec-1")
        expectRejected(TestProvider.request(token), "unknownKey")
    }

    @Test func algOtherThanTheKeysAlgIsRefused() async throws {
        // rsa-1 is published for RS256 only.
        let token = try await TestProvider.sign(digest: .sha512)
        expectRejected(TestProvider.request(token), "unknownKey")
    }

    // MARK: Algorithms

    @Test func algNoneIsRefused() async {
        let token = TestProvider.unsigned(
            header: ["alg": "none", "kid": "rsa-1"],
            claims: [
                "iss": .string(TestProvider.issuer), "sub": "user-4711", "aud": "client-a",
                "exp": .int(TestProvider.nowMs / 1000 + 300), "iat": .int(TestProvider.nowMs / 1000),
                "nonce": "n-0S6_WzA2Mj",
            ])
        expectRejected(TestProvider.request(token), "unsupportedAlgorithm")
        expectRejected(
            TestProvider.request(token, extra: ["algorithms": ["none", "RS256"]]),
            "unsupportedAlgorithm")
    }

    @Test func hmacIsRefusedEvenWhenListed() async throws {
        // The classic confusion: the RSA public key's modulus used as the HMAC secret.
        let secret = TestProvider.jwks["keys"]?[0]?["n"]?.stringValue ?? ""
        let token = try await TestProvider.signHS256(secret: secret)
        expectRejected(TestProvider.request(token), "unsupportedAlgorithm")
        expectRejected(
            TestProvider.request(token, extra: ["algorithms": ["HS256", "RS256"]]),
            "unsupportedAlgorithm")
    }

    @Test func algorithmOutsideTheAllowListIsRefused() async throws {
        let token = try await TestProvider.signES256()
        expectRejected(TestProvider.request(token, extra: ["algorithms": ["RS256"]]), "unsupportedAlgorithm")
    }

    // MARK: Malformed input

    @Test(arguments: ["garbage", "", "a.b", "a.b.c.d", "!!!.e30.sig", "e30.e30.%%%", "bm90IGpzb24.e30.c2ln"])
    func garbageTokenIsMalformed(token: String) async {
        expectRejected(TestProvider.request(token), "malformed")
    }

    @Test func headerWithoutAlgIsMalformed() async {
        let token = TestProvider.unsigned(header: ["kid": "rsa-1"], claims: ["sub": "x"]) + "c2ln"
        expectRejected(TestProvider.request(token), "malformed")
    }

    @Test func signedPayloadWithAWrongClaimTypeIsMalformed() async throws {
        // Signed over a payload of the wrong claim type: the signature verifies, decoding fails.
        struct OddClaims: JWTPayload {
            var iss = TestProvider.issuer
            var exp = "tomorrow"
            func verify(using algorithm: some JWTAlgorithm) async throws {}
        }
        let keys = JWTKeyCollection()
        await keys.add(rsa: TestProvider.rsa, digestAlgorithm: .sha256, kid: "rsa-1")
        let token = try await keys.sign(OddClaims(), kid: "rsa-1")
        expectRejected(TestProvider.request(token), "malformed")
    }

    @Test func jwksWithoutKeysIsBad() async throws {
        let token = try await TestProvider.sign()
        expectRejected(TestProvider.request(token, jwks: ["issuer": "x"]), "badJWKS")
        expectRejected(TestProvider.request(token, jwks: ["keys"]), "badJWKS")
    }

    @Test func unusableMatchingKeyIsBad() async throws {
        let token = try await TestProvider.sign()
        let jwks: JSON = ["keys": [["kty": "RSA", "kid": "rsa-1", "n": "AQAB", "e": "AQAB"]]]
        expectRejected(TestProvider.request(token, jwks: jwks), "badJWKS")
    }

    @Test func requestWithoutIssuerIsInvalid() async throws {
        let token = try await TestProvider.sign()
        expectRejected(TestProvider.request(token).setting("issuer", nil), "invalidRequest")
        expectRejected(TestProvider.request(token).setting("nowMs", "soon"), "invalidRequest")
    }

    // MARK: Issuer, audience, authorized party

    /// A token for another (or no) issuer, audience or authorized party, each refused for its reason.
    @Test(arguments: [
        (TestClaims(iss: "https://evil.example.com"), "issuerMismatch"),
        (TestClaims(iss: nil), "issuerMismatch"),
        (TestClaims(aud: "client-b"), "audienceMismatch"),
        (TestClaims(aud: nil), "audienceMismatch"),
        (TestClaims(aud: AudienceClaim(value: ["client-a", "api-b"])), "azpMismatch"), // an array of audiences without azp
        (TestClaims(azp: "client-b"), "azpMismatch"),
    ])
    func tokenForAnotherPartyIsRefused(_ claims: TestClaims, _ reason: String) async throws {
        expectRejected(TestProvider.request(try await TestProvider.sign(claims)), reason)
    }

    @Test func audienceArrayWithAzpOfTheClientIsAccepted() async throws {
        var claims = TestClaims()
        claims.aud = AudienceClaim(value: ["client-a", "api-b"])
        claims.azp = "client-a"
        #expect(expectAccepted(TestProvider.request(try await TestProvider.sign(claims)))?["azp"] == "client-a")
    }

    // MARK: Time (the host's clock, never the machine's)

    @Test func expiredTokenIsRefused() async throws {
        var claims = TestClaims()
        claims.exp = ExpirationClaim(value: TestProvider.now.addingTimeInterval(-61))
        expectRejected(TestProvider.request(try await TestProvider.sign(claims)), "expired")
        claims.exp = ExpirationClaim(value: TestProvider.now.addingTimeInterval(-1))
        expectRejected(
            TestProvider.request(try await TestProvider.sign(claims), extra: ["leewaySeconds": 0]),
            "expired")
        // exp + leeway == now is already expired.
        claims.exp = ExpirationClaim(value: TestProvider.now.addingTimeInterval(-60))
        expectRejected(TestProvider.request(try await TestProvider.sign(claims)), "expired")
        claims.exp = nil
        expectRejected(TestProvider.request(try await TestProvider.sign(claims)), "expired")
    }

    @Test func expiredWithinLeewayIsAccepted() async throws {
        var claims = TestClaims()
        claims.exp = ExpirationClaim(value: TestProvider.now.addingTimeInterval(-59))
        #expect(expectAccepted(TestProvider.request(try await TestProvider.sign(claims))) != nil)
        claims.exp = ExpirationClaim(value: TestProvider.now.addingTimeInterval(-100))
        let request = TestProvider.request(try await TestProvider.sign(claims), extra: ["leewaySeconds": 120])
        #expect(expectAccepted(request) != nil)
    }

    @Test func validTokenExpiresOnTheHostsClock() async throws {
        let token = try await TestProvider.sign()
        expectRejected(TestProvider.request(token, nowMs: TestProvider.nowMs + 360_000), "expired")
    }

    @Test func issuedInTheFutureIsRefused() async throws {
        var claims = TestClaims()
        claims.iat = IssuedAtClaim(value: TestProvider.now.addingTimeInterval(61))
        expectRejected(TestProvider.request(try await TestProvider.sign(claims)), "issuedInFuture")
        claims.iat = IssuedAtClaim(value: TestProvider.now.addingTimeInterval(59))
        #expect(expectAccepted(TestProvider.request(try await TestProvider.sign(claims))) != nil)
        claims.iat = nil
        expectRejected(TestProvider.request(try await TestProvider.sign(claims)), "issuedInFuture")
    }

    // MARK: Nonce

    @Test func nonceMismatchIsRefused() async throws {
        let token = try await TestProvider.sign()
        expectRejected(TestProvider.request(token, nonce: "another-nonce"), "nonceMismatch")
    }

    @Test func nonceMissingFromTokenWhenRequiredIsRefused() async throws {
        var claims = TestClaims()
        claims.nonce = nil
        expectRejected(TestProvider.request(try await TestProvider.sign(claims)), "nonceMismatch")
    }

    @Test func nonceInTokenIsIgnoredWhenNotRequested() async throws {
        let claims = expectAccepted(TestProvider.request(try await TestProvider.sign(), nonce: nil))
        #expect(claims?["nonce"]?.stringValue == "n-0S6_WzA2Mj")
    }
}
