#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// A per-profile advisory lock shared by every process using one vault:
/// `flock(2)` on `<folder>/<hash>.lock`. The kernel releases it when the
/// holder closes the file or dies, so a crashed process never blocks anyone.
enum ProfileFileLock {
    nonisolated(nonsending) static func withExclusiveAccess<T: Sendable>(folder: String, profile: String, _ body: () async throws -> T) async throws -> T {
        try makePrivateFolder(folder)
        let path = folder + "/" + EncryptedFileVault.fileStem(profile) + ".lock"
        let fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw VaultError(.io, "Cannot open the lock file \(path): \(String(cString: strerror(errno))).") }
        defer { close(fd) }  // closing releases the lock
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
        return try await body()
    }
}
