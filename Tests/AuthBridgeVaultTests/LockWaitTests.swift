@testable import AuthBridgeVault
import Synchronization
import TestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Issue 14: a wait for an account's lock blocked for good while another
/// process held it (a hung plugin's refresh). Now it honours cancellation and
/// `maximumWait`. The holder here is the test: `flock` on a second open file
/// description of the same lock file. Every wait is bounded (`answered`), so a
/// regression fails instead of hanging the run.
@Suite("Account lock waits")
struct LockWaitTests {
    private enum Outcome: Sendable, Equatable {
        case ran, timedOut, cancelled, other(String)
    }

    private static func lockOnce(_ path: String) async -> Outcome {
        do {
            try await ProfileFileLock.withLock(path) {}
            return .ran
        } catch let error as VaultError where error.reason == .lockTimeout {
            return .timedOut
        } catch is CancellationError {
            return .cancelled
        } catch {
            return .other("\(error)")
        }
    }

    /// Holds the lock at `path` like another process would; `release` closes it.
    private struct Holder {
        let fd: Int32
        init(_ path: String) {
            fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
            #expect(flock(fd, LOCK_EX) == 0)
        }
        func release() { close(fd) }
    }

    /// A lock file in a private folder of its own, held by a `Holder`: `body` gets its path and the holder.
    private static func withHeldLock(_ body: (_ path: String, _ holder: Holder) async throws -> Void) async throws {
        let scratch = Scratch()
        defer { scratch.remove() }
        let path = scratch.path + "/locks/p.lock"
        try makePrivateFolder(scratch.path + "/locks")
        try await body(path, Holder(path))
    }

    @Test func aWaitEndsWithLockTimeoutAfterTheMaximumWait() async throws {
        try await Self.withHeldLock { path, holder in
            let outcome = await answered(within: .seconds(20)) {
                await ProfileFileLock.$maximumWait.withValue(.milliseconds(100)) { await Self.lockOnce(path) }
            }
            #expect(outcome == .timedOut, "the wait for a held lock never ended")
            holder.release()
            // Nothing leaked: the abandoned waiter released what it got, and the lock is free again.
            #expect(await answered(within: .seconds(20)) { await Self.lockOnce(path) } == .ran)
        }
    }

    @Test func aCancelledWaiterStopsWaiting() async throws {
        try await Self.withHeldLock { path, holder in
            let waiter = Task { await Self.lockOnce(path) }
            try await waitForLockWaiter(path)
            waiter.cancel()
            #expect(await answered(within: .seconds(20)) { await waiter.value } == .cancelled, "a cancelled wait went on")
            holder.release()
            #expect(await answered(within: .seconds(20)) { await Self.lockOnce(path) } == .ran)
        }
    }

    @Test func aFreeLockIsTakenAndReentrantWithinTheTask() async throws {
        let scratch = Scratch()
        defer { scratch.remove() }
        let path = scratch.path + "/locks/p.lock"
        let inner = try await ProfileFileLock.withLock(path) { try await ProfileFileLock.withLock(path) { 42 } }
        #expect(inner == 42)
    }

    @Test func memoryLocksHonourTheBoundAndCancellation() async throws {
        let locks = ProfileLocks()
        try await locks.acquire("p")
        let timedOut = await answered(within: .seconds(20)) { () -> Outcome in
            do {
                try await ProfileFileLock.$maximumWait.withValue(.milliseconds(100)) { try await locks.acquire("p") }
                return .ran
            } catch let error as VaultError where error.reason == .lockTimeout {
                return .timedOut
            } catch {
                return .other("\(error)")
            }
        }
        #expect(timedOut == .timedOut)
        let waiter = Task { () -> Outcome in
            do {
                try await locks.acquire("p")
                return .ran
            } catch is CancellationError {
                return .cancelled
            } catch {
                return .other("\(error)")
            }
        }
        waiter.cancel()
        #expect(await answered(within: .seconds(20)) { await waiter.value } == .cancelled)
        // The queue is clean: a release frees the lock, and the next caller gets it at once.
        await locks.release("p")
        #expect(await answered(within: .seconds(20)) { () -> Outcome in (try? await locks.acquire("p")) == nil ? .other("threw") : .ran } == .ran)
    }
}
