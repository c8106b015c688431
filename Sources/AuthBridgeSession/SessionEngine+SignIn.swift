// Sign-in: requestOAuthTokens's flows (session, external, browser, device),
// completeSignIn, and identifying whose tokens a sign-in returned.

import AuthBridgeCrypto
import AuthBridgeJSON
import AuthBridgeNetwork
import AuthBridgePluginHost
import AuthBridgeProtocol
import AuthBridgeRedaction
import AuthBridgeURL

extension SessionEngine {
    /// Interactive sign-in. `order` is the request's arrival order (0:
    /// unknown), which decides which of two sign-ins is newer.
    /// `clientName`: the app's `clientInfo` name, the `client_name` of a dynamic client registration.
    public func requestOAuthTokens(
        _ params: RequestOAuthTokensParams, requestID: JSON?, order: UInt64 = 0, clientName: String? = nil
    ) async throws(SessionError) -> SignInStatus {
        let profile = params.provider
        var context = try await context(for: profile)
        var params = params
        let resources = TokenPurpose.resources(params.resource)
        for resource in resources ?? [] where !StandardSteps.isResourceIndicator(resource) {
            throw SessionError(
                .invalidParams, "\"resource\" must be an absolute URI without a fragment (RFC 8707).", provider: profile, field: "resource")
        }
        // Incremental consent (as `gh auth refresh -s`): scopes asked for on top of what the current
        // account's sign-in holds, so that signing in again for more loses nothing.
        if let asked = params.scopes, let (_, current) = try? await selectSession(profile, account: nil), current.grant == nil {
            let held = current.signInScopes ?? context.config["scopes"]?.arrayValue?.compactMap(\.stringValue) ?? []
            params.scopes = held + asked.filter { !held.contains($0) }
        }
        let flows = context.plugin.descriptor["flows"]?.arrayValue?.compactMap(\.stringValue) ?? []
        let flow = params.flow?.rawValue ?? flows.first ?? Flow.browser.rawValue
        guard flows.contains(flow) else {
            let supported =
                flows.isEmpty
                ? "; it declares no sign-in flow at all (its describe lists no \"flows\"), so it cannot sign anyone in"
                : " (it supports: \(flows.joined(separator: ", ")))"
            throw SessionError(
                .unsupported, "The \(context.plugin.manifest.id) plugin does not support the \"\(flow)\" flow\(supported).",
                provider: profile, reason: "unsupportedFlow", field: "flow")
        }
        if flow == Flow.browser.rawValue || flow == Flow.external.rawValue {
            // RFC 7591: a profile without a client id signs in with one AuthBridge registers.
            context = try await registeredContext(
                context, clientName: clientName, redirectUri: flow == Flow.external.rawValue ? params.redirectUri : nil)
        }
        let tokens: JSON
        // OIDC: binds the ID token to this attempt (checked when the authorization URL carried it).
        var nonce: String? = PKCE.randomToken()
        // RFC 9449: the session's key, made for this sign-in, proves every token request of it.
        let dpop = flow == Flow.session.rawValue ? nil : try dpopKey(for: context)
        let grant = SignInGrant(scopes: params.scopes, resources: resources, clientCredentials: flow == Flow.clientCredentials.rawValue)
        switch Flow(rawValue: flow) {
        case .clientCredentials:
            nonce = nil
            send(SignInProgressParams(provider: profile, requestId: requestID ?? .null, stage: .exchanging))
            tokens = try await runOrThrow(
                .completeSignIn, input: clientCredentialsInput(context, grant: grant), context: context, requestID: requestID, dpop: dpop)
        case .session:
            nonce = nil
            guard let sessionID = params.sessionId, !sessionID.isEmpty else {
                throw SessionError(
                    .invalidParams, "The session flow needs \"sessionId\" (e.g. Tableau's workgroup_session_id).", provider: profile,
                    field: "sessionId")
            }
            KnownSecrets.shared.remember(sessionID)
            send(SignInProgressParams(provider: profile, requestId: requestID ?? .null, stage: .exchanging))
            let input: JSON = ["profile": context.profileJSON, "flow": "session", "sessionId": .string(sessionID)]
            tokens = try await runOrThrow(.completeSignIn, input: input, context: context, requestID: requestID)
        case .external:
            tokens = try await externalSignIn(
                profile, context: context, params: params, requestID: requestID, listener: nil, nonce: &nonce, dpop: dpop, order: order)
        case .browser:
            // RFC 8252: the redirect comes back to a one-shot listener on 127.0.0.1,
            // which holds the browser's request until the outcome is known.
            let settings = context.profile.settings
            let port = settings["loopbackPort"]?.intValue ?? 0
            let path = settings["loopbackPath"]?.stringValue ?? "/callback"
            guard (0...65_535).contains(port), path.hasPrefix("/"), !path.contains("?"), !path.contains("#") else {
                throw SessionError(
                    .configurationError, "loopbackPort must be 0…65535 and loopbackPath a path starting with /.",
                    provider: profile, reason: "invalidSettings", field: "settings.loopbackPort")
            }
            let listener: LoopbackListener
            if context.config["dynamicClient"]?.boolValue == true {
                // A registered client's redirect URIs are matched exactly: one of their ports, or a new registration.
                if let free = registeredListener(context) {
                    listener = free
                } else {
                    context = try await registeredContext(context, clientName: clientName, redirectUri: nil, portsTaken: true)
                    guard let free = registeredListener(context) else {
                        throw SessionError(
                            .providerUnavailable, "None of the loopback ports registered for the sign-in is free.", provider: profile,
                            reason: "listener")
                    }
                    listener = free
                }
            } else {
                do { listener = try LoopbackListener(port: UInt16(port), path: path) } catch {
                    // bridge-spec §7: every provider error names its profile
                    throw SessionError(.providerUnavailable, error.message, provider: profile, reason: "listener")
                }
            }
            defer { listener.close() }
            do {
                tokens = try await externalSignIn(
                    profile, context: context, params: params, requestID: requestID, listener: listener, nonce: &nonce, dpop: dpop,
                    order: order)
                let result = try await storeSignIn(tokens, context: context, nonce: nonce, dpop: dpop, profile: profile, grant: grant)
                listener.answerBrowser(signedIn: true, message: nil)
                return result
            } catch {
                listener.answerBrowser(signedIn: false, message: error.message)
                throw error
            }
        case .device:
            nonce = nil
            tokens = try await deviceSignIn(profile, context: context, params: params, requestID: requestID, dpop: dpop)
        case nil:
            throw SessionError(
                .unsupported, "The \"\(flow)\" flow is not available in this build of AuthBridge yet.", provider: profile, reason: "unsupportedFlow",
                field: "flow")
        }
        return try await storeSignIn(tokens, context: context, nonce: nonce, dpop: dpop, profile: profile, grant: grant)
    }

    /// What a sign-in asked for, kept with its session for the grants that follow.
    struct SignInGrant {
        var scopes: [String]?
        var resources: [String]?
        var clientCredentials = false
    }

    /// A sign-in's resources as its token requests name them: all on the authorization request,
    /// the first on a token request (see `StandardSteps.tokenResources`).
    static func tokenRequestResources(_ resources: [String]?) -> JSON? {
        guard let resources else { return nil }
        return .array(resources.prefix(1).map(JSON.string))
    }

    /// The client-credentials grant's input (RFC 6749 §4.4).
    private func clientCredentialsInput(_ context: Context, grant: SignInGrant) -> JSON {
        .compactObject([
            "profile": context.profileJSON, "flow": .string(Flow.clientCredentials.rawValue),
            "scopes": grant.scopes.map { .array($0.map(JSON.string)) }, "resources": grant.resources.map { .array($0.map(JSON.string)) },
        ])
    }

    /// The session of a profile whose client signs in as itself (setting `clientCredentials`),
    /// made on first use with no user: under the session's lock, so that the hosts sharing a vault
    /// (a PostgreSQL fleet) make one grant, and the others use it.
    func clientCredentialsSession(_ context: Context) async throws(SessionError) -> (SessionKey, StoredSession) {
        let profile = context.profile.name
        guard let clientID = context.config["clientId"]?.stringValue else {
            throw SessionError(.configurationError, "The profile needs the setting \"clientId\".", provider: profile, reason: "missingSetting")
        }
        let key = SessionKey(profile: profile, account: clientID)
        let dpop = try dpopKey(for: context)
        let grant = SignInGrant(scopes: nil, resources: nil, clientCredentials: true)
        let result: Result<(StoredSession, Bool), SessionError>
        do {
            result = try await store.withExclusiveAccess(to: key) { () async -> Result<(StoredSession, Bool), SessionError> in
                do throws(SessionError) {
                    if let existing = try? await self.store.load(key) { return .success((existing, false)) }
                    let tokens = try await self.runOrThrow(
                        .completeSignIn, input: self.clientCredentialsInput(context, grant: grant), context: context, requestID: nil, dpop: dpop)
                    let session = try await self.newSession(tokens, context: context, nonce: nil, dpop: dpop, profile: profile, grant: grant)
                    try? await self.store.save(session, for: key)
                    return .success((session, true))
                } catch {
                    return .failure(error)
                }
            }
        } catch {
            throw storageError(error, profile: profile)
        }
        let (session, made) = try result.get()
        if made { announce(.signedIn, profile: profile, account: session.wireAccount) }
        return (key, session)
    }

    /// A new DPoP key when the profile's configuration uses DPoP (`dpopAlgorithm`, chosen at configure time).
    private func dpopKey(for context: Context) throws(SessionError) -> DPoPKey? {
        guard let algorithm = context.config["dpopAlgorithm"]?.stringValue.flatMap(SignatureAlgorithm.init(rawValue:)) else { return nil }
        do {
            return try DPoPKey.generate(algorithm)
        } catch {
            throw SessionError(
                .pluginError, "No DPoP key could be made for the sign-in: \(error.message).", provider: context.profile.name,
                reason: "dpopUnavailable")
        }
    }

    /// Hands the callback URL of an external sign-in to the waiting request.
    public func completeSignIn(_ params: CompleteSignInParams) throws(SessionError) -> CompleteSignInResult {
        try handOver(
            params.callbackUrl, profile: params.provider, to: &pendingSignIns, noun: "callback", waiting: "sign-in", noneWaiting: "noPendingSignIn")
        return CompleteSignInResult()
    }

    /// Hands a redirect to the external flow of `profile` waiting in `table` (`completeSignIn`,
    /// `completeSignOut`): one that does not start with its prefix, or carries another `state`, is
    /// refused and the wait goes on (whoever can call the bridge must not end someone else's).
    func handOver(
        _ callbackURL: String, profile: String, to table: inout [String: PendingSignIn], noun: String, waiting: String, noneWaiting: String
    ) throws(SessionError) {
        guard profiles[profile] != nil else { throw unknownProfile(profile) }
        guard let pending = table[profile] else {
            throw SessionError(
                .noPendingSignIn, "No \(waiting) is waiting for a \(noun) on profile \"\(profile)\".", provider: profile,
                reason: noneWaiting)
        }
        if let prefix = pending.callbackPrefix, !callbackURL.hasPrefix(prefix) {
            throw SessionError(.invalidParams, "The \(noun) URL does not belong to this \(waiting).", provider: profile, field: "callbackUrl")
        }
        guard pending.isAnswer(callbackURL) else {
            throw SessionError(
                .invalidParams,
                "The \(noun)'s state is not this \(waiting)'s (a stale or forged redirect): it was ignored, and the \(waiting) is still waiting.",
                provider: profile, reason: "stateMismatch", field: "callbackUrl")
        }
        table[profile] = nil
        pending.deliver(callbackURL)
    }

    /// Verifies what a sign-in returned, stores it and announces it.
    private func storeSignIn(
        _ tokens: JSON, context: Context, nonce: String?, dpop: DPoPKey?, profile: String, grant: SignInGrant
    ) async throws(SessionError) -> SignInStatus {
        let session = try await newSession(tokens, context: context, nonce: nonce, dpop: dpop, profile: profile, grant: grant)
        // Another account of the profile stays signed in; the same account is replaced — under
        // its lock, so that a refresh of the old session in flight (here or in another process)
        // cannot write its tokens over the new ones.
        let key = SessionKey(profile: profile, account: session.accountKey)
        do {
            try await store.withExclusiveAccess(to: key) { try await self.store.save(session, for: key) }
        } catch {
            throw storageError(error, profile: profile)
        }
        announce(.signedIn, profile: profile, account: session.wireAccount)
        return status(profile, state: .signedIn, session: session, reason: .signedIn)
    }

    /// The session a sign-in's answer makes, verified (ID token) and identified (account).
    private func newSession(
        _ tokens: JSON, context: Context, nonce: String?, dpop: DPoPKey?, profile: String, grant: SignInGrant
    ) async throws(SessionError) -> StoredSession {
        if let problem = TokenSet.sizeProblem(tokens["tokens"], account: tokens["account"]) {
            throw SessionError(
                .providerRefused, "The provider's sign-in answer was refused: \(problem). Nothing was stored.",
                provider: profile, reason: "badResponse")
        }
        guard let received = TokenSet(json: tokens["tokens"] ?? .null) else {
            throw SessionError(
                .pluginError, "The \(context.plugin.manifest.id) plugin finished sign-in without an access token.", provider: profile,
                reason: "pluginError")
        }
        // Nothing is stored before the ID token has passed every check.
        var (tokenSet, account) = try await identify(
            received, account: Self.account(tokens["account"]), context: context,
            nonce: nonce, dpop: dpop, profile: profile)
        if tokenSet.idToken != nil { await keepSigningKeys(context) }
        tokenSet.obtainedAt = HostClock.nowMilliseconds()
        var session = StoredSession(tokens: tokenSet, account: account)
        session.signedInAt = tokenSet.obtainedAt
        session.client = SessionClient(config: context.config)
        session.dpopKey = dpop
        session.signInScopes = grant.scopes
        session.resources = grant.resources
        if grant.clientCredentials { session.grant = Flow.clientCredentials.rawValue }
        return session
    }

    /// The external flow: the frontend opens the URL (its own web view or
    /// browser), catches the redirect, and hands the URL back with
    /// `completeSignIn`. With a `listener` (the browser flow) the redirect
    /// comes back to the host itself on 127.0.0.1; `completeSignIn` still works.
    /// `nonce` goes into the authorization request; it is cleared when the
    /// plugin's URL does not carry it (the ID token cannot then be bound to it).
    private func externalSignIn(
        _ profile: String, context: Context, params: RequestOAuthTokensParams, requestID: JSON?,
        listener: LoopbackListener?, nonce: inout String?, dpop: DPoPKey?, order: UInt64 = 0
    ) async throws(SessionError) -> JSON {
        let pkce = PKCE()
        let state = PKCE.randomToken()
        // A registered client's external flow comes back to its first registered redirect URI by default.
        let registered = context.config["registeredRedirectUris"]?.arrayValue?.first?.stringValue
        let redirectURI = listener?.redirectURI ?? params.redirectUri ?? context.config["redirectUri"]?.stringValue ?? registered
        let begin: JSON = .compactObject([
            "profile": context.profileJSON, "flow": "external", "state": .string(state),
            "redirectUri": redirectURI.map(JSON.string), "codeChallenge": .string(pkce.challenge),
            "codeChallengeMethod": "S256", "nonce": nonce.map(JSON.string), "scopes": params.scopes?.wire, "loginHint": params.loginHint?.wire,
            "dpopJkt": dpop.map { .string($0.thumbprint) },
            "resources": TokenPurpose.resources(params.resource).map { .array($0.map(JSON.string)) },
        ])
        let started = try await runOrThrow(.beginSignIn, input: begin, context: context, requestID: requestID)
        guard let url = started["url"]?.stringValue, let parsed = ParsedURL(url), parsed.isSecureTransport else {
            throw SessionError(.pluginError, "The sign-in URL is missing or not https.", provider: profile, reason: "insecureUrl")
        }
        // A pushed request (RFC 9126) carries the nonce by reference: it stays expected (fail-closed).
        if let sent = nonce, parsed.queryValue("request_uri") == nil, parsed.queryValue("nonce") != sent { nonce = nil }
        // Supersede an earlier sign-in for this profile rather than losing its answer. Earlier means
        // arrived earlier: two sign-ins may get here in either order (each awaited begin_sign_in).
        let superseded = SessionError(.userCancelled, "A newer sign-in for this profile replaced this one.", provider: profile, reason: "superseded")
        if order > 0 {
            if order < newestSignIn[profile] ?? 0 { throw superseded }
            newestSignIn[profile] = order
        }
        pendingSignIns.removeValue(forKey: profile)?.fail(superseded)
        let callbackPrefix = started["callbackPrefix"]?.stringValue ?? redirectURI
        let callbackState = context.plugin.descriptor["callbackState"]?.boolValue != false
        let pending = PendingSignIn(callbackPrefix: callbackPrefix, expectedState: callbackState ? state : nil)
        pendingSignIns[profile] = pending
        send(
            SignInProgressParams(
                provider: profile, requestId: requestID ?? .null, stage: .openUrl, url: url, callbackPrefix: callbackPrefix,
                expiresAt: started["expiresAt"]?.intValue))
        let renewal = started["expiresAt"]?.intValue.map { expiresAt in
            Task {
                await renewPushedRequest(
                    begin, expiresAt: expiresAt, context: context, requestID: requestID, callbackPrefix: callbackPrefix, pending: pending)
            }
        }
        defer { renewal?.cancel() }
        if let listener {
            openBrowser?(url) { [self] reason in
                // The frontend (or person) waiting for a browser that never appeared is told.
                send(
                    SignInProgressParams(
                        provider: profile, requestId: requestID ?? .null, stage: .waiting,
                        message: "The browser could not be opened (\(reason)); open the sign-in URL yourself."))
            }
            // Whatever reaches the listener with the right state completes the sign-in.
            Task { if let url = await listener.awaitCallback(state: state) { pending.deliver(url) } }
            send(
                SignInProgressParams(
                    provider: profile, requestId: requestID ?? .null, stage: .waiting,
                    message: "Waiting for the browser to come back to \(listener.redirectURI)."))
        }

        let timeout = max(1_000, min(params.timeoutMs ?? 300_000, 3_600_000))
        let timedOut = SessionError(
            .timeout,
            Self.noCallbackMessage(
                profile: profile, seconds: timeout / 1000,
                clientID: (context.config["clientId"] ?? context.profile.settings["clientId"])?.stringValue,
                redirectURI: redirectURI, loopbackPinned: (context.profile.settings["loopbackPort"]?.intValue ?? 0) != 0,
                listening: listener != nil),
            provider: profile, reason: "timeout")
        let callbackURL: String
        do {
            callbackURL = try await pending.wait(timeoutMilliseconds: timeout, profile: profile, timedOut: timedOut)
        } catch {
            if pendingSignIns[profile] === pending { pendingSignIns[profile] = nil }
            throw error
        }
        if pendingSignIns[profile] === pending { pendingSignIns[profile] = nil }
        let callback = CallbackURL(callbackURL)
        KnownSecrets.shared.remember(callback?.queryValue("code"))
        // RFC 9207: a callback's `iss` is compared with the issuer whenever it carries one; it must
        // carry one where the server advertises `authorization_response_iss_parameter_supported`.
        let issuer = context.config["issuer"]?.stringValue
        let issuerRequired = context.config["issuerInCallback"]?.boolValue == true && issuer != nil
        // The host checks whose answer this is before any plugin acts on it, unless the plugin
        // declares that its provider's callback carries no state (Duke's login page takes none).
        if callbackState {
            guard let callback else {
                throw SessionError(.providerRefused, "The callback URL could not be read.", provider: profile, reason: "invalidCallback")
            }
            if let mismatch = StandardSteps.callbackMismatch(callback, state: state, issuer: issuer, issuerRequired: issuerRequired) {
                throw SessionError(mismatch, provider: profile)
            }
        }
        send(SignInProgressParams(provider: profile, requestId: requestID ?? .null, stage: .exchanging))
        let input: JSON = .compactObject([
            "profile": context.profileJSON, "flow": "external", "callbackUrl": .string(callbackURL),
            "state": .string(state), "codeVerifier": .string(pkce.verifier), "redirectUri": redirectURI.map(JSON.string),
            "nonce": nonce.map(JSON.string), "issuer": issuer.map(JSON.string),
            "expectedIssuer": issuerRequired ? issuer.map(JSON.string) : nil,
            "resources": Self.tokenRequestResources(TokenPurpose.resources(params.resource)),
        ])
        return try await runOrThrow(.completeSignIn, input: input, context: context, requestID: requestID, dpop: dpop)
    }

    /// RFC 9126 §2.2: a pushed request's `request_uri` works for `expires_in` only. While the
    /// sign-in still waits, an expired one is pushed again (same state, PKCE and nonce, so the
    /// callback still matches) and the new URL announced (`openUrl`, with its `expiresAt`): a
    /// frontend that has not opened the page yet opens a live one, never a stale one.
    private func renewPushedRequest(
        _ begin: JSON, expiresAt first: Int64, context: Context, requestID: JSON?, callbackPrefix: String?, pending: PendingSignIn
    ) async {
        let profile = context.profile.name
        var expiresAt = first
        while pendingSignIns[profile] === pending {
            // A deadline, not synchronisation; at least a second between pushes whatever the server says.
            do { try await Task.sleep(for: .milliseconds(max(expiresAt - HostClock.nowMilliseconds(), 1_000))) } catch { return }
            guard pendingSignIns[profile] === pending else { return }
            let started: JSON
            do { started = try await runOrThrow(.beginSignIn, input: begin, context: context, requestID: requestID) } catch {
                logger.notice(
                    "could not push the authorization request again", metadata: ["provider": "\(profile)", "reason": "\(error.reason ?? "")"])
                return
            }
            guard let url = started["url"]?.stringValue, ParsedURL(url)?.isSecureTransport == true, let next = started["expiresAt"]?.intValue,
                pendingSignIns[profile] === pending
            else { return }
            send(
                SignInProgressParams(
                    provider: profile, requestId: requestID ?? .null, stage: .openUrl, url: url, callbackPrefix: callbackPrefix,
                    expiresAt: next, message: "The pushed authorization request expired: this is a new sign-in URL."))
            expiresAt = next
        }
    }

    /// Why a redirect sign-in may never have come back, for its timeout. A provider that does not
    /// know the client id, or does not allow the redirect URI for it, shows its own error page
    /// (`invalid_client`, `invalid_request`) and never redirects: the wait cannot tell that from a
    /// user who did not finish, so the message names all three, with what the profile sends (the
    /// client id and the redirect URI; never a secret).
    static func noCallbackMessage(
        profile: String, seconds: Int64, clientID: String?, redirectURI: String?, loopbackPinned: Bool, listening: Bool
    ) -> String {
        let shown = { (text: String) in "\"\(ConfigurationLoader.printable(text))\"" }
        let client = clientID.map { "the client id \(shown($0))" } ?? "the client id"
        var allowed = redirectURI.map { "the redirect URI \(shown($0))" } ?? "the redirect URI"
        if listening, let redirectURI, let parsed = ParsedURL(redirectURI) {
            // RFC 8252 §7.3: a loopback redirect's port changes with every sign-in unless pinned.
            allowed =
                loopbackPinned
                ? "the redirect URI \(shown(redirectURI)) (exactly that URI: loopbackPort pins its port)"
                : "the redirect URI \(shown("http://127.0.0.1" + parsed.path)) on any port (RFC 8252 §7.3: register that, "
                    + "or pin a port with loopbackPort and register exactly that URI)"
        }
        let returned =
            listening ? "nothing came back to \(redirectURI ?? "the loopback listener")" : "completeSignIn was not called with the redirect"
        let user =
            listening ? "the sign-in was not finished in the browser" : "the sign-in was not finished, or the app did not hand the redirect back"
        return "The sign-in to \(shown(profile)) was not completed within \(seconds) s: \(returned). "
            + "If the browser shows the provider's error (invalid_client, invalid_request…), the provider does not know "
            + "\(client), or does not allow it \(allowed). Otherwise \(user)."
    }

    /// RFC 8628: the user types a code on another device while the host polls
    /// the token endpoint, honouring `interval` and `slow_down`.
    private func deviceSignIn(
        _ profile: String, context: Context, params: RequestOAuthTokensParams, requestID: JSON?, dpop: DPoPKey?
    ) async throws(SessionError) -> JSON {
        let begin: JSON = .compactObject([
            "profile": context.profileJSON, "flow": "device", "state": .string(PKCE.randomToken()), "scopes": params.scopes?.wire,
            "resources": TokenPurpose.resources(params.resource).map { .array($0.map(JSON.string)) },
        ])
        let started = try await runOrThrow(.beginSignIn, input: begin, context: context, requestID: requestID)
        guard let deviceCode = started["deviceCode"]?.stringValue, let userCode = started["userCode"]?.stringValue,
            let verification = started["verificationUri"]?.stringValue
        else {
            throw SessionError(
                .pluginError,
                "The \(context.plugin.manifest.id) plugin started a device sign-in without a device code, user code or verification URI.",
                provider: profile, reason: "pluginError")
        }
        KnownSecrets.shared.remember(deviceCode)
        let timeout = max(1_000, min(params.timeoutMs ?? 900_000, 3_600_000))
        let deadline = min(started["expiresAt"]?.intValue ?? Int64.max, HostClock.nowMilliseconds() + timeout)
        send(
            SignInProgressParams(
                provider: profile, requestId: requestID ?? .null, stage: .deviceCode, userCode: userCode, verificationUri: verification,
                verificationUriComplete: started["verificationUriComplete"]?.stringValue, expiresAt: deadline,
                message: "Open \(verification) and enter the code \(userCode)."))
        let poll: DevicePolling.Poll = { [self] in
            let input: JSON = .compactObject([
                "profile": context.profileJSON, "flow": "device", "code": .string(deviceCode),
                "resources": Self.tokenRequestResources(TokenPurpose.resources(params.resource)),
            ])
            return await self.run(.completeSignIn, input: input, plugin: context.plugin, profile: profile, requestID: requestID, dpop: dpop)
        }
        let polling = DevicePolling(intervalMilliseconds: started["intervalMs"]?.intValue ?? 5_000, deadline: deadline)
        let answer = try await polling.run(profile: profile, poll: poll)
        send(SignInProgressParams(provider: profile, requestId: requestID ?? .null, stage: .exchanging))
        return answer
    }

    // MARK: - Whose tokens

    /// Verifies the ID token (when the provider sent one) and finds the
    /// account: the plugin's word, else the verified ID token's claims, else
    /// the userinfo endpoint. An ID token that cannot be verified (no JWKS
    /// known) is not kept: nothing unverified is trusted or stored.
    private func identify(
        _ received: TokenSet, account: JSON?, context: Context, nonce: String?, dpop: DPoPKey?,
        profile: String
    ) async throws(SessionError) -> (TokenSet, JSON?) {
        var tokens = received
        var account = account
        if let idToken = tokens.idToken {
            if let expectation = idTokenExpectation(context, nonce: nonce) {
                switch await verifier.verify(idToken, expecting: expectation, http: http) {
                case .success(let claims): if account == nil { account = Self.account(claims: claims) }
                case .failure(let failure):
                    await configurationMayHaveChanged(profile, failure: failure)
                    throw SessionError(failure, provider: profile)
                }
            } else {
                logger.notice(
                    "the provider sent an ID token but no jwksUri is known to verify it; it is not kept",
                    metadata: ["provider": "\(profile)"])
                tokens.idToken = nil
            }
        }
        if account == nil, let endpoint = context.config["userinfoEndpoint"]?.stringValue {
            account = await userinfoAccount(endpoint, tokens: tokens, dpop: dpop)
        }
        return (tokens, account)
    }

    func idTokenExpectation(_ context: Context, nonce: String?) -> IDTokenVerifier.Expectation? {
        guard let issuer = context.config["issuer"]?.stringValue, let clientID = context.config["clientId"]?.stringValue,
            let jwksURI = context.config["jwksUri"]?.stringValue
        else { return nil }
        let skew = context.config["clockSkewSeconds"]?.intValue ?? IDTokenVerifier.defaultClockSkewSeconds
        return IDTokenVerifier.Expectation(
            issuer: issuer, clientID: clientID, jwksURI: jwksURI, nonce: nonce,
            clockSkewSeconds: min(max(skew, 0), 600))
    }

    /// OIDC Core §5.3: who the access token belongs to. Failure leaves the account unknown.
    private func userinfoAccount(_ endpoint: String, tokens: TokenSet, dpop: DPoPKey?) async -> JSON? {
        let request: JSON = [
            "method": "GET", "url": .string(endpoint), "timeoutMs": 15_000,
            "headers": ["Authorization": .string("\(StandardSteps.normalisedTokenType(tokens.tokenType)) \(tokens.accessToken)")],
        ]
        guard case .success(let response) = await resourceRequest(request, dpop: dpop), response["status"]?.intValue == 200,
            let claims = try? JSON.parse(response["body"]?.stringValue ?? "")
        else {
            logger.notice("the userinfo endpoint did not name the account")
            return nil
        }
        return Self.account(claims: claims)
    }

    /// The account named by OIDC standard claims.
    static func account(claims: JSON) -> JSON? {
        account(
            .compactObject([
                "id": claims["sub"], "email": claims["email"],
                "name": claims["name"] ?? claims["preferred_username"],
            ]))
    }

    /// Only the Account fields of the spec, as strings: plugins must not
    /// smuggle other data (or tokens) into notifications.
    static func account(_ value: JSON?) -> JSON? {
        guard let members = value?.objectValue else { return nil }
        var account: [String: JSON] = [:]
        for key in ["id", "name", "email"] {
            if let text = members[key]?.stringValue, !text.isEmpty { account[key] = .string(Redaction.redact(text)) }
        }
        return account.isEmpty ? nil : .object(account)
    }
}
