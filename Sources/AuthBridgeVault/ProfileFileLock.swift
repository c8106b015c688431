import AuthBridgeSystem
import Synchronization

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// A per-profile advisory lock shared by every process using one vault:
/// `flock(2)` on `<folder>/<hash>.lock`. The kernel releases it when the
/// holder closes the file or dies, so a crashed process never blocks anyone.
///
/// A wait for it honours cancellation and gives up after `maximumWait`
/// (`VaultError(.lockTimeout)`): a process whose plugin hangs while holding
/// an account's lock (an older host, without hook deadlines) must not block
/// that account in every other process for good.
///
/// Re-entrant within one task: a vault method that needs the lock
/// (quarantining a damaged record) may run inside `withExclusiveAccess` for
/// the same profile without deadlocking on its own lock. Only the holding
/// task re-enters: a task it starts inherits the task-local table but is
/// another task, so it waits for the lock like anyone else.
enum ProfileFileLock {
    /// Lock file → the task holding it (its identity), for the tasks below a holder.
    @TaskLocal static var held: [String: Int] = [:]

    /// How long a wait for an account's lock lasts before `lockTimeout`: the
    /// refresh hook's 90 s deadline plus 30 s. Tests shorten it.
    @TaskLocal static var maximumWait: Duration = .seconds(120)

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
        try await LockWaiter(fd: fd).acquire(path: path, within: maximumWait)
        defer { close(fd) } // closing releases the lock
        var holding = held
        holding[path] = task
        return try await $held.withValue(holding) { try await body() }
    }
}

/// One wait for a `flock`. `flock` blocks, so it waits on a thread of its own,
/// never on the caller's executor (libdispatch adds threads for blocked work
/// only slowly on Linux). The waiting side gives up on cancellation or at the
/// bound; the flock thread, when it gets the lock, hands it over if still
/// wanted, else closes the descriptor at once (which releases it).
///
/// Who closes the descriptor: the caller once `acquire` returned (it holds
/// the lock); the waiter itself whenever `acquire` throws — the flock thread
/// when the caller gave up first, since only it knows when `flock` returns.
private final class LockWaiter: Sendable {
    private enum Phase {
        case waiting(CheckedContinuation<Void, any Error>?)
        case acquired
        case abandoned
    }
    private let fd: Int32
    private let phase = Mutex(Phase.waiting(nil))

    init(fd: Int32) { self.fd = fd }

    func acquire(path: String, within limit: Duration) async throws {
        // Not a Task.sleep: cancelled, it would keep this waiter until the limit passed (issue 32).
        let timer = Deadlines.shared.after(limit) { [self] in
            giveUp(VaultError(.lockTimeout, "The account's lock (\(path)) was not free within \(limit.components.seconds) s."))
        }
        defer { timer.cancel() }
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                // Given up before we got here (cancelled already): resume at once.
                let abandoned = phase.withLock { phase -> Bool in
                    guard case .waiting = phase else { return true }
                    phase = .waiting(continuation)
                    return false
                }
                if abandoned {
                    close(fd) // no flock thread was started
                    continuation.resume(throwing: CancellationError())
                    return
                }
                let descriptor = fd
                detachThread { [self] in
                    var result: Int32
                    repeat { result = flock(descriptor, LOCK_EX) } while result != 0 && errno == EINTR
                    let failure = result == 0 ? nil : VaultError(.io, "Cannot lock \(path): \(String(cString: strerror(errno))).")
                    finished(failure)
                }
            }
        } onCancel: {
            giveUp(CancellationError())
        }
    }

    /// The flock thread's end: hand the lock (or its error) over, or close.
    private func finished(_ failure: VaultError?) {
        let continuation = phase.withLock { phase -> CheckedContinuation<Void, any Error>?? in
            guard case .waiting(let continuation) = phase else { return nil }
            phase = .acquired
            return .some(continuation)
        }
        guard let continuation else {
            close(fd) // nobody waits any more: release at once
            return
        }
        if let failure {
            close(fd)
            continuation?.resume(throwing: failure)
        } else {
            continuation?.resume()
        }
    }

    private func giveUp(_ error: any Error) {
        let continuation = phase.withLock { phase -> CheckedContinuation<Void, any Error>?? in
            guard case .waiting(let continuation) = phase else { return nil }
            phase = .abandoned
            return .some(continuation)
        }
        continuation??.resume(throwing: error)
    }
}
