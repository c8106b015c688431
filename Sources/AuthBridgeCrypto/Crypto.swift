import AuthBridgeSystem

// AuthBridgeCrypto: the host's cryptography. AES-256-GCM and HKDF-SHA256 — what seals and opens
// vault records — and HMAC-SHA256 are GNU Nettle's, in libAuthBridgeNettle.so; the signing keys
// (Signing.swift) are swift-crypto's, in libAuthBridgeSwiftCrypto.so. Each is opened on first use:
// linked into the host, swift-crypto (BoringSSL) and the FoundationEssentials it needs cost every
// start 1.7 MB of resident memory and 1.5–2 ms (bench/README, "Start-up"); opened to seal the first
// vault record, 5.1 MB, where Nettle costs 0.45 MB (bench/README, "The agent's memory"). SHA-256
// and SHA-1 are in SHA.swift.
//
// Threading: every function may be called from any thread and returns when done. The first call
// opens the library (under HelperLibrary's lock); a host whose library is missing gets
// `CryptoFailure.unavailable` from every call, never a crash.

/// Why a cryptographic operation did not give a result.
public struct CryptoFailure: Error, Sendable, Equatable, CustomStringConvertible {
    public enum Reason: Sendable, Equatable {
        /// libAuthBridgeNettle.so or libAuthBridgeSwiftCrypto.so is not installed next to the host (or lacks an entry point).
        case unavailable
        /// AES-GCM: the sealed bytes, their associated data or the key do not match.
        case authenticationFailed
        /// A key of the wrong size, sealed bytes too short to hold a nonce and a tag, an output size HKDF cannot make.
        case invalidInput
    }

    public let reason: Reason
    public let message: String

    public var description: String { message }
}

/// A 256-bit (or other) symmetric key's bytes.
public struct SymmetricKey: Sendable {
    public let bytes: [UInt8]

    public init(bytes: [UInt8]) { self.bytes = bytes }
}

/// AES-256-GCM with a random 96-bit nonce; sealed bytes are nonce ‖ ciphertext ‖ tag (swift-crypto's
/// `SealedBox.combined`, so records sealed before this library existed keep opening).
public enum AESGCM {
    /// What sealing adds: a 12-byte nonce and a 16-byte tag.
    public static let overhead = 28

    public static func seal(_ plain: [UInt8], using key: SymmetricKey, authenticating associated: [UInt8]) throws(CryptoFailure) -> [UInt8] {
        try run(\.seal, key, plain, associated, outputCount: plain.count + overhead, "AES-GCM sealing")
    }

    public static func open(_ sealed: [UInt8], using key: SymmetricKey, authenticating associated: [UInt8]) throws(CryptoFailure) -> [UInt8] {
        guard sealed.count >= overhead else { throw CryptoFailure(reason: .invalidInput, message: "AES-GCM: the sealed bytes are too short") }
        return try run(\.open, key, sealed, associated, outputCount: sealed.count - overhead, "AES-GCM opening")
    }

    /// One of the library's AEAD entry points over `input` into `outputCount` bytes.
    private static func run(
        _ entry: KeyPath<SymmetricLibrary.Functions, CryptoLibrary.AEAD>, _ key: SymmetricKey, _ input: [UInt8], _ associated: [UInt8],
        outputCount: Int, _ what: String
    ) throws(CryptoFailure) -> [UInt8] {
        let function = try SymmetricLibrary.functions()[keyPath: entry]
        var output = [UInt8](repeating: 0, count: outputCount)
        let status = key.bytes.withUnsafeBufferPointer { key in
            input.withUnsafeBufferPointer { input in
                associated.withUnsafeBufferPointer { associated in
                    output.withUnsafeMutableBufferPointer { out in
                        function(
                            key.baseAddress, key.count, input.baseAddress, input.count, associated.baseAddress, associated.count, out.baseAddress)
                    }
                }
            }
        }
        try CryptoLibrary.check(status, what)
        return output
    }
}

/// HKDF (RFC 5869) with SHA-256.
/// HMAC-SHA256 (RFC 2104), for HS256 client assertions (RFC 7523 client_secret_jwt).
public enum HMACSHA256 {
    public static func authenticationCode(_ message: [UInt8], key: [UInt8]) throws(CryptoFailure) -> [UInt8] {
        let functions = try SymmetricLibrary.functions()
        var code = [UInt8](repeating: 0, count: SHA256.byteCount)
        let status = key.withUnsafeBufferPointer { key in
            message.withUnsafeBufferPointer { message in
                code.withUnsafeMutableBufferPointer {
                    functions.hmacSHA256(key.baseAddress, key.count, message.baseAddress, message.count, $0.baseAddress)
                }
            }
        }
        try CryptoLibrary.check(status, "HMAC-SHA256")
        return code
    }
}

public enum HKDF {
    public static func sha256(inputKeyMaterial: [UInt8], salt: [UInt8], info: [UInt8], outputByteCount: Int) throws(CryptoFailure) -> SymmetricKey {
        let functions = try SymmetricLibrary.functions()
        var key = [UInt8](repeating: 0, count: outputByteCount)
        let status = inputKeyMaterial.withUnsafeBufferPointer { ikm in
            salt.withUnsafeBufferPointer { salt in
                info.withUnsafeBufferPointer { info in
                    key.withUnsafeMutableBufferPointer { out in
                        functions.hkdf(
                            ikm.baseAddress, ikm.count, salt.baseAddress, salt.count, info.baseAddress, info.count, out.baseAddress, out.count)
                    }
                }
            }
        }
        try CryptoLibrary.check(status, "HKDF")
        return SymmetricKey(bytes: key)
    }
}

/// libAuthBridgeNettle.so's entry points (Sources/Helpers/Nettle/include/authbridge_nettle.h: their
/// contract, the same statuses as CryptoLibrary's).
enum SymmetricLibrary {
    struct Functions: @unchecked Sendable {
        let seal: CryptoLibrary.AEAD
        let open: CryptoLibrary.AEAD
        let hkdf: CryptoLibrary.KDF
        let hmacSHA256: CryptoLibrary.MAC
    }

    static let file = "libAuthBridgeNettle.so"

    static let library = HelperLibrary<Functions>("The cryptography library (\(file))", candidates: HelperLibraryLocation.candidates(file)) {
        symbols in
        guard let seal = symbols.function("authbridge_nettle_aes_gcm_seal_v1", as: CryptoLibrary.AEAD.self),
            let open = symbols.function("authbridge_nettle_aes_gcm_open_v1", as: CryptoLibrary.AEAD.self),
            let hkdf = symbols.function("authbridge_nettle_hkdf_sha256_v1", as: CryptoLibrary.KDF.self),
            let hmacSHA256 = symbols.function("authbridge_nettle_hmac_sha256_v1", as: CryptoLibrary.MAC.self)
        else { return nil }
        return Functions(seal: seal, open: open, hkdf: hkdf, hmacSHA256: hmacSHA256)
    }

    static func functions() throws(CryptoFailure) -> Functions {
        switch library.load() {
        case .success(let functions): return functions
        case .failure(let failure): throw CryptoFailure(reason: .unavailable, message: failure.notInstalledMessage)
        }
    }
}

/// libAuthBridgeSwiftCrypto.so's entry points (Sources/Helpers/SwiftCrypto: their contract).
enum CryptoLibrary {
    typealias AEAD =
        @convention(c) (
            UnsafePointer<UInt8>?, Int, UnsafePointer<UInt8>?, Int, UnsafePointer<UInt8>?, Int, UnsafeMutablePointer<UInt8>?
        ) -> Int32
    typealias KDF =
        @convention(c) (
            UnsafePointer<UInt8>?, Int, UnsafePointer<UInt8>?, Int, UnsafePointer<UInt8>?, Int, UnsafeMutablePointer<UInt8>?, Int
        ) -> Int32

    /// Status codes of the entry points.
    static let ok: Int32 = 0
    static let authenticationFailed: Int32 = 1
    static let invalidInput: Int32 = 2

    typealias KeyGenerate =
        @convention(c) (
            Int32, UnsafeMutablePointer<UInt8>?, Int, UnsafeMutablePointer<Int>?, UnsafeMutablePointer<UInt8>?, Int, UnsafeMutablePointer<Int>?
        )
        -> Int32
    typealias KeyOpen = @convention(c) (Int32, UnsafePointer<UInt8>?, Int) -> UnsafeMutableRawPointer?
    typealias KeySign =
        @convention(c) (UnsafeMutableRawPointer?, UnsafePointer<UInt8>?, Int, UnsafeMutablePointer<UInt8>?, Int, UnsafeMutablePointer<Int>?) -> Int32
    typealias KeyClose = @convention(c) (UnsafeMutableRawPointer?) -> Void
    typealias KeyImportPEM =
        @convention(c) (
            UnsafePointer<UInt8>?, Int, UnsafeMutablePointer<Int32>?, UnsafeMutablePointer<UInt8>?, Int, UnsafeMutablePointer<Int>?,
            UnsafeMutablePointer<UInt8>?, Int, UnsafeMutablePointer<Int>?
        ) -> Int32
    typealias MAC = @convention(c) (UnsafePointer<UInt8>?, Int, UnsafePointer<UInt8>?, Int, UnsafeMutablePointer<UInt8>?) -> Int32

    struct Functions: @unchecked Sendable {
        let keyGenerate: KeyGenerate
        let keyOpen: KeyOpen
        let keySign: KeySign
        let keyClose: KeyClose
        let keyImportPEM: KeyImportPEM
    }

    static let file = "libAuthBridgeSwiftCrypto.so"

    static let library = HelperLibrary<Functions>("The cryptography library (\(file))", candidates: HelperLibraryLocation.candidates(file)) {
        symbols in
        guard let keyGenerate = symbols.function("authbridge_crypto_key_generate_v1", as: KeyGenerate.self),
            let keyOpen = symbols.function("authbridge_crypto_key_open_v1", as: KeyOpen.self),
            let keySign = symbols.function("authbridge_crypto_key_sign_v1", as: KeySign.self),
            let keyClose = symbols.function("authbridge_crypto_key_close_v1", as: KeyClose.self),
            let keyImportPEM = symbols.function("authbridge_crypto_key_import_pem_v1", as: KeyImportPEM.self)
        else { return nil }
        return Functions(keyGenerate: keyGenerate, keyOpen: keyOpen, keySign: keySign, keyClose: keyClose, keyImportPEM: keyImportPEM)
    }

    static func functions() throws(CryptoFailure) -> Functions {
        switch library.load() {
        case .success(let functions): return functions
        case .failure(let failure): throw CryptoFailure(reason: .unavailable, message: failure.notInstalledMessage)
        }
    }

    static func check(_ status: Int32, _ what: String) throws(CryptoFailure) {
        switch status {
        case ok: return
        case authenticationFailed: throw CryptoFailure(reason: .authenticationFailed, message: "\(what): authentication failed")
        default: throw CryptoFailure(reason: .invalidInput, message: "\(what): invalid input")
        }
    }
}
