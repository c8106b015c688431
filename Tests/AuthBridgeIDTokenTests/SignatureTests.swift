import AuthBridgeCrypto
@testable import AuthBridgeIDToken
import AuthBridgeJSON
import Crypto
import CryptoExtras
import Foundation
import JWTKit
import Testing

/// The algorithms and signature forms Nettle checks (Sources/Helpers/Nettle/jws_verify.c), each
/// against tokens signed by jwt-kit or swift-crypto.
@Suite("ID-token signatures")
struct SignatureTests {
    // MARK: Every algorithm family, signed by jwt-kit

    @Test(arguments: [(DigestAlgorithm.sha256, "PS256"), (.sha384, "PS384"), (.sha512, "PS512")])
    func validPSSToken(digest: DigestAlgorithm, alg: String) async throws {
        let token = try await TestProvider.sign(pss: digest, kid: "rsa-pss")
        let jwks: JSON = ["keys": [TestProvider.rsaJWK(TestProvider.rsa.publicKey, kid: "rsa-pss", alg: alg)]]
        let claims = expectAccepted(TestProvider.request(token, jwks: jwks, extra: ["algorithms": .array([.string(alg)])]))
        #expect(claims?["sub"]?.stringValue == "user-4711")
    }

    @Test(arguments: [(DigestAlgorithm.sha384, "RS384"), (.sha512, "RS512")])
    func validRSAToken(digest: DigestAlgorithm, alg: String) async throws {
        let token = try await TestProvider.sign(digest: digest, kid: "rsa-big")
        let jwks: JSON = ["keys": [TestProvider.rsaJWK(TestProvider.rsa.publicKey, kid: "rsa-big", alg: alg)]]
        #expect(expectAccepted(TestProvider.request(token, jwks: jwks))?["sub"]?.stringValue == "user-4711")
    }

    @Test func aPSSSignatureDoesNotPassForPKCS1() throws {
        // The same key, hash and signing input; only the padding differs from what the header says.
        let header: JSON = ["alg": "RS256", "kid": "rsa-1"]
        let claims = JSON.object(TestProvider.claimsJSON)
        let pkcs1 = try TestProvider.token(header: header, claims: claims) {
            try TestProvider.rsaBacking.signature(for: $0, padding: .insecurePKCS1v1_5).rawRepresentation
        }
        #expect(expectAccepted(TestProvider.request(pkcs1)) != nil)
        let pss = try TestProvider.token(header: header, claims: claims) {
            try TestProvider.rsaBacking.signature(for: $0, padding: .PSS).rawRepresentation
        }
        expectRejected(TestProvider.request(pss), "invalidSignature")
    }

    @Test func validES384Token() async throws {
        let token = try await TestProvider.signES384()
        let jwks: JSON = ["keys": [TestProvider.ecJWK(TestProvider.ec384.parameters, crv: "P-384", kid: "ec-384")]]
        #expect(expectAccepted(TestProvider.request(token, jwks: jwks))?["sub"]?.stringValue == "user-4711")
    }

    @Test func validES512TokenHas66ByteCoordinates() async throws {
        let token = try await TestProvider.signES512()
        let signature = try #require(Base64URLTest.decode(String(token.split(separator: ".")[2])))
        #expect(signature.count == 132, "r ‖ s of 66 bytes each")
        let jwks: JSON = ["keys": [TestProvider.ecJWK(TestProvider.ec521.parameters, crv: "P-521", kid: "ec-521")]]
        // ES512 is outside the default allow-list.
        let request = TestProvider.request(token, jwks: jwks, extra: ["algorithms": ["ES512"]])
        #expect(expectAccepted(request)?["sub"]?.stringValue == "user-4711")
        expectRejected(TestProvider.request(token, jwks: jwks), "unsupportedAlgorithm")
    }

    @Test func anES384TokenDoesNotVerifyWithAnotherP384Key() async throws {
        let token = try await TestProvider.signES384()
        let jwks: JSON = ["keys": [TestProvider.ecJWK(ES384PrivateKey().parameters, crv: "P-384", kid: "ec-384")]]
        expectRejected(TestProvider.request(token, jwks: jwks), "invalidSignature")
    }

    // MARK: Keys Nettle refuses to use

    @Test func a1024BitRSAKeyIsUnusable() throws {
        let key = try _RSA.Signing.PrivateKey(unsafeKeySize: .init(bitCount: 1024))
        let primitives = try key.publicKey.getKeyPrimitives()
        let jwks: JSON = [
            "keys": [
                [
                    "kty": "RSA", "kid": "rsa-small", "alg": "RS256", "n": .string(TestProvider.base64URL(primitives.modulus)),
                    "e": .string(TestProvider.base64URL(primitives.publicExponent)),
                ]
            ]
        ]
        let token = try TestProvider.token(header: ["alg": "RS256", "kid": "rsa-small"], claims: .object(TestProvider.claimsJSON)) {
            try key.signature(for: $0, padding: .insecurePKCS1v1_5).rawRepresentation
        }
        expectRejected(TestProvider.request(token, jwks: jwks), "badJWKS")
    }

    @Test func anECPointNotOnTheCurveIsUnusable() async throws {
        let token = try await TestProvider.signES256()
        var y = try #require(Base64URLTest.decode(TestProvider.ec.parameters!.y))
        y[y.count - 1] ^= 1
        let jwks: JSON = [
            "keys": [
                [
                    "kty": "EC", "crv": "P-256", "kid": "ec-1", "x": .string(TestProvider.ec.parameters!.x),
                    "y": .string(TestProvider.base64URL(Data(y))),
                ]
            ]
        ]
        expectRejected(TestProvider.request(token, jwks: jwks), "badJWKS")
    }

    @Test func anECKeyWithShortCoordinatesIsUnusable() async throws {
        let token = try await TestProvider.signES256()
        let x = try #require(Base64URLTest.decode(TestProvider.ec.parameters!.x))
        let jwks: JSON = [
            "keys": [
                [
                    "kty": "EC", "crv": "P-256", "kid": "ec-1", "x": .string(TestProvider.base64URL(Data(x.dropFirst()))),
                    "y": .string(TestProvider.ec.parameters!.y),
                ]
            ]
        ]
        expectRejected(TestProvider.request(token, jwks: jwks), "badJWKS")
    }

    @Test func anEd25519KeyOfTheWrongSizeIsUnusable() async throws {
        let token = try await TestProvider.signEdDSA()
        let jwks: JSON = ["keys": [["kty": "OKP", "crv": "Ed25519", "kid": "ed-1", "x": "AQAB"]]]
        expectRejected(TestProvider.request(token, jwks: jwks), "badJWKS")
    }

    // MARK: Signatures not of the algorithm's form

    @Test(arguments: [63, 65, 0])
    func anES256SignatureOfTheWrongLengthIsRefused(length: Int) async throws {
        let token = try await TestProvider.signES256()
        let parts = token.split(separator: ".").map(String.init)
        let signature = try #require(Base64URLTest.decode(parts[2]))
        let altered = length <= 64 ? Array(signature.prefix(length)) : signature + [0]
        expectRejected(TestProvider.request("\(parts[0]).\(parts[1]).\(TestProvider.base64URL(Data(altered)))"), "invalidSignature")
    }

    @Test func aDEREncodedECDSASignatureIsRefused() throws {
        let key = P256.Signing.PrivateKey()
        let jwks: JSON = [
            "keys": [
                [
                    "kty": "EC", "crv": "P-256", "kid": "ec-der", "x": .string(TestProvider.base64URL(key.publicKey.x963Representation[1...32])),
                    "y": .string(TestProvider.base64URL(key.publicKey.x963Representation[33...64])),
                ]
            ]
        ]
        let header: JSON = ["alg": "ES256", "kid": "ec-der"]
        let raw = try TestProvider.token(header: header, claims: .object(TestProvider.claimsJSON)) { try key.signature(for: $0).rawRepresentation }
        #expect(expectAccepted(TestProvider.request(raw, jwks: jwks)) != nil, "the same key's r ‖ s verifies")
        let der = try TestProvider.token(header: header, claims: .object(TestProvider.claimsJSON)) { try key.signature(for: $0).derRepresentation }
        expectRejected(TestProvider.request(der, jwks: jwks), "invalidSignature")
    }

    @Test func anRSASignatureOneByteShortIsRefused() async throws {
        let token = try await TestProvider.sign()
        let parts = token.split(separator: ".").map(String.init)
        let signature = try #require(Base64URLTest.decode(parts[2]))
        let shortened = "\(parts[0]).\(parts[1]).\(TestProvider.base64URL(Data(signature.dropFirst())))"
        expectRejected(TestProvider.request(shortened), "invalidSignature")
    }

    // MARK: Claims as JSON numbers and types

    @Test func fractionalNumericDatesAreAccepted() throws {
        let key = P256.Signing.PrivateKey()
        let jwks: JSON = [
            "keys": [
                [
                    "kty": "EC", "crv": "P-256", "x": .string(TestProvider.base64URL(key.publicKey.x963Representation[1...32])),
                    "y": .string(TestProvider.base64URL(key.publicKey.x963Representation[33...64])),
                ]
            ]
        ]
        func signed(_ changes: [String: JSON]) throws -> String {
            try TestProvider.token(header: ["alg": "ES256"], claims: .object(TestProvider.claimsJSON.merging(changes) { _, new in new })) {
                try key.signature(for: $0).rawRepresentation
            }
        }
        let now = Double(TestProvider.nowMs) / 1000
        #expect(expectAccepted(TestProvider.request(try signed(["exp": .double(now - 59.5), "iat": .double(now + 0.25)]), jwks: jwks)) != nil)
        expectRejected(TestProvider.request(try signed(["exp": .double(now - 60.5)]), jwks: jwks), "expired")
        expectRejected(TestProvider.request(try signed(["nbf": .double(now + 60.5)]), jwks: jwks), "issuedInFuture")
        // Wrong types, each malformed as jwt-kit's decoding made them.
        for changes: [String: JSON] in [["iat": "now"], ["nbf": true], ["iss": 7], ["aud": ["client-a", 7]], ["azp": ["client-a"]], ["nonce": 1]] {
            expectRejected(TestProvider.request(try signed(changes), jwks: jwks), "malformed")
        }
        // null is absent.
        expectRejected(TestProvider.request(try signed(["iss": .null]), jwks: jwks), "issuerMismatch")
    }

    // MARK: The primitive itself

    @Test func theNettlePrimitiveTellsItsThreeVerdictsApart() throws {
        let key = Curve25519.Signing.PrivateKey()
        let message = Array("header.payload".utf8)
        let signature = Array(try key.signature(for: message))
        let publicKey = JWSSignature.PublicKey.okp(curve: "Ed25519", x: Array(key.publicKey.rawRepresentation))
        #expect(try JWSSignature.verify(signature, of: message, algorithm: "EdDSA", key: publicKey) == .verified)
        #expect(try JWSSignature.verify(signature, of: message + [0], algorithm: "EdDSA", key: publicKey) == .refused)
        #expect(
            try JWSSignature.verify(signature, of: message, algorithm: "EdDSA", key: .okp(curve: "Ed448", x: Array(key.publicKey.rawRepresentation)))
                == .unusableKey)
        #expect(try JWSSignature.verify(signature, of: message, algorithm: "ES256", key: publicKey) == .unusableKey)
        #expect(throws: CryptoFailure.self) { try JWSSignature.verify(signature, of: message, algorithm: "HS256", key: publicKey) }
    }
}

/// Base64url without padding, for the tests' own handling of token parts.
enum Base64URLTest {
    static func decode(_ text: String) -> [UInt8]? {
        var base64 = text.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        base64 += String(repeating: "=", count: (4 - base64.count % 4) % 4)
        return Data(base64Encoded: base64).map(Array.init)
    }
}
