// Tokens beyond a session's own: for other scopes or resources (RFC 6749 §6, RFC 8707 §2.2, asked
// with the session's refresh token), and for other audiences (RFC 8693 token exchange). Each is
// kept in the session's record by its purpose, handed out while valid, and fetched again
// single-flight per purpose; the session's one refresh token stays the one (a rotation by any
// purpose's grant replaces it for all).

import AuthBridgeJSON
import AuthBridgePluginHost
import AuthBridgeProtocol
import AuthBridgeRedaction

/// What a derived token is for; its `key` names it in the session's record.
struct TokenPurpose: Hashable, Sendable {
    /// The scopes asked for (sorted, without repeats); nil: the grant's own.
    var scopes: [String]?
    /// The protected resources (RFC 8707), sorted, without repeats.
    var resources: [String]
    /// Set for a token exchange (RFC 8693).
    var exchange: Exchange?

    struct Exchange: Hashable, Sendable {
        var audience: String?
        var requestedTokenType: String?
        var subjectTokenType: String
    }

    init(scopes: [String]?, resources: [String], exchange: Exchange? = nil) {
        self.scopes = scopes.map { Array(Set($0)).sorted() }
        self.resources = Array(Set(resources)).sorted()
        self.exchange = exchange
    }

    /// The purpose's name in the record: its parts as JSON text (stable: sorted, fixed order).
    var key: String {
        var parts: [JSON] = [
            scopes.map { .array($0.map(JSON.string)) } ?? .null, .array(resources.map(JSON.string)),
        ]
        if let exchange {
            parts += [
                "exchange", .string(exchange.subjectTokenType), exchange.audience.map(JSON.string) ?? .null,
                exchange.requestedTokenType.map(JSON.string) ?? .null,
            ]
        }
        return JSON.array(parts).serializedString()
    }

    /// The resources of a bridge `resource` param (a URI or a list of them); nil when absent.
    static func resources(_ value: JSON?) -> [String]? {
        guard let value, !value.isNull else { return nil }
        if let one = value.stringValue { return [one] }
        return value.arrayValue?.compactMap(\.stringValue)
    }
}

/// Which derived token of which session: the unit of single-flight.
struct DerivedKey: Hashable, Sendable {
    var session: SessionKey
    var purpose: String
}

extension SessionEngine {
    /// Plugins whose refresh hook honours `scopes` and `resources` (the standard one does) say so.
    static let scopedTokensCapability = "scopedTokens"

    /// `getAccessToken` with `scopes` or `resource`: the session's token for exactly that purpose.
    func purposeToken(
        _ purpose: TokenPurpose, lookup: AnswerCache.Lookup, minimumValidity: Int64, forceRefresh: Bool, requestID: JSON?
    ) async throws(SessionError) -> (Context, SessionKey, StoredSession, TokenSet) {
        let (context, key, session) = try await usableSessionForPurpose(lookup)
        if purpose.exchange == nil, session.grant == nil {
            let capabilities = context.plugin.descriptor["capabilities"]?.arrayValue?.compactMap(\.stringValue) ?? []
            guard capabilities.contains(Self.scopedTokensCapability) else {
                throw SessionError(
                    .unsupported,
                    "The \(context.plugin.manifest.id) plugin cannot get tokens for other scopes or resources (it does not list the "
                        + "\"\(Self.scopedTokensCapability)\" capability).",
                    provider: lookup.profile, reason: "unsupported")
            }
        }
        try checkResources(purpose.resources, profile: lookup.profile)
        try Self.checkScopes(purpose.scopes, profile: lookup.profile)
        // Scopes beyond what the server said the grant holds are refused here: some servers (glewlwyd)
        // ignore a refresh's scope and would answer with the grant's own token.
        if purpose.exchange == nil, session.grant == nil, let asked = purpose.scopes, session.tokens.scope != nil {
            let missing = missingScopes(asked, session: session, context: context)
            if !missing.isEmpty { throw insufficientScope(missing, profile: lookup.profile, failure: nil) }
        }
        let now = HostClock.nowMilliseconds()
        if !forceRefresh, let kept = session.derived[purpose.key], kept.freshness(at: now, minimumValidity: minimumValidity) != .renew {
            // Refresh ahead, as for the session's own token: past three quarters of its lifetime the
            // caller gets it at once and the next one is fetched in the background (single-flight).
            if let ahead = kept.refreshAheadAt, now >= ahead, derivedWork[DerivedKey(session: key, purpose: purpose.key)] == nil {
                Task { _ = try? await self.derivedOrThrow(purpose, key: key, context: context, stale: session, minimumValidity: minimumValidity) }
            }
            return (context, key, session, kept)
        }
        let derived = try await derivedOrThrow(purpose, key: key, context: context, stale: session, minimumValidity: minimumValidity)
        return (context, key, session, derived)
    }

    /// The session a purpose's token comes from (a client-credentials profile signs its client in
    /// first when it has no session).
    func usableSessionForPurpose(_ lookup: AnswerCache.Lookup) async throws(SessionError) -> (Context, SessionKey, StoredSession) {
        try await usableSession(lookup, observation: store.answers.observe(observation(lookup)))
    }

    /// RFC 6749 §3.3: a scope token is printable ASCII without space, double quote or backslash.
    static func checkScopes(_ scopes: [String]?, profile: String) throws(SessionError) {
        for scope in scopes ?? [] where scope.isEmpty || !scope.utf8.allSatisfy({ (0x21...0x7E).contains($0) && $0 != 0x22 && $0 != 0x5C }) {
            throw SessionError(
                .invalidParams, "\"scopes\" holds a scope that is not an RFC 6749 scope token (printable ASCII without space, \" or \\).",
                provider: profile, field: "scopes")
        }
    }

    private func checkResources(_ resources: [String], profile: String) throws(SessionError) {
        for resource in resources where !StandardSteps.isResourceIndicator(resource) {
            throw SessionError(
                .invalidParams, "\"resource\" must be an absolute URI without a fragment (RFC 8707): \"\(providerSafe(resource))\".",
                provider: profile, field: "resource")
        }
    }

    private func providerSafe(_ text: String) -> String { StandardSteps.providerText(text) }

    private func derivedOrThrow(
        _ purpose: TokenPurpose, key: SessionKey, context: Context, stale: StoredSession, minimumValidity: Int64
    ) async throws(SessionError) -> TokenSet {
        let work: SharedWork<Result<TokenSet, SessionError>>
        let derivedKey = DerivedKey(session: key, purpose: purpose.key)
        if let running = derivedWork[derivedKey], !running.isFinished {
            work = running
        } else {
            work = SharedWork(cancelsWhenAbandoned: false) {
                await self.fetchDerived(purpose, key: key, context: context, stale: stale, minimumValidity: minimumValidity)
            }
            derivedWork[derivedKey] = work
        }
        let result = await work.value()
        if derivedWork[derivedKey] === work, work.isFinished { derivedWork[derivedKey] = nil }
        guard let result else { throw SessionError.cancelled(provider: key.profile) }
        return try result.get()
    }

    /// One grant for a purpose, under the session's cross-process lock: the record is read again
    /// inside it, and a token another caller (or process) got meanwhile is used instead.
    private func fetchDerived(
        _ purpose: TokenPurpose, key: SessionKey, context: Context, stale: StoredSession, minimumValidity: Int64
    ) async -> Result<TokenSet, SessionError> {
        do {
            return try await store.withExclusiveAccess(to: key) {
                await self.fetchDerivedLocked(purpose, key: key, context: context, stale: stale, minimumValidity: minimumValidity)
            }
        } catch let error as VaultError where error.reason == .lockTimeout {
            return .failure(Self.accountBusy(profile: key.profile))
        } catch is CancellationError {
            return .failure(.cancelled(provider: key.profile))
        } catch {
            return .failure(
                SessionError(.storageError, "The session store could not be locked: \(error)", provider: key.profile, reason: "storageError"))
        }
    }

    private func fetchDerivedLocked(
        _ purpose: TokenPurpose, key: SessionKey, context: Context, stale: StoredSession, minimumValidity: Int64
    ) async -> Result<TokenSet, SessionError> {
        let profile = key.profile
        let current: StoredSession
        do {
            guard let loaded = try await store.load(key) else { return .failure(notSignedIn(profile, account: key.account)) }
            current = loaded
        } catch {
            return .failure(storageError(error, profile: profile))
        }
        let now = HostClock.nowMilliseconds()
        if let kept = current.derived[purpose.key], kept != stale.derived[purpose.key],
            kept.freshness(at: now, minimumValidity: minimumValidity) != .renew
        {
            return .success(kept)
        }
        let hook: PluginHook
        var input: JSON
        if let exchange = purpose.exchange {
            hook = .exchangeToken
            input = .compactObject([
                "profile": context.profileJSON, "tokens": current.tokens.json, "subjectTokenType": .string(exchange.subjectTokenType),
                "audience": exchange.audience.map(JSON.string), "requestedTokenType": exchange.requestedTokenType.map(JSON.string),
            ])
        } else if current.grant == Flow.clientCredentials.rawValue {
            hook = .completeSignIn
            input = ["profile": context.profileJSON, "flow": .string(Flow.clientCredentials.rawValue)]
        } else {
            hook = .refresh
            input = ["profile": context.profileJSON, "tokens": current.tokens.json]
        }
        if let scopes = purpose.scopes { input = input.setting("scopes", .array(scopes.map(JSON.string))) }
        if !purpose.resources.isEmpty { input = input.setting("resources", .array(purpose.resources.map(JSON.string))) }
        switch await run(hook, input: input, plugin: context.plugin, profile: profile, requestID: nil, dpop: current.dpopKey) {
        case .success(let answer):
            if let problem = TokenSet.sizeProblem(answer["tokens"], account: nil) {
                return .failure(
                    SessionError(.providerRefused, "The provider's answer was refused: \(problem).", provider: profile, reason: "badResponse"))
            }
            guard var fresh = TokenSet(json: answer["tokens"] ?? .null) else {
                return .failure(
                    SessionError(.providerUnavailable, "The provider answered without an access token.", provider: profile, reason: "badResponse"))
            }
            fresh.obtainedAt = HostClock.nowMilliseconds()
            var updated = current
            // A rotated refresh token is the session's from now on, whichever purpose's grant brought it.
            if hook == .refresh, let rotated = fresh.refreshToken, rotated != current.tokens.refreshToken {
                updated.tokens.refreshToken = rotated
            }
            fresh.refreshToken = nil
            fresh.idToken = nil
            updated.derived[purpose.key] = fresh
            while updated.derived.count > StoredSession.derivedLimit,
                let oldest = updated.derived.min(by: { ($0.value.obtainedAt ?? 0) < ($1.value.obtainedAt ?? 0) })?.key
            {
                updated.derived[oldest] = nil
            }
            do { try await store.save(updated, for: key) } catch {
                return .failure(storageError(error, profile: profile))
            }
            return .success(fresh)
        case .failure(let failure):
            return .failure(await derivedFailure(failure, purpose: purpose, hook: hook, key: key, context: context, session: current))
        }
    }

    /// What a refused purpose grant means. A token exchange's refusal, or a client's grant for other
    /// scopes, never ends the session. A refresh grant's does only when the refusal is about the
    /// refresh token: `invalid_grant`, or a refusal without a scope or resource word (glewlwyd's
    /// bodyless 400, idpyoidc's invalid_request) for scopes and resources the grant covers. Asking
    /// for scopes it does not cover is `insufficientScope`, with the missing ones.
    private func derivedFailure(
        _ failure: ProviderFailure, purpose: TokenPurpose, hook: PluginHook, key: SessionKey, context: Context, session: StoredSession
    ) async -> SessionError {
        let profile = key.profile
        guard failure.kind == .definitive else { return SessionError(failure, provider: profile) }
        let missing = missingScopes(purpose.scopes ?? [], session: session, context: context)
        let unknownResources = purpose.resources.filter { !grantResources(session, context: context).contains($0) }
        if failure.oauthError == "invalid_scope" || (hook == .refresh && failure.oauthError != "invalid_grant" && !missing.isEmpty) {
            return insufficientScope(missing, profile: profile, failure: failure)
        }
        if failure.oauthError == "invalid_target" || (hook == .refresh && failure.oauthError != "invalid_grant" && !unknownResources.isEmpty) {
            let resource = unknownResources.first ?? purpose.resources.first ?? ""
            return SessionError(
                .providerRefused,
                "The provider will not issue a token for the resource \(providerSafe(resource)) (\(failure.oauthError ?? "refused")).",
                provider: profile, reason: "invalid_target", status: failure.status, oauthError: failure.oauthError)
        }
        guard hook == .refresh else { return SessionError(failure, provider: profile) }
        // The refresh token itself was refused: the session ends as on any refused refresh.
        _ = try? await endSession(
            key, reason: EndReason(refusal: failure.reason), message: failure.message, ended: session, context: context, holdingLock: true)
        return SessionError(
            .notSignedIn, failure.message, provider: profile, reason: StatusReason(refusal: failure.reason).rawValue, status: failure.status,
            oauthError: failure.oauthError)
    }

    /// `insufficientScope`: which scopes are missing, and how to get them (incremental consent).
    func insufficientScope(_ missing: [String], profile: String, failure: ProviderFailure?) -> SessionError {
        let said = failure.map { " (\($0.message))" } ?? ""
        var error = SessionError(
            .providerRefused,
            missing.isEmpty
                ? "The provider refused the scopes asked for\(said). Ask the user for them: requestOAuthTokens with those scopes."
                : "The sign-in does not cover the scopes \(missing.joined(separator: ", "))\(said). Ask the user for them: requestOAuthTokens "
                    + "with those scopes (incremental consent).",
            provider: profile, reason: "insufficientScope", status: failure?.status, oauthError: failure?.oauthError)
        error.missingScopes = missing
        return error
    }

    /// Requested scopes the session's grant does not cover: what the server said it granted
    /// (`scope`), else what the sign-in asked for. Empty when neither is known.
    func missingScopes(_ requested: [String], session: StoredSession, context: Context) -> [String] {
        var granted = Set(session.tokens.scope?.split(separator: " ").map(String.init) ?? [])
        granted.formUnion(session.signInScopes ?? context.config["scopes"]?.arrayValue?.compactMap(\.stringValue) ?? [])
        guard !granted.isEmpty else { return [] }
        return requested.filter { !granted.contains($0) }
    }

    /// The resources the session's grant was made for.
    func grantResources(_ session: StoredSession, context: Context) -> [String] {
        session.resources ?? context.config["resources"]?.arrayValue?.compactMap(\.stringValue) ?? []
    }

    // MARK: - Token exchange (RFC 8693)

    /// `exchangeToken`: the session's access token (or ID token) exchanged for one for another
    /// audience, kept and handed out again while valid, as `getAccessToken`'s are.
    public func exchangeToken(_ params: ExchangeTokenParams, requestID: JSON? = nil) async throws(SessionError) -> AccessTokenResult {
        let profile = params.provider
        let minimumValidity = params.minValidityMs ?? Self.defaultMinimumValidityMilliseconds
        let subject = params.subjectTokenType.rawValue
        let purpose = TokenPurpose(
            scopes: params.scopes, resources: TokenPurpose.resources(params.resource) ?? [],
            exchange: .init(audience: params.audience, requestedTokenType: params.requestedTokenType, subjectTokenType: subject))
        if let requested = params.requestedTokenType, requested == "refreshToken" || requested.hasSuffix(":refresh_token") {
            throw SessionError(
                .invalidParams, "A refresh token cannot be asked for: it would have to leave the host.", provider: profile,
                field: "requestedTokenType")
        }
        let lookup = AnswerCache.Lookup(profile: profile, account: params.account)
        // The subject token must be valid when the server reads it: the session's own is renewed first.
        if subject == "accessToken" {
            _ = try await getAccessToken(GetAccessTokenParams(provider: profile, account: params.account), requestID: requestID)
        }
        let (context, _, session, token) = try await purposeToken(
            purpose, lookup: lookup, minimumValidity: minimumValidity, forceRefresh: false, requestID: requestID)
        if subject == "idToken", session.tokens.idToken == nil {
            throw SessionError(.notSignedIn, "The session has no ID token to exchange.", provider: profile, reason: StatusReason.noTokens.rawValue)
        }
        return try await purposeAnswer(token, session: session, context: context, params: nil, requestID: requestID)
    }

    /// The answer for a purpose's token, as `getAccessToken` gives the session's own: the plugin's
    /// headers for it, and for a DPoP-bound token the proof of the frontend's request.
    func purposeAnswer(
        _ token: TokenSet, session: StoredSession, context: Context, params: GetAccessTokenParams?, requestID: JSON?
    ) async throws(SessionError) -> AccessTokenResult {
        var view = session
        view.tokens = token
        return try await accessTokenAnswer(view, context: context, params: params, requestID: requestID)
    }
}
