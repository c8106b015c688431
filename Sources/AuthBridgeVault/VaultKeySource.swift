import Crypto

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

    public var description: String {
        switch self {
        case .secret: "key from a secret"
        case .keyFile(let path): "key file \(path)"
        case .unavailable: "no key"
        }
    }

    /// "keyring" would be a Secret Service key; a key file or secret is "encrypted".
    public var isKeyFile: Bool { if case .keyFile = self { return true } else { return false } }

    func key(vaultFolder: String) throws(VaultError) -> SymmetricKey {
        switch self {
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
