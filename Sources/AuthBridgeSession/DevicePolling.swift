import AuthBridgeJSON
import AuthBridgePluginHost

/// The polling half of the device authorization grant (RFC 8628 §3.4–3.5):
/// wait `interval`, ask, and go on while the answer is "pending"; add 5 s on
/// `slow_down`; stop on tokens, a refusal, the code's expiry or cancellation.
///
/// A transient failure (the server unreachable for a moment) does not end
/// the sign-in: the user may be typing the code; polling backs off instead.
struct DevicePolling: Sendable {
    typealias Poll = @Sendable () async -> Result<JSON, ProviderFailure>
    typealias Sleep = @Sendable (Int64) async throws -> Void

    var intervalMilliseconds: Int64
    /// Host-clock milliseconds after which the device code is dead.
    var deadline: Int64
    var now: @Sendable () -> Int64 = { HostClock.nowMilliseconds() }
    /// Waiting between polls is the protocol's pacing, not synchronisation.
    var sleep: Sleep = { try await Task.sleep(for: .milliseconds($0)) }

    init(intervalMilliseconds: Int64, deadline: Int64) {
        self.intervalMilliseconds = max(intervalMilliseconds, 1_000)
        self.deadline = deadline
    }

    /// The completeSignIn answer that carried tokens.
    func run(profile: String, poll: Poll) async throws(SessionError) -> JSON {
        var interval = intervalMilliseconds
        while true {
            guard now() + interval < deadline else { throw expired(profile) }
            do { try await sleep(interval) } catch {
                throw SessionError(.userCancelled, "The device sign-in was cancelled.", provider: profile, reason: "cancelled")
            }
            switch await poll() {
            case .success(let answer):
                return answer
            case .failure(let failure):
                switch failure.reason {
                case "authorization_pending", "authorizationPending":
                    continue
                case "slow_down", "slowDown":
                    interval += 5_000 // RFC 8628 §3.5: for this and all later requests
                case "expired_token", "expiredToken":
                    throw expired(profile)
                case "access_denied", "accessDenied":
                    throw SessionError(.userCancelled, "The user declined the device sign-in.", provider: profile, reason: "access_denied")
                default:
                    if failure.kind == .cancelled {
                        throw SessionError(.userCancelled, "The device sign-in was cancelled.", provider: profile, reason: "cancelled")
                    }
                    guard failure.kind == .transient else { throw SessionError(failure, provider: profile) }
                    // Any other OAuth error the server answered (invalid_request, invalid_scope,
                    // unsupported_grant_type…) will not change by asking again (RFC 8628 §3.5).
                    if let status = failure.status, (400..<500).contains(status), status != 429 {
                        throw SessionError(.providerRefused, failure.message, provider: profile, reason: failure.reason, status: status)
                    }
                    // RFC 8628 §3.5: on a connection timeout, back off (here: double, up to a minute).
                    interval = min(interval * 2, 60_000)
                }
            }
        }
    }

    private func expired(_ profile: String) -> SessionError {
        SessionError(.timeout, "The device code expired before the user finished signing in.", provider: profile, reason: "expired_token")
    }
}
