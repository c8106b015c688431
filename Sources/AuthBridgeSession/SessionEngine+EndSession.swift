// RP-initiated logout (OpenID Connect RP-Initiated Logout 1.0): after signOut has revoked and
// wiped, the provider's own sign-in session is ended in the browser that holds it, so the next
// sign-in asks for the password again.

import AuthBridgeJSON
import AuthBridgeNetwork
import AuthBridgeProtocol
import AuthBridgeRedaction
import AuthBridgeURL

extension SessionEngine {
    /// The default wait for the provider's redirect (browser flow).
    static let endSessionTimeoutMilliseconds: Int64 = 120_000

    /// Whether a sign-out also ends the provider's session: the param, else the profile's
    /// host-level setting `endSession` (false unless set).
    func wantsEndSession(_ params: SignOutParams) -> Bool {
        params.endSession ?? (profiles[params.provider]?.settings["endSession"]?.boolValue ?? false)
    }

    /// Who opens the end-session page, checked before anything is revoked: the param, else
    /// browser when it is the profile's first flow, else external (the frontend gets the URL).
    func endSessionFlow(_ params: SignOutParams, context: Context?) throws(SessionError) -> Flow {
        if let flow = params.flow {
            guard flow == .browser || flow == .external else {
                throw SessionError(
                    .unsupported, "Ending the provider's session needs a browser: flow \"browser\" or \"external\", not \"\(flow.rawValue)\".",
                    provider: params.provider, reason: "unsupportedFlow", field: "flow")
            }
            return flow
        }
        let first = context?.plugin.descriptor["flows"]?.arrayValue?.first?.stringValue
        return first == Flow.browser.rawValue ? .browser : .external
    }

    /// Ends the provider's session for `session` (already wiped here). Never throws: whatever
    /// happens is the outcome's state, and the sign-out stands.
    func endProviderSession(
        _ session: StoredSession?, context: Context?, unresolved: SessionError?, flow: Flow, params: SignOutParams, requestID: JSON?
    ) async -> EndSessionOutcome {
        let profile = params.provider
        guard let context else {
            let why = unresolved?.message ?? "the profile's configuration could not be resolved."
            return EndSessionOutcome(state: .failed, message: "The provider's session was not ended: \(why)")
        }
        guard let endpoint = context.config["endSessionEndpoint"]?.stringValue else {
            return EndSessionOutcome(
                state: .unsupported,
                message: "The provider has no end-session endpoint (end_session_endpoint): its own sign-in session stays; the tokens were revoked.")
        }
        guard ParsedURL(endpoint)?.isSecureTransport == true else {
            return EndSessionOutcome(
                state: .failed, message: "The provider's end-session endpoint must be an https URL (http only on a loopback IP address).")
        }
        guard let idToken = session?.tokens.idToken else {
            return EndSessionOutcome(
                state: .noIdToken,
                message: "The session kept no ID token to name it to the provider (id_token_hint): its own sign-in session stays.")
        }
        KnownSecrets.shared.remember(idToken)
        let clientID = (context.config["clientId"] ?? context.profile.settings["clientId"])?.stringValue
        let state = PKCE.randomToken()
        guard flow == .browser else {
            return await externalEndSession(
                endpoint, idToken: idToken, clientID: clientID, state: state, context: context, params: params, requestID: requestID)
        }
        let settings = context.profile.settings
        let port = settings["loopbackPort"]?.intValue ?? 0
        let path = settings["loopbackPath"]?.stringValue ?? "/callback"
        guard (0...65_535).contains(port), path.hasPrefix("/") else {
            return EndSessionOutcome(state: .failed, message: "loopbackPort must be 0…65535 and loopbackPath a path starting with /.")
        }
        let listener: LoopbackListener
        do { listener = try LoopbackListener(port: UInt16(port), path: path) } catch {
            return EndSessionOutcome(state: .failed, message: "The provider's session was not ended: \(error.message)")
        }
        defer { listener.close() }
        let url = Self.endSessionURL(endpoint, idToken: idToken, clientID: clientID, redirectURI: listener.redirectURI, state: state)
        let requestId = requestID ?? .null
        send(SignOutProgressParams(provider: profile, requestId: requestId, stage: .openUrl, url: url))
        openBrowser?(url) { [self] reason in
            send(
                SignOutProgressParams(
                    provider: profile, requestId: requestId, stage: .waiting,
                    message: "The browser could not be opened (\(reason)); open the end-session URL yourself."))
        }
        send(
            SignOutProgressParams(
                provider: profile, requestId: requestId, stage: .waiting,
                message: "Waiting for the provider to come back to \(listener.redirectURI)."))
        let timeout = max(1_000, min(params.timeoutMs ?? Self.endSessionTimeoutMilliseconds, 3_600_000))
        // A deadline, not synchronisation: closing the listener ends the wait at once.
        let deadline = Task {
            guard (try? await Task.sleep(for: .milliseconds(timeout))) != nil else { return }
            listener.close()
        }
        defer { deadline.cancel() }
        let callback = await withTaskCancellationHandler {
            await listener.awaitCallback(state: state)
        } onCancel: {
            listener.close()
        }
        guard callback != nil else {
            return EndSessionOutcome(
                state: .requested,
                message: "The end-session page was opened, but the provider did not come back to \(listener.redirectURI) within \(timeout / 1000) s: "
                    + "its session may still be open (it must allow that post-logout redirect URI for this client).")
        }
        listener.answerBrowserSignedOut()
        return EndSessionOutcome(state: .confirmed)
    }

    /// The external flow: the frontend opens the end-session URL (`signOut/progress` openUrl) in
    /// the browser or web view that holds the provider's session and hands the redirect back with
    /// `completeSignOut`, as `completeSignIn` does for a sign-in. Without a post-logout redirect
    /// URI nothing can come back: the URL is the answer, at once.
    private func externalEndSession(
        _ endpoint: String, idToken: String, clientID: String?, state: String, context: Context, params: SignOutParams, requestID: JSON?
    ) async -> EndSessionOutcome {
        let profile = params.provider
        let redirect = (context.profile.settings["postLogoutRedirectUri"] ?? context.config["redirectUri"])?.stringValue
        let url = Self.endSessionURL(endpoint, idToken: idToken, clientID: clientID, redirectURI: redirect, state: state)
        guard let redirect else {
            return EndSessionOutcome(
                state: .requested, url: url,
                message:
                    "No post-logout redirect URI is set (postLogoutRedirectUri, or the profile's redirectUri): the provider cannot say it is done.")
        }
        let superseded = SessionError(.userCancelled, "A newer sign-out for this profile replaced this one.", provider: profile, reason: "superseded")
        pendingSignOuts.removeValue(forKey: profile)?.fail(superseded)
        let pending = PendingSignIn(callbackPrefix: redirect, expectedState: state)
        pendingSignOuts[profile] = pending
        send(SignOutProgressParams(provider: profile, requestId: requestID ?? .null, stage: .openUrl, url: url, callbackPrefix: redirect))
        let timeout = max(1_000, min(params.timeoutMs ?? Self.endSessionTimeoutMilliseconds, 3_600_000))
        let timedOut = SessionError(.timeout, "No post-logout redirect came back.", provider: profile, reason: "timeout")
        let outcome: EndSessionOutcome
        do {
            _ = try await pending.wait(timeoutMilliseconds: timeout, profile: profile, timedOut: timedOut)
            outcome = EndSessionOutcome(state: .confirmed)
        } catch {
            outcome = EndSessionOutcome(
                state: .requested, url: url,
                message: "The end-session URL was handed out, but no redirect came back with completeSignOut within \(timeout / 1000) s "
                    + "(\(error.reason ?? "timeout")): the provider's session may still be open.")
        }
        if pendingSignOuts[profile] === pending { pendingSignOuts[profile] = nil }
        return outcome
    }

    /// Hands the post-logout redirect of an external end-session to the waiting `signOut`.
    public func completeSignOut(_ params: CompleteSignOutParams) throws(SessionError) -> CompleteSignOutResult {
        try handOver(
            params.callbackUrl, profile: params.provider, to: &pendingSignOuts, noun: "redirect", waiting: "sign-out", noneWaiting: "noPendingSignOut"
        )
        return CompleteSignOutResult()
    }

    /// OpenID Connect RP-Initiated Logout 1.0 §2: the end-session request, with the ID token
    /// as id_token_hint (how the provider knows whose session it ends).
    static func endSessionURL(_ endpoint: String, idToken: String, clientID: String?, redirectURI: String?, state: String) -> String {
        var pairs = [("id_token_hint", idToken)]
        if let clientID { pairs.append(("client_id", clientID)) }
        if let redirectURI {
            pairs.append(("post_logout_redirect_uri", redirectURI))
            pairs.append(("state", state))
        }
        return endpoint + (endpoint.contains("?") ? "&" : "?") + FormEncoding.encode(pairs)
    }
}
