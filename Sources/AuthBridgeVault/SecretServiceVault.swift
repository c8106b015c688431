import AuthBridgeJSON

/// Sessions kept in the Secret Service (the desktop keyring, e.g.
/// gnome-keyring): one item per profile, its secret the record as JSON.
///
/// The keyring encrypts at rest and unlocks with the user's login. The
/// per-profile cross-process lock is a file lock in `lockFolder`.
public final class SecretServiceVault: Vault {
    public let backend = "secret-service"
    public let protection = "keyring"
    private let keyring: Keyring
    private let lockFolder: String

    public init(keyring: Keyring, lockFolder: String) {
        self.keyring = keyring
        self.lockFolder = lockFolder
    }

    nonisolated(nonsending) public func load(_ profile: String, validate: @Sendable (VaultRecord) -> String?) async throws -> VaultRecord? {
        /// The record; or the damaged item's text and why it cannot be used.
        func examine() async throws -> (record: VaultRecord?, damaged: (text: String, problem: String)?) {
            guard let text = try await keyring.lookup(kind: "session", key: profile) else { return (nil, nil) }
            guard let json = try? JSON.parse(text), json["profile"]?.stringValue == profile, let secret = json["secret"] else {
                return (nil, (text, "not a session record"))
            }
            let record = VaultRecord(profile: profile, account: json["account"]?.stringValue, secret: secret)
            if let problem = validate(record) { return (nil, (text, problem)) }
            return (record, nil)
        }
        guard try await examine().damaged != nil else { return try await examine().record }
        // Kept aside under the profile's lock, only if still damaged (a writer may have replaced it).
        return try await withExclusiveAccess(to: profile) {
            let now = try await examine()
            guard let (text, problem) = now.damaged else { return now.record }
            // A key of its own (time and a random suffix): never over an earlier quarantined item.
            var generator = SystemRandomNumberGenerator()
            try await keyring.store(
                kind: "quarantine", key: "\(profile) \(HostTime.seconds()).\(UInt32.random(in: .min ... .max, using: &generator))",
                label: "AuthBridge damaged session: \(profile)", secret: text)
            try await keyring.clear(kind: "session", key: profile)
            throw VaultError(
                .corruptRecord,
                "The stored session of profile \"\(VaultKey.split(profile).profile)\" in the keyring could not be read (\(problem)); it was kept aside (kind \"quarantine\") and the profile is signed out. Other profiles are not affected."
            )
        }
    }

    nonisolated(nonsending) public func save(_ record: VaultRecord) async throws {
        let item = Self.item(record)
        guard item.utf8.count <= VaultRecord.maximumSize else { throw VaultError.tooLarge(record.profile, size: item.utf8.count) }
        try await keyring.store(kind: "session", key: record.profile, label: "AuthBridge session: \(record.profile)", secret: item)
    }

    /// The item's secret: the record as JSON.
    static func item(_ record: VaultRecord) -> String {
        JSON.compactObject([
            "profile": .string(record.profile), "account": record.account.map(JSON.string),
            "secret": record.secret,
        ]).serializedString()
    }

    nonisolated(nonsending) public func delete(_ profile: String) async throws {
        try await keyring.clear(kind: "session", key: profile)
    }

    nonisolated(nonsending) public func profiles() async throws -> [String] {
        try await keyring.list(kind: "session").sorted()
    }

    nonisolated(nonsending) public func withExclusiveAccess<T: Sendable>(to profile: String, _ body: () async throws -> T) async throws -> T {
        try await ProfileFileLock.withExclusiveAccess(folder: lockFolder, profile: profile, body)
    }
}

#if canImport(Glibc)
import Glibc
#endif

enum HostTime {
    static func seconds() -> Int {
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        return now.tv_sec
    }
}
