import ArgumentParser
import AuthBridgeJSON
import AuthBridgeLaunch
import AuthBridgeProtocol
import AuthBridgeSession

/// How a command for people reaches the sessions: in this process
/// (`LocalEngine`), or through the running agent (`AgentSessions`), so that
/// `authbridge login corp` in a terminal signs in the desktop app that uses
/// the agent at once (it gets `session/changed`). Every command goes through
/// this seam (`SessionAccess.open`), and so does one added later.
///
/// The methods are the bridge's, with its params and results (AuthBridgeProtocol,
/// generated from bridge-spec); failures are `SessionError`s.
protocol Sessions: Sendable {
    /// The configured profiles.
    func profiles() async throws(SessionError) -> [ProfileInfo]
    /// `configureProfile`: adds or replaces a profile in the sessions' host (for this process, or the agent's run).
    func configureProfile(_ params: ConfigureProfileParams) async throws(SessionError) -> ProfileInfo
    /// `requestOAuthTokens`; progress goes to the events sink the sessions were opened with.
    func signIn(_ params: RequestOAuthTokensParams) async throws(SessionError) -> SignInStatus
    /// `checkSignInStatus`.
    func status(_ params: CheckSignInStatusParams) async throws(SessionError) -> SignInStatus
    /// `listAccounts`.
    func accounts(_ params: ListAccountsParams) async throws(SessionError) -> [SignInStatus]
    /// `getAccessToken`.
    func accessToken(_ params: GetAccessTokenParams) async throws(SessionError) -> AccessTokenResult
    /// `exchangeToken` (RFC 8693): the session's token exchanged for another audience, resource or scopes.
    func exchangeToken(_ params: ExchangeTokenParams) async throws(SessionError) -> AccessTokenResult
    /// `signOut`.
    func signOut(_ params: SignOutParams) async throws(SessionError) -> SignOutResult
    /// The plugins found, as `initialize` lists them, with the fix for a refused one when known.
    func plugins() async throws(SessionError) -> [PluginEntry]
    /// Where tokens are kept.
    var storage: StorageInfo { get }
    /// `error` as a person needs it: a profile whose plugin was refused says why.
    func explained(_ error: SessionError) -> SessionError
    /// The sign-in flows the plugin of profile `name` declares (none when it is not loaded).
    func flows(ofProfile name: String) -> [String]
    /// Where the profiles come from, as a message names it: the configuration file this
    /// process read, or the agent.
    var profileSource: String { get }
    /// The names of the configured profiles, as known when the sessions were opened.
    var profileNames: [String] { get }
    /// The ids of the plugins that loaded.
    var loadedPlugins: [String] { get }
    /// Whether the vault's key is AUTHBRIDGE_VAULT_KEY (the vault is this process's, the variable set).
    var keyFromEnvironment: Bool { get }
}

/// One plugin as `authbridge plugins` shows it: its PluginStatus (as the plugin host wrote it,
/// members of its own included), and how to fix a refusal.
struct PluginEntry: Sendable {
    var status: JSON
    var fix: String?

    /// The status read as the spec's `PluginStatus`; nil when it is not one.
    var plugin: PluginStatus? { try? PluginStatus(wire: status) }
}

extension Sessions {
    /// The exit code and one-line message for a failed command (see `CommandExit.report`).
    func report(_ error: SessionError) -> ExitCode { CommandExit.report(explained(error)) }

    /// What the bridge's words leave out for a person at a terminal: for an unknown profile,
    /// where the profiles come from, which there are, and the closest to the name given; for a
    /// profile not signed in, the command that signs in; for a setting refused, the profile and
    /// the file; for a plugin not loaded, which are.
    /// (`explained` of each kind of sessions ends here.)
    func explainedForCommandLine(_ error: SessionError) -> SessionError {
        guard let name = error.provider else { return error }
        var explained = error
        switch (error.kind, error.reason) {
        case (.providerUnknown, "unknownProfile"):
            explained.message = CommandText.unknownProfile(name, known: profileNames, source: profileSource)
        case (.notSignedIn, _):
            explained.message += " Sign in with: authbridge login \(name)"
        case (.configurationError, _):
            // A setting the plugin refused (an http issuer): which profile, in which file, to fix.
            explained.message += " (profile \"\(name)\" in \(profileSource))"
        case (_, "pluginNotLoaded"):
            explained.message +=
                loadedPlugins.isEmpty ? " No plugin is loaded." : " Loaded plugins: \(loadedPlugins.joined(separator: ", "))."
        default: return error
        }
        return explained
    }

    /// Runs one call for `profile`, saying on stderr that the command waits for its provider
    /// when the call takes longer than a second; an error becomes the command's exit.
    func waitingForProvider<Answer>(of profile: String, _ call: (Self) async throws(SessionError) -> Answer) async throws -> Answer {
        let notice = WaitNotice.forProvider(of: profile)
        let result: Result<Answer, SessionError>
        do throws(SessionError) {
            result = .success(try await call(self))
        } catch {
            result = .failure(error)
        }
        await notice.finish()
        switch result {
        case .success(let answer): return answer
        case .failure(let error): throw report(error)
        }
    }
}

/// `--agent` / `--no-agent`: whether a command goes through the running agent.
struct AgentChoice: ParsableArguments {
    @Flag(
        inversion: .prefixedNo,
        help: ArgumentHelp(
            "Go through the running agent (authbridge agent): --agent fails when none answers, --no-agent never uses it. Default: the agent when one answers on $AUTHBRIDGE_AGENT_SOCKET or $XDG_RUNTIME_DIR/authbridge/agent.sock, unless options describe a host of this command's own (--config, --plugins, --vault…: then a running agent is named on stderr)."
        ))
    var agent: Bool?
}

/// Opens the command's way to the sessions.
enum SessionAccess {
    /// The running agent when the command may use it and one answers, else this process
    /// (`LocalEngine`, which loads plugins and opens the vault itself).
    static func open(
        _ options: HostOptions, _ choice: AgentChoice, openBrowser: SessionEngine.BrowserOpener? = nil,
        events: @escaping SessionEngine.EventSink = { _, _ in }
    ) async throws -> any Sessions {
        if let agent = try await agent(options, choice, openBrowser: openBrowser, events: events) { return agent }
        return try LocalEngine(options: options, openBrowser: openBrowser, events: events)
    }

    /// The running agent's sessions; nil when this process is to be the host: `--no-agent`,
    /// options that describe a host of its own, or no agent answering (then `--agent` fails).
    static func agent(
        _ options: HostOptions, _ choice: AgentChoice, openBrowser: SessionEngine.BrowserOpener? = nil,
        events: @escaping SessionEngine.EventSink = { _, _ in }
    ) async throws -> AgentSessions? {
        if choice.agent == false { return nil }
        if let own = options.ownHostReason {
            if choice.agent == true { throw ValidationError("--agent cannot be combined with \(own): the agent has its own") }
            // Not in silence when an agent is there: its profiles and sessions are not this command's.
            if choice.agent == nil, let path = AgentSocket.path(), AgentSessions.listening(at: path) {
                Terminal.standardError.warn(
                    "not using the agent at \(path): \(own) describes a host of this command's own; pass --no-agent to say so"
                )
            }
            return nil
        }
        guard let path = AgentSocket.path() else {
            if choice.agent == true {
                Terminal.standardError.error(
                    "no agent to use: XDG_RUNTIME_DIR is not set; set \(AgentSocket.environmentVariable) to the agent's socket")
                throw ExitCode(CommandExit.failure)
            }
            return nil
        }
        switch await AgentSessions.connect(path: path, openBrowser: openBrowser, events: events) {
        case .success(let sessions):
            // The agent serves the profiles it last read; a file it cannot use now fails the command as here.
            if let problem = sessions.configurationProblem { throw HostOptions.unusableConfiguration(problem) }
            // The variable is the key of a vault in this process; the agent has its own.
            if ProcessHardening.vaultSecret != nil {
                Terminal.standardError.warn(
                    "AUTHBRIDGE_VAULT_KEY is set but not used: the agent at \(path) keeps its own vault (pass --no-agent to open the vault here with that key)"
                )
            }
            return sessions
        case .failure(let failure):
            if choice.agent == true || failure.worthTelling {
                let err = Terminal.standardError
                if choice.agent == true {
                    err.error(failure.message)
                    if !failure.worthTelling { err.line(CommandText.startAgent) }
                    throw ExitCode(CommandExit.failure)
                }
                err.warn("\(failure.message); going on without it")
            }
            return nil
        }
    }

    /// Ends what the command opened (agent connections, engines), before the process exits.
    static func closeAll() async {
        AgentSessions.closeAll()
        await LocalEngine.closeAll()
    }
}

extension HostOptionSet {
    /// Why this command must be its own host, not the agent's client: an option that
    /// describes plugins, profiles or the vault (the agent has its own). Nil when none was
    /// given. AUTHBRIDGE_VAULT_KEY is not one: it is the key of this process's vault, set in
    /// the environment of every command (a shell's profile), and the agent has a vault and a
    /// key of its own (`SessionAccess.agent` says the variable goes unused).
    var ownHostReason: String? {
        if config != nil { return "--config" }
        if !pluginFolders.isEmpty { return "--plugins" }
        if noDefaultPlugins { return "--no-default-plugins" }
        if !pluginIsolation.isEmpty { return "--plugin-isolation" }
        if pluginMemoryLimit != 1024 { return "--plugin-memory-limit" } // the defaults as declared
        if vault != "encrypted-file" { return "--vault" }
        if vaultDir != nil { return "--vault-dir" }
        if vaultKeyFile != nil { return "--vault-key-file" }
        if requireSecureStorage { return "--require-secure-storage" }
        return nil
    }
}
