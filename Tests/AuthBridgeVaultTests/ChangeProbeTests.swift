import AuthBridgeJSON
@testable import AuthBridgeVault
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Change probes: a stamp moves with every save and delete, from this vault
/// object or another on the same folder, and a file changed too recently to
/// tell a later change in the same clock tick is not vouched for.
@Suite("Change probes")
final class ChangeProbeTests: Sendable {
    let scratch = Scratch()
    let key = randomKey()
    deinit { scratch.remove() }

    private func vault() -> EncryptedFileVault {
        EncryptedFileVault(folder: scratch.path + "/vault", keySource: .secret(key))
    }

    /// The stamp of `path` as it will be once its times have settled.
    private func settledStamp(_ path: String) -> VaultStamp? {
        FileProbe.stamp(path, now: FileProbe.realTimeNanoseconds() + FileProbe.settle)
    }

    @Test func aFileStampMovesWithEverySaveAndDeleteOfAnyVaultObject() async throws {
        let writer = vault()
        let other = vault()
        try await writer.save(record("work"))
        let path = writer.recordPath("work")
        let first = try #require(settledStamp(path))
        #expect(settledStamp(path) == first, "nothing changed")
        try await other.save(record("work", token: "at-secret-2"))
        let second = try #require(settledStamp(path))
        #expect(second != first, "another writer replaced the record")
        try await other.save(record("work", token: "at-secret-2"))
        #expect(settledStamp(path) != second, "the same bytes written again are a new file")
        try await other.delete("work")
        #expect(settledStamp(path) == nil, "no record: nothing to vouch for")
    }

    @Test func theFolderStampMovesWhenAnyRecordIsSavedOrDeleted() async throws {
        let writer = vault()
        try await writer.save(record("work"))
        let folder = writer.folder
        let before = try #require(settledStamp(folder))
        try await vault().save(record("work", account: "another"))
        let after = try #require(settledStamp(folder))
        #expect(after != before)
        try await vault().delete("work")
        #expect(settledStamp(folder) != after)
    }

    @Test func aFileChangedWithinTheSettleTimeIsNotVouchedFor() async throws {
        let writer = vault()
        try await writer.save(record("work"))
        let path = writer.recordPath("work")
        var info = stat()
        #expect(lstat(path, &info) == 0)
        let changed = max(
            Int64(info.st_mtim.tv_sec) * 1_000_000_000 + Int64(info.st_mtim.tv_nsec),
            Int64(info.st_ctim.tv_sec) * 1_000_000_000 + Int64(info.st_ctim.tv_nsec))
        #expect(FileProbe.stamp(path, now: changed) == nil)
        #expect(FileProbe.stamp(path, now: changed + FileProbe.settle - 1) == nil)
        #expect(FileProbe.stamp(path, now: changed + FileProbe.settle) != nil)
    }

    @Test func theMemoryVaultsStampMovesWithEveryWrite() async throws {
        let memory = MemoryVault()
        let probe = try #require(memory.changeProbe(for: "work"))
        let start = probe.stamp()
        try await memory.save(record("work"))
        let saved = probe.stamp()
        #expect(saved != start)
        await memory.delete("work")
        #expect(probe.stamp() != saved)
    }

    @Test func theSecretServiceHasNoProbe() {
        let vault = SecretServiceVault(keyring: Keyring(libraryPaths: []), lockFolder: scratch.path)
        #expect(vault.changeProbe(for: "work") == nil && vault.changeProbe(forRecordsOf: "work") == nil)
    }
}
