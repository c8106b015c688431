// The words of session states and reasons, spelled as bridge-spec spells
// them on the wire. The engine compares and sends these only through the
// types below, so each word is written once: the states are the generated
// enums of AuthBridgeProtocol (from bridge-spec), the reasons are here.

import AuthBridgePluginHost
import AuthBridgeProtocol

/// The state a status reports (bridge-spec SignInStatus.state).
public typealias SessionState = SignInStatus.State

/// What happened to a session, as `session/changed` tells it (bridge-spec
/// SessionChangedParams.state).
typealias SessionChange = SessionChangedParams.State

/// Why a status has its state (bridge-spec SignInStatus.reason): the generated open set,
/// whose words are the spec's; a session ended by a provider's definitive refusal carries
/// the provider's word (see `init(refusal:)`).
typealias StatusReason = SignInStatus.Reason

extension SignInStatus.Reason {
    /// `getAccessToken`'s `forceRefresh` without a refresh token (an error's reason, -32001).
    static let noRefreshToken = StatusReason(rawValue: "noRefreshToken")

    /// Why a definitive refusal ended the session. RFC 6749 §5.2:
    /// `invalid_grant` on a refresh means the grant is no longer valid
    /// (revoked by the user, an administrator or the provider's policy):
    /// `revoked`. Other words are camelCased as they come: reasons on the
    /// wire are camelCase words.
    init(refusal reason: String) {
        guard reason != "invalid_grant" else {
            self = .revoked
            return
        }
        let parts = reason.split(separator: "_")
        guard parts.count > 1 else {
            self.init(rawValue: reason)
            return
        }
        self.init(rawValue: String(parts[0]) + parts.dropFirst().map { $0.prefix(1).uppercased() + $0.dropFirst() }.joined())
    }
}

/// Why a session ended: `session/changed` `signedOut`'s reason, the spec's closed set
/// (generated). `refreshRefused`: the provider answered a refresh 400 or 401 without
/// `invalid_grant` (a bodyless 400, `invalid_request`…): it refused, but did not say the
/// grant was revoked.
typealias EndReason = SessionChangedParams.SignedOutReason

extension SessionChangedParams.SignedOutReason {
    /// The closed set's word for a provider's definitive refusal.
    init(refusal reason: String) {
        switch StatusReason(refusal: reason) {
        case .revoked: self = .revoked
        case .licenseRevoked: self = .licenseRevoked
        case .refreshRefused: self = .refreshRefused
        case .expired, .noRefreshToken: self = .expired
        default: self = .invalidGrant
        }
    }
}

/// A plugin's `check_session` verdict (bridge-spec PluginABI
/// CheckSessionOutput.state).
enum SessionCheck: String, Sendable {
    case valid, expired, revoked, licenseRevoked, unknown
}

/// A plugin's `classify_response` outcome (bridge-spec PluginABI
/// ClassifyResponseOutput.outcome).
enum ResponseOutcome: String, Sendable {
    case ok, sessionExpired, revoked, licenseRevoked
}
