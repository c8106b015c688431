import ArgumentParser
import AuthBridgeJSON
import AuthBridgeProtocol
import AuthBridgeSession

/// The sessions as the credential commands (`git-credential`, `exec-credential`, `exec`) use
/// them: an access token, an interactive sign-in, and how a failure ends the command. Kept to
/// what those commands call, so that this process's engine or the running agent can answer
/// them alike (`SessionCredentials` over `Sessions`); `openCredentialSessions` picks one.
protocol CredentialSessions: Sendable {
    /// `getAccessToken`'s answer (AccessTokenResult in bridge-spec): a token valid for at least
    /// `minimumValidity` more milliseconds (refreshed first when it is not), or a renewed one
    /// whatever its expiry says when `forceRefresh` (the caller saw it rejected); `purpose`: the
    /// token for those scopes and resources (`--scope`, `--resource`) rather than the session's own.
    func accessToken(
        _ profile: String, account: String?, minimumValidity: Int64, forceRefresh: Bool, purpose: TokenFor
    ) async throws(SessionError) -> AccessTokenResult

    /// An interactive sign-in with the browser flow, shown on stderr as `authbridge login` shows
    /// it (the browser opened with xdg-open, Ctrl-C cancels); SignInStatus. A failure is
    /// reported on stderr and thrown as the command's exit.
    func signIn(_ profile: String, timeoutSeconds: Int64) async throws -> SignInStatus

    /// Ends the command for `error`: its message on stderr, the exit code (`CommandExit`).
    func report(_ error: SessionError) -> ExitCode
}

/// The sessions for a credential command: the running agent's when the command may use it
/// (`AgentChoice`), else this process's engine. `interactive`: a sign-in may be started (the
/// browser opener and the progress display are set up).
func openCredentialSessions(options: HostOptions, agent: AgentChoice, interactive: Bool) async throws -> any CredentialSessions {
    let stage = LastStage()
    return SessionCredentials(
        sessions: try await Login.sessions(options: options, agent: agent, openBrowser: interactive, stage: stage), stage: stage)
}

/// `CredentialSessions` over the command's `Sessions` (this process's engine or the agent).
struct SessionCredentials: CredentialSessions {
    let sessions: any Sessions
    let stage: LastStage

    func accessToken(
        _ profile: String, account: String?, minimumValidity: Int64, forceRefresh: Bool, purpose: TokenFor
    ) async throws(SessionError) -> AccessTokenResult {
        let notice = WaitNotice.forProvider(of: profile)
        let result: Result<AccessTokenResult, SessionError>
        do throws(SessionError) {
            result = .success(
                try await sessions.accessToken(
                    GetAccessTokenParams(
                        provider: profile, account: account, minValidityMs: minimumValidity, forceRefresh: forceRefresh,
                        scopes: purpose.scopes, resource: purpose.resource)))
        } catch {
            result = .failure(sessions.explained(error))
        }
        await notice.finish()
        return try result.get()
    }

    func signIn(_ profile: String, timeoutSeconds: Int64) async throws -> SignInStatus {
        try await Login.signIn(profile, sessions: sessions, device: false, timeout: timeoutSeconds, stage: stage)
    }

    func report(_ error: SessionError) -> ExitCode { sessions.report(error) }
}

extension AccessTokenResult {
    /// Refuses a sender-constrained token (RFC 9449 DPoP) to a `consumer` that sends whatever it
    /// gets as a bearer token (git, kubectl, a program's environment): the server would refuse
    /// it without a proof, and only the host holds the key that makes one.
    func refuseIfSenderConstrained(for consumer: String, profile: String) throws {
        guard tokenType.lowercased() == "dpop" else { return }
        Terminal.standardError.error(
            "the session of \(Terminal.clean(profile)) holds a DPoP-bound token (RFC 9449): \(consumer) cannot send the proof each request needs. "
                + "Set the profile's \"dpop\": false for bearer tokens, or use `authbridge token \(Terminal.clean(profile)) --header METHOD URL` for the headers of one request."
        )
        throw ExitCode(CommandExit.failure)
    }
}
