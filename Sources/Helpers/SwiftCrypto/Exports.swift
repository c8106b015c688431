import Crypto
import CryptoExtras

// The host's signing keys as C entry points of libAuthBridgeSwiftCrypto.so, over swift-crypto
// (Sources/AuthBridgeCrypto calls them; it opens the library on first use). AES-GCM, HKDF and
// HMAC, which the vault needs from its first record, are libAuthBridgeNettle.so's: lighter.
//
// Every entry point is synchronous, may be called from any thread, reads its inputs and writes
// its output before it returns, and answers a status: 0 done, 2 invalid input (a length the
// output cannot hold, a key it cannot read). Pointers may be null when their length is 0. Versioned by name (`_v1`): a changed
// contract is a new name, so an older library is refused rather than misused.

private let done: Int32 = 0
private let invalidInput: Int32 = 2

private func bytes(_ pointer: UnsafePointer<UInt8>?, _ count: Int) -> UnsafeRawBufferPointer {
    UnsafeRawBufferPointer(start: count > 0 ? pointer : nil, count: count > 0 ? count : 0)
}

// Signing keys for proofs of possession (RFC 9449 DPoP): made, kept and used by the host, never
// handed out. `algorithm`: 1 P-256 (ES256), 2 Ed25519 (EdDSA), 3 RSA 2048 with PKCS #1 v1.5 and
// SHA-256 (RS256, for servers that list nothing else). Private keys: the P-256 scalar or the
// Ed25519 seed (32 bytes), RSA's PKCS #1 DER. Public keys: P-256 x ‖ y (64 bytes), the Ed25519
// point (32), RSA's modulus (256 bytes) ‖ public exponent. Signatures: r ‖ s (64 bytes, RFC 7518
// §3.4), Ed25519's (64), RSA's (256). A key signs through a handle (`authbridge_crypto_key_open_v1`):
// opened once, it signs without parsing the key or computing its public point again.

private enum SigningKey {
    case p256(P256.Signing.PrivateKey)
    case ed25519(Curve25519.Signing.PrivateKey)
    case rsa(_RSA.Signing.PrivateKey)

    static func generate(_ algorithm: Int32) -> SigningKey? {
        switch algorithm {
        case 1: return .p256(P256.Signing.PrivateKey())
        case 2: return .ed25519(Curve25519.Signing.PrivateKey())
        case 3: return (try? _RSA.Signing.PrivateKey(keySize: .bits2048)).map(SigningKey.rsa)
        default: return nil
        }
    }

    static func open(_ algorithm: Int32, _ raw: UnsafeRawBufferPointer) -> SigningKey? {
        switch algorithm {
        case 1: return (try? P256.Signing.PrivateKey(rawRepresentation: raw)).map(SigningKey.p256)
        case 2: return (try? Curve25519.Signing.PrivateKey(rawRepresentation: raw)).map(SigningKey.ed25519)
        case 3:
            guard let key = try? _RSA.Signing.PrivateKey(derRepresentation: raw), rsaSizes.contains(key.keySizeInBits) else { return nil }
            return .rsa(key)
        default: return nil
        }
    }

    /// RSA key sizes a key may have: 2048 for those made here, up to 4096 for a client's own (RFC 7523 assertions).
    static let rsaSizes: ClosedRange<Int> = 2048...4096

    /// A private key in PEM (PKCS #8 "PRIVATE KEY", SEC 1 "EC PRIVATE KEY", PKCS #1 "RSA PRIVATE KEY"), with its algorithm code.
    static func importPEM(_ pem: String) -> (Int32, SigningKey)? {
        if let key = try? P256.Signing.PrivateKey(pemRepresentation: pem) { return (1, .p256(key)) }
        if let key = try? Curve25519.Signing.PrivateKey(pemRepresentation: pem) { return (2, .ed25519(key)) }
        if let key = try? _RSA.Signing.PrivateKey(pemRepresentation: pem), rsaSizes.contains(key.keySizeInBits) { return (3, .rsa(key)) }
        return nil
    }

    var privateBytes: [UInt8] {
        switch self {
        case .p256(let key): Array(key.rawRepresentation)
        case .ed25519(let key): Array(key.rawRepresentation)
        case .rsa(let key): Array(key.derRepresentation)
        }
    }

    var publicBytes: [UInt8]? {
        switch self {
        case .p256(let key): return Array(key.publicKey.rawRepresentation)
        case .ed25519(let key): return Array(key.publicKey.rawRepresentation)
        case .rsa(let key):
            guard let primitives = try? key.publicKey.getKeyPrimitives() else { return nil }
            // A 2048-bit modulus is 256 bytes (4096: 512), its first one not zero; the exponent follows.
            let modulus = Array(primitives.modulus.drop { $0 == 0 })
            return modulus.count * 8 == key.keySizeInBits ? modulus + Array(primitives.publicExponent.drop { $0 == 0 }) : nil
        }
    }

    func sign(_ message: UnsafeRawBufferPointer) -> [UInt8]? {
        switch self {
        case .p256(let key): return (try? key.signature(for: message)).map { Array($0.rawRepresentation) }
        case .ed25519(let key): return (try? key.signature(for: message)).map { Array($0) }
        case .rsa(let key): return (try? key.signature(for: message, padding: .insecurePKCS1v1_5)).map { Array($0.rawRepresentation) }
        }
    }
}

/// Writes `source` to `output` (at most `capacity` bytes) and its length to `length`.
private func write(_ source: [UInt8], to output: UnsafeMutablePointer<UInt8>?, capacity: Int, length: UnsafeMutablePointer<Int>?) -> Int32 {
    guard source.count <= capacity, let output, let length else { return invalidInput }
    source.withUnsafeBufferPointer { output.update(from: $0.baseAddress!, count: source.count) }
    length.pointee = source.count
    return done
}

/// A new key pair for `algorithm`: the private key to `privateKey` (its length to `privateLength`),
/// the public key to `publicKey` (`publicLength`). 2 when a capacity is too small.
@_cdecl("authbridge_crypto_key_generate_v1")
public func keyGenerate(
    _ algorithm: Int32, _ privateKey: UnsafeMutablePointer<UInt8>?, _ privateCapacity: Int, _ privateLength: UnsafeMutablePointer<Int>?,
    _ publicKey: UnsafeMutablePointer<UInt8>?, _ publicCapacity: Int, _ publicLength: UnsafeMutablePointer<Int>?
) -> Int32 {
    guard let key = SigningKey.generate(algorithm), let publicBytes = key.publicBytes else { return invalidInput }
    let status = write(key.privateBytes, to: privateKey, capacity: privateCapacity, length: privateLength)
    return status == done ? write(publicBytes, to: publicKey, capacity: publicCapacity, length: publicLength) : status
}

private final class OpenedKey {
    let key: SigningKey
    init(_ key: SigningKey) { self.key = key }
}

/// Opens a private key of `algorithm` for signing; null for one that does not open. Released with
/// `authbridge_crypto_key_close_v1`.
@_cdecl("authbridge_crypto_key_open_v1")
public func keyOpen(_ algorithm: Int32, _ privateKey: UnsafePointer<UInt8>?, _ privateCount: Int) -> UnsafeMutableRawPointer? {
    guard let key = SigningKey.open(algorithm, bytes(privateKey, privateCount)) else { return nil }
    return Unmanaged.passRetained(OpenedKey(key)).toOpaque()
}

/// Signs `message` with an opened key: the signature to `signature` (at most `capacity` bytes),
/// its length to `length`. Any thread.
@_cdecl("authbridge_crypto_key_sign_v1")
public func keySign(
    _ handle: UnsafeMutableRawPointer?, _ message: UnsafePointer<UInt8>?, _ messageCount: Int, _ signature: UnsafeMutablePointer<UInt8>?,
    _ capacity: Int, _ length: UnsafeMutablePointer<Int>?
) -> Int32 {
    guard let handle else { return invalidInput }
    let opened = Unmanaged<OpenedKey>.fromOpaque(handle).takeUnretainedValue()
    guard let signed = opened.key.sign(bytes(message, messageCount)) else { return invalidInput }
    return write(signed, to: signature, capacity: capacity, length: length)
}

/// Releases an opened key.
@_cdecl("authbridge_crypto_key_close_v1")
public func keyClose(_ handle: UnsafeMutableRawPointer?) {
    guard let handle else { return }
    Unmanaged<OpenedKey>.fromOpaque(handle).release()
}

/// A private key from PEM text (a client's own key for RFC 7523 assertions): its algorithm code
/// (1, 2 or 3 as above; RSA 2048 to 4096 bits) to `algorithm`, the private and public keys as
/// `authbridge_crypto_key_generate_v1` writes them. 2 for text that holds no such key.
@_cdecl("authbridge_crypto_key_import_pem_v1")
public func keyImportPEM(
    _ pem: UnsafePointer<UInt8>?, _ pemCount: Int, _ algorithm: UnsafeMutablePointer<Int32>?,
    _ privateKey: UnsafeMutablePointer<UInt8>?, _ privateCapacity: Int, _ privateLength: UnsafeMutablePointer<Int>?,
    _ publicKey: UnsafeMutablePointer<UInt8>?, _ publicCapacity: Int, _ publicLength: UnsafeMutablePointer<Int>?
) -> Int32 {
    guard let algorithm, let text = String(validating: bytes(pem, pemCount), as: UTF8.self),
        let (code, key) = SigningKey.importPEM(text), let publicBytes = key.publicBytes
    else { return invalidInput }
    algorithm.pointee = code
    let status = write(key.privateBytes, to: privateKey, capacity: privateCapacity, length: privateLength)
    return status == done ? write(publicBytes, to: publicKey, capacity: publicCapacity, length: publicLength) : status
}
