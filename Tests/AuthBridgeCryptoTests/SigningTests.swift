import AuthBridgeCrypto
import Crypto
import CryptoExtras
import Testing

/// The DPoP signing keys through libAuthBridgeSwiftCrypto.so, checked by swift-crypto's own verifiers.
@Suite("Signing keys")
struct SigningTests {
    @Test func es256SignaturesVerifyWithThePublicKey() throws {
        let key = try SigningKey.generate(.es256)
        #expect(key.privateKey.count == 32 && key.publicKey.count == 64)
        let message = Array("header.claims".utf8)
        let signature = try key.sign(message)
        let publicKey = try P256.Signing.PublicKey(rawRepresentation: key.publicKey)
        #expect(publicKey.isValidSignature(try P256.Signing.ECDSASignature(rawRepresentation: signature), for: message))
        #expect(!publicKey.isValidSignature(try P256.Signing.ECDSASignature(rawRepresentation: signature), for: Array("other".utf8)))
        // The private key read back (as the vault keeps it) is the same key.
        let stored = try #require(SigningKey(algorithm: .es256, privateKey: key.privateKey, publicKey: key.publicKey))
        #expect(Array(try P256.Signing.PrivateKey(rawRepresentation: stored.privateKey).publicKey.rawRepresentation) == key.publicKey)
    }

    @Test func edDSASignaturesVerifyWithThePublicKey() throws {
        let key = try SigningKey.generate(.edDSA)
        #expect(key.privateKey.count == 32 && key.publicKey.count == 32)
        let message = Array("header.claims".utf8)
        let publicKey = try Curve25519.Signing.PublicKey(rawRepresentation: key.publicKey)
        #expect(publicKey.isValidSignature(try key.sign(message), for: message))
    }

    @Test func rs256SignaturesVerifyWithThePublicKey() throws {
        let key = try SigningKey.generate(.rs256)
        let (modulus, exponent) = (key.publicKey[0..<256], key.publicKey[256...])
        #expect(modulus.first != 0 && exponent.elementsEqual([1, 0, 1]), "a 2048-bit modulus and e = 65537")
        let message = Array("header.claims".utf8)
        let signature = try key.sign(message)
        #expect(signature.count == 256)
        let publicKey = try _RSA.Signing.PublicKey(n: Array(modulus), e: Array(exponent))
        #expect(publicKey.isValidSignature(_RSA.Signing.RSASignature(rawRepresentation: signature), for: message, padding: .insecurePKCS1v1_5))
        let stored = try #require(SigningKey(algorithm: .rs256, privateKey: key.privateKey, publicKey: key.publicKey))
        #expect(
            publicKey.isValidSignature(
                _RSA.Signing.RSASignature(rawRepresentation: try stored.sign(message)), for: message, padding: .insecurePKCS1v1_5))
    }

    @Test func everyKeyIsNewAndNeverPrinted() throws {
        let (first, second) = (try SigningKey.generate(.es256), try SigningKey.generate(.es256))
        #expect(first.privateKey != second.privateKey)
        #expect("\(first)" == "SigningKey(ES256, private key: [REDACTED])")
        #expect(SigningKey(algorithm: .es256, privateKey: [1], publicKey: first.publicKey) == nil)
    }

    /// RFC 9449 §5.1: ES256 whenever the server lists it, then EdDSA, then RS256.
    @Test func theAlgorithmIsChosenFromTheServersList() {
        #expect(SignatureAlgorithm.preferred(among: ["RS256", "PS256", "ES256", "EdDSA"]) == .es256)
        #expect(SignatureAlgorithm.preferred(among: ["RS256", "EdDSA"]) == .edDSA)
        #expect(SignatureAlgorithm.preferred(among: ["RS256", "PS256"]) == .rs256)
        #expect(SignatureAlgorithm.preferred(among: ["PS256", "ES384"]) == nil)
        #expect(SignatureAlgorithm.preferred(among: []) == nil)
    }
}
