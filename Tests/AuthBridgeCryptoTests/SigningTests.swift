import AuthBridgeCrypto
import Crypto
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

    @Test func everyKeyIsNewAndNeverPrinted() throws {
        let (first, second) = (try SigningKey.generate(.es256), try SigningKey.generate(.es256))
        #expect(first.privateKey != second.privateKey)
        #expect("\(first)" == "SigningKey(ES256, private key: [REDACTED])")
        #expect(SigningKey(algorithm: .es256, privateKey: [1], publicKey: first.publicKey) == nil)
    }

    /// RFC 9449 §5.1: ES256 whenever the server lists it, else the first the host can make.
    @Test func theAlgorithmIsChosenFromTheServersList() {
        #expect(SignatureAlgorithm.preferred(among: ["RS256", "PS256", "ES256", "EdDSA"]) == .es256)
        #expect(SignatureAlgorithm.preferred(among: ["RS256", "EdDSA"]) == .edDSA)
        #expect(SignatureAlgorithm.preferred(among: ["RS256", "PS256"]) == nil)
        #expect(SignatureAlgorithm.preferred(among: []) == nil)
    }
}
