import AuthBridgeCrypto
import AuthBridgeJSON
import AuthBridgeSystem
import Synchronization

/// Sessions in a PostgreSQL database shared by every host of a fleet (`--vault postgresql`):
/// the vault for a service that runs on several machines as one integration user.
///
/// - **Sealed as in the encrypted-file vault**: each record is the same AES-256-GCM envelope
///   (profile and account authenticated), so the database and its backups never see a token;
///   the key comes from `AUTHBRIDGE_VAULT_KEY` or a key file every host is given. A sealed
///   constant (`vault_check`) tells a wrong key (`wrongKey`, nothing changed) from a damaged
///   record, which is moved to the quarantine table, never deleted.
/// - **Single-flight across machines**: `withExclusiveAccess` holds a session-level advisory
///   lock derived from the record's key on a connection of its own (after an in-process lock,
///   so a host queues its own tasks itself); a host that dies releases it with its connection.
/// - **Everyone hears about changes**: every write NOTIFYs the vault's channel in its own
///   transaction; `ChangeFeed` LISTENs, moves the stamp every `ChangeProbe` answers with, and
///   tells observers (the engine drops what it kept and relays `session/changed`). Payloads are
///   sealed: any role that may connect can NOTIFY the channel, and is heard only as a hint.
/// - **Faults are transient**: the database down, restarting or slow is `vaultUnavailable`
///   (retryable, never a sign-out); statements are bounded (`statementTimeout`, on the server
///   and in the client); connections come back with a back-off (`PostgresPool`). A write
///   keeps trying for `writePersistence`: the tokens of a refresh exist nowhere else.
///
/// Statements take their values as parameters only: no token (they are sealed anyway), key or
/// envelope appears in a statement's text, in pg_stat_activity or in a statement log's text.
/// libpq is loaded (libAuthBridgePostgres.so) and the database opened on first use.
public final class PostgresVault: Vault {
    public let backend = "postgresql"
    public let protection = "encrypted"

    /// Where the tables live (`authbridge` unless a test says otherwise).
    let schema: PostgresSchema
    private let conninfo: String
    private let keySource: VaultKeySource
    private let client: PostgresClient
    private let pool: PostgresPool
    let feed: ChangeFeed
    private let opener = Opener(retrying: [.io, .vaultUnavailable, .accessDenied, .lockTimeout])
    /// This process's tasks queue here first: one advisory lock (and connection) per record at a time.
    private let locks = ProfileLocks()
    private let outbox = Mutex<(pending: [JSON], sending: Bool)>(([], false))

    /// The schema a fleet's hosts use by default.
    public static let defaultSchema = "authbridge"
    /// Bounds every statement: the server's statement_timeout; the client waits 2 s longer.
    static let statementTimeout: Duration = .seconds(5)
    static let connectTimeout: Duration = .seconds(5)
    /// How long a write keeps trying while the database cannot be reached.
    static let writePersistence: Duration = .seconds(20)

    /// `url`: a libpq connection string; `libraryPaths`: where libAuthBridgePostgres.so may be.
    public init(url: String, keySource: VaultKeySource, libraryPaths: [String], schema: String = PostgresVault.defaultSchema) {
        self.schema = PostgresSchema(schema)
        self.conninfo = url
        self.keySource = keySource
        client = PostgresClient(libraryPaths: libraryPaths)
        pool = PostgresPool(client: client, conninfo: url, statementTimeout: Self.statementTimeout, connectTimeout: Self.connectTimeout)
        var generator = SystemRandomNumberGenerator()
        let origin = (0..<4).map { _ in String(UInt32.random(in: .min ... .max, using: &generator), radix: 16) }.joined(separator: "-")
        feed = ChangeFeed(pool: pool, channel: self.schema.channel, origin: origin)
    }

    private var statementBound: Duration { Self.statementTimeout + .seconds(2) }

    // MARK: - Vault

    nonisolated(nonsending) public func load(_ profile: String, validate: @Sendable (VaultRecord) -> String?) async throws -> VaultRecord? {
        let key = try await openKey()
        var found = try await examine(profile, key: key, validate: validate)
        // Moved aside only if it is still the damaged revision: a writer may have replaced it since.
        for _ in 0..<3 {
            guard case .damaged(let problem, let revision) = found else { return found.record }
            let moved = try await onConnection("set a damaged session aside") {
                [schema, feed, statementBound] (connection: PostgresConnection) throws(PostgresFailure) in
                try connection.run(
                    schema.moveToQuarantine, [profile, revision, problem, schema.channel, feed.changePayload(profile)], timeout: statementBound)
            }
            if !moved.isEmpty {
                feed.changed()
                throw VaultError(
                    .corruptRecord,
                    "The stored session of profile \"\(VaultKey.split(profile).profile)\" could not be read (\(problem)); it was moved to the table \(schema.quarantine) and the profile is signed out. Other profiles are not affected."
                )
            }
            found = try await examine(profile, key: key, validate: validate)
        }
        return found.record
    }

    nonisolated(nonsending) public func save(_ record: VaultRecord) async throws {
        let key = try await openKey()
        let sealed = try EncryptedFileVault.seal(record, key: key)
        guard sealed.count <= VaultRecord.maximumSize else { throw VaultError.tooLarge(record.profile, size: sealed.count) }
        let parameters = [
            record.profile, VaultKey.split(record.profile).profile, String(decoding: sealed, as: UTF8.self), schema.channel,
            feed.changePayload(record.profile),
        ]
        try await persistently("store a session") { [schema, statementBound] (connection: PostgresConnection) throws(PostgresFailure) in
            _ = try connection.run(schema.save, parameters, timeout: statementBound)
        }
        feed.changed()
    }

    nonisolated(nonsending) public func delete(_ profile: String) async throws {
        _ = try await openKey()
        let parameters = [profile, schema.channel, feed.changePayload(profile)]
        try await persistently("delete a session") { [schema, statementBound] (connection: PostgresConnection) throws(PostgresFailure) in
            _ = try connection.run(schema.delete, parameters, timeout: statementBound)
        }
        feed.changed()
    }

    nonisolated(nonsending) public func profiles() async throws -> [String] {
        _ = try await openKey()
        return try await keys(schema.allKeys, [])
    }

    nonisolated(nonsending) public func keys(of profile: String) async throws -> [String] {
        _ = try await openKey()
        return try await keys(schema.keysOfProfile, [profile])
    }

    private func keys(_ statement: String, _ parameters: [String]) async throws(VaultError) -> [String] {
        let rows = try await onConnection("list sessions") { [statementBound] (connection: PostgresConnection) throws(PostgresFailure) in
            try connection.run(statement, parameters, timeout: statementBound)
        }
        return rows.compactMap { $0.first ?? nil }.sorted()
    }

    /// Lock holders below the holding task (see `ProfileFileLock.held`): lock name → task.
    @TaskLocal static var held: [String: Int] = [:]

    nonisolated(nonsending) public func withExclusiveAccess<T: Sendable>(to profile: String, _ body: () async throws -> T) async throws -> T {
        _ = try await openKey()
        let name = feed.origin + "\u{0}" + profile
        let task = withUnsafeCurrentTask { $0?.hashValue }
        if let task, Self.held[name] == task { return try await body() }
        try await locks.acquire(profile)
        let connection: PostgresConnection
        do {
            connection = try await advisoryLock(profile)
        } catch {
            await locks.release(profile)
            throw error
        }
        var holding = Self.held
        holding[name] = task
        let outcome: Result<T, any Error>
        do {
            outcome = .success(try await Self.$held.withValue(holding) { try await body() })
        } catch {
            outcome = .failure(error)
        }
        await advisoryUnlock(profile, connection)
        await locks.release(profile)
        return try outcome.get()
    }

    /// Each write moves the stamp, and so does each change another host announces; none is
    /// given while the vault does not listen (it listens once it is open).
    public func changeProbe(for key: String) -> ChangeProbe? {
        let feed = self.feed
        return ChangeProbe { feed.stamp }
    }

    public func changeProbe(forRecordsOf profile: String) -> ChangeProbe? { changeProbe(for: profile) }

    /// Listening needs the key (payloads are sealed): the vault is opened now, not at first use.
    public func observeChanges(_ handler: @escaping @Sendable (VaultChange) -> Void) {
        feed.observe(handler)
        Task.detached { [self] in _ = try? await openKey() } // a failure is reported to the first use
    }

    /// Sent in order, one at a time, after whatever this process wrote before (best effort;
    /// nothing without the key: an event is sealed with it).
    public func publish(_ event: JSON) {
        let starts = outbox.withLock { outbox -> Bool in
            outbox.pending.append(event)
            defer { outbox.sending = true }
            return !outbox.sending
        }
        guard starts else { return }
        Task.detached { [self] in
            while let next = outbox.withLock({ outbox -> JSON? in
                guard !outbox.pending.isEmpty else {
                    outbox.sending = false
                    return nil
                }
                return outbox.pending.removeFirst()
            }) {
                guard (try? await openKey()) != nil, let payload = feed.eventPayload(next) else { continue }
                _ = try? await onConnection("publish an event") { [schema, statementBound] (connection: PostgresConnection) throws(PostgresFailure) in
                    try connection.run("SELECT pg_notify($1, $2)", [schema.channel, payload], timeout: statementBound)
                }
            }
        }
    }

    // MARK: - Records

    private enum Examined {
        case missing, intact(VaultRecord), damaged(String, revision: String)
        var record: VaultRecord? { if case .intact(let record) = self { record } else { nil } }
    }

    private func examine(_ profile: String, key: SymmetricKey, validate: @Sendable (VaultRecord) -> String?) async throws(VaultError) -> Examined {
        let rows = try await onConnection("read a session") { [schema, statementBound] (connection: PostgresConnection) throws(PostgresFailure) in
            try connection.run(schema.load, [profile], timeout: statementBound)
        }
        guard let row = rows.first, row.count == 2, let envelope = row[0], let revision = row[1] else { return .missing }
        do throws(VaultError) {
            let record = try EncryptedFileVault.open(Array(envelope.utf8), key: key, expectedProfile: profile)
            if let problem = validate(record) { return .damaged(problem, revision: revision) }
            return .intact(record)
        } catch {
            return .damaged(error.message, revision: revision)
        }
    }

    // MARK: - Locks

    /// Takes the record's advisory lock on a connection kept for it; waits at most
    /// `ProfileFileLock.maximumWait` (in waits of one statement timeout each) and honours
    /// cancellation.
    private func advisoryLock(_ profile: String) async throws -> PostgresConnection {
        let id = schema.lockID(profile)
        let limit = ProfileFileLock.maximumWait
        let deadline = ContinuousClock.now + limit
        while true {
            try Task.checkCancellation()
            let connection: PostgresConnection
            do throws(PostgresFailure) {
                connection = try await pool.take().connection
            } catch {
                throw vaultError(error, doing: "lock an account")
            }
            // One wait lasts a statement timeout, or what is left of the limit when that is shorter.
            let left = deadline - .now
            let bound = min(statementBound, max(.milliseconds(1), left))
            let result = await withTaskCancellationHandler {
                await blocking {
                    Result { () throws(PostgresFailure) in try connection.run("SELECT pg_advisory_lock($1::bigint)", [id], timeout: bound) }
                }
            } onCancel: {
                connection.interrupt()
            }
            switch result {
            case .success: return connection
            case .failure(let failure) where failure.kind == .interrupted:
                throw CancellationError()
            case .failure(let failure) where failure.sqlstate == "57014" && ContinuousClock.now < deadline:
                pool.give(connection) // the statement timeout ended one wait: wait again
            case .failure(let failure) where failure.sqlstate == "57014" || (failure.kind == .timedOut && left <= statementBound):
                pool.give(connection) // kept only if the server ended the wait itself
                throw VaultError(.lockTimeout, "The account's lock was not free within \(limit.components.seconds) s.")
            case .failure(let failure):
                throw vaultError(failure, doing: "lock an account")
            }
        }
    }

    /// Releases the lock; a connection that cannot say it did is closed, which releases it too.
    private func advisoryUnlock(_ profile: String, _ connection: PostgresConnection) async {
        let (id, bound) = (schema.lockID(profile), statementBound)
        let released = await blocking { (try? connection.run("SELECT pg_advisory_unlock($1::bigint)", [id], timeout: bound)) != nil }
        if released { pool.give(connection) }
    }

    // MARK: - Connections

    /// Runs `work` (blocking) on a pooled connection, on a thread of its own. A connection the
    /// server closed while it was idle (a restart) fails once and the work runs again on a new one.
    private func onConnection<T: Sendable>(
        _ doing: String, _ work: @escaping @Sendable (PostgresConnection) throws(PostgresFailure) -> T
    ) async throws(VaultError) -> T {
        var attempt = 0
        while true {
            attempt += 1
            let taken: (connection: PostgresConnection, reused: Bool)
            do throws(PostgresFailure) {
                taken = try await pool.take()
            } catch {
                throw vaultError(error, doing: doing)
            }
            let connection = taken.connection
            let result = await blocking { Result { () throws(PostgresFailure) -> T in try work(connection) } }
            pool.give(connection)
            switch result {
            case .success(let value): return value
            case .failure(let failure) where failure.kind == .lost && taken.reused && attempt == 1:
                pool.dropIdle()
            case .failure(let failure):
                throw vaultError(failure, doing: doing)
            }
        }
    }

    /// `onConnection` for writes: while the database cannot be reached, tried again (after the
    /// pool's back-off) for up to `writePersistence`.
    private func persistently(
        _ doing: String, _ work: @escaping @Sendable (PostgresConnection) throws(PostgresFailure) -> Void
    ) async throws(VaultError) {
        let deadline = ContinuousClock.now + Self.writePersistence
        while true {
            do throws(VaultError) {
                return try await onConnection(doing, work)
            } catch {
                guard error.reason == .vaultUnavailable, ContinuousClock.now < deadline else { throw error }
                let failure = error
                // A back-off while the database is away (a restart, a fail-over), not synchronisation.
                let wait = max(.milliseconds(50), (pool.nextAttempt ?? .now) - .now)
                do { try await Task.sleep(for: min(wait, PostgresPool.longestBackOff)) } catch { throw failure }
            }
        }
    }

    /// A PostgreSQL failure as the vault reports it.
    private func vaultError(_ failure: PostgresFailure, doing: String) -> VaultError {
        if failure.isTransient {
            return VaultError(
                .vaultUnavailable,
                "The vault's database cannot be reached to \(doing) (\(failure.message)); nothing was lost, try again.")
        }
        switch failure.kind {
        case .notLoaded:
            return VaultError(.io, "The PostgreSQL vault cannot be used: \(failure.message).")
        case .invalid:
            return VaultError(.io, "The vault's connection string (--vault-url or AUTHBRIDGE_VAULT_URL) cannot be read: \(failure.message).")
        case .server where failure.isRefusal:
            let (user, database) = client.identity(conninfo) ?? ("?", "?")
            return VaultError(.accessDenied, schema.grantHint(failure, user: user, database: database))
        default:
            let state = failure.sqlstate.isEmpty ? "" : " (SQLSTATE \(failure.sqlstate))"
            return VaultError(.io, "The vault's database failed to \(doing): \(failure.message)\(state).")
        }
    }

    // MARK: - Opening

    /// The key, once the tables are there and the key is proven (once per process; failures
    /// other than a wrong or missing key are tried again on the next use).
    private func openKey() async throws(VaultError) -> SymmetricKey {
        try await opener.open { () async throws(VaultError) -> SymmetricKey in try await self.openVault() }
    }

    private func openVault() async throws(VaultError) -> SymmetricKey {
        let (key, _) = try await keySource.key(vaultFolder: "")
        var version = try await onConnection("read the vault's version") {
            [schema, statementBound] (connection: PostgresConnection) throws(PostgresFailure) in
            try schema.version(connection, timeout: statementBound)
        }
        if version < PostgresSchema.version {
            version = try await onConnection("create the vault's tables") {
                [schema, statementBound] (connection: PostgresConnection) throws(PostgresFailure) in
                try schema.upgrade(connection, timeout: statementBound)
            }
        }
        guard version <= PostgresSchema.version else {
            throw VaultError(
                .io,
                "The vault's tables (schema \(schema.name)) are at version \(version); this authbridge knows versions up to \(PostgresSchema.version). Upgrade authbridge on this host; nothing was changed."
            )
        }
        try await checkKey(key)
        try feed.start(vaultKey: key)
        return key
    }

    /// `vault_check`, a sealed constant: stored with the first key, then proves each key.
    private func checkKey(_ key: SymmetricKey) async throws(VaultError) {
        let constant = VaultRecord(profile: "authbridge.vault.check", account: nil, secret: "authbridge")
        let sealed = String(decoding: try EncryptedFileVault.seal(constant, key: key), as: UTF8.self)
        let rows = try await onConnection("check the vault key") {
            [schema, statementBound] (connection: PostgresConnection) throws(PostgresFailure) in
            _ = try connection.run(schema.storeCheck, [sealed], timeout: statementBound)
            return try connection.run(schema.readCheck, timeout: statementBound)
        }
        guard let stored = rows.first?.first ?? nil else { throw VaultError(.io, "The vault's key check could not be stored.") }
        do {
            _ = try EncryptedFileVault.open(Array(stored.utf8), key: key, expectedProfile: constant.profile)
        } catch {
            throw VaultError(
                .wrongKey,
                "The vault key (\(keySource.description)) does not open the vault in PostgreSQL (schema \(schema.name)); nothing was changed. Every host sharing the vault needs the key it was created with."
            )
        }
    }
}
