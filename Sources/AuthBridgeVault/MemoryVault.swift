import AuthBridgeJSON
import Synchronization

/// Sessions that live as long as the process: nothing touches the disk.
/// For ephemeral sessions and tests.
public final class MemoryVault: Vault {
    private let records = Mutex<[String: VaultRecord]>([:])
    private let writes = WriteCounter()
    public let backend = "memory"
    public let protection = "none"

    public init() {}

    nonisolated(nonsending) public func load(_ profile: String, validate: @Sendable (VaultRecord) -> String?) async throws -> VaultRecord? {
        guard let record = records.withLock({ $0[profile] }) else { return nil }
        guard let problem = validate(record) else { return record }
        // Nothing to keep aside in memory: the unreadable record is dropped, and reported once.
        records.withLock { if $0[profile] == record { $0[profile] = nil } }
        writes.wrote()
        throw VaultError(
            .corruptRecord,
            "The stored session of profile \"\(VaultKey.split(profile).profile)\" could not be read (\(problem)); it was discarded and the profile is signed out."
        )
    }

    nonisolated(nonsending) public func save(_ record: VaultRecord) async throws {
        // The same bound as the other backends, so a session behaves alike in each.
        let size = SecretServiceVault.item(record).utf8.count
        guard size <= VaultRecord.maximumSize else { throw VaultError.tooLarge(record.profile, size: size) }
        records.withLock { $0[record.profile] = record }
        writes.wrote()
    }
    nonisolated(nonsending) public func delete(_ profile: String) async {
        records.withLock { $0[profile] = nil }
        writes.wrote()
    }
    /// Every write moves one counter: a stamp for each key and each profile.
    public func changeProbe(for key: String) -> ChangeProbe? { writes.probe }
    public func changeProbe(forRecordsOf profile: String) -> ChangeProbe? { writes.probe }
    nonisolated(nonsending) public func profiles() async -> [String] { records.withLock { $0.keys.sorted() } }
    nonisolated(nonsending) public func withExclusiveAccess<T: Sendable>(to profile: String, _ body: () async throws -> T) async throws -> T {
        try await locks.acquire(profile)
        do {
            let result = try await body()
            await locks.release(profile)
            return result
        } catch {
            await locks.release(profile)
            throw error
        }
    }

    private let locks = ProfileLocks()
}

/// In-process per-profile locks that suspend instead of blocking a thread.
/// A waiter that is cancelled, or still waiting after
/// `ProfileFileLock.maximumWait`, leaves the queue and throws
/// (`CancellationError`, `VaultError(.lockTimeout)`).
actor ProfileLocks {
    private var held: Set<String> = []
    private var waiting: [String: [(id: Int, continuation: CheckedContinuation<Void, any Error>)]] = [:]
    private var nextID = 0

    func acquire(_ profile: String) async throws {
        if held.insert(profile).inserted { return }
        nextID += 1
        let id = nextID
        let limit = ProfileFileLock.maximumWait
        let timer = Task { [weak self] in
            guard (try? await Task.sleep(for: limit)) != nil else { return }
            await self?.giveUp(
                profile, id: id,
                VaultError(.lockTimeout, "The account's lock was not free within \(limit.components.seconds) s."))
        }
        defer { timer.cancel() }
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                if Task.isCancelled {
                    continuation.resume(throwing: CancellationError())
                } else {
                    waiting[profile, default: []].append((id, continuation))
                }
            }
        } onCancel: {
            Task { await self.giveUp(profile, id: id, CancellationError()) }
        }
    }

    func release(_ profile: String) {
        if var queue = waiting[profile], !queue.isEmpty {
            let next = queue.removeFirst()
            waiting[profile] = queue.isEmpty ? nil : queue
            next.continuation.resume() // ownership passes straight to the next waiter
        } else {
            held.remove(profile)
        }
    }

    /// Takes a waiter out of the queue (if it still waits) and fails its wait.
    private func giveUp(_ profile: String, id: Int, _ error: any Error) {
        guard var queue = waiting[profile], let index = queue.firstIndex(where: { $0.id == id }) else { return }
        let waiter = queue.remove(at: index)
        waiting[profile] = queue.isEmpty ? nil : queue
        waiter.continuation.resume(throwing: error)
    }
}
