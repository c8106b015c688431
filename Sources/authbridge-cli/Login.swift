import ArgumentParser
import AuthBridgeHost
import AuthBridgeJSON
import AuthBridgeProtocol
import AuthBridgeLaunch
import AuthBridgeSession
import AuthBridgeURL
import Dispatch
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// `authbridge login PROFILE`: an interactive sign-in from a terminal.
struct Login: HumanCommand {
    static let configuration = CommandConfiguration(
        commandName: "login",
        abstract: "Sign in to a profile (opens the browser, or shows a device code).",
        discussion: """
            The browser flow prints the sign-in URL and opens it with xdg-open (--no-browser: \
            only print it; when xdg-open fails, a warning says so and the wait goes on). \
            --device uses the device authorization grant: type the code shown on any device. \
            Progress goes to stderr; Ctrl-C cancels (exit 4). A sign-in not completed within \
            --timeout exits 1.

            With a URL instead of a profile (authbridge login https://host/mcp), it signs in to \
            that protected resource with nothing else configured: the resource names its \
            authorization server (RFC 9728), AuthBridge registers itself there (RFC 7591), and \
            the profile — named after the host unless --profile names it — is added to the \
            profiles file, so later commands, the agent and the credential helpers know it.

            --client-credentials signs the profile's own client in (the client credentials \
            grant: a machine identity, no user and no browser; the profile needs a client secret \
            or a private key). --scope asks for these scopes (repeatable; an account already \
            signed in is asked again for what it lacks, keeping the account); --resource names \
            the protected resources the sign-in is for (RFC 8707; repeatable).
            """)

    @Argument(help: ArgumentHelp("The profile to sign in to, or a protected resource's URL (an MCP server, an API).", valueName: "PROFILE|URL"))
    var profile: String

    @Option(
        name: .customLong("profile"),
        help: ArgumentHelp("With a URL: the name of the profile it makes (default: the URL's host).", valueName: "NAME"))
    var profileName: String?

    @Flag(help: "Use the device authorization grant (RFC 8628): for machines without a browser.")
    var device = false

    @Flag(help: "Print the sign-in URL without opening a browser.")
    var noBrowser = false

    @Flag(help: "Use the client credentials grant: the profile's own client, no user and no browser (a machine identity).")
    var clientCredentials = false

    @Option(
        name: .customLong("scope"),
        help: ArgumentHelp("Ask for these scopes (repeat for several; default: the profile's).", valueName: "SCOPE"))
    var scopes: [String] = []

    @Option(
        name: .customLong("resource"),
        help: ArgumentHelp("The protected resource the sign-in is for (an absolute URI, RFC 8707; repeat for several).", valueName: "URI"))
    var resources: [String] = []

    @OptionGroup var wait: SignInWait

    @OptionGroup(title: "Host options") var options: HostOptions

    @OptionGroup(title: "Host options") var agent: AgentChoice

    func validate() throws {
        if clientCredentials && device { throw ValidationError("--client-credentials and --device are two different flows: choose one") }
        if profileName != nil && ResourceProfile.url(profile) == nil {
            throw ValidationError("--profile names the profile a URL makes: give the protected resource's URL, not a profile name")
        }
        if let profileName, profileName.isEmpty || profileName.unicodeScalars.contains(where: { $0.properties.generalCategory == .control }) {
            throw ValidationError("--profile must be a name without control characters")
        }
    }

    func execute() async throws {
        let stage = LastStage()
        let openBrowser = !(noBrowser || device || clientCredentials)
        let sessions = try await Login.sessions(options: options, agent: agent, openBrowser: openBrowser, stage: stage)
        var target = profile
        if let url = ResourceProfile.url(profile) {
            target = try await Login.resourceProfile(profile, url: url, name: profileName, sessions: sessions, options: options)
        }
        let wanted = TokenFor(scopes: scopes, resources: resources)
        let status = try await Login.signIn(
            target, sessions: sessions, device: device, timeout: wait.seconds, stage: stage,
            flow: clientCredentials ? .clientCredentials : nil, scopes: wanted.scopes, resource: wanted.resource)
        let out = Terminal.standardOutput
        out.line(out.styled("✓", .green) + " Signed in to \(target) as \(accountLabel(status.account))")
    }

    /// The profile of a protected resource's URL: configured in the sessions' host (which
    /// discovers its authorization server, so that a URL that names none fails before anything
    /// is written), then kept in the profiles file. Returns its name.
    static func resourceProfile(
        _ resource: String, url: ParsedURL, name: String?, sessions: any Sessions, options: HostOptions
    ) async throws -> String {
        let err = Terminal.standardError
        let name = name ?? ResourceProfile.defaultName(for: url)
        guard let path = options.settings.configPath else {
            err.error("no profiles file: set HOME or XDG_CONFIG_HOME, or name one with --config FILE")
            throw ExitCode(CommandExit.configuration)
        }
        // A profile of that name for something else is never replaced (its sessions would go).
        let known = try? await sessions.profiles().first { $0.name == name }
        if let known, known.plugin != "oidc" || known.resource != resource {
            err.error("there is already a profile \"\(name)\" for something else; name another with --profile NAME")
            throw ExitCode(CommandExit.configuration)
        }
        if let problem = ResourceProfile.conflict(name, resource: resource, in: path) {
            err.error(problem)
            throw ExitCode(CommandExit.configuration)
        }
        let entry = ResourceProfile.entry(resource)
        do {
            _ = try await sessions.configureProfile(
                ConfigureProfileParams(name: name, plugin: "oidc", settings: entry["settings"]?.objectValue))
        } catch {
            throw sessions.report(error)
        }
        do {
            if try ResourceProfile.add(name, resource: resource, to: path) == .added {
                err.line(err.styled("Added profile \"\(name)\" for \(resource) to \(path)", .dim))
            }
        } catch {
            err.error(error.message)
            throw ExitCode(CommandExit.configuration)
        }
        return name
    }

    /// The sessions for an interactive sign-in (the running agent's, or this process's):
    /// progress shown on stderr (into `stage` too), and browser-flow pages opened with
    /// xdg-open when `openBrowser`.
    static func sessions(options: HostOptions, agent: AgentChoice, openBrowser: Bool, stage: LastStage) async throws -> any Sessions {
        let err = Terminal.standardError
        return try await SessionAccess.open(options, agent, openBrowser: openBrowser ? Login.browser(err) : nil) { method, params in
            guard method == SignInProgressParams.method, let progress = try? SignInProgressParams(wire: params) else { return }
            stage.set(progress.stage)
            Login.show(progress, terminal: err, browserOpened: openBrowser)
        }
    }

    /// Signs in to `profile` (Ctrl-C cancels) and returns its SignInStatus; a failure is
    /// reported on stderr and thrown as the exit code (a sign-in the user did not finish in
    /// `timeout` seconds: exit 1, not "provider unreachable").
    static func signIn(
        _ profile: String, sessions: any Sessions, device: Bool, timeout: Int64, stage: LastStage,
        flow: Flow? = nil, scopes: [String]? = nil, resource: JSON? = nil
    ) async throws -> SignInStatus {
        let err = Terminal.standardError
        let params = RequestOAuthTokensParams(
            provider: profile, flow: flow ?? (device ? .device : nil), scopes: scopes, timeoutMs: timeout * 1000, resource: resource)
        let signIn = Task { () async throws -> SignInStatus in
            try await sessions.signIn(params)
        }
        let interrupt = Interrupt { signIn.cancel() }
        defer { interrupt.stop() }
        do {
            return try await signIn.value
        } catch let error as SessionError {
            if error.kind == .timeout, stage.waitingForUser {
                // The user did not finish, or the provider never sent them back (the message says
                // the usual causes): not the provider being down (exit 3 would say so), a failed login.
                err.error(error.message)
                throw ExitCode(CommandExit.failure)
            }
            if error.reason == "unsupportedFlow" && !device && sessions.flows(ofProfile: profile).contains("device") {
                err.line("Hint: this profile cannot sign in through a browser from the command line; try --device.")
            }
            throw sessions.report(error)
        }
    }

    /// Opens sign-in pages with xdg-open; when that fails (no desktop), says so: the URL is already on screen.
    static func browser(_ err: Terminal) -> SessionEngine.BrowserOpener {
        let launcher = BrowserLauncher()
        return { url, _ in
            launcher.open(url) { reason in
                err.warn("could not open a browser (\(reason)). Open the URL above yourself; still waiting… (Ctrl-C cancels)")
            }
        }
    }

    static func show(_ progress: SignInProgressParams, terminal err: Terminal, browserOpened: Bool) {
        switch progress.stage {
        case .openUrl:
            guard let url = progress.url else { return }
            err.line("Open this URL in a browser to sign in:")
            err.line("  " + err.styled(url, .cyan))
            if browserOpened { err.line(err.styled("(opening it in your browser…)", .dim)) }
        case .waiting:
            err.line(err.styled("Waiting for the browser to come back… (Ctrl-C cancels)", .dim))
        case .deviceCode:
            let code = progress.userCode ?? "?"
            let uri = progress.verificationUri ?? "?"
            err.line("First copy your one-time code: " + err.styled(code, .bold))
            err.line("Then open " + err.styled(uri, .cyan) + " on any device and enter it.")
            if let complete = progress.verificationUriComplete { err.line("Or open: " + Terminal.clean(complete)) }
            let expiry = progress.expiresAt.map { " (the code expires \(relativeTime($0)))" } ?? ""
            err.line(err.styled("Waiting for you to finish\(expiry)… (Ctrl-C cancels)", .dim))
        case .exchanging:
            err.line(err.styled("Signing in…", .dim))
        case .plugin:
            if let message = progress.message { err.line(Terminal.clean(message)) }
        }
    }
}

/// `--timeout SECONDS`: how long a sign-in started by a command may wait for the user.
struct SignInWait: ParsableArguments {
    @Option(name: .customLong("timeout"), help: ArgumentHelp("How long a sign-in may wait for the user, in seconds.", valueName: "SECONDS"))
    var seconds: Int64 = 300

    func validate() throws {
        guard (1...3_600).contains(seconds) else { throw ValidationError("--timeout must be 1…3600 seconds") }
    }
}

/// The sign-in's latest progress stage, so a timeout can be told apart:
/// while the user is being waited for, or while talking to the provider.
final class LastStage: Sendable {
    private let stage = Mutex<SignInStage?>(nil)

    func set(_ value: SignInStage?) { stage.withLock { $0 = value } }

    /// The URL or code was shown and the provider has not been asked for tokens yet.
    var waitingForUser: Bool { stage.withLock { [.openUrl, .waiting, .deviceCode].contains($0) } }
}
