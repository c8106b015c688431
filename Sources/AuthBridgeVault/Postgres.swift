import AuthBridgeSystem
import Synchronization

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// PostgreSQL through libpq, in `libAuthBridgePostgres.so` (Sources/Helpers/Postgres), which
/// the host dlopens the first time a `--vault postgresql` host uses its vault: libpq never
/// loads into hosts that keep their tokens elsewhere.
///
/// Calls block (bounded, see the C header), so callers run them on a thread of their own.
final class PostgresClient: Sendable {
    private let library: HelperLibrary<Functions>

    init(libraryPaths: [String]) {
        library = HelperLibrary("The PostgreSQL helper libAuthBridgePostgres.so", candidates: libraryPaths, remembersFailure: true) { symbols in
            guard let connect = symbols.function("ab_pg_connect", as: Functions.Connect.self),
                let close = symbols.function("ab_pg_close", as: Functions.Close.self),
                let usable = symbols.function("ab_pg_usable", as: Functions.Usable.self),
                let exec = symbols.function("ab_pg_exec", as: Functions.Exec.self),
                let rows = symbols.function("ab_pg_rows", as: Functions.Count.self),
                let columns = symbols.function("ab_pg_columns", as: Functions.Count.self),
                let value = symbols.function("ab_pg_value", as: Functions.Value.self),
                let clear = symbols.function("ab_pg_clear", as: Functions.Clear.self),
                let notification = symbols.function("ab_pg_next_notification", as: Functions.Notification.self),
                let interrupt = symbols.function("ab_pg_interrupt", as: Functions.Close.self),
                let identity = symbols.function("ab_pg_identity", as: Functions.Identity.self),
                let free = symbols.function("ab_pg_free", as: Functions.Free.self)
            else { return nil }
            return Functions(
                connect: connect, close: close, usable: usable, exec: exec, rows: rows, columns: columns, value: value, clear: clear,
                notification: notification, interrupt: interrupt, identity: identity, free: free)
        }
    }

    struct Functions: @unchecked Sendable {
        typealias Connect =
            @convention(c) (
                UnsafePointer<CChar>, Int32, UnsafeMutablePointer<OpaquePointer?>, UnsafeMutablePointer<CChar>,
                UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>
            ) -> Int32
        typealias Close = @convention(c) (OpaquePointer) -> Void
        typealias Usable = @convention(c) (OpaquePointer) -> Int32
        typealias Exec =
            @convention(c) (
                OpaquePointer, UnsafePointer<CChar>, Int32, UnsafePointer<UnsafePointer<CChar>?>?, Int32,
                UnsafeMutablePointer<OpaquePointer?>, UnsafeMutablePointer<CChar>, UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>
            ) -> Int32
        typealias Count = @convention(c) (OpaquePointer) -> Int32
        typealias Value = @convention(c) (OpaquePointer, Int32, Int32) -> UnsafePointer<CChar>?
        typealias Clear = @convention(c) (OpaquePointer?) -> Void
        typealias Notification =
            @convention(c) (
                OpaquePointer, Int32, UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>, UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>
            ) -> Int32
        typealias Identity = @convention(c) (UnsafePointer<CChar>) -> UnsafeMutablePointer<CChar>?
        typealias Free = @convention(c) (UnsafeMutablePointer<CChar>?) -> Void
        let connect: Connect, close: Close, usable: Usable, exec: Exec, rows: Count, columns: Count, value: Value, clear: Clear
        let notification: Notification, interrupt: Close, identity: Identity, free: Free

        /// The text of a C string the helper allocated, which is released.
        func take(_ text: UnsafeMutablePointer<CChar>?) -> String? {
            defer { free(text) }
            return text.map { String(cString: $0) }
        }
    }

    /// The helper's functions, loading it on first use.
    func functions() throws(PostgresFailure) -> Functions {
        try library.load().mapError { failure in
            PostgresFailure(
                .notLoaded,
                failure.loadError.map { "cannot load the PostgreSQL helper: \($0) (libpq: apt install libpq5, dnf install libpq)" }
                    ?? failure.notInstalledMessage)
        }.get()
    }

    /// Opens a connection (blocking, at most `timeout`).
    func connect(_ conninfo: String, timeout: Duration) throws(PostgresFailure) -> PostgresConnection {
        let functions = try functions()
        var handle: OpaquePointer?
        var error: UnsafeMutablePointer<CChar>?
        var state = [CChar](repeating: 0, count: 6)
        let status = functions.connect(conninfo, Int32(timeout.wholeMilliseconds), &handle, &state, &error)
        guard status == 0, let handle else {
            throw PostgresFailure(status: status, sqlstate: Self.text(state), message: functions.take(error) ?? "cannot connect")
        }
        return PostgresConnection(handle: handle, functions: functions)
    }

    /// A NUL-terminated buffer's text.
    static func text(_ buffer: [CChar]) -> String {
        String(decoding: buffer.prefix(while: { $0 != 0 }).map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// (user, database) the connection string names, libpq's defaults filled in; nil when it cannot be read.
    func identity(_ conninfo: String) -> (user: String, database: String)? {
        guard let functions = try? functions(), let text = functions.take(functions.identity(conninfo)) else { return nil }
        let parts = text.split(separator: "\t", maxSplits: 1, omittingEmptySubsequences: false)
        return parts.count == 2 ? (String(parts[0]), String(parts[1])) : nil
    }
}

/// Why a PostgreSQL call failed.
struct PostgresFailure: Error, Sendable {
    enum Kind: Equatable, Sendable {
        /// The server answered with an error (SQLSTATE).
        case server(String)
        /// The connection could not be made or broke.
        case lost
        case timedOut
        case interrupted
        /// The connection string cannot be read.
        case invalid
        /// The helper library (or libpq) is not there.
        case notLoaded
    }

    let kind: Kind
    /// libpq's or the server's primary message (never a parameter's value or a password).
    let message: String

    init(_ kind: Kind, _ message: String) {
        self.kind = kind
        self.message = message
    }

    init(status: Int32, sqlstate: String, message: String) {
        switch status {
        case 1: kind = .server(sqlstate)
        case 3: kind = .timedOut
        case 4: kind = .interrupted
        case 5: kind = .invalid
        default: kind = sqlstate.isEmpty ? .lost : .server(sqlstate)
        }
        self.message = message
    }

    /// The server's SQLSTATE, "" for failures without one.
    var sqlstate: String { if case .server(let state) = kind { state } else { "" } }

    /// A failure that may pass by itself: the server is down, restarting, overloaded or slow.
    var isTransient: Bool {
        switch kind {
        case .lost, .timedOut: return true
        case .server(let state):
            // Connection exceptions, operator intervention (shutdown, "starting up"), insufficient
            // resources, a statement timeout, serialization failures and deadlocks, lock timeouts.
            return state.hasPrefix("08") || state.hasPrefix("57") || state.hasPrefix("53") || state.hasPrefix("40")
                || state == "55P03"
        case .interrupted, .invalid, .notLoaded: return false
        }
    }

    /// The connection's user lacks a right, or may not log in at all.
    var isRefusal: Bool { ["42501", "28000", "28P01", "3D000"].contains(sqlstate) }
}

/// One connection. Used by one thread at a time; `interrupt` from any.
final class PostgresConnection: @unchecked Sendable {
    private let handle: OpaquePointer
    private let functions: PostgresClient.Functions

    fileprivate init(handle: OpaquePointer, functions: PostgresClient.Functions) {
        self.handle = handle
        self.functions = functions
    }

    deinit { functions.close(handle) }

    /// False once the connection broke or a call on it gave up: it is then dropped.
    var usable: Bool { functions.usable(handle) != 0 }

    /// Runs one statement with text parameters (blocking, at most `timeout`); the rows, each
    /// column's text or nil for SQL null.
    func run(_ sql: String, _ parameters: [String?] = [], timeout: Duration) throws(PostgresFailure) -> [[String?]] {
        var copies: [UnsafeMutablePointer<CChar>?] = parameters.map { $0.map { strdup($0) } }
        defer { for copy in copies { free(copy) } }
        var result: OpaquePointer?
        var error: UnsafeMutablePointer<CChar>?
        var state = [CChar](repeating: 0, count: 6)
        let status = copies.withUnsafeMutableBufferPointer { buffer in
            buffer.withMemoryRebound(to: UnsafePointer<CChar>?.self) { values in
                functions.exec(handle, sql, Int32(values.count), values.baseAddress, Int32(timeout.wholeMilliseconds), &result, &state, &error)
            }
        }
        guard status == 0, let result else {
            throw PostgresFailure(status: status, sqlstate: PostgresClient.text(state), message: functions.take(error) ?? "the statement failed")
        }
        defer { functions.clear(result) }
        let columns = functions.columns(result)
        return (0..<functions.rows(result)).map { row in
            (0..<columns).map { column in functions.value(result, row, column).map { String(cString: $0) } }
        }
    }

    /// The next notification's payload on a connection that LISTENs (blocking, at most
    /// `timeout`); nil when none came in time or the wait was interrupted.
    func nextNotification(timeout: Duration) throws(PostgresFailure) -> String? {
        var payload: UnsafeMutablePointer<CChar>?
        var error: UnsafeMutablePointer<CChar>?
        let status = functions.notification(handle, Int32(timeout.wholeMilliseconds), &payload, &error)
        switch status {
        case 0: return functions.take(payload)
        case 3, 4: return nil
        default: throw PostgresFailure(status: status, sqlstate: "", message: functions.take(error) ?? "the connection was lost")
        }
    }

    /// Wakes the call waiting on this connection (it fails `interrupted`; the connection is then dropped).
    func interrupt() { functions.interrupt(handle) }
}

extension Duration {
    /// Whole milliseconds, at least 1, at most Int32.max.
    var wholeMilliseconds: Int {
        let (seconds, attoseconds) = components
        return Int(max(1, min(Int64(Int32.max), seconds * 1000 + attoseconds / 1_000_000_000_000_000)))
    }
}

/// Runs a blocking `body` on a thread of its own and awaits its value.
func blocking<T: Sendable>(_ body: @escaping @Sendable () -> T) async -> T {
    await withCheckedContinuation { continuation in
        detachThread { continuation.resume(returning: body()) }
    }
}

/// The connections a vault keeps open to its database (a few idle ones), and the back-off
/// after a failed attempt to open one: while the database is down, calls fail at once with
/// the last failure instead of each waiting for a connection timeout, and the database is
/// tried again after 100 ms, 200 ms, … up to 2 s.
final class PostgresPool: Sendable {
    let client: PostgresClient
    let conninfo: String
    /// The server's statement_timeout, set on each new connection.
    let statementTimeout: Duration
    let connectTimeout: Duration

    static let keptIdle = 4
    static let firstBackOff: Duration = .milliseconds(100)
    static let longestBackOff: Duration = .seconds(2)

    private struct State {
        var idle: [PostgresConnection] = []
        var retryAt: ContinuousClock.Instant?
        var backOff = PostgresPool.firstBackOff
        var lastFailure: PostgresFailure?
    }
    private let state = Mutex(State())

    init(client: PostgresClient, conninfo: String, statementTimeout: Duration, connectTimeout: Duration) {
        self.client = client
        self.conninfo = conninfo
        self.statementTimeout = statementTimeout
        self.connectTimeout = connectTimeout
    }

    /// An idle connection (`reused`), else a new one — unless the last attempt failed less than
    /// the back-off ago: then that failure again.
    func take() async throws(PostgresFailure) -> (connection: PostgresConnection, reused: Bool) {
        let now = ContinuousClock.now
        let ready = state.withLock { state -> Result<PostgresConnection?, PostgresFailure> in
            if let idle = state.idle.popLast() { return .success(idle) }
            if let retryAt = state.retryAt, now < retryAt, let failure = state.lastFailure { return .failure(failure) }
            return .success(nil)
        }
        if let connection = try ready.get() { return (connection, true) }
        let (client, conninfo, connectTimeout, statementTimeout) = (client, conninfo, connectTimeout, statementTimeout)
        let made = await blocking { () -> Result<PostgresConnection, PostgresFailure> in
            Result { () throws(PostgresFailure) -> PostgresConnection in
                let connection = try client.connect(conninfo, timeout: connectTimeout)
                // Every statement is bounded on the server too; a transaction left open never holds locks for long.
                _ = try connection.run(
                    "SELECT set_config('statement_timeout', $1, false), set_config('idle_in_transaction_session_timeout', $2, false)",
                    ["\(statementTimeout.wholeMilliseconds)", "\(2 * statementTimeout.wholeMilliseconds)"], timeout: connectTimeout)
                return connection
            }
        }
        state.withLock { state in
            switch made {
            case .success:
                state.retryAt = nil
                state.backOff = Self.firstBackOff
                state.lastFailure = nil
            case .failure(let failure):
                // A little jitter, so that a fleet does not come back in step.
                let jitter = Duration.milliseconds(Int.random(in: 0...max(1, state.backOff.wholeMilliseconds / 4)))
                state.retryAt = .now + state.backOff + jitter
                state.backOff = min(state.backOff * 2, Self.longestBackOff)
                state.lastFailure = failure
            }
        }
        return (try made.get(), false)
    }

    /// Takes a connection back: kept if it is usable and few are idle, else closed.
    func give(_ connection: PostgresConnection) {
        guard connection.usable else { return }
        state.withLock { state in
            if state.idle.count < Self.keptIdle { state.idle.append(connection) }
        }
    }

    /// Closes the idle connections (after one turned out dead: the server restarted).
    func dropIdle() {
        let dropped = state.withLock { state -> [PostgresConnection] in
            defer { state.idle.removeAll() }
            return state.idle
        }
        _ = dropped
    }

    /// When the next attempt to connect may be made (nil: now).
    var nextAttempt: ContinuousClock.Instant? { state.withLock { $0.retryAt } }
}
