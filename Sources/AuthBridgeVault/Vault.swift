@_exported import AuthBridgeJSON

/// One stored session record: what a vault keeps per profile.
///
/// `profile` and `account` are metadata (authenticated, readable without the
/// key, so accounts can be listed without decrypting tokens); `secret` is the
/// encrypted part (tokens, provider extras, cookies).
public struct VaultRecord: Sendable, Equatable {
    public var profile: String
    public var account: String?
    public var secret: JSON

    public init(profile: String, account: String?, secret: JSON) {
        self.profile = profile
        self.account = account
        self.secret = secret
    }

    /// The largest record any vault keeps: 1 MiB (1,048,576 bytes) as stored
    /// (for the encrypted file, the sealed envelope: the record's JSON takes
    /// about three quarters of it). Reads and writes share this bound: a save
    /// over it is refused with nothing written (`recordTooLarge`), so every
    /// stored record can be read back. What the host accepts from a provider
    /// is bounded far below it.
    public static let maximumSize = 1 << 20
}

/// A record's key: a profile, or a profile and one of its accounts.
///
/// Accounts of one profile are separate records (each refreshes, locks and
/// is deleted on its own); the key joins the two with U+001F, which profile
/// names never contain.
public enum VaultKey {
    public static let accountSeparator: Character = "\u{1F}"

    public static func make(profile: String, account: String) -> String {
        account.isEmpty ? profile : profile + String(accountSeparator) + account
    }

    /// (profile, account); account is "" for a profile's own record.
    public static func split(_ key: String) -> (profile: String, account: String) {
        guard let index = key.firstIndex(of: accountSeparator) else { return (key, "") }
        return (String(key[..<index]), String(key[key.index(after: index)...]))
    }
}

/// Why the vault failed, for one profile or for all of it.
public struct VaultError: Error, Sendable, CustomStringConvertible {
    public enum Reason: String, Sendable {
        /// Folder or file permissions or ownership are unsafe; nothing was read.
        case insecurePermissions
        /// A record could not be read (torn write, tampering, wrong format, too
        /// large, not a file): it was moved aside (quarantine).
        case corruptRecord
        /// A save larger than `VaultRecord.maximumSize`: refused, nothing written.
        case recordTooLarge
        /// The key does not open this vault (a wrong key, not a corrupt vault).
        case wrongKey
        /// No key source is acceptable (e.g. `--require-secure-storage` without a keyring).
        case noKey
        /// The Secret Service is missing, locked or refused.
        case keyringUnavailable
        /// The account's lock was not free within `ProfileFileLock.maximumWait`
        /// (another process has held it that long); nothing was changed.
        case lockTimeout
        /// The vault's database cannot be reached now (down, restarting, too slow):
        /// retryable, nothing was lost, and never a reason to sign anyone out.
        case vaultUnavailable
        /// The vault's database refused the host's user (a missing grant, a failed
        /// login): the message names what an administrator must grant.
        case accessDenied
        case io
    }

    public var reason: Reason
    public var message: String

    public init(_ reason: Reason, _ message: String) {
        self.reason = reason
        self.message = message
    }

    public var description: String { message }

    /// The refusal of a save over `VaultRecord.maximumSize`.
    static func tooLarge(_ profile: String, size: Int) -> VaultError {
        VaultError(
            .recordTooLarge,
            "The session of \"\(VaultKey.split(profile).profile)\" is too large to store (\(size) bytes; a vault record holds at most \(VaultRecord.maximumSize)); nothing was written."
        )
    }
}

/// Where sessions are kept. Every backend passes the same behaviour suite.
///
/// Methods are `nonisolated(nonsending)`: they run on the caller's executor
/// (the session engine), and a backend that blocks briefly on file I/O does
/// so there.
public protocol Vault: Sendable {
    /// "memory", "encrypted-file", "secret-service", "postgresql".
    var backend: String { get }
    /// "none" (memory only), "encrypted" (AES-GCM at rest), "keyring".
    var protection: String { get }

    /// The profile's record, nil when there is none. A record that cannot be
    /// read, or that `validate` rejects (it returns why), is moved aside
    /// (quarantine) and reported as `corruptRecord`, once: afterwards the
    /// profile has no record. The move happens under the profile's lock and
    /// only if the record is still the damaged one (a writer may have
    /// replaced it meanwhile).
    nonisolated(nonsending) func load(_ profile: String, validate: @Sendable (VaultRecord) -> String?) async throws -> VaultRecord?
    /// Durable when it returns (fsync'ed), atomic (all or nothing). A record
    /// larger than `VaultRecord.maximumSize` is refused (`recordTooLarge`).
    nonisolated(nonsending) func save(_ record: VaultRecord) async throws
    /// Removes everything stored for the profile.
    nonisolated(nonsending) func delete(_ profile: String) async throws
    /// Keys of every record, from metadata only.
    nonisolated(nonsending) func profiles() async throws -> [String]
    /// Keys of one profile's records (see `VaultKey`). A record found damaged
    /// while listing is quarantined and reported for this profile only.
    nonisolated(nonsending) func keys(of profile: String) async throws -> [String]
    /// Runs `body` holding the profile's cross-process lock (a refresh must
    /// re-read the record inside it). A lock held by a dead process is free.
    /// Re-entrant within a task: `load` inside `body` may take it again.
    nonisolated(nonsending) func withExclusiveAccess<T: Sendable>(to profile: String, _ body: () async throws -> T) async throws -> T
    /// How to tell cheaply whether the record of `key` changed (any process),
    /// nil when the backend cannot tell without reading it.
    func changeProbe(for key: String) -> ChangeProbe?
    /// The same for the set of `profile`'s records (one added, replaced or
    /// removed), nil when the backend cannot tell.
    func changeProbe(forRecordsOf profile: String) -> ChangeProbe?
    /// Tells `handler` (on a thread of the vault's) what other processes
    /// sharing the vault changed, for backends that hear of it (PostgreSQL's
    /// LISTEN/NOTIFY); the others never call it.
    func observeChanges(_ handler: @escaping @Sendable (VaultChange) -> Void)
    /// Hands `event` (a `session/changed` notification's params) to every
    /// other process observing the vault; best effort, nothing for backends
    /// that cannot.
    func publish(_ event: JSON)
}

/// What another process did to a shared vault (see `Vault.observeChanges`).
public enum VaultChange: Sendable {
    /// A record was written or removed (its key; nil: any may have changed,
    /// e.g. after the vault lost its connection and may have missed news).
    case records(String?)
    /// An event another process published (`Vault.publish`).
    case event(JSON)
}

extension Vault {
    public func changeProbe(for key: String) -> ChangeProbe? { nil }
    public func changeProbe(forRecordsOf profile: String) -> ChangeProbe? { nil }
    public func observeChanges(_ handler: @escaping @Sendable (VaultChange) -> Void) {}
    public func publish(_ event: JSON) {}

    nonisolated(nonsending) public func load(_ profile: String) async throws -> VaultRecord? {
        try await load(profile, validate: { _ in nil })
    }

    nonisolated(nonsending) public func keys(of profile: String) async throws -> [String] {
        try await profiles().filter { VaultKey.split($0).profile == profile }
    }
}
