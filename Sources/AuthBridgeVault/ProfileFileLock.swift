import AuthBridgeSystem

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// A per-profile advisory lock shared by every process using one vault:
/// `flock(2)` on `<folder>/<hash>.lock`. The kernel releases it when the
/// holder closes the file or dies, so a crashed process never blocks anyone.
///
/// Re-entrant within one task: a vault method that needs the lock
/// (quarantining a damaged record) may run inside `withExclusiveAccess` for
/// the same profile without deadlocking on its own lock. Only the holding
/// task re-enters: a task it starts inherits the task-local table but is
/// another task, so it waits for the lock like anyone else.
enum ProfileFileLock {
    /// Lock file → the task holding it (its identity), for the tasks below a holder.
    @TaskLocal static var held: [String: Int] = [:]

    private static var currentTask: Int? { withUnsafeCurrentTask { $0?.hashValue } }

    nonisolated(nonsending) static func withExclusiveAccess<T: Sendable>(
        folder: String, profile: String, _ body: () async throws -> T
    ) async throws -> T {
        try await withLock(folder + "/" + EncryptedFileVault.fileStem(profile) + ".lock", body)
    }

    /// Runs `body` holding the lock file at `path` (created 0600 in a private folder).
    nonisolated(nonsending) static func withLock<T: Sendable>(_ path: String, _ body: () async throws -> T) async throws -> T {
        let task = currentTask
        if let task, held[path] == task { return try await body() }
        try makePrivateFolder(String(path[..<(path.lastIndex(of: "/") ?? path.endIndex)]))
        let fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0o600)
        guard fd >= 0 else { throw VaultError(.io, "Cannot open the lock file \(path): \(String(cString: strerror(errno))).") }
        defer { close(fd) } // closing releases the lock
        // flock blocks: wait on a thread of its own, never on the caller's executor
        // (libdispatch adds threads for blocked work only slowly on Linux).
        let locked: Bool = await withCheckedContinuation { continuation in
            detachThread {
                var result: Int32
                repeat { result = flock(fd, LOCK_EX) } while result != 0 && errno == EINTR
                continuation.resume(returning: result == 0)
            }
        }
        guard locked else { throw VaultError(.io, "Cannot lock \(path): \(String(cString: strerror(errno))).") }
        var holding = held
        holding[path] = task
        return try await $held.withValue(holding) { try await body() }
    }
}
