import ArgumentParser
import AuthBridgeJSON
import AuthBridgeSession

/// The sessions as the credential commands (`git-credential`, `exec-credential`, `exec`) use
/// them: an access token, an interactive sign-in, and how a failure ends the command. Kept to
/// what those commands call, so that this process's engine (`LocalSessions`) or an agent's
/// connection can answer them alike; `openCredentialSessions` picks one.
protocol CredentialSessions: Sendable {
    /// `getAccessToken`'s answer (AccessTokenResult in bridge-spec): a token valid for at least
    /// `minimumValidity` more milliseconds (refreshed first when it is not), or a renewed one
    /// whatever its expiry says when `forceRefresh` (the caller saw it rejected).
    func accessToken(_ profile: String, account: String?, minimumValidity: Int64, forceRefresh: Bool) async throws(SessionError) -> JSON

    /// An interactive sign-in with the browser flow, shown on stderr as `authbridge login` shows
    /// it (the browser opened with xdg-open, Ctrl-C cancels); SignInStatus. A failure is
    /// reported on stderr and thrown as the command's exit.
    func signIn(_ profile: String, timeoutSeconds: Int64) async throws -> JSON

    /// Ends the command for `error`: its message on stderr, the exit code (`CommandExit`).
    func report(_ error: SessionError) -> ExitCode
}

/// The sessions for a credential command. `interactive`: a sign-in may be started (the browser
/// opener and the progress display are set up).
func openCredentialSessions(options: HostOptions, interactive: Bool) throws -> any CredentialSessions {
    try LocalSessions(options: options, interactive: interactive)
}

/// `CredentialSessions` over this process's engine (the plugins, profiles and vault every
/// command shares).
struct LocalSessions: CredentialSessions {
    let local: LocalEngine
    private let stage = LastStage()

    init(options: HostOptions, interactive: Bool) throws {
        local = try Login.engine(options: options, openBrowser: interactive, stage: stage)
    }

    func accessToken(_ profile: String, account: String?, minimumValidity: Int64, forceRefresh: Bool) async throws(SessionError) -> JSON {
        let notice = WaitNotice.forProvider(of: profile)
        let result: Result<JSON, SessionError>
        do throws(SessionError) {
            result = .success(
                try await local.engine.getAccessToken(profile, account: account, minimumValidity: minimumValidity, forceRefresh: forceRefresh))
        } catch {
            result = .failure(local.explained(error))
        }
        await notice.finish()
        return try result.get()
    }

    func signIn(_ profile: String, timeoutSeconds: Int64) async throws -> JSON {
        try await Login.signIn(profile, local: local, device: false, timeout: timeoutSeconds, stage: stage)
    }

    func report(_ error: SessionError) -> ExitCode { local.report(error) }
}
