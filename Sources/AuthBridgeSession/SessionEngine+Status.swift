// Status: checkSignInStatus (the seed flowchart), listAccounts, and the
// SignInStatus answer both give.

import AuthBridgeJSON
import AuthBridgePluginHost
import AuthBridgeProtocol
import AuthBridgeRedaction
import AuthBridgeURL

extension SessionEngine {
    /// The seed flowchart: not expired → signed in; expired without tokens →
    /// not signed in; expired with a refresh token → refresh → signed in, or
    /// not signed in on a definitive refusal. Transient failures answer
    /// `offline` and keep the tokens; a plugin fault (it crashed or hung) is
    /// an error (`-32008`) and keeps them too.
    public func checkSignInStatus(_ params: CheckSignInStatusParams, requestID: JSON? = nil) async throws(SessionError) -> SignInStatus {
        let (profile, account) = (params.provider, params.account)
        let lookup = AnswerCache.Lookup(profile: profile, account: account)
        let observation = store.answers.observe(observation(lookup))
        let context = try await context(for: profile)
        let found: (SessionKey, StoredSession)?
        do {
            found = try await readSession(lookup, observation: observation)
        } catch  where error.reason == VaultError.Reason.vaultUnavailable.rawValue {
            // The shared vault's database is away: as when the provider is, the state is offline.
            return status(profile, state: .offline, session: nil, reason: .transient, message: error.message)
        }
        guard let (key, session) = found else {
            return status(profile, state: .notSignedIn, session: nil, reason: .noTokens)
        }
        if let discarded = try await endIfIssuedToAnotherClient(key, session: session, context: context) {
            return try await statusAfterEnding(key, reason: .profileChanged, message: discarded)
        }
        if session.licenseRevoked {
            guard let pending = try await enforceLicenseSignOut(key, session: session, context: context) else {
                return status(profile, state: .notSignedIn, session: nil, reason: .licenseRevoked, message: session.licenseMessage)
            }
            return status(profile, state: .licenseRevoked, session: pending, reason: .licenseRevoked, message: pending.licenseMessage)
        }
        var expired: Bool
        if context.plugin.implements(.checkSession) {
            let input: JSON = ["profile": context.profileJSON, "tokens": session.tokens.json]
            switch await run(.checkSession, input: input, plugin: context.plugin, profile: profile, requestID: requestID) {
            case .success(let answer):
                let message = answer["message"]?.stringValue
                switch answer["state"]?.stringValue.flatMap(SessionCheck.init(rawValue:)) {
                case .valid:
                    let signedIn = status(profile, state: .signedIn, session: session, reason: .valid)
                    let plugin = context.plugin
                    let check: AnswerCache.StatusCheck =
                        plugin.isolation == .process && plugin.inlineHooks.contains(.checkSession)
                        ? .runnerCheck(confirmedAt: HostClock.nowMilliseconds())
                        : .inlineHook(plugin: plugin, input: hookInput(input, profile: profile))
                    keepStatus(signedIn, lookup, observation, session: session, context: context, check: check)
                    return signedIn
                case .expired: expired = true
                case .licenseRevoked:
                    return try await markLicenseRevoked(key, session: session, context: context, message: message)
                case .revoked:
                    try await endSession(key, reason: .revoked, message: message, ended: session, context: context)
                    return try await statusAfterEnding(key, reason: .revoked, message: message)
                case .unknown, nil:
                    return status(
                        profile, state: .offline, session: session, reason: .transient,
                        message: message ?? "The provider could not confirm the session.")
                }
            case .failure(let failure) where failure.kind == .definitive:
                try await endSession(key, reason: EndReason(refusal: failure.reason), message: failure.message, ended: session, context: context)
                return try await statusAfterEnding(key, reason: StatusReason(refusal: failure.reason), message: failure.message)
            case .failure(let failure) where failure.isPluginFault || failure.kind == .cancelled:
                // The plugin crashed or hung, or the frontend cancelled: that says nothing about
                // the session, which is kept, and the answer is an error (-32008, -32800), not a state.
                throw SessionError(failure, provider: profile)
            case .failure(let failure):
                return status(profile, state: .offline, session: session, reason: .transient, message: failure.message)
            }
        } else {
            expired = session.tokens.isExpired(at: HostClock.nowMilliseconds())
            if !expired {
                let signedIn = status(profile, state: .signedIn, session: session, reason: .valid)
                keepStatus(signedIn, lookup, observation, session: session, context: context, check: .clock)
                return signedIn
            }
        }
        guard expired else { return status(profile, state: .signedIn, session: session, reason: .valid) }
        guard session.tokens.refreshToken != nil else {
            try await endSession(key, reason: .expired, message: nil, ended: session, context: context)
            return try await statusAfterEnding(key, reason: .expired, message: nil)
        }
        switch await refreshed(key, context: context, stale: session) {
        case .success(let fresh):
            return status(profile, state: .signedIn, session: fresh, reason: .refreshed)
        case .failure(let failure) where failure.kind == .definitive && StatusReason(refusal: failure.reason) == .licenseRevoked:
            var marked = session
            marked.licenseRevoked = true
            return status(profile, state: .licenseRevoked, session: marked, reason: .licenseRevoked, message: failure.message)
        case .failure(let failure) where failure.kind == .definitive:
            return status(profile, state: .notSignedIn, session: nil, reason: StatusReason(refusal: failure.reason), message: failure.message)
        case .failure(let failure) where failure.isPluginFault || failure.kind == .cancelled:
            throw SessionError(failure, provider: profile)
        case .failure(let failure):
            return status(profile, state: .offline, session: session, reason: .transient, message: failure.message)
        }
    }

    /// Keeps a `signedIn` answer given from what was read (see `AnswerCache`).
    private func keepStatus(
        _ answer: SignInStatus, _ lookup: AnswerCache.Lookup, _ observation: AnswerCache.Observation?, session: StoredSession, context: Context,
        check: AnswerCache.StatusCheck
    ) {
        guard let observation, configs[lookup.profile] != nil else { return }
        store.answers.keep(lookup, observation, tokens: session.tokens, plugin: context.plugin) { $0.status = (Answer(answer.wire), check) }
    }

    /// `checkSignInStatus`'s answer for a session that is still valid, without
    /// the actor (see `AnswerCache`): confirmed by the clock, by an isolated plugin's
    /// inline `check_session` less than a second ago, or — when
    /// `runningHooks` — by the plugin's `check_session` run inline on the
    /// caller's thread; `ifBlocked` is called if it runs past the inline mark.
    /// Nil when only the engine can answer (then the hook runs again there).
    public nonisolated func statusAtOnce(
        _ profile: String, account: String?, requestID: JSON?, runningHooks: Bool, ifBlocked: (@Sendable () -> Void)? = nil
    ) -> Answer? {
        guard let entry = store.answers.current(AnswerCache.Lookup(profile: profile, account: account)), let (answer, check) = entry.status
        else { return nil }
        switch check {
        case .clock:
            return entry.tokens.isExpired(at: HostClock.nowMilliseconds()) ? nil : answer
        case .runnerCheck(let confirmedAt):
            let now = HostClock.nowMilliseconds()
            let recent = now >= confirmedAt && now - confirmedAt < AnswerCache.runnerCheckReuseMilliseconds
            return recent && !entry.tokens.isExpired(at: now) ? answer : nil
        case .inlineHook where !runningHooks:
            return nil
        case .inlineHook(let plugin, let input, let text):
            let environment = EngineEnvironment(profile: profile, requestID: requestID, http: HookHTTP(http), emit: emit)
            guard
                case .result(let checked) = plugin.invokeInlineNow(
                    .checkSession, input: input, inputText: text, environment: environment, ifBlocked: ifBlocked),
                checked["state"]?.stringValue.flatMap(SessionCheck.init(rawValue:)) == .valid
            else { return nil }
            return answer
        }
    }

    /// Stored sessions as seen locally, without contacting any provider.
    public func listAccounts(_ params: ListAccountsParams) async throws(SessionError) -> ListAccountsResult {
        let profile = params.provider
        if let profile, profiles[profile] == nil { throw unknownProfile(profile) }
        let keys: [SessionKey]
        do { keys = try await store.keys() } catch { throw storageError(error, profile: profile) }
        var found: [(SessionKey, StoredSession)] = []
        for key in keys where profile == nil || key.profile == profile {
            if let session = try await loadSession(key) { found.append((key, session)) }
        }
        // By profile, then the current (latest signed-in) account first.
        found.sort { ($0.0.profile, -($0.1.signedInAt ?? 0)) < ($1.0.profile, -($1.1.signedInAt ?? 0)) }
        // A license sign-out left pending by a host that stopped meanwhile is timed again.
        for (key, session) in found where session.licenseRevoked {
            if let context = try? await context(for: key.profile) {
                scheduleLicenseSignOut(key, context: context, at: session.licenseSignOutAt ?? 0)
            }
        }
        var current: Set<String> = []
        return ListAccountsResult(
            accounts: found.map { key, session in
                // Local knowledge only: an expired access token with a refresh
                // token is still a signed-in account (`expiresAt` tells the age).
                let entry =
                    session.licenseRevoked
                    ? status(key.profile, state: .licenseRevoked, session: session, reason: .licenseRevoked, message: session.licenseMessage)
                    : status(key.profile, state: .signedIn, session: session, reason: .valid)
                var listed = entry
                listed.current = current.insert(key.profile).inserted
                return listed
            })
    }

    /// After evidence ended a session: not signed in — unless a newer session
    /// (refreshed or signed in meanwhile) took its place, which stands.
    private func statusAfterEnding(_ key: SessionKey, reason: StatusReason, message: String?) async throws(SessionError) -> SignInStatus {
        if let newer = try await loadSession(key), !newer.licenseRevoked {
            return status(key.profile, state: .signedIn, session: newer, reason: .valid)
        }
        return status(key.profile, state: .notSignedIn, session: nil, reason: reason, message: message)
    }

    /// A SignInStatus (bridge-spec); provider details only while signed in.
    func status(_ profile: String, state: SessionState, session: StoredSession?, reason: StatusReason, message: String? = nil) -> SignInStatus {
        let details = state == .notSignedIn ? [:] : session?.tokens.details ?? [:]
        return SignInStatus(
            provider: profile, state: state, account: session?.wireAccount, expiresAt: session?.tokens.expiresAt,
            tokenType: state == .notSignedIn ? nil : session.map { $0.sessionTokenType },
            details: details.isEmpty ? nil : details, reason: reason.rawValue, message: message.map { KnownSecrets.shared.scrub($0) },
            storage: storageInfo, issuer: resolvedConfig(profile)?["issuer"]?.stringValue,
            dynamicClient: resolvedConfig(profile)?["dynamicClient"]?.boolValue)
    }

    /// The profile's configuration as resolved in this process (no I/O), or nil.
    func resolvedConfig(_ profile: String) -> JSON? { configs[profile] ?? fallbackConfigs[profile]?.config }
}
