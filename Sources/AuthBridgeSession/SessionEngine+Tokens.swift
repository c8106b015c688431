// Tokens: getAccessToken, fetch (the authorized request proxy) and the
// single-flight refresh behind both.

import AuthBridgeCrypto
import AuthBridgeJSON
import AuthBridgeNetwork
import AuthBridgePluginHost
import AuthBridgeProtocol
import AuthBridgeURL

extension SessionEngine {
    /// A valid access token and what to attach to a request, refreshing first
    /// when the token expires within `minValidityMs`. `forceRefresh`: the
    /// caller saw the provider reject the token (a 401 where no expiry is
    /// known, e.g. Salesforce): renew it now.
    public func getAccessToken(_ params: GetAccessTokenParams, requestID: JSON? = nil) async throws(SessionError) -> AccessTokenResult {
        let (profile, account, forceRefresh) = (params.provider, params.account, params.forceRefresh)
        let minimumValidity = params.minValidityMs ?? Self.defaultMinimumValidityMilliseconds
        let lookup = AnswerCache.Lookup(profile: profile, account: account)
        // A token for other scopes or resources (RFC 6749 §6, RFC 8707): kept per purpose.
        if params.scopes != nil || params.resource != nil {
            let purpose = TokenPurpose(scopes: params.scopes, resources: TokenPurpose.resources(params.resource) ?? [])
            let (context, _, session, token) = try await purposeToken(
                purpose, lookup: lookup, minimumValidity: minimumValidity, forceRefresh: forceRefresh, requestID: requestID)
            return try await purposeAnswer(token, session: session, context: context, params: params, requestID: requestID)
        }
        let observation = store.answers.observe(observation(lookup))
        let (context, key, current) = try await usableSession(lookup, observation: observation)
        var session = current
        let freshness = forceRefresh ? .renew : session.tokens.freshness(at: HostClock.nowMilliseconds(), minimumValidity: minimumValidity)
        if forceRefresh {
            guard session.tokens.refreshToken != nil || session.grant != nil else {
                throw SessionError(
                    .notSignedIn, "The session cannot be renewed (no refresh token); sign in again.", provider: profile,
                    reason: StatusReason.noRefreshToken.rawValue)
            }
            session = try await refreshOrThrow(key, context: context, stale: session)
        } else if freshness == .renew {
            session = try await refreshOrThrow(key, context: context, stale: session)
        } else if freshness == .refreshAhead, refreshes[key] == nil {
            // Refresh ahead: the caller gets the still-valid token at once and
            // the next one is fetched in the background (single-flight as ever).
            let stale = session
            Task { _ = await self.refreshed(key, context: context, stale: stale) }
        }
        var kept: ((AccessTokenResult, DPoPKey?) -> Void)?
        // Kept for the next calls only when it came straight from what was read (no refresh, none
        // started); a DPoP answer without its proof, which each call gets anew.
        if let observation, freshness == .usable, session == current, configs[profile] != nil {
            kept = { [store] answer, dpop in
                store.answers.keep(lookup, observation, tokens: session.tokens, plugin: context.plugin) {
                    $0.accessToken = Answer(answer.wire)
                    $0.dpop = dpop.flatMap { DPoPAnswer(answer.wire, key: $0, accessToken: session.tokens.accessToken) }
                }
            }
        }
        return try await accessTokenAnswer(session, context: context, params: params, requestID: requestID, keep: kept)
    }

    /// `getAccessToken`'s answer for `session`'s tokens: the plugin's headers and cookies for them,
    /// and for a DPoP-bound token the proof of the frontend's request (`params.method`, `url`).
    /// `keep` sees the answer before a proof is added (the answer cache's copy).
    func accessTokenAnswer(
        _ session: StoredSession, context: Context, params: GetAccessTokenParams?, requestID: JSON?,
        keep: ((AccessTokenResult, DPoPKey?) -> Void)? = nil
    ) async throws(SessionError) -> AccessTokenResult {
        var request: JSON = ["method": "GET", "headers": [:]]
        if let base = context.config["apiBaseUrl"]?.stringValue { request = request.setting("url", .string(base)) }
        let authorized = try await authorize(request, session: session, context: context, requestID: requestID)
        var answer = Self.accessTokenAnswer(context.profile.name, session: session, authorized: authorized)
        // A DPoP-bound token (RFC 9449): the frontend's own request needs a proof for its method and URL.
        let dpop = session.dpopKey.flatMap { answer.tokenType == "DPoP" || answer.headers["Authorization"]?.hasPrefix("DPoP ") == true ? $0 : nil }
        if dpop != nil { answer.tokenType = "DPoP" }
        keep?(answer, dpop)
        if let dpop, let params, let url = params.url {
            answer.headers["DPoP"] = try Self.proof(
                dpop, method: params.method ?? "GET", url: url, nonce: params.dpopNonce, session: session, context: context)
        }
        return answer
    }

    /// `getAccessToken`'s answer (its JSON text) when it needs no refresh, without the actor (see
    /// `AnswerCache`); nil when only the engine can answer. `request`: the method, absolute URL and
    /// server nonce of the frontend's request, for a DPoP-bound session's proof, made here.
    public nonisolated func accessTokenAtOnce(
        _ profile: String, account: String?, minimumValidity: Int64, request: (method: String, url: String, nonce: String?)? = nil
    ) -> [UInt8]? {
        guard let entry = store.answers.current(AnswerCache.Lookup(profile: profile, account: account)), let answer = entry.accessToken,
            entry.tokens.freshness(at: HostClock.nowMilliseconds(), minimumValidity: minimumValidity) == .usable
        else { return nil }
        guard let dpop = entry.dpop, let request else { return answer.text }
        // A relative URL needs the profile's apiBaseUrl: the engine joins it.
        guard let origin = ParsedURL(request.url)?.origin else { return nil }
        if let nonce = request.nonce { DPoPNonces.shared.keep(nonce, for: request.url) }
        guard
            let proof = try? dpop.key.proof(
                method: request.method, url: request.url, ath: dpop.ath, nonce: DPoPNonces.shared.nonce(origin: origin),
                now: HostClock.systemMilliseconds())
        else { return nil }
        return dpop.text(with: proof)
    }

    /// `getAccessToken`'s answer for the session's own token when the stored one serves as it is,
    /// else nil with nothing done: no discovery, refresh (due or ahead), sign-in or sign-out, no
    /// write. For `authbridge token` without an agent, which hands every other case — and the
    /// explaining of errors — to the command line tool, whose `getAccessToken` then does it all.
    /// Nil too for a DPoP-bound session (each use needs a proof) and a revoked license.
    public func accessTokenAsStored(profile: String, account: String?, minimumValidity: Int64?) async -> AccessTokenResult? {
        guard let context = await contextWithoutDiscovery(for: profile),
            let found = try? await readSession(AnswerCache.Lookup(profile: profile, account: account), observation: nil)
        else { return nil }
        let session = found.1
        guard session.client?.change(to: SessionClient(config: context.config)) == nil, !session.licenseRevoked, session.dpopKey == nil,
            session.tokens.freshness(at: HostClock.nowMilliseconds(), minimumValidity: minimumValidity ?? Self.defaultMinimumValidityMilliseconds)
                == .usable
        else { return nil }
        return try? await accessTokenAnswer(session, context: context, params: nil, requestID: nil)
    }

    /// How to tell whether the session a call means changed since it was read.
    func observation(_ lookup: AnswerCache.Lookup) -> ChangeProbe? {
        guard let account = lookup.account else { return store.changeProbe(recordsOf: lookup.profile) }
        return store.changeProbe(SessionKey(profile: lookup.profile, account: account))
    }

    /// The answer, with the headers and cookies the plugin's `authorize_request` attaches (those the
    /// spec can carry: string headers, cookies with a name, value, domain and path).
    private static func accessTokenAnswer(_ profile: String, session: StoredSession, authorized: JSON) -> AccessTokenResult {
        AccessTokenResult(
            provider: profile, account: session.wireAccount, accessToken: session.tokens.accessToken, tokenType: session.tokens.tokenType,
            expiresAt: session.tokens.expiresAt, headers: (authorized["request"]?["headers"]?.objectValue ?? [:]).compactMapValues(\.stringValue),
            cookies: authorized["cookies"]?.arrayValue?.compactMap { try? Cookie(wire: $0) } ?? [],
            details: session.tokens.details.isEmpty ? nil : session.tokens.details)
    }

    /// An authorized request through the provider plugin. A "session expired"
    /// answer (as the plugin classifies it) refreshes and replays once; a
    /// revocation signs the profile out.
    public func fetch(_ params: FetchParams, requestID: JSON?) async throws(SessionError) -> FetchResult {
        let profile = params.provider
        let request: JSON = .compactObject([
            "method": .string(params.method.rawValue), "url": .string(params.url), "headers": .object((params.headers ?? [:]).mapValues(JSON.string)),
            "body": params.body.map(JSON.string), "timeoutMs": params.timeoutMs.map(JSON.int),
        ])
        let lookup = AnswerCache.Lookup(profile: profile, account: params.account)
        var (context, key, current) = try await usableSession(lookup, observation: store.answers.observe(observation(lookup)))
        var session = current
        // A request for other scopes, or to a configured resource, goes with that purpose's token.
        let purpose = Self.fetchPurpose(params, resources: grantResources(current, context: context))
        if let purpose {
            session.tokens = try await purposeToken(
                purpose, lookup: lookup, minimumValidity: 0, forceRefresh: false, requestID: requestID
            ).3
        } else if let expiresAt = session.tokens.expiresAt, expiresAt <= HostClock.nowMilliseconds(),
            session.tokens.refreshToken != nil || session.grant != nil
        {
            // A token known to be expired is renewed first rather than spending a 401.
            session = try await refreshOrThrow(key, context: context, stale: session)
        }
        var replayed = false
        var steppedUp = params.stepUp == false
        while true {
            let authorized = try await authorize(request, session: session, context: context, requestID: requestID)
            var outgoing = authorized["request"] ?? request
            if let cookies = authorized["cookies"]?.arrayValue, !cookies.isEmpty {
                let header = cookies.compactMap { cookie -> String? in
                    guard let name = cookie["name"]?.stringValue, let value = cookie["value"]?.stringValue else { return nil }
                    return "\(name)=\(value)"
                }.joined(separator: "; ")
                var headers = outgoing["headers"]?.objectValue ?? [:]
                headers["Cookie"] = .string(header)
                outgoing = outgoing.setting("headers", .object(headers))
            }
            let response: JSON
            switch await resourceRequest(outgoing, dpop: session.dpopKey) {
            case .success(let value): response = value
            case .failure(let failure):
                if Task.isCancelled { throw SessionError.cancelled(provider: profile) }
                throw SessionError(failure, provider: profile)
            }
            let classifyInput: JSON = ["profile": context.profileJSON, "request": outgoing, "response": response]
            let outcome: JSON
            switch await run(.classifyResponse, input: classifyInput, plugin: context.plugin, profile: profile, requestID: requestID) {
            case .success(let value): outcome = value
            case .failure: outcome = ["outcome": .string(ResponseOutcome.ok.rawValue)]
            }
            let message = outcome["message"]?.stringValue
            switch outcome["outcome"]?.stringValue.flatMap(ResponseOutcome.init(rawValue:)) {
            case .sessionExpired where !replayed:
                replayed = true
                if let purpose {
                    session.tokens = try await purposeToken(
                        purpose, lookup: lookup, minimumValidity: 0, forceRefresh: true, requestID: requestID
                    ).3
                } else {
                    session = try await refreshOrThrow(key, context: context, stale: session)
                }
                continue
            case .revoked:
                try await endSession(key, reason: .revoked, message: message, ended: session, context: context)
                throw SessionError(
                    .notSignedIn, message ?? "The provider revoked this session.", provider: profile,
                    reason: StatusReason.revoked.rawValue)
            case .licenseRevoked:
                _ = try await markLicenseRevoked(key, session: session, context: context, message: message)
            default:
                break
            }
            if !steppedUp,
                let added = Self.stepUpScopes(response, held: session.signInScopes ?? context.config["scopes"]?.arrayValue?.compactMap(\.stringValue))
            {
                // RFC 6750 §3.1 (the MCP step-up): the resource needs scopes the sign-in does not hold.
                // The user is asked once for them on top of the account's (incremental consent), then the request is replayed.
                steppedUp = true
                logger.info("the resource asks for more scopes; signing in again for them", metadata: ["provider": "\(profile)"])
                _ = try await requestOAuthTokens(RequestOAuthTokensParams(provider: profile, scopes: added), requestID: requestID)
                (context, key, current) = try await usableSession(lookup, observation: nil)
                session = current
                if let purpose {
                    session.tokens = try await purposeToken(
                        purpose, lookup: lookup, minimumValidity: 0, forceRefresh: true, requestID: requestID
                    ).3
                }
                continue
            }
            return FetchResult(
                status: response["status"]?.intValue ?? 0, headers: (response["headers"]?.objectValue ?? [:]).compactMapValues(\.stringValue),
                body: response["body"]?.stringValue ?? "")
        }
    }

    /// The scopes a 403 `insufficient_scope` challenge (RFC 6750 §3.1) asks for that `held` lacks,
    /// or nil: no such answer, or nothing new to ask for (another reason, which asking again would not change).
    static func stepUpScopes(_ response: JSON, held: [String]?) -> [String]? {
        guard response["status"]?.intValue == 403, let field = response["headers"]?["www-authenticate"]?.stringValue,
            let challenge = AuthenticationChallenge.parse(field).first(where: { $0.error == "insufficient_scope" }),
            let wanted = challenge.scopes
        else { return nil }
        let held = held ?? []
        let added = wanted.filter { !held.contains($0) }
        return added.isEmpty ? nil : wanted
    }

    /// Which purpose's token a `fetch` uses: its `scopes` and `resource`, else the configured
    /// resource its URL is under (the longest), nil for the session's own token.
    static func fetchPurpose(_ params: FetchParams, resources: [String]) -> TokenPurpose? {
        if params.scopes != nil || params.resource != nil {
            return TokenPurpose(scopes: params.scopes, resources: TokenPurpose.resources(params.resource) ?? [])
        }
        // The session's own token is for the first resource (`StandardSteps.tokenResources`).
        guard resources.count > 1 else { return nil }
        let matching = resources.filter { resource in
            params.url == resource || params.url.hasPrefix(resource.hasSuffix("/") ? resource : resource + "/")
                || (params.url.hasPrefix(resource) && (params.url.dropFirst(resource.count).first.map { "?#".contains($0) } ?? true))
        }
        guard let best = matching.max(by: { $0.count < $1.count }), best != resources.first else { return nil }
        return TokenPurpose(scopes: nil, resources: [best])
    }

    /// A DPoP proof for a frontend's request (`getAccessToken` with `url`): `htu` the URL (a relative
    /// one joined to `apiBaseUrl`), `ath` the access token, the server's last nonce (`nonce`, when
    /// the frontend brings one).
    private static func proof(
        _ key: DPoPKey, method: String, url: String, nonce: String?, session: StoredSession, context: Context
    ) throws(SessionError) -> String {
        var target = url
        if ParsedURL(url) == nil {
            guard let base = context.config["apiBaseUrl"]?.stringValue else {
                throw SessionError(
                    .invalidParams, "A relative url needs the profile setting \"apiBaseUrl\".", provider: context.profile.name, field: "url")
            }
            target = StandardSteps.joinURL(base, url)
        }
        // A nonce the frontend's request was refused for (RFC 9449 §9) is the server's latest.
        if let nonce { DPoPNonces.shared.keep(nonce, for: target) }
        do {
            return try key.proof(
                method: method, url: target, accessToken: session.tokens.accessToken, nonce: DPoPNonces.shared.nonce(for: target),
                now: HostClock.systemMilliseconds())
        } catch {
            throw SessionError(
                .pluginError, "No DPoP proof could be made: \(error.message).", provider: context.profile.name, reason: "dpopUnavailable")
        }
    }

    /// A request to a resource (or userinfo) with the session's tokens: with a DPoP key and a DPoP
    /// access token, it leaves with a proof, and a server's nonce request is answered once.
    func resourceRequest(_ request: JSON, dpop: DPoPKey?) async -> Result<JSON, ProviderFailure> {
        let authorization = request["headers"]?.objectValue?.first { $0.key.lowercased() == "authorization" }?.value.stringValue
        guard let dpop, authorization?.lowercased().hasPrefix("dpop ") == true else { return await http.perform(request) }
        let http = self.http
        return await DPoPBinding(key: dpop).perform(request) { await http.perform($0) }
    }

    /// The session a token call means, with its profile's context; none is
    /// handed out while its license is revoked.
    func usableSession(
        _ lookup: AnswerCache.Lookup, observation: AnswerCache.Observation?
    ) async throws(SessionError) -> (Context, SessionKey, StoredSession) {
        let context = try await context(for: lookup.profile)
        guard let (key, session) = try await readSession(lookup, observation: observation) else {
            // A profile of a client that signs in as itself (RFC 6749 §4.4) needs no user: it signs in now.
            if context.config["clientCredentials"]?.boolValue == true,
                lookup.account == nil || lookup.account == context.config["clientId"]?.stringValue
            {
                let (key, session) = try await clientCredentialsSession(context)
                return (context, key, session)
            }
            throw notSignedIn(lookup.profile, account: lookup.account)
        }
        if let discarded = try await endIfIssuedToAnotherClient(key, session: session, context: context) {
            throw SessionError(.notSignedIn, discarded, provider: lookup.profile, reason: StatusReason.profileChanged.rawValue)
        }
        try await refuseIfLicenseRevoked(key, session: session, context: context)
        return (context, key, session)
    }

    /// The plugin's `authorize_request`: what to attach to `request` for these
    /// tokens. Pure by the ABI (no I/O; the same input, the same answer): the
    /// calls that ask for one input share one run and its answer — a burst of
    /// `getAccessToken` after a refresh costs one hook call, not one each.
    /// A failure is never reused.
    private func authorize(_ request: JSON, session: StoredSession, context: Context, requestID: JSON?) async throws(SessionError) -> JSON {
        let input: JSON = ["profile": context.profileJSON, "tokens": session.tokens.json, "request": request]
        let profile = context.profile.name
        let work: SharedWork<Result<JSON, SessionError>>
        if let known = authorizations[profile], known.input == input, !known.work.failed {
            work = known.work
        } else {
            work = SharedWork(cancelsWhenAbandoned: true) {
                do throws(SessionError) {
                    return .success(try await self.runOrThrow(.authorizeRequest, input: input, context: context, requestID: requestID))
                } catch {
                    return .failure(error)
                }
            }
            authorizations[profile] = (input, work)
        }
        guard let result = await work.value() else {
            throw SessionError.cancelled(provider: profile)
        }
        return try result.get()
    }

    // MARK: - Refresh (single-flight)

    private func refreshOrThrow(_ key: SessionKey, context: Context, stale: StoredSession) async throws(SessionError) -> StoredSession {
        switch await refreshed(key, context: context, stale: stale) {
        case .success(let session): return session
        case .failure(let failure) where failure.oauthError == "invalid_target":
            // The server refused the resource, not the grant (glewlwyd binds a rotated refresh
            // token to the resource of the refresh that issued it): the session is kept.
            throw SessionError(
                .providerRefused, "The provider will not renew the token for this resource (invalid_target): \(failure.message)",
                provider: key.profile, reason: "invalid_target", status: failure.status, oauthError: failure.oauthError)
        case .failure(let failure) where failure.kind == .definitive:
            throw SessionError(
                .notSignedIn, failure.message, provider: key.profile, reason: StatusReason(refusal: failure.reason).rawValue,
                status: failure.status, oauthError: failure.oauthError)
        case .failure(let failure):
            throw SessionError(failure, provider: key.profile)
        }
    }

    /// Refreshes once for any number of concurrent callers. If the stored
    /// session already differs from `stale`, someone else refreshed: use it.
    func refreshed(_ key: SessionKey, context: Context, stale: StoredSession) async -> Result<StoredSession, ProviderFailure> {
        // A caller that is cancelled stops waiting; the refresh itself always runs to its end
        // (the provider may already have rotated the refresh token: the new one must be stored).
        let work: SharedWork<Result<StoredSession, ProviderFailure>>
        if let running = refreshes[key], !running.isFinished {
            work = running
        } else {
            work = SharedWork(cancelsWhenAbandoned: false) { await self.performRefresh(key, context: context, stale: stale) }
            refreshes[key] = work
        }
        let result = await work.value()
        if refreshes[key] === work, work.isFinished { refreshes[key] = nil }
        return result ?? .failure(ProviderFailure.cancelled)
    }

    /// One refresh, under the profile's cross-process lock: the session is
    /// re-read inside it, and if another process already rotated the tokens
    /// they are used instead of replaying a spent refresh token.
    private func performRefresh(_ key: SessionKey, context: Context, stale: StoredSession) async -> Result<StoredSession, ProviderFailure> {
        do {
            return try await store.withExclusiveAccess(to: key) {
                await self.refreshLocked(key, context: context, stale: stale)
            }
        } catch let error as VaultError where error.reason == .lockTimeout {
            let busy = Self.accountBusy(profile: key.profile)
            return .failure(ProviderFailure(.transient, reason: Self.accountBusyReason, message: busy.message))
        } catch is CancellationError {
            return .failure(ProviderFailure.cancelled)
        } catch {
            return .failure(ProviderFailure(.transient, reason: "storageError", message: "The session store could not be locked: \(error)"))
        }
    }

    private func refreshLocked(_ key: SessionKey, context: Context, stale: StoredSession) async -> Result<StoredSession, ProviderFailure> {
        let profile = key.profile
        let current: StoredSession?
        do { current = try await store.load(key) } catch {
            return .failure(ProviderFailure(.transient, reason: "storageError", message: "The stored session could not be read: \(error)"))
        }
        guard let current else {
            return .failure(ProviderFailure(.definitive, reason: StatusReason.noTokens.rawValue, message: "The session was signed out meanwhile."))
        }
        // Someone else renewed the session's own token meanwhile: use theirs. (A purpose's grant may
        // have rotated the refresh token alone: the access token is still to be renewed, with it.)
        if current.tokens.accessToken != stale.tokens.accessToken || current.tokens.expiresAt != stale.tokens.expiresAt {
            return .success(current)
        }
        let hook: PluginHook
        var input: JSON
        if current.grant == Flow.clientCredentials.rawValue {
            // A client's own session has no refresh token: a new client-credentials grant renews it.
            hook = .completeSignIn
            input = ["profile": context.profileJSON, "flow": .string(Flow.clientCredentials.rawValue)]
        } else {
            hook = .refresh
            input = ["profile": context.profileJSON, "tokens": current.tokens.json]
        }
        if hook == .completeSignIn, let scopes = current.signInScopes { input = input.setting("scopes", .array(scopes.map(JSON.string))) }
        if let resources = Self.tokenRequestResources(current.resources) { input = input.setting("resources", resources) }
        let stale = current
        switch await run(hook, input: input, plugin: context.plugin, profile: profile, requestID: nil, dpop: stale.dpopKey) {
        case .success(let answer):
            if let problem = TokenSet.sizeProblem(answer["tokens"], account: answer["account"]) {
                // Too big to keep: the grant cannot go on (a rotated refresh token is spent).
                let failure = ProviderFailure(.definitive, reason: "badResponse", message: "The provider's refresh answer was refused: \(problem).")
                _ = try? await endSession(
                    key, reason: EndReason(refusal: failure.reason), message: failure.message, ended: stale, context: context,
                    holdingLock: true)
                return .failure(failure)
            }
            guard var fresh = TokenSet(json: answer["tokens"] ?? .null) else {
                return .failure(ProviderFailure(.transient, reason: "badResponse", message: "The refresh answer had no access token."))
            }
            fresh.obtainedAt = HostClock.nowMilliseconds()
            if let idToken = fresh.idToken, idToken != stale.tokens.idToken {
                fresh.idToken = await refreshedIDToken(idToken, context: context, session: stale, profile: profile)
            }
            var session = stale
            session.tokens = stale.tokens.updated(with: fresh)
            // The account is the record's key: a refresh does not move the session to another.
            if let account = Self.account(answer["account"]), account["id"]?.stringValue ?? "" == key.account { session.account = account }
            // Durable before anyone sees the new access token (rotation safety).
            do { try await store.save(session, for: key) } catch {
                return .failure(ProviderFailure(.transient, reason: "storageError", message: "The refreshed session could not be stored."))
            }
            announce(.refreshed, profile: profile, account: session.wireAccount)
            return .success(session)
        case .failure(let failure) where failure.kind == .definitive && StatusReason(refusal: failure.reason) == .licenseRevoked:
            // Like a license lost on an API call: announced, then signed out after the grace period.
            _ = try? await markLicenseRevoked(key, session: stale, context: context, message: failure.message, holdingLock: true)
            return .failure(failure)
        case .failure(let failure) where failure.kind == .definitive && failure.oauthError != "invalid_target":
            // A client AuthBridge registered that the server no longer knows: the next sign-in registers again.
            if failure.oauthError == "invalid_client" { await forgetRegistration(context, refusedClient: stale.client?.clientId) }
            _ = try? await endSession(
                key, reason: EndReason(refusal: failure.reason), message: failure.message, ended: stale, context: context,
                holdingLock: true)
            return .failure(failure)
        case .failure(let failure):
            logger.notice("refresh failed transiently; the session is kept", metadata: ["provider": "\(profile)", "reason": "\(failure.reason)"])
            return .failure(failure)
        }
    }

    /// OIDC §12.2: an ID token from a refresh is verified like the first
    /// (without a nonce) and must name the same subject. One that fails is
    /// dropped — the rotated refresh token it came with must still be kept.
    private func refreshedIDToken(_ idToken: String, context: Context, session: StoredSession, profile: String) async -> String? {
        guard let expectation = idTokenExpectation(context, nonce: nil) else { return nil }
        switch await verifier.verify(idToken, expecting: expectation, http: http) {
        case .success(let claims):
            if let known = session.account?["id"]?.stringValue, let subject = claims["sub"]?.stringValue, known != subject {
                logger.warning("a refreshed ID token names another subject; it is not kept", metadata: ["provider": "\(profile)"])
                return nil
            }
            return idToken
        case .failure(let failure):
            logger.warning(
                "a refreshed ID token failed verification; it is not kept",
                metadata: ["provider": "\(profile)", "reason": "\(failure.reason)"])
            return nil
        }
    }
}
