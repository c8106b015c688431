import AuthBridgeCrypto
import Crypto
import Testing

@Suite("The host's hashes agree with swift-crypto")
struct AgreementTests {
    /// Every length across the padding's edge cases (55, 56, 63, 64, 119, 120 bytes…), random bytes.
    @Test func onEveryLengthUpTo300Bytes() {
        var generator = SystemRandomNumberGenerator()
        for length in 0...300 {
            let message = (0..<length).map { _ in UInt8.random(in: .min ... .max, using: &generator) }
            #expect(AuthBridgeCrypto.SHA256.hash(message) == Array(Crypto.SHA256.hash(data: message)), "SHA-256 of \(length) bytes")
            #expect(
                AuthBridgeCrypto.Insecure.SHA1.hash(message) == Array(Crypto.Insecure.SHA1.hash(data: message)), "SHA-1 of \(length) bytes")
        }
    }

    /// AES-GCM sealed by the library opens with swift-crypto linked here, and the other way round.
    @Test func sealedBoxesCrossBothWays() throws {
        let bytes = (0..<32).map { UInt8($0 * 7 % 256) }
        let plain = Array("{\"accessToken\":\"a\"}".utf8)
        let associated = Array("{\"profile\":\"work\"}".utf8)
        let ours = try AESGCM.seal(plain, using: AuthBridgeCrypto.SymmetricKey(bytes: bytes), authenticating: associated)
        let opened = try AES.GCM.open(AES.GCM.SealedBox(combined: ours), using: Crypto.SymmetricKey(data: bytes), authenticating: associated)
        #expect(Array(opened) == plain)
        let theirs = try #require(try AES.GCM.seal(plain, using: Crypto.SymmetricKey(data: bytes), authenticating: associated).combined)
        #expect(try AESGCM.open(Array(theirs), using: AuthBridgeCrypto.SymmetricKey(bytes: bytes), authenticating: associated) == plain)
    }
}
