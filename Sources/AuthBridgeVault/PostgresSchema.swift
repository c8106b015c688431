import AuthBridgeCrypto
import AuthBridgeURL

/// The PostgreSQL vault's tables, created and upgraded by the host itself.
///
/// All of them live in one schema (`authbridge` by default):
///
///     schema_version  one row per version applied (version, applied_at)
///     records         key (profile, or profile U+001F account) → envelope: the record sealed
///                     exactly as the encrypted-file vault seals a file (AES-256-GCM, profile and
///                     account authenticated); revision counts its writes
///     quarantine      records that failed authentication, moved aside (never deleted)
///     vault_check     one sealed constant: tells a wrong key from a damaged record
///
/// Upgrading: each step of `steps` takes the tables from version n to n + 1 and only adds or
/// transforms (a record is never dropped); steps run in one transaction under an advisory
/// lock, so hosts starting together upgrade once. A host finding a newer version than it knows
/// refuses to touch the tables. The user the host connects as needs no superuser right: see
/// `grantHint` and the README ("Running a fleet").
struct PostgresSchema: Sendable {
    /// The version this host writes.
    static let version = 1

    /// The schema's name, already checked to be a plain identifier (written into statements).
    let name: String

    init(_ name: String) {
        precondition(
            !name.isEmpty && name.count <= 48 && name.utf8.first.map({ $0 < 0x30 || $0 > 0x39 }) == true
                && name.utf8.allSatisfy { ($0 >= 0x61 && $0 <= 0x7A) || ($0 >= 0x30 && $0 <= 0x39) || $0 == 0x5F },
            "a PostgreSQL vault schema is a lower-case identifier")
        self.name = name
    }

    var records: String { "\(name).records" }
    var quarantine: String { "\(name).quarantine" }
    /// The LISTEN/NOTIFY channel of the vault's changes.
    var channel: String { "\(name)_changes" }

    /// Statements taking the tables from version `index` to `index + 1`.
    var steps: [[String]] {
        [
            [
                """
                CREATE TABLE \(records) (key text PRIMARY KEY, profile text NOT NULL, envelope text NOT NULL, \
                revision bigint NOT NULL DEFAULT 1, updated_at timestamptz NOT NULL DEFAULT now())
                """,
                "CREATE INDEX records_by_profile ON \(records) (profile)",
                """
                CREATE TABLE \(quarantine) (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, key text NOT NULL, \
                envelope text NOT NULL, problem text NOT NULL, quarantined_at timestamptz NOT NULL DEFAULT now())
                """,
                "CREATE TABLE \(name).vault_check (id integer PRIMARY KEY CHECK (id = 1), envelope text NOT NULL)",
            ]
        ]
    }

    // MARK: - Statements (values are always parameters)

    var currentVersion: String { "SELECT max(version) FROM \(name).schema_version" }
    var load: String { "SELECT envelope, revision FROM \(records) WHERE key = $1" }
    /// Insert or replace, and tell the listeners in the same transaction ($4 channel, $5 payload).
    var save: String {
        """
        WITH saved AS (INSERT INTO \(records) AS r (key, profile, envelope) VALUES ($1, $2, $3) \
        ON CONFLICT (key) DO UPDATE SET envelope = EXCLUDED.envelope, profile = EXCLUDED.profile, \
        revision = r.revision + 1, updated_at = now() RETURNING revision) \
        SELECT revision, pg_notify($4, $5) FROM saved
        """
    }
    var delete: String {
        "WITH gone AS (DELETE FROM \(records) WHERE key = $1 RETURNING key) SELECT pg_notify($2, $3) FROM gone"
    }
    /// Moves the record to quarantine if it is still the revision found damaged ($2).
    var moveToQuarantine: String {
        """
        WITH moved AS (DELETE FROM \(records) WHERE key = $1 AND revision = $2::bigint RETURNING key, envelope), \
        kept AS (INSERT INTO \(quarantine) (key, envelope, problem) SELECT key, envelope, $3 FROM moved RETURNING id) \
        SELECT id, pg_notify($4, $5) FROM kept
        """
    }
    var allKeys: String { "SELECT key FROM \(records)" }
    var keysOfProfile: String { "SELECT key FROM \(records) WHERE profile = $1" }
    var storeCheck: String { "INSERT INTO \(name).vault_check (id, envelope) VALUES (1, $1) ON CONFLICT (id) DO NOTHING" }
    var readCheck: String { "SELECT envelope FROM \(name).vault_check WHERE id = 1" }

    /// The advisory lock of one record (64 bits of SHA-256 of the schema and key): two accounts
    /// share one only by a collision, which would only make them wait for each other.
    func lockID(_ key: String) -> String { Self.lockID("\(name)\u{0}\(key)") }
    /// The advisory lock of the schema's upgrades.
    var upgradeLockID: String { Self.lockID("\(name)\u{0}\u{0}schema") }

    private static func lockID(_ text: String) -> String {
        let digest = Array(SHA256.hash(Array(("authbridge-lock\u{0}" + text).utf8)))
        let bits = digest.prefix(8).reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
        return String(Int64(bitPattern: bits))
    }

    // MARK: - Creating and upgrading

    /// The version of the tables, 0 when there are none yet (blocking).
    func version(_ connection: PostgresConnection, timeout: Duration) throws(PostgresFailure) -> Int {
        do {
            let rows = try connection.run(currentVersion, timeout: timeout)
            return rows.first?.first.flatMap { $0 }.flatMap { Int($0) } ?? 0
        } catch  where error.sqlstate == "3F000" || error.sqlstate == "42P01" {
            return 0 // no schema, or no version table yet
        }
    }

    /// Brings the tables to `PostgresSchema.version` (blocking), in one transaction under the
    /// upgrade lock; returns the version they are at (a newer one is left alone).
    func upgrade(_ connection: PostgresConnection, timeout: Duration) throws(PostgresFailure) -> Int {
        _ = try connection.run("BEGIN", timeout: timeout)
        _ = try connection.run("SELECT pg_advisory_xact_lock($1::bigint)", [upgradeLockID], timeout: timeout)
        // Checked first: CREATE SCHEMA IF NOT EXISTS needs the database's CREATE right even when the schema exists.
        if try connection.run("SELECT 1 FROM pg_namespace WHERE nspname = $1", [name], timeout: timeout).isEmpty {
            _ = try connection.run("CREATE SCHEMA \(name)", timeout: timeout)
        }
        _ = try connection.run(
            "CREATE TABLE IF NOT EXISTS \(name).schema_version (version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())",
            timeout: timeout)
        // Read again under the lock: another host may have upgraded meanwhile.
        var current =
            try connection.run("SELECT coalesce(max(version), 0) FROM \(name).schema_version", timeout: timeout).first?.first
            .flatMap { $0 }.flatMap { Int($0) } ?? 0
        while current < Self.version {
            for statement in steps[current] { _ = try connection.run(statement, timeout: timeout) }
            current += 1
            _ = try connection.run("INSERT INTO \(name).schema_version (version) VALUES ($1::integer)", ["\(current)"], timeout: timeout)
        }
        _ = try connection.run("COMMIT", timeout: timeout)
        return current
    }

    // MARK: - Messages

    /// What an administrator runs to give `user` the right `failure` says is missing.
    func grantHint(_ failure: PostgresFailure, user: String, database: String) -> String {
        let message = failure.message
        let role = Self.quotedIdentifier(user)
        switch failure.sqlstate {
        case "28P01", "28000":
            return
                "The vault's database refused the login (\(message)): check the user and password of the connection string (--vault-url or AUTHBRIDGE_VAULT_URL, or ~/.pgpass) and the server's pg_hba.conf."
        case "3D000":
            return
                "The vault's database does not exist (\(message)): an administrator creates it, e.g. CREATE DATABASE \(Self.quotedIdentifier(database)) OWNER \(role);"
        default:
            break
        }
        let grant: String
        if message.hasSubstring("for schema") {
            grant = "GRANT USAGE, CREATE ON SCHEMA \(name) TO \(role);"
        } else if message.hasSubstring("for table") || message.hasSubstring("for relation") || message.hasSubstring("for sequence") {
            grant = "GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA \(name) TO \(role);"
        } else if message.hasSubstring("for database") && message.hasSubstring("CONNECT") {
            grant = "GRANT CONNECT ON DATABASE \(Self.quotedIdentifier(database)) TO \(role);"
        } else if message.hasSubstring("for database") {
            grant = "CREATE SCHEMA \(name) AUTHORIZATION \(role); (run by the database's owner)"
        } else {
            grant = "GRANT USAGE, CREATE ON SCHEMA \(name) TO \(role);"
        }
        return
            "The vault's database user \"\(user)\" lacks a right (\(message)). An administrator can grant it: \(grant) Nothing was changed."
    }

    /// `text` as a PostgreSQL identifier in a message (double quotes only when needed).
    static func quotedIdentifier(_ text: String) -> String {
        let plain =
            !text.isEmpty && text.utf8.first.map({ !($0 >= 0x30 && $0 <= 0x39) }) == true
            && text.utf8.allSatisfy { ($0 >= 0x61 && $0 <= 0x7A) || ($0 >= 0x30 && $0 <= 0x39) || $0 == 0x5F }
        return plain ? text : "\"" + text.split(separator: "\"", omittingEmptySubsequences: false).joined(separator: "\"\"") + "\""
    }
}
