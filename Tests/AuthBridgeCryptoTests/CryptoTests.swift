import AuthBridgeCrypto
import Testing

/// The hashes against FIPS 180-4 and swift-crypto; AES-GCM and HKDF through
/// libAuthBridgeNettle.so in the build folder (built with the host: `make build`).
@Suite("The host's cryptography")
struct CryptoTests {
    static func hex(_ bytes: [UInt8]) -> String { bytes.map { ($0 < 16 ? "0" : "") + String($0, radix: 16) }.joined() }
    static func bytes(_ hex: String) -> [UInt8] {
        let digits = Array(hex.utf8)
        return stride(from: 0, to: digits.count, by: 2).map { UInt8(String(decoding: digits[$0..<$0 + 2], as: UTF8.self), radix: 16)! }
    }

    @Test func digestsGiveTheFIPSExamples() {
        #expect(Self.hex(SHA256.hash(Array("abc".utf8))) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
        #expect(Self.hex(SHA256.hash([])) == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
        #expect(
            Self.hex(SHA256.hash(Array("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq".utf8)))
                == "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1")
        #expect(
            Self.hex(SHA256.hash([UInt8](repeating: 0x61, count: 1_000_000))) == "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0")
        #expect(Self.hex(Insecure.SHA1.hash(Array("abc".utf8))) == "a9993e364706816aba3e25717850c26c9cd0d89d")
        #expect(Self.hex(Insecure.SHA1.hash([])) == "da39a3ee5e6b4b0d3255bfef95601890afd80709")
        #expect(
            Self.hex(Insecure.SHA1.hash(Array("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq".utf8)))
                == "84983e441c3bd26ebaae4aa1f95129e5e54670f1")
    }

    @Test func hkdfGivesRFC5869TestCase1() throws {
        let key = try HKDF.sha256(
            inputKeyMaterial: [UInt8](repeating: 0x0B, count: 22), salt: Self.bytes("000102030405060708090a0b0c"),
            info: Self.bytes("f0f1f2f3f4f5f6f7f8f9"), outputByteCount: 42)
        #expect(Self.hex(key.bytes) == "3cb25f25faacd57a90434f64d0362f2a2d2d0a90cf1a5a4c5db02d56ecc4c5bf34007208d5b887185865")
        #expect(throws: CryptoFailure.self) { try HKDF.sha256(inputKeyMaterial: [1], salt: [], info: [], outputByteCount: 0) }
    }

    @Test func sealedBytesOpenOnlyWithTheirKeyAndAssociatedData() throws {
        let key = SymmetricKey(bytes: (0..<32).map { UInt8($0) })
        let plain = Array("{\"refreshToken\":\"r\"}".utf8)
        let sealed = try AESGCM.seal(plain, using: key, authenticating: Array("profile".utf8))
        #expect(sealed.count == plain.count + AESGCM.overhead)
        #expect(try AESGCM.open(sealed, using: key, authenticating: Array("profile".utf8)) == plain)
        #expect(
            try AESGCM.seal(plain, using: key, authenticating: []) != AESGCM.seal(plain, using: key, authenticating: []), "a fresh nonce each time")

        func failure(_ body: () throws -> [UInt8]) -> CryptoFailure.Reason? {
            do { _ = try body() } catch { return (error as? CryptoFailure)?.reason }
            return nil
        }
        #expect(failure { try AESGCM.open(sealed, using: key, authenticating: Array("other".utf8)) } == .authenticationFailed)
        #expect(
            failure { try AESGCM.open(sealed, using: SymmetricKey(bytes: [UInt8](repeating: 9, count: 32)), authenticating: Array("profile".utf8)) }
                == .authenticationFailed)
        var tampered = sealed
        tampered[14] ^= 1
        #expect(failure { try AESGCM.open(tampered, using: key, authenticating: Array("profile".utf8)) } == .authenticationFailed)
        #expect(failure { try AESGCM.open(Array(sealed.prefix(27)), using: key, authenticating: []) } == .invalidInput)
        #expect(failure { try AESGCM.seal(plain, using: SymmetricKey(bytes: [1, 2, 3]), authenticating: []) } == .invalidInput)
    }

    /// "authbridge" sealed by another implementation (Python's `cryptography`, nonce cafebabe…,
    /// key 00…1f, associated data "profile") in the layout vault records have had since the
    /// first release (swift-crypto's `SealedBox.combined`): vaults written before keep opening.
    @Test func opensWhatTheLinkedSwiftCryptoSealed() throws {
        let key = SymmetricKey(bytes: (0..<32).map { UInt8($0) })
        let sealed = Self.bytes(Self.earlierSeal)
        #expect(try AESGCM.open(sealed, using: key, authenticating: Array("profile".utf8)) == Array("authbridge".utf8))
    }

    static let earlierSeal = "cafebabefacedbaddecaf888ebd6d44ec808267f216e520ebf6766ef0f931b7aa436543c7466"
}
