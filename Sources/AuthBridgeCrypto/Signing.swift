// Asymmetric keys the host makes and signs with: proofs of possession (RFC 9449 DPoP). The key
// pair is made and used here, through libAuthBridgeSwiftCrypto.so (swift-crypto); the private
// key's bytes are kept only in the session's sealed vault record.

import Synchronization

/// A JWS signature algorithm the host can sign with (RFC 7518 §3.3–3.4, RFC 8037 §3.1).
public enum SignatureAlgorithm: String, Sendable, CaseIterable {
    /// ECDSA on P-256 with SHA-256: the default (RFC 9449 §5 names it as the one to support).
    case es256 = "ES256"
    /// Ed25519, for servers that list it and not ES256.
    case edDSA = "EdDSA"
    /// RSA 2048 with PKCS #1 v1.5 and SHA-256, for servers that list only it among these.
    case rs256 = "RS256"

    /// The library's number for the algorithm (Sources/Helpers/SwiftCrypto).
    var code: Int32 {
        switch self {
        case .es256: 1
        case .edDSA: 2
        case .rs256: 3
        }
    }

    /// The first of `advertised` (a server's list) the host can sign with, by the host's order of
    /// preference: ES256 (small and fast), EdDSA, then RS256 (its keys take a moment to make and
    /// its proofs are larger); nil when none is listed.
    public static func preferred(among advertised: [String]) -> SignatureAlgorithm? {
        allCases.first { advertised.contains($0.rawValue) }
    }
}

/// A signing key pair. `description` never shows the private key.
public struct SigningKey: Sendable, Equatable, CustomStringConvertible {
    public let algorithm: SignatureAlgorithm
    /// The private key: the P-256 scalar or the Ed25519 seed (32 bytes), RSA's PKCS #1 DER.
    public let privateKey: [UInt8]
    /// The public key: x ‖ y for P-256 (64 bytes), the Ed25519 point (32), RSA's modulus (256
    /// bytes) ‖ public exponent.
    public let publicKey: [UInt8]

    /// A key read back from storage; nil when the sizes do not fit the algorithm.
    public init?(algorithm: SignatureAlgorithm, privateKey: [UInt8], publicKey: [UInt8]) {
        switch algorithm {
        case .es256: guard privateKey.count == 32, publicKey.count == 64 else { return nil }
        case .edDSA: guard privateKey.count == 32, publicKey.count == 32 else { return nil }
        case .rs256: guard (600...4096).contains(privateKey.count), (257...520).contains(publicKey.count) else { return nil }
        }
        self.algorithm = algorithm
        self.privateKey = privateKey
        self.publicKey = publicKey
    }

    /// A new random key pair (RS256: a 2048-bit key, which takes tens of milliseconds to make).
    public static func generate(_ algorithm: SignatureAlgorithm) throws(CryptoFailure) -> SigningKey {
        let functions = try CryptoLibrary.functions()
        var privateKey = [UInt8](repeating: 0, count: 4096)
        var publicKey = [UInt8](repeating: 0, count: 512)
        var lengths = (0, 0)
        let status = privateKey.withUnsafeMutableBufferPointer { secret in
            publicKey.withUnsafeMutableBufferPointer { key in
                functions.keyGenerate(algorithm.code, secret.baseAddress, secret.count, &lengths.0, key.baseAddress, key.count, &lengths.1)
            }
        }
        try CryptoLibrary.check(status, "\(algorithm.rawValue) key generation")
        guard let key = SigningKey(algorithm: algorithm, privateKey: Array(privateKey[..<lengths.0]), publicKey: Array(publicKey[..<lengths.1]))
        else { throw CryptoFailure(reason: .invalidInput, message: "\(algorithm.rawValue) key generation: a key of an unexpected size") }
        return key
    }

    /// The private key in PEM text (PKCS #8, SEC 1 or PKCS #1; P-256, Ed25519, or RSA of 2048 to 4096
    /// bits): a client's own key for its assertions (RFC 7523). nil for text that holds none of these.
    public static func importing(pem: String) throws(CryptoFailure) -> SigningKey? {
        let functions = try CryptoLibrary.functions()
        var privateKey = [UInt8](repeating: 0, count: 4096)
        var publicKey = [UInt8](repeating: 0, count: 1024)
        var lengths = (0, 0)
        var code: Int32 = 0
        let text = Array(pem.utf8)
        let status = text.withUnsafeBufferPointer { text in
            privateKey.withUnsafeMutableBufferPointer { secret in
                publicKey.withUnsafeMutableBufferPointer { key in
                    functions.keyImportPEM(
                        text.baseAddress, text.count, &code, secret.baseAddress, secret.count, &lengths.0, key.baseAddress, key.count, &lengths.1)
                }
            }
        }
        defer { for index in privateKey.indices { privateKey[index] = 0 } }
        guard status == CryptoLibrary.ok, let algorithm = SignatureAlgorithm.allCases.first(where: { $0.code == code }) else { return nil }
        return SigningKey(algorithm: algorithm, privateKey: Array(privateKey[..<lengths.0]), publicKey: Array(publicKey[..<lengths.1]))
    }

    /// The JWS signature of `message`: r ‖ s for ES256 (64 bytes), Ed25519's for EdDSA (64), RSA's for RS256 (256).
    public func sign(_ message: [UInt8]) throws(CryptoFailure) -> [UInt8] {
        let functions = try CryptoLibrary.functions()
        guard let handle = prepared.handle(self, functions) else {
            throw CryptoFailure(reason: .invalidInput, message: "\(algorithm.rawValue) signing: the key does not open")
        }
        var signature = [UInt8](repeating: 0, count: 512)
        var length = 0
        let status = message.withUnsafeBufferPointer { message in
            signature.withUnsafeMutableBufferPointer {
                functions.keySign(handle, message.baseAddress, message.count, $0.baseAddress, $0.count, &length)
            }
        }
        try CryptoLibrary.check(status, "\(algorithm.rawValue) signing")
        return Array(signature[..<length])
    }

    /// The key opened once in the library, for every signature (shared by copies of the key).
    private let prepared = OpenedKey()

    public static func == (lhs: SigningKey, rhs: SigningKey) -> Bool {
        lhs.algorithm == rhs.algorithm && lhs.privateKey == rhs.privateKey && lhs.publicKey == rhs.publicKey
    }

    public var description: String { "SigningKey(\(algorithm.rawValue), private key: [REDACTED])" }
}

/// A private key opened in libAuthBridgeSwiftCrypto.so on first use, closed with the last copy of
/// its `SigningKey`.
private final class OpenedKey: Sendable {
    private let opened = Mutex<(pointer: UnsafeMutableRawPointer, close: CryptoLibrary.KeyClose)?>(nil)

    func handle(_ key: SigningKey, _ functions: CryptoLibrary.Functions) -> UnsafeMutableRawPointer? {
        opened.withLock { opened in
            if let opened { return opened.pointer }
            let pointer = key.privateKey.withUnsafeBufferPointer { functions.keyOpen(key.algorithm.code, $0.baseAddress, $0.count) }
            if let pointer { opened = (pointer, functions.keyClose) }
            return pointer
        }
    }

    deinit {
        opened.withLock { opened in
            if let opened { opened.close(opened.pointer) }
        }
    }
}
