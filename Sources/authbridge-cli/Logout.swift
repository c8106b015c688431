import ArgumentParser
import AuthBridgeJSON
import AuthBridgeHost
import AuthBridgeProtocol
import AuthBridgeSession

/// `authbridge logout PROFILE`: revoke at the provider and forget the session; with
/// `--end-session`, end the provider's own sign-in session too (RP-Initiated Logout).
struct Logout: HumanCommand {
    static let configuration = CommandConfiguration(
        commandName: "logout",
        abstract: "Sign out: revoke the tokens at the provider, then delete them here.",
        discussion: """
            The tokens are deleted locally whatever the provider answers; revocation problems are reported as warnings.
            With --end-session, the provider's own sign-in session ends too (OpenID Connect RP-Initiated Logout): its \
            end-session page opens in your browser, and the next sign-in asks for the password again.
            """)

    @OptionGroup var selection: AccountSelection

    @Flag(help: "Also end your session at the provider: opens its end-session page in a browser and waits for it to come back.")
    var endSession = false

    @Flag(help: "With --end-session: print the end-session URL without opening a browser.")
    var noBrowser = false

    @Option(
        name: .customLong("timeout"),
        help: ArgumentHelp("With --end-session: how long to wait for the provider to come back, in seconds.", valueName: "SECONDS"))
    var seconds: Int64 = 120

    @OptionGroup(title: "Host options") var options: HostOptions

    @OptionGroup(title: "Host options") var agent: AgentChoice

    func validate() throws {
        guard (1...3_600).contains(seconds) else { throw ValidationError("--timeout must be 1…3600 seconds.") }
    }

    func execute() async throws {
        let err = Terminal.standardError
        let browser = endSession && !noBrowser ? Logout.browser(err) : nil
        let sessions = try await SessionAccess.open(options, agent, openBrowser: browser) { method, params in
            guard method == SignOutProgressParams.method, let progress = try? SignOutProgressParams(wire: params) else { return }
            Logout.show(progress, terminal: err, browserOpened: browser != nil)
        }
        let params = SignOutParams(
            provider: selection.profile, account: selection.account, endSession: endSession ? true : nil,
            flow: endSession ? .browser : nil, timeoutMs: endSession ? seconds * 1000 : nil)
        let result = try await sessions.waitingForProvider(of: selection.profile) { sessions throws(SessionError) in
            try await sessions.signOut(params)
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
        if let ended = result.endSession { Logout.report(ended, out: out, err: err) }
    }

    /// What the provider did with its own session, in a line.
    static func report(_ ended: EndSessionOutcome, out: Terminal, err: Terminal) {
        let said = ended.message.map { ": " + Terminal.clean($0) } ?? ""
        switch ended.state {
        case .confirmed: out.line(out.styled("✓", .green) + " The provider ended its session too")
        case .requested: err.warn("the provider was asked to end its session, but did not confirm it\(said)")
        case .unsupported, .noIdToken, .failed: err.warn("the provider's session was not ended\(said)")
        }
    }

    /// Opens the end-session page with xdg-open. Its URL carries the ID token, so it is printed
    /// only when no browser could open it.
    static func browser(_ err: Terminal) -> SessionEngine.BrowserOpener {
        let launcher = BrowserLauncher()
        return { url, _ in
            launcher.open(url) { reason in
                err.warn("could not open a browser (\(reason)). Open this URL in the browser you signed in with:")
                err.line("  " + err.styled(url, .cyan))
            }
        }
    }

    static func show(_ progress: SignOutProgressParams, terminal err: Terminal, browserOpened: Bool) {
        switch progress.stage {
        case .openUrl:
            guard let url = progress.url else { return }
            if browserOpened {
                err.line("Opening the provider's end-session page in your browser…")
            } else {
                err.line("Open this URL in the browser you signed in with, to end your session at the provider:")
                err.line("  " + err.styled(url, .cyan))
            }
        case .waiting:
            if let message = progress.message, message.hasPrefix("The browser could not") { err.line(Terminal.clean(message)) }
            err.line(err.styled("Waiting for the provider to come back… (you are signed out here already; Ctrl-C stops waiting)", .dim))
        }
    }
}
