import Synchronization

/// An external sign-in waiting for the frontend's `completeSignIn`.
///
/// Exactly one of deliver / fail / timeout / task cancellation ends the wait;
/// later ones are ignored.
final class PendingSignIn: Sendable {
    let callbackPrefix: String?

    private enum State {
        case waiting(CheckedContinuation<String, any Error>?)
        case delivered(String)
        case failed(SessionError)
    }
    private let state = Mutex<State>(.waiting(nil))

    init(callbackPrefix: String?) { self.callbackPrefix = callbackPrefix }

    func deliver(_ url: String) { finish(.delivered(url)) }
    func fail(_ error: SessionError) { finish(.failed(error)) }

    private func finish(_ outcome: State) {
        let continuation: CheckedContinuation<String, any Error>? = state.withLock { state in
            guard case .waiting(let continuation) = state else { return nil }
            state = outcome
            return continuation
        }
        guard let continuation else { return }
        switch outcome {
        case .delivered(let url): continuation.resume(returning: url)
        case .failed(let error): continuation.resume(throwing: error)
        case .waiting: break
        }
    }

    /// Waits for the callback URL, a failure, the timeout or cancellation.
    func wait(timeoutMilliseconds: Int64, profile: String) async throws(SessionError) -> String {
        do {
            return try await withThrowingTaskGroup(of: String?.self) { group in
                group.addTask {
                    try await withTaskCancellationHandler {
                        try await withCheckedThrowingContinuation { continuation in
                            let immediate: State? = self.state.withLock { state in
                                if case .waiting = state {
                                    state = .waiting(continuation)
                                    return nil
                                }
                                return state
                            }
                            switch immediate {
                            case .delivered(let url): continuation.resume(returning: url)
                            case .failed(let error): continuation.resume(throwing: error)
                            default: break
                            }
                        }
                    } onCancel: {
                        self.fail(SessionError(.userCancelled, "The sign-in was cancelled.", provider: profile, reason: "cancelled"))
                    }
                }
                group.addTask {
                    // A deadline, not synchronisation: the wait ends earlier on any event.
                    try await Task.sleep(for: .milliseconds(timeoutMilliseconds))
                    return nil
                }
                let first = try await group.next()!
                group.cancelAll()
                guard let url = first else {
                    self.fail(
                        SessionError(.timeout, "No callback arrived within \(timeoutMilliseconds / 1000) s.", provider: profile, reason: "timeout"))
                    throw SessionError(
                        .timeout, "The sign-in timed out after \(timeoutMilliseconds / 1000) s without a callback.", provider: profile,
                        reason: "timeout")
                }
                return url
            }
        } catch let error as SessionError {
            throw error
        } catch {
            throw SessionError(.userCancelled, "The sign-in was cancelled.", provider: profile, reason: "cancelled")
        }
    }
}
