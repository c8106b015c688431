import AuthBridgeCrypto
import AuthBridgeURL

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Where the encrypted-file vault's key comes from.
public enum VaultKeySource: Sendable, CustomStringConvertible {
    /// A random key given to a service account (`AUTHBRIDGE_VAULT_KEY`): 32
    /// random bytes written as 64 hex digits or base64 (standard or URL-safe,
    /// padding optional). Anything weaker (a passphrase) is refused: the key
    /// goes through HKDF-SHA256, which adds no work against guessing.
    case secret(String)
    /// 32 random bytes in a 0600 file, created on first use. Protects against
    /// other users and stolen vault files, not against this user's own programs.
    case keyFile(String)
    /// A key file every host of a fleet is given (the PostgreSQL vault): read,
    /// never created, so that no host makes a key of its own that the others
    /// cannot open.
    case sharedKeyFile(String)
    /// No acceptable source (e.g. `--require-secure-storage` on a machine
    /// without a keyring): the vault refuses to open, with this explanation.
    case unavailable(String)
    /// A random key kept in the Secret Service (the desktop keyring). When
    /// the keyring is missing or locked, `fallback` is used instead (a key
    /// file), or the vault fails closed when there is none.
    indirect case keyring(Keyring, fallback: VaultKeySource?)

    public var description: String {
        switch self {
        case .secret: "key from a secret"
        case .keyFile(let path), .sharedKeyFile(let path): "key file \(path)"
        case .unavailable: "no key"
        case .keyring: "key in the Secret Service"
        }
    }

    /// What `protection` the vault reports before it is opened.
    public var expectedProtection: String {
        if case .keyring = self { return "keyring" }
        return "encrypted"
    }

    /// "keyring" would be a Secret Service key; a key file or secret is "encrypted".
    public var isKeyFile: Bool { if case .keyFile = self { return true } else { return false } }

    /// The key and the protection it gives ("keyring" or "encrypted").
    func key(vaultFolder: String) async throws(VaultError) -> (SymmetricKey, String) {
        switch self {
        case .keyring(let keyring, let fallback):
            do {
                return (try await Self.keyringKey(keyring, vaultFolder: vaultFolder), "keyring")
            } catch {
                guard let fallback else {
                    throw VaultError(.noKey, "\(error.message) Secure storage is required, so the vault stays closed (no key file is used).")
                }
                return try await fallback.key(vaultFolder: vaultFolder)
            }
        default:
            return (try fileOrSecretKey(vaultFolder: vaultFolder), "encrypted")
        }
    }

    /// Called with the vault folder's lock held (`EncryptedFileVault`), so two
    /// processes opening a new vault never both store a key: the second finds
    /// the first's.
    private static func keyringKey(_ keyring: Keyring, vaultFolder: String) async throws(VaultError) -> SymmetricKey {
        if let stored = try await keyring.lookup(kind: "vault-key", key: vaultFolder) {
            guard let bytes = Base64.decode(stored), bytes.count == 32 else {
                throw VaultError(.noKey, "The vault key in the keyring is damaged; nothing was changed.")
            }
            return SymmetricKey(bytes: bytes)
        }
        try await keyring.store(
            kind: "vault-key", key: vaultFolder, label: "AuthBridge vault key (\(vaultFolder))",
            secret: Base64.encode(randomKeyBytes()))
        // A process of an older version, which did not take the lock, may have stored one too: use what the keyring kept.
        guard let stored = try await keyring.lookup(kind: "vault-key", key: vaultFolder),
            let kept = Base64.decode(stored), kept.count == 32
        else {
            throw VaultError(.keyringUnavailable, "The keyring did not keep the vault key.")
        }
        return SymmetricKey(bytes: kept)
    }

    /// Why `secret` is not acceptable as `AUTHBRIDGE_VAULT_KEY`, or nil.
    public static func secretProblem(_ secret: String) -> String? {
        guard let bytes = decodeKey(secret) else {
            return
                "The vault secret (AUTHBRIDGE_VAULT_KEY) must be a random 32-byte key written as 64 hex digits or as base64 (43 or 44 characters), e.g. the output of: head -c 32 /dev/urandom | base64. Passphrases are refused; the vault stays closed."
        }
        // Random bytes: about 30 distinct values out of 32; a made-up pattern ("0000…", "abab…") has few.
        guard Set(bytes).count >= 16 else {
            return
                "The vault secret (AUTHBRIDGE_VAULT_KEY) does not look random (it repeats a few byte values); make one with: head -c 32 /dev/urandom | base64. The vault stays closed."
        }
        return nil
    }

    /// The 32 bytes of a hex or base64 (standard or URL-safe, padding optional) key.
    static func decodeKey(_ text: String) -> [UInt8]? {
        let characters = Array(text.utf8)
        if characters.count == 64, characters.allSatisfy({ ($0 >= 0x30 && $0 <= 0x39) || ($0 | 0x20 >= 0x61 && $0 | 0x20 <= 0x66) }) {
            return stride(from: 0, to: 64, by: 2).map { UInt8(String(decoding: characters[$0..<$0 + 2], as: UTF8.self), radix: 16)! }
        }
        guard characters.count == 43 || (characters.count == 44 && characters.last == UInt8(ascii: "=")) else { return nil }
        var standard = String(
            decoding: characters.prefix(43).map { $0 == UInt8(ascii: "-") ? UInt8(ascii: "+") : $0 == UInt8(ascii: "_") ? UInt8(ascii: "/") : $0 },
            as: UTF8.self)
        standard += "="
        guard let data = Base64.decode(standard), data.count == 32 else { return nil }
        return data
    }

    private static func randomKeyBytes() -> [UInt8] {
        var generator = SystemRandomNumberGenerator()
        return (0..<32).map { _ in UInt8.random(in: .min ... .max, using: &generator) }
    }

    private func fileOrSecretKey(vaultFolder: String) throws(VaultError) -> SymmetricKey {
        switch self {
        case .keyring:
            throw VaultError(.noKey, "no key")
        case .unavailable(let why):
            throw VaultError(.noKey, why)
        case .secret(let secret):
            if let problem = Self.secretProblem(secret) { throw VaultError(.noKey, problem) }
            // Over the text as given: vaults made with a random key of this form keep opening.
            do {
                return try HKDF.sha256(
                    inputKeyMaterial: Array(secret.utf8), salt: Array("authbridge-vault".utf8), info: Array("v1".utf8), outputByteCount: 32)
            } catch {
                throw VaultError(.noKey, error.message)
            }
        case .sharedKeyFile(let path):
            guard let stored = try readKeyFile(path) else {
                throw VaultError(
                    .noKey,
                    "The vault key file \(path) does not exist. Every host sharing the vault needs the same key: make one once (head -c 32 /dev/urandom > key; chmod 600 key) and give it to each (--vault-key-file), or set AUTHBRIDGE_VAULT_KEY."
                )
            }
            return SymmetricKey(bytes: stored)
        case .keyFile(let path):
            if let stored = try readKeyFile(path) { return SymmetricKey(bytes: stored) }
            let folder = String(path[..<(path.lastIndex(of: "/") ?? path.endIndex)])
            try makePrivateFolder(folder)
            // Never replaces a key another process created meanwhile: then that one is read.
            _ = try createExclusively(Self.randomKeyBytes(), at: path)
            guard let stored = try readKeyFile(path) else {
                throw VaultError(.io, "Cannot create the vault key file \(path).")
            }
            return SymmetricKey(bytes: stored)
        }
    }
}

/// The 32 bytes of a key file; nil when there is none.
private func readKeyFile(_ path: String) throws(VaultError) -> [UInt8]? {
    let bytes: [UInt8]?
    do {
        bytes = try readPrivateFile(path, limit: 4096)
    } catch  where error.reason == .corruptRecord {
        throw VaultError(.noKey, "The vault key file \(path) is damaged (\(error.message)); nothing was changed.")
    }
    guard let bytes else { return nil }
    guard bytes.count == 32 else {
        throw VaultError(.noKey, "The vault key file \(path) is damaged (\(bytes.count) bytes instead of 32); nothing was changed.")
    }
    return bytes
}
