import AuthBridgeJSON
@testable import AuthBridgeVault
import Synchronization
import TestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// The database scripts/with-postgres.sh started for this run (AUTHBRIDGE_TEST_POSTGRES_URL), and
/// vaults on it, each in a schema of its own so that tests running at once never meet. Two
/// vaults on one schema are two hosts of a fleet.
enum TestDatabase {
    static var url: String? { getenv("AUTHBRIDGE_TEST_POSTGRES_URL").map { String(cString: $0) } }
    static let library = Backend.libraryPath("libAuthBridgePostgres.so")

    static func schemaName() -> String { "t_" + String(UInt64.random(in: .min ... .max), radix: 36) }

    static func vault(key: VaultKeySource, schema: String = schemaName(), url: String? = nil) -> PostgresVault {
        PostgresVault(url: url ?? self.url ?? "", keySource: key, libraryPaths: [library], schema: schema)
    }

    /// A connection of the test's own, as the test role.
    static func connection() throws -> PostgresConnection {
        try PostgresClient(libraryPaths: [library]).connect(url ?? "", timeout: .seconds(10))
    }

    /// Runs one statement as the test role.
    @discardableResult
    static func sql(_ statement: String, _ parameters: [String?] = []) throws -> [[String?]] {
        try connection().run(statement, parameters, timeout: .seconds(10))
    }

    /// Waits (bounded) until `condition` holds: for what another connection does meanwhile.
    static func eventually(_ what: Comment, within limit: Duration = .seconds(20), _ condition: () throws -> Bool) async throws {
        let deadline = ContinuousClock.now + limit
        while try !condition() {
            guard ContinuousClock.now < deadline else {
                Issue.record("not within \(limit): \(what)")
                return
            }
            try await Task.sleep(for: .milliseconds(10)) // polling a condition another process makes true, bounded
        }
    }
}

/// What one vault hears of the others: its observer's news, in order, awaited one by one.
final class Heard: Sendable {
    private let stream: AsyncStream<VaultChange>
    private let continuation: AsyncStream<VaultChange>.Continuation

    init(_ vault: PostgresVault) {
        (stream, continuation) = AsyncStream<VaultChange>.makeStream()
        let continuation = continuation
        vault.observeChanges { continuation.yield($0) }
    }

    /// The next change that `matches`, skipping others (bounded by the test's time limit).
    func next(where matches: (VaultChange) -> Bool) async -> VaultChange? {
        for await change in stream where matches(change) { return change }
        return nil
    }

    /// The next event's params.
    func nextEvent() async -> JSON? {
        guard case .event(let event) = await next(where: { if case .event = $0 { true } else { false } }) else { return nil }
        return event
    }

    /// Waits until the vault listens (it says so with `.records(nil)`).
    func listening() async { _ = await next { if case .records(nil) = $0 { true } else { false } } }
}

@Suite("PostgreSQL vault", .enabled(if: TestDatabase.url != nil, "needs scripts/with-postgres.sh"), .timeLimit(.minutes(1)))
final class PostgresVaultTests: Sendable {
    let scratch = Scratch()
    deinit { scratch.remove() }

    private var key: VaultKeySource { .keyFile(scratch.path + "/keys/vault.key") }

    @Test func recordsAreSealedVersionedAndListedFromMetadata() async throws {
        let schema = TestDatabase.schemaName()
        let vault = TestDatabase.vault(key: key, schema: schema)
        try await vault.save(record("work"))
        try await vault.save(record("work" + String(VaultKey.accountSeparator) + "grace", account: "grace"))
        #expect(try await vault.load("work") == record("work"))
        #expect(try await vault.keys(of: "work") == ["work", "work\u{1F}grace"])
        let rows = try TestDatabase.sql("SELECT key, profile, envelope FROM \(schema).records ORDER BY key")
        #expect(rows.map { $0[1] } == ["work", "work"])
        for row in rows {
            let envelope = row[2] ?? ""
            #expect(envelope.contains("authbridge-vault") && envelope.contains("\"sealed\""))
            #expect(!envelope.contains("at-secret-1") && !envelope.contains("rt-secret-1"), "a token in the database")
        }
        #expect(try TestDatabase.sql("SELECT version FROM \(schema).schema_version") == [["1"]])
        #expect(try TestDatabase.sql("SELECT count(*) FROM \(schema).vault_check") == [["1"]])
    }

    @Test func aWrongKeyChangesNothing() async throws {
        let schema = TestDatabase.schemaName()
        let first = TestDatabase.vault(key: key, schema: schema)
        try await first.save(record("work"))
        let other = Scratch()
        defer { other.remove() }
        let second = TestDatabase.vault(key: .keyFile(other.path + "/vault.key"), schema: schema)
        let attempts: [@Sendable () async throws -> Void] = [
            { _ = try await second.load("work") }, { try await second.save(record("work", token: "at-other")) },
        ]
        for attempt in attempts {
            let error = await #expect(throws: VaultError.self) { try await attempt() }
            #expect(error?.reason == .wrongKey && error?.message.contains("nothing was changed") == true)
        }
        #expect(try await first.load("work") == record("work"))
        #expect(try TestDatabase.sql("SELECT count(*) FROM \(schema).records") == [["1"]])
    }

    @Test func aTamperedRowIsQuarantinedAndOnlyItsAccountIsAffected() async throws {
        let schema = TestDatabase.schemaName()
        let vault = TestDatabase.vault(key: key, schema: schema)
        try await vault.save(record("work"))
        try await vault.save(record("home"))
        // One character of the ciphertext changed: authentication fails.
        try TestDatabase.sql(
            "UPDATE \(schema).records SET envelope = overlay(envelope placing (CASE WHEN substr(envelope, 120, 1) = 'A' THEN 'B' ELSE 'A' END) from 120 for 1) WHERE key = $1",
            ["work"])
        let error = await #expect(throws: VaultError.self) { _ = try await vault.load("work") }
        #expect(error?.reason == .corruptRecord && error?.message.contains("\(schema).quarantine") == true)
        #expect(try await vault.load("work") == nil, "moved aside, reported once")
        #expect(try await vault.load("home") == record("home"))
        #expect(try TestDatabase.sql("SELECT key, problem FROM \(schema).quarantine") == [["work", "authentication failed"]])
    }

    @Test func hostsOpeningANewVaultTogetherCreateItOnce() async throws {
        let schema = TestDatabase.schemaName()
        let key = self.key
        try await withThrowingTaskGroup(of: Void.self) { group in
            for index in 0..<8 {
                group.addTask { try await TestDatabase.vault(key: key, schema: schema).save(record("p\(index)")) }
            }
            try await group.waitForAll()
        }
        #expect(try TestDatabase.sql("SELECT version FROM \(schema).schema_version") == [["1"]])
        #expect(try await TestDatabase.vault(key: key, schema: schema).profiles() == (0..<8).map { "p\($0)" })
    }

    @Test func aNewerVersionOfTheTablesIsLeftAlone() async throws {
        let schema = TestDatabase.schemaName()
        try await TestDatabase.vault(key: key, schema: schema).save(record("work"))
        try TestDatabase.sql("INSERT INTO \(schema).schema_version (version) VALUES (2)")
        let error = await #expect(throws: VaultError.self) { _ = try await TestDatabase.vault(key: key, schema: schema).load("work") }
        #expect(error?.message.contains("version 2") == true && error?.message.contains("nothing was changed") == true)
        #expect(try TestDatabase.sql("SELECT count(*) FROM \(schema).records") == [["1"]])
    }

    @Test func theProbeMovesWhenAnotherHostWrites() async throws {
        let schema = TestDatabase.schemaName()
        let (here, there) = (TestDatabase.vault(key: key, schema: schema), TestDatabase.vault(key: key, schema: schema))
        let heard = Heard(here)
        await heard.listening()
        let probe = try #require(here.changeProbe(for: "work"))
        let before = try #require(probe.stamp(), "a listening vault vouches for its records")
        try await there.save(record("work"))
        _ = await heard.next { if case .records("work") = $0 { true } else { false } }
        let saved = try #require(probe.stamp())
        #expect(saved != before)
        try await there.delete("work")
        _ = await heard.next { if case .records("work") = $0 { true } else { false } }
        #expect(probe.stamp() != saved)
        // Its own writes move it too, without news of them.
        let own = probe.stamp()
        try await here.save(record("home"))
        #expect(probe.stamp() != own)
    }

    @Test func eventsReachTheOtherHostsInOrder() async throws {
        let schema = TestDatabase.schemaName()
        let (here, there) = (TestDatabase.vault(key: key, schema: schema), TestDatabase.vault(key: key, schema: schema))
        let heard = Heard(here)
        await heard.listening()
        for state in ["refreshed", "signedOut"] { there.publish(["provider": "work", "state": .string(state)]) }
        var states: [String] = []
        while states.count < 2, let change = await heard.next(where: { if case .event = $0 { true } else { false } }) {
            if case .event(let event) = change { states.append(event["state"]?.stringValue ?? "") }
        }
        #expect(states == ["refreshed", "signedOut"])
    }

    /// Any role that may connect can NOTIFY the channel: what it writes is never an event, only
    /// a hint to re-read (issue 26: every host relayed a forged sign-out to its frontends).
    @Test func aForgedEventIsNotHeard() async throws {
        let schema = TestDatabase.schemaName()
        let (here, there) = (TestDatabase.vault(key: key, schema: schema), TestDatabase.vault(key: key, schema: schema))
        let heard = Heard(here)
        await heard.listening()
        let forged: JSON = ["provider": "work", "state": "signedOut", "reason": "userSignedOut", "message": "sign in at https://evil.example"]
        for payload: JSON in [["h": "intruder", "e": forged], ["h": "intruder", "s": "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", "e": forged]] {
            try TestDatabase.sql("SELECT pg_notify($1, $2)", ["\(schema)_changes", payload.serializedString()])
        }
        there.publish(["provider": "work", "state": "signedOut", "reason": "userSignedOut"])
        #expect(await heard.nextEvent() == ["provider": "work", "state": "signedOut", "reason": "userSignedOut"])
    }

    /// Any role that may connect can also LISTEN: an event it heard and sends again, or one
    /// sealed long ago, is not heard twice or late.
    @Test func aReplayedOrStaleEventIsNotHeard() async throws {
        let schema = TestDatabase.schemaName()
        let (here, there) = (TestDatabase.vault(key: key, schema: schema), TestDatabase.vault(key: key, schema: schema))
        let heard = Heard(here)
        await heard.listening()
        let listener = try TestDatabase.connection()
        _ = try listener.run("LISTEN \(schema)_changes", timeout: .seconds(10))
        there.publish(["provider": "work", "state": "refreshed", "reason": "refreshed"])
        #expect(await heard.nextEvent()?["state"] == "refreshed")
        let captured = try #require(try listener.nextNotification(timeout: .seconds(10)))
        #expect(!captured.contains("refreshed"), "the event is sealed")
        let stale = try #require(there.feed.eventPayload(["provider": "work", "state": "signedOut"], at: ChangeFeed.now() - 600_000))
        for payload in [captured, stale] { try TestDatabase.sql("SELECT pg_notify($1, $2)", ["\(schema)_changes", payload]) }
        there.publish(["provider": "work", "state": "signedIn", "reason": "signedIn"])
        #expect(await heard.nextEvent()?["state"] == "signedIn")
    }

    @Test func theAdvisoryLockSerialisesHostsAndFreesWithAConnection() async throws {
        let schema = TestDatabase.schemaName()
        let (here, there) = (TestDatabase.vault(key: key, schema: schema), TestDatabase.vault(key: key, schema: schema))
        try await here.save(record("work"))
        let log = Log()
        let (released, release) = AsyncStream<Void>.makeStream()
        let holder = Task {
            try await here.withExclusiveAccess(to: "work") {
                await log.append("here in")
                for await _ in released { break }
                await log.append("here out")
            }
        }
        try await TestDatabase.eventually("the first host holds the lock") { try self.advisoryLocks(here, "work", granted: true) == 1 }
        let waiter = Task { try await there.withExclusiveAccess(to: "work") { await log.append("there in") } }
        try await TestDatabase.eventually("the second host waits for it") { try self.advisoryLocks(here, "work", granted: false) == 1 }
        release.yield()
        try await holder.value
        try await waiter.value
        #expect(await log.entries == ["here in", "here out", "there in"])
        // A host that dies holding the lock (its connection closes) frees it.
        var dying: PostgresConnection? = try TestDatabase.connection()
        _ = try dying?.run("SELECT pg_advisory_lock($1::bigint)", [here.schema.lockID("work")], timeout: .seconds(5))
        dying = nil
        try await there.withExclusiveAccess(to: "work") { await log.append("after a death") }
        #expect(await log.entries.last == "after a death")
    }

    @Test func aWaitForTheLockIsBoundedAndCancellable() async throws {
        let schema = TestDatabase.schemaName()
        let (here, there) = (TestDatabase.vault(key: key, schema: schema), TestDatabase.vault(key: key, schema: schema))
        let (released, release) = AsyncStream<Void>.makeStream()
        let holder = Task { try await here.withExclusiveAccess(to: "work") { for await _ in released { break } } }
        try await TestDatabase.eventually("the first host holds the lock") { try self.advisoryLocks(here, "work", granted: true) == 1 }
        let error = await #expect(throws: VaultError.self) {
            try await ProfileFileLock.$maximumWait.withValue(.milliseconds(300)) { try await there.withExclusiveAccess(to: "work") {} }
        }
        #expect(error?.reason == .lockTimeout)
        let cancelled = Task { try await there.withExclusiveAccess(to: "work") {} }
        try await TestDatabase.eventually("the second host waits") { try self.advisoryLocks(here, "work", granted: false) == 1 }
        cancelled.cancel()
        await #expect(throws: CancellationError.self) { try await cancelled.value }
        release.yield()
        try await holder.value
        try await there.withExclusiveAccess(to: "work") {} // free again
    }

    @Test func anUnreachableDatabaseIsRetryableAndNeverWaitsLong() async throws {
        let vault = TestDatabase.vault(key: key, url: "host=\(scratch.path) port=5 dbname=nowhere user=nobody connect_timeout=2")
        for _ in 0..<3 {
            let started = ContinuousClock.now
            let error = await #expect(throws: VaultError.self) { _ = try await vault.load("work") }
            #expect(error?.reason == .vaultUnavailable && error?.message.contains("try again") == true)
            #expect(ContinuousClock.now - started < .seconds(6))
        }
    }

    @Test func theKeyOfAFleetMustBeGivenAndTheHelperBeThere() async throws {
        let missing = TestDatabase.vault(key: .sharedKeyFile(scratch.path + "/none.key"))
        let error = await #expect(throws: VaultError.self) { _ = try await missing.load("work") }
        #expect(error?.reason == .noKey && error?.message.contains("does not exist") == true)
        #expect(access(scratch.path + "/none.key", F_OK) != 0, "a fleet's key is never made by one host")
        let helperless = PostgresVault(url: TestDatabase.url ?? "", keySource: key, libraryPaths: [scratch.path + "/libAuthBridgePostgres.so"])
        let loading = await #expect(throws: VaultError.self) { _ = try await helperless.load("work") }
        #expect(loading?.message.contains("libAuthBridgePostgres.so") == true)
    }

    /// How many hold (`granted`) or wait for the advisory lock of `key` in `vault`'s schema.
    private func advisoryLocks(_ vault: PostgresVault, _ key: String, granted: Bool) throws -> Int {
        // pg_locks shows a bigint advisory key as two oids: its high and low 32 bits.
        let id = UInt64(bitPattern: Int64(vault.schema.lockID(key)) ?? 0)
        let rows = try TestDatabase.sql(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND classid = $1::oid AND objid = $2::oid AND objsubid = 1 AND granted = $3",
            ["\(id >> 32)", "\(id & 0xFFFF_FFFF)", granted ? "t" : "f"])
        return Int(rows.first?.first.flatMap { $0 } ?? "0") ?? 0
    }
}
