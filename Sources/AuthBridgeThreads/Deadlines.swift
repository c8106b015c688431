import Synchronization

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// Actions that run once their deadline has passed, unless cancelled before: a bound on a wait
/// (a lock that is not free within 120 s), not synchronisation. One thread for the process waits
/// for the nearest deadline and runs the actions due, in turn: an action must be short and must
/// not block.
///
/// Not `Task.sleep`: a cancelled sleep keeps its task allocation, and whatever the task captured,
/// until its deadline passes (issue 32: ~500 bytes for 120 s for every vault lock taken, 6 MiB in a
/// long-lived agent busy signing in and out). A deadline cancelled here lets go of its action at once.
public final class Deadlines: Sendable {
    public static let shared = Deadlines()

    /// One deadline: `cancel` before it passes and its action never runs (and is let go of).
    public struct Deadline: Sendable {
        fileprivate let id: UInt64
        fileprivate let owner: Deadlines

        public func cancel() { owner.cancel(id) }
    }

    private final class State: @unchecked Sendable {
        var entries: [UInt64: (at: ContinuousClock.Instant, action: @Sendable () -> Void)] = [:]
        var lastID: UInt64 = 0
        var started = false
    }

    private let lock = ConditionLock()
    private let state = State()

    public init() {}

    /// Runs `action` on the deadlines' thread once `duration` has passed, unless cancelled before.
    /// When no thread can be started the deadline never passes (the wait it bounds is then bounded
    /// by nothing else: its own end, or a cancel).
    public func after(_ duration: Duration, _ action: @escaping @Sendable () -> Void) -> Deadline {
        let at = ContinuousClock.now + duration
        let (id, start): (UInt64, Bool) = lock.withLock {
            state.lastID += 1
            state.entries[state.lastID] = (at, action)
            let start = !state.started
            state.started = true
            lock.signal()
            return (state.lastID, start)
        }
        if start && !startThread({ [self] in run() }) {
            lock.withLock { state.started = false }
        }
        return Deadline(id: id, owner: self)
    }

    private func cancel(_ id: UInt64) {
        // The action is released outside the lock: its captures' deinits may take other locks.
        let removed = lock.withLock { state.entries.removeValue(forKey: id) }
        _ = removed
    }

    private func run() {
        while true {
            let due: [@Sendable () -> Void] = lock.withLock {
                while true {
                    let now = ContinuousClock.now
                    let passed = state.entries.filter { $0.value.at <= now }
                    if !passed.isEmpty {
                        for id in passed.keys { state.entries[id] = nil }
                        return passed.sorted { $0.value.at < $1.value.at }.map(\.value.action)
                    }
                    guard let next = state.entries.values.map(\.at).min() else {
                        lock.wait()
                        continue
                    }
                    _ = lock.wait(until: ConditionLock.deadline(after: next - now))
                }
            }
            for action in due { action() }
        }
    }
}
