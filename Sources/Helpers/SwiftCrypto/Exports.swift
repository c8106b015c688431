import Crypto

// The host's AES-GCM and HKDF as C entry points of libAuthBridgeSwiftCrypto.so, over swift-crypto
// (Sources/AuthBridgeCrypto calls them; it opens the library on first use).
//
// Every entry point is synchronous, may be called from any thread, reads its inputs and writes
// its output before it returns, and answers a status: 0 done, 1 authentication failed (AES-GCM
// opening), 2 invalid input (a key that is not 128, 192 or 256 bits, a length the output cannot
// hold). Pointers may be null when their length is 0. Versioned by name (`_v1`): a changed
// contract is a new name, so an older library is refused rather than misused.

private let done: Int32 = 0
private let authenticationFailed: Int32 = 1
private let invalidInput: Int32 = 2

private func bytes(_ pointer: UnsafePointer<UInt8>?, _ count: Int) -> UnsafeRawBufferPointer {
    UnsafeRawBufferPointer(start: count > 0 ? pointer : nil, count: count > 0 ? count : 0)
}

private func write(_ source: some Sequence<UInt8>, to output: UnsafeMutablePointer<UInt8>?, count: Int) -> Int32 {
    var written = 0
    for byte in source {
        guard written < count, let output else { return invalidInput }
        output[written] = byte
        written += 1
    }
    return written == count ? done : invalidInput
}

/// AES-GCM with a random nonce: `plain` sealed under `key`, authenticating `associated`, as
/// nonce ‖ ciphertext ‖ tag (plainCount + 28 bytes) to `output`.
@_cdecl("authbridge_crypto_aes_gcm_seal_v1")
public func seal(
    _ key: UnsafePointer<UInt8>?, _ keyCount: Int, _ plain: UnsafePointer<UInt8>?, _ plainCount: Int,
    _ associated: UnsafePointer<UInt8>?, _ associatedCount: Int, _ output: UnsafeMutablePointer<UInt8>?
) -> Int32 {
    guard [16, 24, 32].contains(keyCount) else { return invalidInput }
    let key = SymmetricKey(data: bytes(key, keyCount))
    guard let box = try? AES.GCM.seal(bytes(plain, plainCount), using: key, authenticating: bytes(associated, associatedCount)),
        let combined = box.combined
    else { return invalidInput }
    return write(combined, to: output, count: plainCount + 28)
}

/// AES-GCM opening of nonce ‖ ciphertext ‖ tag (`sealedCount` ≥ 28): the plain text
/// (sealedCount − 28 bytes) to `output`, or 1 when it is not authentic.
@_cdecl("authbridge_crypto_aes_gcm_open_v1")
public func open(
    _ key: UnsafePointer<UInt8>?, _ keyCount: Int, _ sealed: UnsafePointer<UInt8>?, _ sealedCount: Int,
    _ associated: UnsafePointer<UInt8>?, _ associatedCount: Int, _ output: UnsafeMutablePointer<UInt8>?
) -> Int32 {
    guard [16, 24, 32].contains(keyCount), sealedCount >= 28 else { return invalidInput }
    let key = SymmetricKey(data: bytes(key, keyCount))
    guard let box = try? AES.GCM.SealedBox(combined: bytes(sealed, sealedCount)) else { return invalidInput }
    guard let plain = try? AES.GCM.open(box, using: key, authenticating: bytes(associated, associatedCount)) else {
        return authenticationFailed
    }
    return write(plain, to: output, count: sealedCount - 28)
}

/// HKDF-SHA256 (RFC 5869): `outputCount` bytes (at most 255 × 32) of key to `output`.
@_cdecl("authbridge_crypto_hkdf_sha256_v1")
public func hkdf(
    _ inputKeyMaterial: UnsafePointer<UInt8>?, _ inputCount: Int, _ salt: UnsafePointer<UInt8>?, _ saltCount: Int,
    _ info: UnsafePointer<UInt8>?, _ infoCount: Int, _ output: UnsafeMutablePointer<UInt8>?, _ outputCount: Int
) -> Int32 {
    guard outputCount > 0, outputCount <= 255 * SHA256.byteCount else { return invalidInput }
    let key = HKDF<SHA256>.deriveKey(
        inputKeyMaterial: SymmetricKey(data: bytes(inputKeyMaterial, inputCount)), salt: bytes(salt, saltCount),
        info: bytes(info, infoCount), outputByteCount: outputCount)
    return key.withUnsafeBytes { write($0, to: output, count: outputCount) }
}

// Signing keys for proofs of possession (RFC 9449 DPoP): made, kept and used by the host, never
// handed out. Raw representations: P-256 private 32 bytes, public x ‖ y 64 bytes, signature r ‖ s
// 64 bytes (JWS ES256, RFC 7518 §3.4); Ed25519 private 32, public 32, signature 64 (RFC 8037).
// A key signs through a handle (`authbridge_crypto_key_open_v1`): opened once, it signs without
// computing its public point again.

/// A new P-256 key pair: the private scalar (32 bytes) to `privateKey`, x ‖ y (64 bytes) to `publicKey`.
@_cdecl("authbridge_crypto_p256_generate_v1")
public func p256Generate(_ privateKey: UnsafeMutablePointer<UInt8>?, _ publicKey: UnsafeMutablePointer<UInt8>?) -> Int32 {
    let key = P256.Signing.PrivateKey()
    let status = write(key.rawRepresentation, to: privateKey, count: 32)
    return status == done ? write(key.publicKey.rawRepresentation, to: publicKey, count: 64) : status
}

/// A new Ed25519 key pair: the private seed (32 bytes) to `privateKey`, the public key (32 bytes) to `publicKey`.
@_cdecl("authbridge_crypto_ed25519_generate_v1")
public func ed25519Generate(_ privateKey: UnsafeMutablePointer<UInt8>?, _ publicKey: UnsafeMutablePointer<UInt8>?) -> Int32 {
    let key = Curve25519.Signing.PrivateKey()
    let status = write(key.rawRepresentation, to: privateKey, count: 32)
    return status == done ? write(key.publicKey.rawRepresentation, to: publicKey, count: 32) : status
}

/// A private key made ready to sign (its public point computed once), held by the host across
/// proofs: opening a raw key costs as much as the signature itself.
private enum PreparedKey {
    case p256(P256.Signing.PrivateKey)
    case ed25519(Curve25519.Signing.PrivateKey)
}

private final class PreparedKeyBox {
    let key: PreparedKey
    init(_ key: PreparedKey) { self.key = key }
}

/// Opens a raw private key for signing: `algorithm` 1 P-256 (ES256), 2 Ed25519 (EdDSA). The handle
/// is released with `authbridge_crypto_key_close_v1`; null for a key that does not open.
@_cdecl("authbridge_crypto_key_open_v1")
public func keyOpen(_ algorithm: Int32, _ privateKey: UnsafePointer<UInt8>?, _ privateCount: Int) -> UnsafeMutableRawPointer? {
    let raw = bytes(privateKey, privateCount)
    let key: PreparedKey
    switch algorithm {
    case 1:
        guard let opened = try? P256.Signing.PrivateKey(rawRepresentation: raw) else { return nil }
        key = .p256(opened)
    case 2:
        guard let opened = try? Curve25519.Signing.PrivateKey(rawRepresentation: raw) else { return nil }
        key = .ed25519(opened)
    default:
        return nil
    }
    return Unmanaged.passRetained(PreparedKeyBox(key)).toOpaque()
}

/// Signs `message` with an opened key: 64 bytes to `signature` (r ‖ s for P-256). Any thread.
@_cdecl("authbridge_crypto_key_sign_v1")
public func keySign(
    _ handle: UnsafeMutableRawPointer?, _ message: UnsafePointer<UInt8>?, _ messageCount: Int, _ signature: UnsafeMutablePointer<UInt8>?
) -> Int32 {
    guard let handle else { return invalidInput }
    let box = Unmanaged<PreparedKeyBox>.fromOpaque(handle).takeUnretainedValue()
    switch box.key {
    case .p256(let key):
        guard let signed = try? key.signature(for: bytes(message, messageCount)) else { return invalidInput }
        return write(signed.rawRepresentation, to: signature, count: 64)
    case .ed25519(let key):
        guard let signed = try? key.signature(for: bytes(message, messageCount)) else { return invalidInput }
        return write(signed, to: signature, count: 64)
    }
}

/// Releases an opened key.
@_cdecl("authbridge_crypto_key_close_v1")
public func keyClose(_ handle: UnsafeMutableRawPointer?) {
    guard let handle else { return }
    Unmanaged<PreparedKeyBox>.fromOpaque(handle).release()
}
