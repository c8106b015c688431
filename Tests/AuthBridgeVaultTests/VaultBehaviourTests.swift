import AuthBridgeJSON
@testable import AuthBridgeVault
import TestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// A private temporary folder, removed at the end of a test (TestSupport's TemporaryFolder).
typealias Scratch = TemporaryFolder

extension TemporaryFolder {
    /// The vault tests' folders; a failed mkdtemp stops the test run.
    init() { try! self.init(prefix: "authbridge-vault") }
}

/// The backends the behaviour suite runs against. The Secret Service joins
/// when `make test` provides an unlocked keyring (scripts/with-keyring.sh),
/// PostgreSQL when it provides a database (scripts/with-postgres.sh).
enum Backend: String, CaseIterable, Sendable, CustomTestStringConvertible {
    case memory, encryptedFile, secretService, postgresql

    static var available: [Backend] {
        var backends: [Backend] = [.memory, .encryptedFile]
        if getenv("AUTHBRIDGE_TEST_KEYRING") != nil && getenv("DBUS_SESSION_BUS_ADDRESS") != nil { backends.append(.secretService) }
        if TestDatabase.url != nil { backends.append(.postgresql) }
        return backends
    }

    var testDescription: String { rawValue }

    func make(in scratch: Scratch) -> any Vault {
        switch self {
        case .memory: MemoryVault()
        case .encryptedFile: EncryptedFileVault(folder: scratch.path + "/vault", keySource: .keyFile(scratch.path + "/keys/vault.key"))
        case .secretService: SecretServiceVault(keyring: Keyring(libraryPaths: [keyringLibrary]), lockFolder: scratch.path + "/locks")
        case .postgresql: TestDatabase.vault(key: .keyFile(scratch.path + "/keys/vault.key"))
        }
    }

    private var keyringLibrary: String { Self.libraryPath("libAuthBridgeKeyring.so") }

    /// A helper library from this build (next to the test bundle).
    static func libraryPath(_ file: String) -> String {
        var root = Substring(String(#filePath))
        while let slash = root.lastIndex(of: "/"), !root.hasSuffix("/Tests") { root = root[..<slash] }
        return String(root.dropLast("/Tests".count)) + "/.build/debug/" + file
    }
}

func record(_ profile: String, token: String = "at-secret-1", account: String? = "ada") -> VaultRecord {
    VaultRecord(profile: profile, account: account, secret: ["tokens": ["accessToken": .string(token), "refreshToken": "rt-secret-1"]])
}

/// Serialized: the Secret Service cases share one keyring, whose listing fails on an item
/// another test deletes meanwhile. A class: Swift Testing makes one instance per test (case),
/// so each gets its own scratch folder, removed when the test ends.
@Suite("Vault behaviour (every backend)", .serialized)
final class VaultBehaviourTests: Sendable {
    let scratch = Scratch()
    deinit { scratch.remove() }

    @Test(arguments: Backend.available)
    func savesLoadsOverwritesAndDeletes(_ backend: Backend) async throws {
        let vault = backend.make(in: scratch)
        try await vault.delete("work")
        try await vault.delete("héllo / ☃")
        #expect(try await vault.load("work") == nil)
        try await vault.save(record("work"))
        #expect(try await vault.load("work") == record("work"))
        try await vault.save(record("work", token: "at-secret-2"))
        #expect(try await vault.load("work")?.secret["tokens"]?["accessToken"] == "at-secret-2")
        try await vault.save(record("héllo / ☃", account: nil))
        #expect(try await vault.profiles() == ["héllo / ☃", "work"])
        try await vault.delete("work")
        #expect(try await vault.load("work") == nil)
        try await vault.delete("work") // deleting nothing is fine
        #expect(try await vault.profiles() == ["héllo / ☃"])
        try await vault.delete("héllo / ☃")
    }

    @Test(arguments: Backend.available)
    func exclusiveAccessSerialisesOneProfile(_ backend: Backend) async throws {
        let vault = backend.make(in: scratch)
        // Two critical sections on one profile never overlap.
        let log = Log()
        try await withThrowingTaskGroup(of: Void.self) { group in
            for index in 0..<8 {
                group.addTask {
                    try await vault.withExclusiveAccess(to: "work") {
                        await log.append("in \(index)")
                        await Task.yield()
                        await log.append("out \(index)")
                    }
                }
            }
            try await group.waitForAll()
        }
        let entries = await log.entries
        for pair in stride(from: 0, to: entries.count, by: 2) {
            #expect(entries[pair].dropFirst(3) == entries[pair + 1].dropFirst(4), "sections overlapped: \(entries)")
        }
    }
}

extension VaultBehaviourTests {
    /// Reads and writes share one bound (VaultRecord.maximumSize, 1 MiB): before, a save had
    /// none while reads refused more than 16 MiB, so a large save broke its profile for good.
    @Test(arguments: Backend.available)
    func aSaveOverTheRecordLimitIsRefusedAndNothingIsWritten(_ backend: Backend) async throws {
        let vault = backend.make(in: scratch)
        let work = "limit-\(UInt32.random(in: .min ... .max))" // one keyring serves every test at once
        try await vault.save(record(work))
        let huge = VaultRecord(profile: work, account: "ada", secret: ["tokens": ["accessToken": .string(String(repeating: "a", count: 1 << 20))]])
        let error = await #expect(throws: VaultError.self, "a record over the limit was stored") { try await vault.save(huge) }
        #expect(error?.reason.rawValue == "recordTooLarge")
        #expect(error?.message.contains("too large") == true && error?.message.contains("aaaa") == false)
        #expect(try await vault.load(work) == record(work), "the stored record is untouched")
        // Just under the bound is stored and read back.
        let large = VaultRecord(profile: work, account: "ada", secret: ["tokens": ["accessToken": .string(String(repeating: "b", count: 600 << 10))]])
        try await vault.save(large)
        #expect(try await vault.load(work) == large)
        try await vault.delete(work)
    }

    /// A record the vault can open but its user cannot read (`validate` says why) is kept
    /// aside and reported once; afterwards the profile simply has no record.
    @Test(arguments: Backend.available)
    func aRecordItsReaderRejectsIsSetAsideOnce(_ backend: Backend) async throws {
        let vault = backend.make(in: scratch)
        let suffix = UInt32.random(in: .min ... .max) // one keyring serves every test at once
        let odd = "odd-\(suffix)", fine = "fine-\(suffix)"
        try await vault.save(record(odd))
        try await vault.save(record(fine))
        let error = await #expect(throws: VaultError.self, "a rejected record must be reported") {
            _ = try await vault.load(odd, validate: { _ in "it holds no tokens" })
        }
        #expect(error?.reason == .corruptRecord && error?.message.contains("it holds no tokens") == true)
        #expect(try await vault.load(odd) == nil)
        #expect(try await vault.load(fine) == record(fine))
        try await vault.delete(fine)
    }
}

actor Log {
    var entries: [String] = []
    func append(_ entry: String) { entries.append(entry) }
}
