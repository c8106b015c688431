import AuthBridgeJSON
@testable import AuthBridgeVault
import Testing

#if canImport(Glibc)
import Glibc
#endif

@Suite("Encrypted file vault")
struct EncryptedFileVaultTests {
    private func make(_ scratch: Scratch, key: VaultKeySource? = nil) -> EncryptedFileVault {
        EncryptedFileVault(folder: scratch.path + "/vault", keySource: key ?? .keyFile(scratch.path + "/keys/vault.key"))
    }

    private func mode(_ path: String) -> mode_t {
        var info = stat()
        return lstat(path, &info) == 0 ? info.st_mode & 0o777 : 0
    }

    private func bytes(_ path: String) -> [UInt8] { (try? readPrivateFile(path)) ?? [] }

    @Test func noTokenBytesOnDiskAndPrivatePermissions() async throws {
        let scratch = Scratch()
        defer { scratch.remove() }
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
        let scratch = Scratch()
        defer { scratch.remove() }
        let vault = make(scratch)
        try await vault.save(record("work"))
        try await vault.save(record("home"))
        let path = vault.recordPath("work")
        var torn = bytes(path)
        torn.removeLast(torn.count / 3)   // a torn write
        try writeAtomically(torn, to: path)
        await #expect(throws: VaultError.self) { try await vault.load("work") }
        do { _ = try await vault.load("work") } catch {}
        #expect(try await vault.load("work") == nil, "the damaged record was moved aside")
        #expect(try await vault.load("home") == record("home"))
        let kept = listFolder(scratch.path + "/vault/quarantine")
        #expect(kept.count == 1, "kept aside, never deleted: \(kept)")
    }

    @Test func aTamperedRecordFailsAuthentication() async throws {
        let scratch = Scratch()
        defer { scratch.remove() }
        let vault = make(scratch)
        try await vault.save(record("work", account: "ada"))
        // Change the authenticated metadata (the account) without the key.
        let path = vault.recordPath("work")
        let text = String(decoding: bytes(path), as: UTF8.self).replacingOccurrences(of: "\"ada\"", with: "\"eve\"")
        try writeAtomically(Array(text.utf8), to: path)
        do {
            _ = try await vault.load("work")
            Issue.record("a tampered record must not load")
        } catch let error as VaultError {
            #expect(error.reason == .corruptRecord)
        }
    }

    @Test func aWrongKeyIsRefusedWithoutTouchingTheVault() async throws {
        let scratch = Scratch()
        defer { scratch.remove() }
        let first = make(scratch, key: .secret("correct horse battery staple 1"))
        try await first.save(record("work"))
        let other = make(scratch, key: .secret("a different long secret value"))
        do {
            _ = try await other.load("work")
            Issue.record("a wrong key must be refused")
        } catch let error as VaultError {
            #expect(error.reason == .wrongKey)
        }
        #expect(try await first.load("work") == record("work"), "nothing was quarantined")
    }

    @Test func looseFolderOrFilePermissionsAreRefused() async throws {
        let scratch = Scratch()
        defer { scratch.remove() }
        let vault = make(scratch)
        try await vault.save(record("work"))
        chmod(vault.recordPath("work"), 0o644)
        do {
            _ = try await vault.load("work")
            Issue.record("a group-readable record must be refused")
        } catch let error as VaultError {
            #expect(error.reason == .insecurePermissions)
            #expect(error.message.contains("chmod 600"))
        }
        chmod(vault.recordPath("work"), 0o600)
        chmod(scratch.path + "/vault", 0o755)
        let reopened = make(scratch)
        do {
            _ = try await reopened.load("work")
            Issue.record("a group-readable folder must be refused")
        } catch let error as VaultError {
            #expect(error.reason == .insecurePermissions)
        }
    }

    @Test func withoutAnAcceptableKeyTheVaultFailsClosed() async throws {
        let scratch = Scratch()
        defer { scratch.remove() }
        let vault = make(scratch, key: .unavailable("secure storage required"))
        do {
            try await vault.save(record("work"))
            Issue.record("must fail closed")
        } catch let error as VaultError {
            #expect(error.reason == .noKey)
        }
        #expect(listFolder(scratch.path + "/vault").allSatisfy { !$0.hasSuffix(".vault") })
    }

    @Test func twoInstancesShareOneVault() async throws {
        let scratch = Scratch()
        defer { scratch.remove() }
        try await make(scratch).save(record("work"))
        #expect(try await make(scratch).load("work") == record("work"))
    }
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
