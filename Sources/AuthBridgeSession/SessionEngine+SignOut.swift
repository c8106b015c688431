// How sessions end: signOut (revoked at the provider, then wiped), endings
// on a provider's evidence, and the web-view cookies to drop with them.

import AuthBridgeJSON
import AuthBridgePluginHost
import AuthBridgeProtocol
import AuthBridgeURL

extension SessionEngine {
    /// Revokes at the provider (best effort, bounded), then wipes the session
    /// locally whatever the provider said, then notifies. A profile whose
    /// configuration cannot be resolved (provider unreachable with nothing
    /// kept, plugin missing) is still signed out locally; the revocation is
    /// listed among the failures.
    public func signOut(_ params: SignOutParams, requestID: JSON?) async throws(SessionError) -> SignOutResult {
        let (profile, account) = (params.provider, params.account)
        guard profiles[profile] != nil else { throw unknownProfile(profile) }
        let context: Context?
        var unresolved: SessionError?
        do { context = try await self.context(for: profile) } catch {
            if Task.isCancelled { throw error } // a cancelled sign-out signs nothing out
            context = nil
            unresolved = error
        }
        // RP-initiated logout: its flow is checked before anything is revoked; it runs after the wipe.
        let endSessionFlow = wantsEndSession(params) ? try endSessionFlow(params, context: context) : nil
        pendingSignIns.removeValue(forKey: profile)?.fail(
            SessionError(.userCancelled, "The profile was signed out.", provider: profile, reason: "signedOut"))
        guard let (key, _) = try await selectSession(profile, account: account),
            let (ended, outcome) = try await revokeAndEnd(
                key, context: context, unresolved: unresolved, reason: .userSignedOut,
                requestID: requestID)
        else {
            let endSession = endSessionFlow.map { _ in
                EndSessionOutcome(state: .noIdToken, message: "No session was signed in: there is no ID token to name the provider's session.")
            }
            return SignOutResult(provider: profile, revoked: [], failures: [], endSession: endSession)
        }
        var endSession: EndSessionOutcome?
        if let endSessionFlow {
            endSession = await endProviderSession(
                ended, context: context, unresolved: unresolved, flow: endSessionFlow, params: params, requestID: requestID)
        }
        return SignOutResult(
            provider: profile, account: ended.wireAccount, revoked: outcome.revoked, failures: outcome.failures,
            clearCookies: outcome.clearCookies.isEmpty ? nil : outcome.clearCookies, endSession: endSession)
    }

    /// What a sign-out revoked at the provider (bridge-spec SignOutResult).
    struct Revocation {
        var revoked: [String]
        var failures: [RevocationFailure]
        var clearCookies: [CookieRef]

        /// Nothing was revoked, for `reason`.
        static func failed(reason: String, message: String) -> Revocation {
            Revocation(revoked: [], failures: [RevocationFailure(token: "all", reason: reason, message: message)], clearCookies: [])
        }
    }

    /// Revokes the stored tokens and wipes them as one step under the
    /// session's lock (shared with other processes): a refresh in flight
    /// finishes first and the tokens it stored are the ones revoked, and no
    /// refresh can store tokens after them. `when` may decline the stored
    /// session (e.g. it is no longer license-revoked). Nil when nothing was
    /// stored (signed out meanwhile) or `when` declined.
    func revokeAndEnd(
        _ key: SessionKey, context: Context?, unresolved: SessionError? = nil, reason: EndReason,
        message: (StoredSession) -> String? = { _ in nil },
        when: @escaping (StoredSession) -> Bool = { _ in true },
        requestID: JSON?
    ) async throws(SessionError) -> (StoredSession, Revocation)? {
        let ended: (StoredSession, Revocation)?
        do {
            ended = try await store.withExclusiveAccess(to: key) { () async throws -> (StoredSession, Revocation)? in
                guard let current = try await self.store.load(key), when(current) else { return nil }
                let outcome: Revocation
                if let context {
                    outcome = await self.revokeAtProvider(current, context: context, requestID: requestID)
                } else {
                    let why = unresolved?.message ?? "The profile's configuration could not be resolved."
                    outcome = .failed(reason: unresolved?.reason ?? "unresolved", message: "Not revoked at the provider: \(why)")
                }
                try await self.store.delete(key)
                return (current, outcome)
            }
        } catch let error as SessionError {
            throw error
        } catch {
            throw storageError(error, profile: key.profile)
        }
        guard let (session, revocation) = ended else { return nil }
        var outcome = revocation
        if let context {
            outcome.clearCookies = await cookiesToClear(ended: session, key: key, context: context, named: outcome.clearCookies)
        }
        announce(
            .signedOut, profile: key.profile, endedBecause: reason, message: message(session), account: session.wireAccount,
            clearCookies: outcome.clearCookies)
        return (session, outcome)
    }

    /// The `revoke` hook, best effort: what was revoked, what failed, and the
    /// cookies a frontend's web view should drop (only this provider's).
    private func revokeAtProvider(_ session: StoredSession, context: Context, requestID: JSON?) async -> Revocation {
        let input: JSON = ["profile": context.profileJSON, "tokens": session.tokens.json]
        switch await run(.revoke, input: input, plugin: context.plugin, profile: context.profile.name, requestID: requestID) {
        case .success(let answer):
            // The plugin's lists, as far as they are what the spec says (a word, a message; never a value).
            return Revocation(
                revoked: answer["revoked"]?.arrayValue?.compactMap(\.stringValue).filter { !$0.isEmpty } ?? [],
                failures: answer["failures"]?.arrayValue?.compactMap { try? RevocationFailure(wire: $0) } ?? [],
                clearCookies: Self.cookieRefs(answer["clearCookies"]))
        case .failure(let failure):
            return .failed(reason: failure.reason, message: failure.message)
        }
    }

    /// Wipes one account's session and tells the frontend why — unless the
    /// stored session is no longer the one the evidence was about (it was
    /// refreshed or signed in again meanwhile) or is already gone. Runs under
    /// the session's lock unless the caller holds it. With a `context`, the
    /// frontend is told to drop the cookies the plugin attaches for the ended
    /// tokens (`authorize_request`, no I/O), however the session ended.
    @discardableResult
    func endSession(
        _ key: SessionKey, reason: EndReason, message: String?, ended: StoredSession? = nil,
        context: Context? = nil, holdingLock: Bool = false
    ) async throws(SessionError) -> Bool {
        let wiped: StoredSession?
        do {
            wiped =
                holdingLock
                ? try await wipe(key, ifStill: ended)
                : try await store.withExclusiveAccess(to: key) { try await self.wipe(key, ifStill: ended) }
        } catch {
            throw storageError(error, profile: key.profile)
        }
        guard let wiped else { return false }
        var cookies: [CookieRef] = []
        if let context { cookies = await cookiesToClear(ended: wiped, key: key, context: context) }
        announce(.signedOut, profile: key.profile, endedBecause: reason, message: message, account: wiped.wireAccount, clearCookies: cookies)
        return true
    }

    /// Deletes the stored session if it is still `expected` (any, when nil).
    private func wipe(_ key: SessionKey, ifStill expected: StoredSession?) async throws -> StoredSession? {
        guard let current = try await store.load(key) else { return nil }
        if let expected, current.tokens != expected.tokens { return nil }
        try await store.delete(key)
        return current
    }

    /// The cookies to drop for an ended account: those `named` (by the
    /// revoke hook), else those the plugin attaches for its tokens. The web
    /// view holds the profile's current account's cookies: when the ended
    /// account was not the current one, cookies the current one also uses
    /// (same name, domain and path — Tableau's, for two users of one server)
    /// are left alone.
    private func cookiesToClear(ended: StoredSession, key: SessionKey, context: Context, named: [CookieRef] = []) async -> [CookieRef] {
        let cookies = named.isEmpty ? await attachedCookies(ended, context: context) : named
        guard !cookies.isEmpty, let (currentKey, current) = try? await selectSession(key.profile, account: nil),
            currentKey != key, (current.signedInAt ?? 0) > (ended.signedInAt ?? 0)
        else { return cookies }
        let live = await attachedCookies(current, context: context)
        return cookies.filter { !live.contains($0) }
    }

    /// The name, domain and path of each cookie the plugin attaches for these tokens.
    private func attachedCookies(_ session: StoredSession, context: Context) async -> [CookieRef] {
        let input: JSON = ["profile": context.profileJSON, "tokens": session.tokens.json, "request": ["method": "GET", "headers": [:]]]
        guard
            case .success(let answer) = await run(
                .authorizeRequest, input: input, plugin: context.plugin,
                profile: context.profile.name, requestID: nil)
        else { return [] }
        return Self.cookieRefs(answer["cookies"])
    }

    /// Cookie references (bridge-spec CookieRef) from a plugin's cookie list.
    static func cookieRefs(_ cookies: JSON?) -> [CookieRef] {
        (cookies?.arrayValue ?? []).compactMap { cookie in
            guard let name = cookie["name"]?.stringValue, let domain = cookie["domain"]?.stringValue else { return nil }
            return CookieRef(name: name, domain: domain, path: cookie["path"]?.stringValue ?? "/")
        }
    }
}
