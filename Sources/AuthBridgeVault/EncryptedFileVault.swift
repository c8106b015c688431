import AuthBridgeCrypto
import AuthBridgeJSON
import AuthBridgeURL
import Synchronization

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// The default vault: one AES-256-GCM sealed file per profile in a private
/// folder, written atomically and durably.
///
/// Layout (`folder` is 0700 and ours; files are 0600):
///
///     vault.check             a sealed constant: tells a wrong key from corruption
///     <hash>.vault            {"format","version","profile","account","sealed"}
///     locks/<hash>.lock       flock(2) per profile, for cross-process refreshes
///     locks/vault.lock        held while opening (creating the key and vault.check)
///     quarantine/             records that could not be read, kept aside
///
/// The profile and account are authenticated (AEAD associated data) but not
/// encrypted, so accounts can be listed without the key; everything else
/// (tokens, provider extras) is inside `sealed`.
///
/// Opening (folder checks, key, check record) happens on first use, never on
/// the start-up path.
public final class EncryptedFileVault: Vault {
    public let backend = "encrypted-file"
    /// "keyring" when the key lives in the Secret Service, else "encrypted".
    public var protection: String { protectionState.withLock { $0 } }
    public let folder: String
    private let keySource: VaultKeySource
    private let opener = Opener()
    private let protectionState: Mutex<String>

    static let format = "authbridge-vault"
    static let version: Int64 = 1

    public init(folder: String, keySource: VaultKeySource) {
        self.folder = folder
        self.keySource = keySource
        self.protectionState = Mutex(keySource.expectedProtection)
    }

    // MARK: - Vault

    nonisolated(nonsending) public func load(_ profile: String, validate: @Sendable (VaultRecord) -> String?) async throws -> VaultRecord? {
        let key = try await openKey()
        let path = recordPath(profile)
        func examine() throws(VaultError) -> Examined {
            guard let bytes = try readRecordFile(path) else { return .missing }
            guard let bytes = bytes.value else { return .damaged(bytes.problem!) }
            do {
                let record = try Self.open(bytes, key: key, expectedProfile: profile)
                if let problem = validate(record) { return .damaged(problem) }
                return .intact(record)
            } catch  where error.reason == .corruptRecord {
                return .damaged(error.message)
            }
        }
        guard case .damaged = try examine() else { return try examine().record }
        // Moved aside under the record's lock, and only if it is still the
        // damaged one: a writer may have replaced it since it was read.
        return try await ProfileFileLock.withLock(lockPath(Self.fileStem(profile))) {
            let now = try examine()
            guard case .damaged(let problem) = now else { return now.record }
            let kept = quarantine(path)
            throw VaultError(
                .corruptRecord,
                "The stored session of profile \"\(VaultKey.split(profile).profile)\" could not be read (\(problem)); it was moved to \(kept) and the profile is signed out. Other profiles are not affected."
            )
        }
    }

    nonisolated(nonsending) public func save(_ record: VaultRecord) async throws {
        let key = try await openKey()
        let bytes = try Self.seal(record, key: key)
        guard bytes.count <= VaultRecord.maximumSize else { throw VaultError.tooLarge(record.profile, size: bytes.count) }
        try writeAtomically(bytes, to: recordPath(record.profile))
    }

    nonisolated(nonsending) public func delete(_ profile: String) async throws {
        _ = try await openKey()
        let path = recordPath(profile)
        if unlink(path) != 0 && errno != ENOENT {
            throw VaultError(.io, "Cannot delete the stored session of \"\(profile)\": \(String(cString: strerror(errno))).")
        }
        syncFolder(folder)
    }

    nonisolated(nonsending) public func profiles() async throws -> [String] {
        _ = try await openKey()
        var names: [String] = []
        for file in listFolder(folder) where file.hasSuffix(".vault") {
            guard let bytes = try? readPrivateFile(folder + "/" + file),
                let envelope = try? JSON.parse(bytes), let profile = envelope["profile"]?.stringValue,
                Self.fileStem(profile) + ".vault" == file
            else { continue }
            names.append(profile)
        }
        return names.sorted()
    }

    /// Files are named by the profile's hash (and the account's), so one
    /// profile's records are found without reading anyone else's. A record
    /// whose metadata cannot be read is moved aside (under its lock, if still
    /// damaged) and reported once.
    nonisolated(nonsending) public func keys(of profile: String) async throws -> [String] {
        _ = try await openKey()
        let stem = Self.fileStem(profile)
        var keys: [String] = []
        var damaged: [String] = []
        for file in listFolder(folder) where file == stem + ".vault" || (file.hasPrefix(stem + "-") && file.hasSuffix(".vault")) {
            let path = folder + "/" + file
            let examine = { () throws(VaultError) -> String?? in
                guard let bytes = try self.readRecordFile(path) else { return .some(nil) }
                // The record must be the one its file name says (not a copy of another).
                guard let envelope = bytes.value.flatMap({ try? JSON.parse($0) }), let key = envelope["profile"]?.stringValue,
                    VaultKey.split(key).profile == profile, Self.fileStem(key) + ".vault" == file
                else { return nil }
                return .some(key)
            }
            if let found = try examine() {
                if let found { keys.append(found) }
                continue
            }
            let recordStem = String(file.dropLast(".vault".count))
            try await ProfileFileLock.withLock(lockPath(recordStem)) {
                if let found = try examine() {
                    if let found { keys.append(found) }
                } else {
                    damaged.append(quarantine(path))
                }
            }
        }
        if !damaged.isEmpty {
            throw VaultError(
                .corruptRecord,
                "A stored session of profile \"\(profile)\" could not be read; it was moved to \(damaged.joined(separator: ", ")) and that account is signed out. Other profiles are not affected."
            )
        }
        return keys.sorted()
    }

    nonisolated(nonsending) public func withExclusiveAccess<T: Sendable>(to profile: String, _ body: () async throws -> T) async throws -> T {
        _ = try await openKey()
        return try await ProfileFileLock.withLock(lockPath(Self.fileStem(profile)), body)
    }

    /// The record file's stamp: a rename over it (a save) makes a new inode, an unlink (a delete) none.
    public func changeProbe(for key: String) -> ChangeProbe? {
        let path = recordPath(key)
        return ChangeProbe { FileProbe.stamp(path) }
    }

    /// The folder's stamp: every record saved or deleted (a rename, an unlink) moves its times.
    public func changeProbe(forRecordsOf profile: String) -> ChangeProbe? {
        let folder = self.folder
        return ChangeProbe { FileProbe.stamp(folder) }
    }

    /// What a record file holds: a readable record, nothing, or why it cannot be read.
    private enum Examined {
        case missing, intact(VaultRecord), damaged(String)
        var record: VaultRecord? { if case .intact(let record) = self { record } else { nil } }
    }

    /// A record file's bytes, nil when there is none, or (in `problem`) why it
    /// cannot be a record (too large, not a file); other failures throw.
    private func readRecordFile(_ path: String) throws(VaultError) -> (value: [UInt8]?, problem: String?)? {
        do {
            return try readPrivateFile(path).map { ($0, nil) }
        } catch  where error.reason == .corruptRecord {
            return (nil, error.message)
        }
    }

    private func lockPath(_ stem: String) -> String { folder + "/locks/" + stem + ".lock" }

    // MARK: - Opening

    /// The key, after the folder checks and the wrong-key check (once).
    private func openKey() async throws(VaultError) -> SymmetricKey {
        try await opener.open { () async throws(VaultError) -> SymmetricKey in try await self.openVault() }
    }

    /// Under the vault's lock (`locks/vault.lock`): processes opening a new
    /// vault at once create one key and one check record, never two (the
    /// files are also created without replacing, for processes that do not
    /// take the lock).
    private func openVault() async throws(VaultError) -> SymmetricKey {
        try makePrivateFolder(folder)
        removeAbandonedTemporaryFiles()
        do {
            return try await ProfileFileLock.withLock(folder + "/locks/vault.lock") { () async throws -> SymmetricKey in
                let (key, protection) = try await keySource.key(vaultFolder: folder)
                protectionState.withLock { $0 = protection }
                try checkKey(key)
                return key
            }
        } catch let error as VaultError {
            throw error
        } catch {
            throw VaultError(.io, "Cannot open the vault in \(folder).")
        }
    }

    /// `vault.check`, a sealed constant: created with the first key, then proves each key.
    private func checkKey(_ key: SymmetricKey) throws(VaultError) {
        let check = folder + "/vault.check"
        let constant = VaultRecord(profile: "authbridge.vault.check", account: nil, secret: "authbridge")
        if try readPrivateFile(check) == nil, try createExclusively(try Self.seal(constant, key: key), at: check) { return }
        guard let bytes = try readPrivateFile(check) else { throw VaultError(.io, "Cannot create \(check).") }
        do {
            _ = try Self.open(bytes, key: key, expectedProfile: constant.profile)
        } catch  where error.reason == .corruptRecord {
            throw VaultError(
                .wrongKey,
                "The vault key does not open the vault in \(folder) (\(keySource.description)); nothing was changed. Use the key it was created with."
            )
        }
    }

    /// A process killed in the middle of `writeAtomically` leaves its
    /// temporary file behind (`<record>.<pid>.<ns>.tmp`); the record itself is
    /// intact. Remove those whose writer is gone — never a live writer's.
    private func removeAbandonedTemporaryFiles() {
        for name in listFolder(folder) where name.hasSuffix(".tmp") {
            let parts = name.split(separator: ".")
            guard parts.count >= 4, let pid = Int32(parts[parts.count - 3]) else { continue }
            if kill(pid, 0) != 0 && errno == ESRCH { unlink(folder + "/" + name) }
        }
    }

    // MARK: - Sealing

    static func metadata(_ record: VaultRecord) -> JSON {
        .compactObject([
            "format": .string(format), "version": .int(version), "profile": .string(record.profile),
            "account": record.account.map(JSON.string),
        ])
    }

    static func seal(_ record: VaultRecord, key: SymmetricKey) throws(VaultError) -> [UInt8] {
        let associated = metadata(record).serialized(sortKeys: true)
        let combined: [UInt8]
        do {
            combined = try AESGCM.seal(record.secret.serialized(), using: key, authenticating: associated)
        } catch {
            throw VaultError(.io, error.reason == .unavailable ? error.message : "sealing failed")
        }
        var envelope = metadata(record).objectValue!
        envelope["sealed"] = .string(Base64.encode(combined))
        return JSON.object(envelope).serialized(sortKeys: true) + [0x0A]
    }

    /// Opens a record; throws `corruptRecord` with a short reason when it is not authentic
    /// (`io` when the cryptography library is missing: nothing is wrong with the record).
    static func open(_ bytes: [UInt8], key: SymmetricKey, expectedProfile: String) throws(VaultError) -> VaultRecord {
        guard let envelope = try? JSON.parse(bytes) else { throw VaultError(.corruptRecord, "not a vault record") }
        guard envelope["format"]?.stringValue == format, envelope["version"]?.intValue == version,
            let profile = envelope["profile"]?.stringValue, let sealed = envelope["sealed"]?.stringValue,
            let combined = Base64.decode(sealed)
        else { throw VaultError(.corruptRecord, "unknown format") }
        guard profile == expectedProfile else { throw VaultError(.corruptRecord, "the record belongs to another profile") }
        let record = VaultRecord(profile: profile, account: envelope["account"]?.stringValue, secret: .null)
        let plain: [UInt8]
        do {
            plain = try AESGCM.open(combined, using: key, authenticating: metadata(record).serialized(sortKeys: true))
        } catch {
            if error.reason == .unavailable { throw VaultError(.io, error.message) }
            throw VaultError(.corruptRecord, "authentication failed")
        }
        guard let secret = try? JSON.parse(plain) else { throw VaultError(.corruptRecord, "authentication failed") }
        return VaultRecord(profile: profile, account: record.account, secret: secret)
    }

    // MARK: - Files

    /// A file name for a profile: profile names may hold any character.
    /// A record's file name without `.vault`: the profile's hash, then the
    /// account's for an account record (names never appear on disk).
    static func fileStem(_ key: String) -> String {
        let (profile, account) = VaultKey.split(key)
        return account.isEmpty ? hash(profile) : hash(profile) + "-" + hash(account)
    }

    private static func hash(_ text: String) -> String {
        SHA256.hash(Array(text.utf8)).prefix(16).map { String($0, radix: 16).leftPadded(to: 2) }.joined()
    }

    func recordPath(_ profile: String) -> String { folder + "/" + Self.fileStem(profile) + ".vault" }

    /// Moves a damaged record aside (never deletes it, never over an earlier
    /// one) and says where: `quarantine/<file>.<seconds>`, `….<seconds>.2`, ….
    private func quarantine(_ path: String) -> String {
        let aside = folder + "/quarantine"
        try? makePrivateFolder(aside)
        let name = path.split(separator: "/").last.map(String.init) ?? "record"
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        for attempt in 1...1_000 {
            let target = "\(aside)/\(name).\(now.tv_sec)" + (attempt == 1 ? "" : ".\(attempt)")
            switch moveWithoutReplacing(path, to: target) {
            case 0:
                syncFolder(folder)
                syncFolder(aside)
                return target
            case EEXIST: continue
            default: return path
            }
        }
        return path
    }
}

/// Opens a vault once, however many callers arrive at first use together
/// (two concurrent first uses must not create two different keys): the
/// first caller's attempt is shared, never run twice at once.
actor Opener {
    private var attempt: Task<Result<SymmetricKey, VaultError>, Never>?
    /// The failures tried again on the next use; any other is final for the process.
    private let retrying: Set<VaultError.Reason>

    /// By default a missing or wrong key is permanent, other I/O may be retried.
    init(retrying: Set<VaultError.Reason> = [.io, .keyringUnavailable]) { self.retrying = retrying }

    func open(_ make: @escaping @Sendable () async throws(VaultError) -> SymmetricKey) async throws(VaultError) -> SymmetricKey {
        let attempt =
            self.attempt
            ?? Task {
                do throws(VaultError) { return .success(try await make()) } catch { return .failure(error) }
            }
        self.attempt = attempt
        let made = await attempt.value
        if case .failure(let error) = made, retrying.contains(error.reason), self.attempt == attempt {
            self.attempt = nil
        }
        return try made.get()
    }
}

extension String {
    fileprivate func leftPadded(to width: Int) -> String { count >= width ? self : String(repeating: "0", count: width - count) + self }
}
