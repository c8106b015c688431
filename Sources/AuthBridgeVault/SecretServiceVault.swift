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

    nonisolated(nonsending) public func load(_ profile: String) async throws -> VaultRecord? {
        guard let text = try await keyring.lookup(kind: "session", key: profile) else { return nil }
        guard let json = try? JSON.parse(text), json["profile"]?.stringValue == profile, let secret = json["secret"] else {
            // Keep the damaged item aside under another kind, never delete it.
            try await keyring.store(kind: "quarantine", key: "\(profile) \(HostTime.seconds())",
                                    label: "AuthBridge damaged session: \(profile)", secret: text)
            try await keyring.clear(kind: "session", key: profile)
            throw VaultError(.corruptRecord, "The stored session of profile \"\(profile)\" in the keyring is damaged; it was kept aside (kind \"quarantine\") and the profile is signed out. Other profiles are not affected.")
        }
        return VaultRecord(profile: profile, account: json["account"]?.stringValue, secret: secret)
    }

    nonisolated(nonsending) public func save(_ record: VaultRecord) async throws {
        let json: JSON = .compactObject(["profile": .string(record.profile), "account": record.account.map(JSON.string),
                                         "secret": record.secret])
        try await keyring.store(kind: "session", key: record.profile, label: "AuthBridge session: \(record.profile)",
                                secret: json.serializedString())
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
