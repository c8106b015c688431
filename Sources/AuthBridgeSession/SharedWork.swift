import AuthBridgeJSON
import Synchronization

/// One piece of work shared by every caller that asks for it while it runs
/// (single flight: one discovery, one refresh), whose callers may each give up.
///
/// A caller whose task is cancelled stops waiting at once and gets nil; the
/// others keep waiting. With `cancelsWhenAbandoned` the work itself is
/// cancelled once nobody waits for it any more (a discovery: nothing is lost);
/// without it, it runs to its end (a refresh: the provider may already have
/// rotated the refresh token, and the new one must be stored).
///
/// Threading: any task; one lock around the waiters.
final class SharedWork<Value: Sendable>: Sendable {
    private struct State {
        var waiters: [UInt64: CheckedContinuation<Value?, Never>] = [:]
        var nextWaiter: UInt64 = 0
        var result: Value?
        var task: Task<Void, Never>?
    }

    private let state = Mutex(State())
    private let cancelsWhenAbandoned: Bool

    init(cancelsWhenAbandoned: Bool, _ work: @escaping @Sendable () async -> Value) {
        self.cancelsWhenAbandoned = cancelsWhenAbandoned
        let task = Task { [self] in finish(await work()) }
        state.withLock { $0.task = task }
    }

    private func finish(_ value: Value) {
        let waiters = state.withLock { state in
            state.result = value
            defer { state.waiters.removeAll() }
            return Array(state.waiters.values)
        }
        for waiter in waiters { waiter.resume(returning: value) }
    }

    /// True once the work has finished.
    var isFinished: Bool { state.withLock { $0.result != nil } }

    /// The work's value once it has finished; nil before.
    var finishedValue: Value? { state.withLock { $0.result } }

    /// The work's value, or nil when the calling task was cancelled first.
    func value() async -> Value? {
        let id = state.withLock { state -> UInt64 in
            defer { state.nextWaiter += 1 }
            return state.nextWaiter
        }
        return await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                let (ready, abandoned): (Value??, Task<Void, Never>?) = state.withLock { state in
                    if let result = state.result { return (.some(result), nil) }
                    // Cancelled before it could wait: the handler below found nothing to remove.
                    if Task.isCancelled { return (.some(nil), state.waiters.isEmpty ? state.task : nil) }
                    state.waiters[id] = continuation
                    return (nil, nil)
                }
                if cancelsWhenAbandoned { abandoned?.cancel() }
                if let ready { continuation.resume(returning: ready) }
            }
        } onCancel: {
            let (waiter, abandoned) = state.withLock { state in
                let waiter = state.waiters.removeValue(forKey: id)
                return (waiter, waiter != nil && state.waiters.isEmpty && state.result == nil ? state.task : nil)
            }
            waiter?.resume(returning: nil)
            if cancelsWhenAbandoned { abandoned?.cancel() }
        }
    }
}

extension SharedWork where Value == Result<JSON, SessionError> {
    /// True once the work has finished with a failure (never reused: see `SessionEngine.authorize`).
    var failed: Bool {
        guard case .failure? = finishedValue else { return false }
        return true
    }
}
