// The license policy: what the host does when a provider says a user's
// license is gone (MarketSharp's named licenses). `LicensePolicy` holds the
// rules and the timers; the engine extension below applies them.

import AuthBridgeJSON
import AuthBridgePluginHost
import AuthBridgeProtocol

/// A license revoked while signed in: the session is marked (its tokens
/// kept, so that signOut can still revoke them, but never handed out), the
/// user sees the provider's message for the profile's grace period
/// (`licenseGracePeriodMs`, default 5 s: time to read it), then the account
/// is signed out — revoked at the provider, wiped, `signedOut`
/// `licenseRevoked`. The deadline is stored with the session, so a host
/// stopped meanwhile signs out when it next sees the session (or at start).
struct LicensePolicy: Sendable {
    /// How long a user sees a revoked-license message before being signed out.
    static let defaultGracePeriodMilliseconds: Int64 = 5_000

    /// Accounts whose sign-out is timed in this process: one timer each.
    private var timed: Set<SessionKey> = []

    /// The profile's grace period, 0 ms to one day.
    static func gracePeriod(_ settings: JSON) -> Int64 {
        min(max(settings["licenseGracePeriodMs"]?.intValue ?? defaultGracePeriodMilliseconds, 0), 86_400_000)
    }

    /// `session` marked license-revoked, its sign-out due after `gracePeriod`;
    /// nil when it is marked already (its deadline stands).
    static func marked(_ session: StoredSession, message: String?, gracePeriod: Int64) -> StoredSession? {
        guard !session.licenseRevoked else { return nil }
        var marked = session
        marked.licenseRevoked = true
        marked.licenseMessage = message
        marked.licenseSignOutAt = HostClock.nowMilliseconds() + gracePeriod
        return marked
    }

    /// What `getAccessToken` and `fetch` answer instead of a token: the
    /// provider's words, which the user keeps seeing.
    static func refusal(_ session: StoredSession, profile: String) -> SessionError {
        SessionError(
            .notSignedIn, session.licenseMessage ?? "The user's license was revoked; sign out and contact the administrator.",
            provider: profile, reason: StatusReason.licenseRevoked.rawValue)
    }

    /// Runs `signOut` at `due`, unless a sign-out of `key` is timed already.
    mutating func schedule(_ key: SessionKey, at due: Int64, signOut: @escaping @Sendable () async -> Void) {
        guard timed.insert(key).inserted else { return }
        let wait = max(0, due - HostClock.nowMilliseconds())
        Task {
            try? await Task.sleep(for: .milliseconds(wait))
            await signOut()
        }
    }

    /// The sign-out of `key` is under way: a later loss is timed anew.
    mutating func signingOut(_ key: SessionKey) { timed.remove(key) }
}

extension SessionEngine {
    /// Marks the session license-revoked, announces it once and times the
    /// sign-out. Under the account's lock (unless the caller holds it), on
    /// the record as it is now: another process may have rotated the tokens
    /// since `session` was read, and those must not be overwritten.
    func markLicenseRevoked(
        _ key: SessionKey, session: StoredSession, context: Context, message: String?,
        holdingLock: Bool = false
    ) async throws(SessionError) -> SignInStatus {
        let profile = key.profile
        let gracePeriod = LicensePolicy.gracePeriod(context.profile.settings)
        let mark: () async throws -> (StoredSession, Bool)? = {
            guard let current = try await self.store.load(key) else { return nil }
            guard let marked = LicensePolicy.marked(current, message: message, gracePeriod: gracePeriod) else { return (current, false) }
            try await self.store.save(marked, for: key)
            return (marked, true)
        }
        let outcome: (StoredSession, Bool)?
        do {
            outcome = holdingLock ? try await mark() : try await store.withExclusiveAccess(to: key) { try await mark() }
        } catch {
            throw storageError(error, profile: profile)
        }
        guard let (updated, marked) = outcome else {
            // Signed out meanwhile: nothing is left to hold back.
            return status(profile, state: .notSignedIn, session: nil, reason: .licenseRevoked, message: message)
        }
        if marked { announce(.licenseRevoked, profile: profile, message: message, account: updated.wireAccount) }
        scheduleLicenseSignOut(key, context: context, at: updated.licenseSignOutAt ?? HostClock.nowMilliseconds())
        return status(profile, state: .licenseRevoked, session: updated, reason: .licenseRevoked, message: updated.licenseMessage)
    }

    /// A license-revoked session whose grace period is over is signed out now
    /// (nil); one still in its grace period is returned, its timer running.
    func enforceLicenseSignOut(_ key: SessionKey, session: StoredSession, context: Context) async throws(SessionError) -> StoredSession? {
        let due = session.licenseSignOutAt ?? 0
        guard due <= HostClock.nowMilliseconds() else {
            scheduleLicenseSignOut(key, context: context, at: due)
            return session
        }
        await signOutAfterLicenseLoss(key, context: context)
        return try await loadSession(key).flatMap { $0.licenseRevoked ? $0 : nil }
    }

    /// Hands out no token of a license-revoked session (signing it out first
    /// when its grace period is over).
    func refuseIfLicenseRevoked(_ key: SessionKey, session: StoredSession, context: Context) async throws(SessionError) {
        guard session.licenseRevoked else { return }
        _ = try await enforceLicenseSignOut(key, session: session, context: context)
        throw LicensePolicy.refusal(session, profile: key.profile)
    }

    func scheduleLicenseSignOut(_ key: SessionKey, context: Context, at due: Int64) {
        license.schedule(key, at: due) { await self.signOutAfterLicenseLoss(key, context: context) }
    }

    private func signOutAfterLicenseLoss(_ key: SessionKey, context: Context) async {
        license.signingOut(key)
        // Signed out, or signed in again, meanwhile: nothing to do.
        _ = try? await revokeAndEnd(
            key, context: context, reason: .licenseRevoked, message: { $0.licenseMessage },
            when: { $0.licenseRevoked }, requestID: nil)
    }
}
