import Synchronization

/// `operation`'s value, or nil when it has not returned within `limit` — for
/// tests of calls that used to hang for good: the test fails instead of
/// hanging the run. A bound, not synchronisation: a passing test never waits
/// for it. A hung operation is left running (it cannot be stopped from here).
public func answered<T: Sendable>(within limit: Duration, _ operation: @escaping @Sendable () async -> T) async -> T? {
    let waiter = Mutex<CheckedContinuation<T?, Never>?>(nil)
    let take: @Sendable () -> CheckedContinuation<T?, Never>? = {
        waiter.withLock { continuation in
            defer { continuation = nil }
            return continuation
        }
    }
    return await withCheckedContinuation { continuation in
        waiter.withLock { $0 = continuation }
        let work = Task {
            let value = await operation()
            take()?.resume(returning: value)
        }
        Task {
            try? await Task.sleep(for: limit)
            if let continuation = take() {
                continuation.resume(returning: nil)
                work.cancel()
            }
        }
    }
}

/// True once `condition` holds, checked every millisecond for at most `limit`: for a state
/// another thread reaches by itself with no event to wait on (a thread gone idle). A bound, not
/// synchronisation: a passing test stops polling as soon as the state is reached.
public func eventually(within limit: Duration, _ condition: @Sendable () -> Bool) async -> Bool {
    let end = ContinuousClock.now + limit
    while !condition() {
        guard ContinuousClock.now < end else { return false }
        try? await Task.sleep(for: .milliseconds(1))
    }
    return true
}
