import ArgumentParser
import AuthBridgeJSON
import AuthBridgeProtocol
import AuthBridgeSession

/// `authbridge logout PROFILE`: revoke at the provider and forget the session.
struct Logout: HumanCommand {
    static let configuration = CommandConfiguration(
        commandName: "logout",
        abstract: "Sign out: revoke the tokens at the provider, then delete them here.",
        discussion: "The tokens are deleted locally whatever the provider answers; revocation problems are reported as warnings.")

    @OptionGroup var selection: AccountSelection

    @OptionGroup(title: "Host options") var options: HostOptions

    @OptionGroup(title: "Host options") var agent: AgentChoice

    func execute() async throws {
        let sessions = try await SessionAccess.open(options, agent)
        let result = try await sessions.waitingForProvider(of: selection.profile) { sessions throws(SessionError) in
            try await sessions.signOut(SignOutParams(provider: selection.profile, account: selection.account))
        }
        let out = Terminal.standardOutput
        let (revoked, failures) = (result.revoked, result.failures)
        guard result.account != nil || !revoked.isEmpty || !failures.isEmpty else {
            out.line("\(selection.profile) was not signed in.")
            return
        }
        out.line(
            out.styled("✓", .green) + " Signed out of \(selection.profile) (\(accountLabel(result.account)))"
                + (revoked.isEmpty ? "" : "; revoked: \(Terminal.clean(revoked.joined(separator: ", ")))"))
        for failure in failures {
            Terminal.standardError.warn("could not revoke \(failure.token): \(failure.message)")
        }
    }
}
