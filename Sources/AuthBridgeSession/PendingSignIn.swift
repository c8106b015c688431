import AuthBridgeCrypto
import AuthBridgeURL
import Synchronization

/// An external sign-in waiting for the frontend's `completeSignIn`.
///
/// Exactly one of deliver / fail / timeout / task cancellation ends the wait;
/// later ones are ignored.
final class PendingSignIn: Sendable {
    let callbackPrefix: String?
    /// The `state` its callback must carry (RFC 6749 §10.12); nil where the plugin says its
    /// provider's callback carries none. A callback with another one is refused without ending
    /// the wait, as the loopback listener ignores it: anyone who can call `completeSignIn` could
    /// otherwise cancel someone else's sign-in.
    let expectedState: String?

    private enum State {
        case waiting(CheckedContinuation<String, any Error>?)
        case delivered(String)
        case failed(SessionError)
    }
    private let state = Mutex<State>(.waiting(nil))

    init(callbackPrefix: String?, expectedState: String?) {
        self.callbackPrefix = callbackPrefix
        self.expectedState = expectedState
    }

    /// Whether `callbackURL` answers this sign-in: it carries its state (compared in constant time).
    func isAnswer(_ callbackURL: String) -> Bool {
        guard let expectedState else { return true }
        guard let received = CallbackURL(callbackURL)?.queryValue("state") else { return false }
        return constantTimeEquals(received, expectedState)
    }

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

    /// Waits for the callback URL, a failure, the timeout (answered `timedOut`) or cancellation.
    func wait(timeoutMilliseconds: Int64, profile: String, timedOut: SessionError) async throws(SessionError) -> String {
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
                    self.fail(timedOut)
                    throw timedOut
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
