import AuthBridgeJSON
import FoundationEssentials
@testable import AuthBridgeVault
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// A class: Swift Testing makes one instance per test (case), so each gets its own scratch
/// folder, removed when the test ends.
@Suite("Encrypted file vault")
final class EncryptedFileVaultTests: Sendable {
    let scratch = Scratch()
    deinit { scratch.remove() }

    private func make(_ scratch: Scratch, key: VaultKeySource? = nil) -> EncryptedFileVault {
        EncryptedFileVault(folder: scratch.path + "/vault", keySource: key ?? .keyFile(scratch.path + "/keys/vault.key"))
    }

    private func mode(_ path: String) -> mode_t {
        var info = stat()
        return lstat(path, &info) == 0 ? info.st_mode & 0o777 : 0
    }

    private func bytes(_ path: String) -> [UInt8] { (try? readPrivateFile(path)) ?? [] }

    @Test func noTokenBytesOnDiskAndPrivatePermissions() async throws {
        let vault = make(scratch)
        try await vault.save(record("work"))
        #expect(mode(scratch.path + "/vault") == 0o700)
        #expect(mode(scratch.path + "/keys/vault.key") == 0o600)
        #expect(bytes(scratch.path + "/keys/vault.key").count == 32)
        for file in listFolder(scratch.path + "/vault") where file.hasSuffix(".vault") || file == "vault.check" {
            let path = scratch.path + "/vault/" + file
            #expect(mode(path) == 0o600)
            let text = String(decoding: bytes(path), as: UTF8.self)
            #expect(!text.contains("at-secret-1") && !text.contains("rt-secret-1"), "token bytes in \(file)")
        }
        // Listing reads metadata only.
        #expect(try await vault.profiles() == ["work"])
    }

    @Test func aCorruptRecordIsQuarantinedAndOnlyItsProfileIsAffected() async throws {
        let vault = make(scratch)
        try await vault.save(record("work"))
        try await vault.save(record("home"))
        let path = vault.recordPath("work")
        var torn = bytes(path)
        torn.removeLast(torn.count / 3) // a torn write
        try writeAtomically(torn, to: path)
        await #expect(throws: VaultError.self) { try await vault.load("work") }
        do { _ = try await vault.load("work") } catch {}
        #expect(try await vault.load("work") == nil, "the damaged record was moved aside")
        #expect(try await vault.load("home") == record("home"))
        let kept = listFolder(scratch.path + "/vault/quarantine")
        #expect(kept.count == 1, "kept aside, never deleted: \(kept)")
    }

    @Test func aTamperedRecordFailsAuthentication() async throws {
        let vault = make(scratch)
        try await vault.save(record("work", account: "ada"))
        // Change the authenticated metadata (the account) without the key.
        let path = vault.recordPath("work")
        let text = String(decoding: bytes(path), as: UTF8.self).replacingOccurrences(of: "\"ada\"", with: "\"eve\"")
        try writeAtomically(Array(text.utf8), to: path)
        let error = await #expect(throws: VaultError.self, "a tampered record must not load") { _ = try await vault.load("work") }
        #expect(error?.reason == .corruptRecord)
    }

    @Test func aWrongKeyIsRefusedWithoutTouchingTheVault() async throws {
        let first = make(scratch, key: .secret(randomKey()))
        try await first.save(record("work"))
        let other = make(scratch, key: .secret(randomKey()))
        let error = await #expect(throws: VaultError.self, "a wrong key must be refused") { _ = try await other.load("work") }
        #expect(error?.reason == .wrongKey)
        #expect(try await first.load("work") == record("work"), "nothing was quarantined")
    }

    /// The service secret goes through HKDF, which adds no work against guessing: only a
    /// random key of full strength is accepted (before: any 16 characters).
    @Test(arguments: [
        "correct horse battery staple 1", "a-long-random-service-secret-1234",
        String(repeating: "0", count: 64), String(repeating: "ab", count: 32),
        String(repeating: "A", count: 43), "c2hvcnQ=",
    ])
    func aSecretWeakerThanARandom32ByteKeyIsRefused(_ secret: String) async throws {
        let error = await #expect(throws: VaultError.self, "a weak secret opened the vault") {
            try await make(scratch, key: .secret(secret)).save(record("work"))
        }
        #expect(error?.reason == .noKey)
        #expect(error?.message.contains("AUTHBRIDGE_VAULT_KEY") == true && error?.message.contains("base64") == true)
        #expect(error?.message.contains(secret) == false)
        #expect(listFolder(scratch.path + "/vault").allSatisfy { !$0.hasSuffix(".vault") && $0 != "vault.check" })
    }

    @Test func aRandomKeyIsAcceptedAsHexBase64AndUnpaddedBase64URL() async throws {
        var generator = SystemRandomNumberGenerator()
        let bytes = (0..<32).map { _ in UInt8.random(in: .min ... .max, using: &generator) }
        let hex = bytes.map { String($0, radix: 16).count == 1 ? "0" + String($0, radix: 16) : String($0, radix: 16) }.joined()
        let base64 = Data(bytes).base64EncodedString()
        let url = String(base64.dropLast()).map { $0 == "+" ? "-" : $0 == "/" ? "_" : $0 }
        for (index, secret) in [hex, hex.uppercased(), base64, String(url)].enumerated() {
            let vault = EncryptedFileVault(folder: scratch.path + "/vault\(index)", keySource: .secret(secret))
            try await vault.save(record("work"))
            #expect(try await vault.load("work") == record("work"))
        }
        #expect(VaultKeySource.decodeKey(hex) == bytes && VaultKeySource.decodeKey(String(url)) == bytes)
    }

    /// Before: each first opener that found no key file wrote its own (a replacing rename) and
    /// sealed vault.check with it; the others then failed with wrongKey.
    @Test func manyFirstTimeOpenersInOneProcessShareOneKey() async throws {
        for _ in 0..<3 {
            let scratch = Scratch()
            defer { scratch.remove() }
            let vaults = (0..<24).map { _ in make(scratch) }
            let failures = await withTaskGroup(of: String?.self) { group in
                for (index, vault) in vaults.enumerated() {
                    group.addTask {
                        do {
                            try await vault.save(record("p\(index)"))
                            return nil
                        } catch {
                            return "\(index): \(error)"
                        }
                    }
                }
                return await group.reduce(into: [String]()) { if let failure = $1 { $0.append(failure) } }
            }
            #expect(failures.isEmpty, "\(failures)")
            let later = make(scratch)
            for index in 0..<24 { #expect(try await later.load("p\(index)") == record("p\(index)")) }
            #expect(listFolder(scratch.path + "/keys") == ["vault.key"])
        }
    }

    /// Creating the key file runs under the vault's lock, and never replaces a key file: an
    /// opener that waited while another created one uses that one.
    @Test func anOpenerTakesTheVaultLockAroundCreatingTheKeyFile() async throws {
        let folder = scratch.path + "/vault", keyFile = scratch.path + "/keys/vault.key"
        try makePrivateFolder(folder + "/locks")
        let lock = open(folder + "/locks/vault.lock", O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        #expect(flock(lock, LOCK_EX) == 0)
        let opener = Task { try await EncryptedFileVault(folder: folder, keySource: .keyFile(keyFile)).save(record("work")) }
        try await waitForLockWaiter(folder + "/locks/vault.lock")
        #expect(bytes(keyFile).isEmpty, "no key file written while the lock is held elsewhere")
        let theirs = [UInt8](repeating: 7, count: 16) + [UInt8](repeating: 9, count: 16)
        try makePrivateFolder(scratch.path + "/keys")
        try writeAtomically(theirs, to: keyFile)
        close(lock)
        try await opener.value
        #expect(bytes(keyFile) == theirs, "the key file found was kept")
    }

    /// The keyring's lookup-then-store runs under the vault's lock: before, openers that all
    /// found no key each stored one (the keyring keeps the last) and sealed vault.check with their
    /// own, so the others got wrongKey, or vault.check was sealed with a key the keyring no longer
    /// held. Here another opener (the test) holds the lock and stores its key meanwhile: the
    /// waiting opener must then use that key, not store its own.
    @Test(.enabled(if: getenv("AUTHBRIDGE_TEST_KEYRING") != nil && getenv("DBUS_SESSION_BUS_ADDRESS") != nil))
    func anOpenerTakesTheVaultLockAroundTheKeyringLookupAndStore() async throws {
        let folder = scratch.path + "/vault"
        let keyring = Keyring(libraryPaths: [Backend.libraryPath("libAuthBridgeKeyring.so")])
        try makePrivateFolder(folder + "/locks")
        let lock = open(folder + "/locks/vault.lock", O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        #expect(flock(lock, LOCK_EX) == 0)
        let opener = Task { try await EncryptedFileVault(folder: folder, keySource: .keyring(keyring, fallback: nil)).save(record("work")) }
        try await waitForLockWaiter(folder + "/locks/vault.lock")
        #expect(try await keyring.lookup(kind: "vault-key", key: folder) == nil, "nothing stored while the lock is held elsewhere")
        let theirs = randomKey()
        try await keyring.store(kind: "vault-key", key: folder, label: "another opener's key", secret: theirs)
        close(lock)
        try await opener.value
        #expect(try await keyring.lookup(kind: "vault-key", key: folder) == theirs, "the key found was kept")
        #expect(try await EncryptedFileVault(folder: folder, keySource: .keyring(keyring, fallback: nil)).load("work") == record("work"))
        try await keyring.clear(kind: "vault-key", key: folder)
    }

    /// A record file larger than any record (a save before the bound existed, or not ours) is
    /// set aside once; before, every call on the profile failed with corruptRecord for good.
    @Test func anOversizedRecordIsQuarantinedAndTheProfileWorksAfterwards() async throws {
        let vault = make(scratch)
        try await vault.save(record("big"))
        try await vault.save(record("big\u{1F}bob"))
        try writeAtomically([UInt8](repeating: 0x61, count: 17 << 20), to: vault.recordPath("big"))
        let error = await #expect(throws: VaultError.self, "an oversized record must be reported") { _ = try await vault.load("big") }
        #expect(error?.reason == .corruptRecord && error?.message.contains("quarantine") == true)
        #expect(try await vault.load("big") == nil)
        #expect(try await vault.keys(of: "big") == ["big\u{1F}bob"])
        // The same through listing: an account's record too large to read.
        try writeAtomically([UInt8](repeating: 0x62, count: 17 << 20), to: vault.recordPath("big\u{1F}bob"))
        await #expect(throws: VaultError.self) { try await vault.keys(of: "big") }
        #expect(try await vault.keys(of: "big") == [])
        try await vault.save(record("big"))
        #expect(try await vault.load("big") == record("big"))
        #expect(listFolder(scratch.path + "/vault/quarantine").count == 2)
    }

    /// Not a regular file (a FIFO would even block a plain open), or a symbolic link: set aside too.
    @Test func aRecordThatIsNotAFileIsQuarantined() async throws {
        let vault = make(scratch)
        try await vault.save(record("other"))
        #expect(mkfifo(vault.recordPath("fifo"), 0o600) == 0)
        #expect(symlink(vault.recordPath("other"), vault.recordPath("link")) == 0)
        for profile in ["fifo", "link"] {
            await #expect(throws: VaultError.self) { try await vault.load(profile) }
            #expect(try await vault.load(profile) == nil)
        }
        #expect(listFolder(scratch.path + "/vault/quarantine").count == 2)
        #expect(try await vault.load("other") == record("other"))
    }

    /// Before: copies were named `<file>.<seconds>`, so a second one within a second replaced the first.
    @Test func quarantinedCopiesNeverReplaceEachOther() async throws {
        let vault = make(scratch)
        try await vault.save(record("other"))
        for round in 0..<3 {
            try writeAtomically(Array("torn \(round)".utf8), to: vault.recordPath("work"))
            await #expect(throws: VaultError.self) { try await vault.load("work") }
        }
        let kept = listFolder(scratch.path + "/vault/quarantine")
        #expect(kept.count == 3, "\(kept)")
        let contents = Set(kept.map { String(decoding: bytes(scratch.path + "/vault/quarantine/" + $0), as: UTF8.self) })
        #expect(contents == ["torn 0", "torn 1", "torn 2"])
    }

    /// Before, `load` moved a damaged record aside without the profile's lock: a record a writer
    /// (holding the lock) put in its place meanwhile went to quarantine instead. Now the move
    /// happens under the lock, only if the file is still the damaged one.
    @Test func aRecordReplacedWhileALoadWaitsForTheLockIsNotQuarantined() async throws {
        let vault = make(scratch)
        try await vault.save(record("work"))
        try writeAtomically(Array("torn".utf8), to: vault.recordPath("work"))
        let loaded = try await vault.withExclusiveAccess(to: "work") { () async throws -> Task<VaultRecord?, any Error> in
            let reader = Task { try await make(scratch).load("work") } // another opener, as another process would be
            // The reader has found the damage once it waits for the lock (bounded: /proc/locks shows the waiter).
            try await waitForLockWaiter(scratch.path + "/vault/locks/" + EncryptedFileVault.fileStem("work") + ".lock")
            try await vault.save(record("work", token: "fresh"))
            return reader
        }
        #expect(try await loaded.value == record("work", token: "fresh"))
        #expect(!listFolder(scratch.path + "/vault").contains("quarantine") || listFolder(scratch.path + "/vault/quarantine").isEmpty)
    }

    /// Inside the profile's own critical section a damaged record is set aside without
    /// waiting for the lock the caller already holds.
    @Test func aDamagedRecordFoundUnderTheLockIsQuarantinedWithoutDeadlock() async throws {
        let vault = make(scratch)
        try await vault.save(record("work"))
        try writeAtomically(Array("torn".utf8), to: vault.recordPath("work"))
        let outcome = try await vault.withExclusiveAccess(to: "work") { () async throws -> String in
            do {
                _ = try await vault.load("work")
                return "loaded"
            } catch let error as VaultError { return error.reason.rawValue }
        }
        #expect(outcome == "corruptRecord")
        #expect(listFolder(scratch.path + "/vault/quarantine").count == 1)
    }

    @Test func looseFolderOrFilePermissionsAreRefused() async throws {
        let vault = make(scratch)
        try await vault.save(record("work"))
        chmod(vault.recordPath("work"), 0o644)
        let error = await #expect(throws: VaultError.self, "a group-readable record must be refused") { _ = try await vault.load("work") }
        #expect(error?.reason == .insecurePermissions)
        #expect(error?.message.contains("chmod 600") == true)
        chmod(vault.recordPath("work"), 0o600)
        chmod(scratch.path + "/vault", 0o755)
        let reopened = make(scratch)
        let folderError = await #expect(throws: VaultError.self, "a group-readable folder must be refused") { _ = try await reopened.load("work") }
        #expect(folderError?.reason == .insecurePermissions)
    }

    @Test func withoutAnAcceptableKeyTheVaultFailsClosed() async throws {
        let vault = make(scratch, key: .unavailable("secure storage required"))
        let error = await #expect(throws: VaultError.self, "must fail closed") { try await vault.save(record("work")) }
        #expect(error?.reason == .noKey)
        #expect(listFolder(scratch.path + "/vault").allSatisfy { !$0.hasSuffix(".vault") })
    }

    @Test func twoInstancesShareOneVault() async throws {
        try await make(scratch).save(record("work"))
        #expect(try await make(scratch).load("work") == record("work"))
    }
}

/// 32 random bytes as base64: a service secret of full strength.
func randomKey() -> String {
    var generator = SystemRandomNumberGenerator()
    return Data((0..<32).map { _ in UInt8.random(in: .min ... .max, using: &generator) }).base64EncodedString()
}

/// Waits until someone waits for the flock on `path` (/proc/locks lists waiters with "->"), bounded.
func waitForLockWaiter(_ path: String) async throws {
    var info = stat()
    #expect(stat(path, &info) == 0)
    let inode = ":\(info.st_ino) "
    let deadline = ContinuousClock.now + .seconds(30)
    while ContinuousClock.now < deadline {
        var text = ""
        if let file = fopen("/proc/locks", "r") {
            var line = [CChar](repeating: 0, count: 512)
            while fgets(&line, 512, file) != nil { text += line.withUnsafeBufferPointer { String(cString: $0.baseAddress!) } }
            fclose(file)
        }
        if text.split(separator: "\n").contains(where: { $0.contains("-> FLOCK") && $0.contains(inode) }) { return }
        try await Task.sleep(for: .milliseconds(5))
    }
    Issue.record("nobody waited for the lock")
}

private extension String {
    func replacingOccurrences(of target: String, with replacement: String) -> String {
        split(separator: target, omittingEmptySubsequences: false).joined(separator: replacement)
    }
}

@Suite("Encrypted file vault: crash leftovers")
struct EncryptedFileVaultLeftoverTests {
    @Test func temporaryFilesOfDeadWritersAreRemovedOnOpen() async throws {
        let scratch = Scratch()
        defer { scratch.remove() }
        let first = EncryptedFileVault(folder: scratch.path + "/vault", keySource: .keyFile(scratch.path + "/keys/vault.key"))
        try await first.save(record("work"))
        // A writer that died (no such pid) and one that is alive (this process).
        let dead = first.recordPath("work") + ".2147480000.123.tmp"
        let alive = first.recordPath("work") + ".\(getpid()).456.tmp"
        try writeAtomically([1, 2, 3], to: dead)
        try writeAtomically([1, 2, 3], to: alive)
        let reopened = EncryptedFileVault(folder: scratch.path + "/vault", keySource: .keyFile(scratch.path + "/keys/vault.key"))
        #expect(try await reopened.load("work") == record("work"))
        let names = listFolder(scratch.path + "/vault")
        #expect(!names.contains(dead.split(separator: "/").last.map(String.init)!))
        #expect(names.contains(alive.split(separator: "/").last.map(String.init)!))
    }
}
