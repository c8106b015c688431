import Crypto
import FoundationEssentials

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Where the encrypted-file vault's key comes from.
public enum VaultKeySource: Sendable, CustomStringConvertible {
    /// A secret given to a service account (e.g. `AUTHBRIDGE_VAULT_KEY`): the
    /// key is derived from it with HKDF-SHA256. Use a long random secret.
    case secret(String)
    /// 32 random bytes in a 0600 file, created on first use. Protects against
    /// other users and stolen vault files, not against this user's own programs.
    case keyFile(String)
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
        case .keyFile(let path): "key file \(path)"
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

    private static func keyringKey(_ keyring: Keyring, vaultFolder: String) async throws(VaultError) -> SymmetricKey {
        if let stored = try await keyring.lookup(kind: "vault-key", key: vaultFolder) {
            guard let bytes = Data(base64Encoded: stored), bytes.count == 32 else {
                throw VaultError(.noKey, "The vault key in the keyring is damaged; nothing was changed.")
            }
            return SymmetricKey(data: bytes)
        }
        var generator = SystemRandomNumberGenerator()
        let bytes = (0..<32).map { _ in UInt8.random(in: .min ... .max, using: &generator) }
        try await keyring.store(kind: "vault-key", key: vaultFolder, label: "AuthBridge vault key (\(vaultFolder))",
                                secret: Data(bytes).base64EncodedString())
        // Two hosts creating it at once: read back what the keyring kept.
        guard let stored = try await keyring.lookup(kind: "vault-key", key: vaultFolder),
              let kept = Data(base64Encoded: stored), kept.count == 32 else {
            throw VaultError(.keyringUnavailable, "The keyring did not keep the vault key.")
        }
        return SymmetricKey(data: kept)
    }

    private func fileOrSecretKey(vaultFolder: String) throws(VaultError) -> SymmetricKey {
        switch self {
        case .keyring:
            throw VaultError(.noKey, "no key")
        case .unavailable(let why):
            throw VaultError(.noKey, why)
        case .secret(let secret):
            guard secret.utf8.count >= 16 else {
                throw VaultError(.noKey, "The vault secret is too short (at least 16 characters; use a long random value).")
            }
            return HKDF<SHA256>.deriveKey(inputKeyMaterial: SymmetricKey(data: Array(secret.utf8)),
                                          salt: Array("authbridge-vault".utf8), info: Array("v1".utf8), outputByteCount: 32)
        case .keyFile(let path):
            if let bytes = try readPrivateFile(path) {
                guard bytes.count == 32 else {
                    throw VaultError(.noKey, "The vault key file \(path) is damaged (\(bytes.count) bytes instead of 32); nothing was changed.")
                }
                return SymmetricKey(data: bytes)
            }
            var generator = SystemRandomNumberGenerator()
            let bytes = (0..<32).map { _ in UInt8.random(in: .min ... .max, using: &generator) }
            let folder = String(path[..<(path.lastIndex(of: "/") ?? path.endIndex)])
            try makePrivateFolder(folder)
            try writeAtomically(bytes, to: path)
            // Two hosts creating it at once: the last rename wins; read back what stands.
            guard let stored = try readPrivateFile(path), stored.count == 32 else {
                throw VaultError(.io, "Cannot create the vault key file \(path).")
            }
            return SymmetricKey(data: stored)
        }
    }
}
