// Asymmetric keys the host makes and signs with: proofs of possession (RFC 9449 DPoP). The key
// pair is made and used here, through libAuthBridgeSwiftCrypto.so (swift-crypto); the private
// key's bytes are kept only in the session's sealed vault record.

import Synchronization

/// A JWS signature algorithm the host can sign with (RFC 7518 §3.4, RFC 8037 §3.1).
public enum SignatureAlgorithm: String, Sendable, CaseIterable {
    /// ECDSA on P-256 with SHA-256: the default (RFC 9449 §5 names it as the one to support).
    case es256 = "ES256"
    /// Ed25519, for servers that list only it.
    case edDSA = "EdDSA"

    /// The first of `advertised` (a server's list, in its order of preference) the host can
    /// sign with, ES256 first whenever it is listed; nil when none is.
    public static func preferred(among advertised: [String]) -> SignatureAlgorithm? {
        if advertised.contains(es256.rawValue) { return .es256 }
        return advertised.lazy.compactMap(SignatureAlgorithm.init(rawValue:)).first
    }
}

/// A signing key pair. `description` never shows the private key.
public struct SigningKey: Sendable, Equatable, CustomStringConvertible {
    public let algorithm: SignatureAlgorithm
    /// The raw private key: the P-256 scalar or the Ed25519 seed (32 bytes).
    public let privateKey: [UInt8]
    /// The raw public key: x ‖ y for P-256 (64 bytes), the Ed25519 point (32 bytes).
    public let publicKey: [UInt8]

    /// A key read back from storage; nil when the sizes do not fit the algorithm.
    public init?(algorithm: SignatureAlgorithm, privateKey: [UInt8], publicKey: [UInt8]) {
        guard privateKey.count == 32, publicKey.count == (algorithm == .es256 ? 64 : 32) else { return nil }
        self.algorithm = algorithm
        self.privateKey = privateKey
        self.publicKey = publicKey
    }

    /// A new random key pair.
    public static func generate(_ algorithm: SignatureAlgorithm) throws(CryptoFailure) -> SigningKey {
        let functions = try CryptoLibrary.functions()
        var privateKey = [UInt8](repeating: 0, count: 32)
        var publicKey = [UInt8](repeating: 0, count: algorithm == .es256 ? 64 : 32)
        let generate = algorithm == .es256 ? functions.p256Generate : functions.ed25519Generate
        let status = privateKey.withUnsafeMutableBufferPointer { secret in
            publicKey.withUnsafeMutableBufferPointer { generate(secret.baseAddress, $0.baseAddress) }
        }
        try CryptoLibrary.check(status, "\(algorithm.rawValue) key generation")
        return SigningKey(algorithm: algorithm, privateKey: privateKey, publicKey: publicKey)!
    }

    /// The JWS signature of `message`: r ‖ s for ES256, the Ed25519 signature for EdDSA (64 bytes).
    public func sign(_ message: [UInt8]) throws(CryptoFailure) -> [UInt8] {
        let functions = try CryptoLibrary.functions()
        var signature = [UInt8](repeating: 0, count: 64)
        let status: Int32
        if let prepared = try prepared.key(self, functions) {
            status = message.withUnsafeBufferPointer { message in
                signature.withUnsafeMutableBufferPointer { functions.keySign(prepared, message.baseAddress, message.count, $0.baseAddress) }
            }
        } else {
            status = CryptoLibrary.invalidInput
        }
        try CryptoLibrary.check(status, "\(algorithm.rawValue) signing")
        return signature
    }

    /// The key opened once in the library, for every signature (shared by copies of the key).
    private let prepared = PreparedKey()

    public static func == (lhs: SigningKey, rhs: SigningKey) -> Bool {
        lhs.algorithm == rhs.algorithm && lhs.privateKey == rhs.privateKey && lhs.publicKey == rhs.publicKey
    }

    public var description: String { "SigningKey(\(algorithm.rawValue), private key: [REDACTED])" }
}

/// A private key opened in libAuthBridgeSwiftCrypto.so, opened on first use and closed with the
/// last copy of its `SigningKey`.
private final class PreparedKey: Sendable {
    private let handle = Mutex<(pointer: UnsafeMutableRawPointer, close: CryptoLibrary.KeyClose)?>(nil)

    func key(_ key: SigningKey, _ functions: CryptoLibrary.Functions) throws(CryptoFailure) -> UnsafeMutableRawPointer? {
        handle.withLock { handle in
            if let handle { return handle.pointer }
            let opened = key.privateKey.withUnsafeBufferPointer {
                functions.keyOpen(key.algorithm == .es256 ? 1 : 2, $0.baseAddress, $0.count)
            }
            if let opened { handle = (opened, functions.keyClose) }
            return opened
        }
    }

    deinit {
        handle.withLock { handle in
            if let handle { handle.close(handle.pointer) }
        }
    }
}
