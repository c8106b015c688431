import AuthBridgeJSON
import Synchronization

/// Sessions that live as long as the process: nothing touches the disk.
/// For ephemeral sessions and tests.
public final class MemoryVault: Vault {
    private let records = Mutex<[String: VaultRecord]>([:])
    public let backend = "memory"
    public let protection = "none"

    public init() {}

    nonisolated(nonsending) public func load(_ profile: String) async -> VaultRecord? { records.withLock { $0[profile] } }
    nonisolated(nonsending) public func save(_ record: VaultRecord) async { records.withLock { $0[record.profile] = record } }
    nonisolated(nonsending) public func delete(_ profile: String) async { records.withLock { $0[profile] = nil } }
    nonisolated(nonsending) public func profiles() async -> [String] { records.withLock { $0.keys.sorted() } }
    nonisolated(nonsending) public func withExclusiveAccess<T: Sendable>(to profile: String, _ body: () async throws -> T) async throws -> T {
        await locks.acquire(profile)
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
actor ProfileLocks {
    private var held: Set<String> = []
    private var waiting: [String: [CheckedContinuation<Void, Never>]] = [:]

    func acquire(_ profile: String) async {
        if held.insert(profile).inserted { return }
        await withCheckedContinuation { waiting[profile, default: []].append($0) }
    }

    func release(_ profile: String) {
        if var queue = waiting[profile], !queue.isEmpty {
            let next = queue.removeFirst()
            waiting[profile] = queue.isEmpty ? nil : queue
            next.resume()   // ownership passes straight to the next waiter
        } else {
            held.remove(profile)
        }
    }
}
