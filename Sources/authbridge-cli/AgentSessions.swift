import AuthBridgeHost
import AuthBridgeJSON
import AuthBridgeProtocol
import AuthBridgeRPC
import AuthBridgeSession
import AuthBridgeSystem
import Logging
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// The sessions of the running agent, over its socket: a bridge connection
/// like any app's (its own `initialize`), so what a command does reaches
/// every app at once, and refreshes are the agent's, shared with them.
final class AgentSessions: Sessions {
    let path: String
    private let client: RPCClient
    private let fd: Int32
    /// The agent's `initialize` answer: its plugins, profiles and storage.
    private let initialized: InitializeResult
    /// Whether the sign-in under way is a browser flow, whose page this process opens.
    private let browserSignIn = Mutex(false)

    /// Why the agent could not be used.
    struct ConnectFailure: Error {
        let message: String
        /// False for the ordinary case of no agent running (nothing to say unless `--agent`).
        let worthTelling: Bool
    }

    private init(path: String, fd: Int32, client: RPCClient, initialized: InitializeResult) {
        self.path = path
        self.fd = fd
        self.client = client
        self.initialized = initialized
    }

    /// Whether an agent of this user listens at `path`: a connection is made and closed at
    /// once, nothing sent (to say that a command bypasses it).
    static func listening(at path: String) -> Bool {
        guard let fd = try? UnixSocket.connect(path: path) else { return false }
        defer { close(fd) }
        return UnixSocket.peerCredentials(fd)?.uid == getuid()
    }

    /// How long `initialize` may take before the agent counts as not answering.
    static let initializeBound = Duration.seconds(10)

    /// Connects to the agent at `path` and initializes the connection. `events` gets the
    /// agent's notifications (this connection's sign-in progress, every session change);
    /// `openBrowser` opens a browser sign-in's page, as the engine does in process.
    static func connect(
        path: String, openBrowser: SessionEngine.BrowserOpener?, events: @escaping SessionEngine.EventSink
    ) async -> Result<AgentSessions, ConnectFailure> {
        // An agent that closes the connection must not kill the command with SIGPIPE.
        signal(SIGPIPE, SIG_IGN)
        let fd: Int32
        do {
            fd = try UnixSocket.connect(path: path)
        } catch  where [ENOENT, ECONNREFUSED].contains(error.errno) {
            return .failure(ConnectFailure(message: "no authbridge agent answers on \(path)", worthTelling: false))
        } catch {
            return .failure(ConnectFailure(message: "cannot reach the authbridge agent on \(path) (\(error))", worthTelling: true))
        }
        // The agent serves only its own user, and is only trusted as this user's: anyone may listen
        // at a path others can write to (AUTHBRIDGE_AGENT_SOCKET in /tmp), and would be handed
        // every request and answer with tokens and sign-in pages of its own.
        guard let peer = UnixSocket.peerCredentials(fd), peer.uid == getuid() else {
            let who = UnixSocket.peerCredentials(fd).map { "uid \($0.uid) (pid \($0.pid))" } ?? "an unknown user"
            close(fd)
            return .failure(
                ConnectFailure(
                    message: "what answers on \(path) runs as \(who), not as you (uid \(getuid())): it is not your authbridge agent",
                    worthTelling: true))
        }
        let opened = Mutex<AgentSessions?>(nil)
        let client = RPCClient(fd: fd, logger: Logger(label: "authbridge.agent-client")) { method, params in
            if method == SignInProgressParams.method, let progress = try? SignInProgressParams(wire: params), progress.stage == .openUrl,
                let url = progress.url, let sessions = opened.withLock({ $0 }), sessions.browserSignIn.withLock({ $0 })
            {
                openBrowser?(url) { _ in }
            }
            // A sign-out's end-session page (browser flow): the agent opens no browser, its caller does.
            if method == SignOutProgressParams.method, let progress = try? SignOutProgressParams(wire: params), progress.stage == .openUrl,
                let url = progress.url
            {
                openBrowser?(url) { _ in }
            }
            events(method, params)
        }
        // A wedged agent must not hang the command: initialize is bounded (a live one answers in milliseconds).
        let initialized = await firstOf(within: initializeBound) { () async -> Result<JSON, RPCClient.Failure> in
            do throws(RPCClient.Failure) {
                let params = InitializeParams(
                    protocolVersion: "1.0", clientInfo: .init(name: "authbridge-cli", version: BridgeServer.serverVersion))
                return .success(try await client.call(InitializeParams.method, params.wire))
            } catch {
                return .failure(error)
            }
        }
        let answer: InitializeResult
        switch initialized {
        case .success(let result)?:
            do throws(WireError) {
                answer = try InitializeResult(wire: result)
            } catch {
                client.close()
                close(fd)
                return .failure(
                    ConnectFailure(
                        message: "the authbridge agent on \(path) answered initialize with what this command cannot read (\(error))",
                        worthTelling: true))
            }
        case .failure(let failure)?:
            client.close()
            close(fd)
            if case .error(let refusal) = failure {
                return .failure(
                    ConnectFailure(message: "the authbridge agent on \(path) refused this command: \(refusal.message)", worthTelling: true))
            }
            return .failure(ConnectFailure(message: "the authbridge agent on \(path) closed the connection", worthTelling: true))
        case nil:
            client.close()
            close(fd)
            return .failure(
                ConnectFailure(message: "the authbridge agent on \(path) did not answer within \(initializeBound)", worthTelling: true))
        }
        client.notify("initialized", [:])
        let sessions = AgentSessions(path: path, fd: fd, client: client, initialized: answer)
        opened.withLock { $0 = sessions }
        open.withLock { $0.append(sessions) }
        return .success(sessions)
    }

    // MARK: - Sessions

    func profiles() async throws(SessionError) -> [ProfileInfo] {
        try await call(ListProvidersParams()).profiles
    }

    func configureProfile(_ params: ConfigureProfileParams) async throws(SessionError) -> ProfileInfo { try await call(params) }

    func signIn(_ params: RequestOAuthTokensParams) async throws(SessionError) -> SignInStatus {
        let flow = params.flow?.rawValue ?? flows(ofProfile: params.provider).first
        browserSignIn.withLock { $0 = flow == Flow.browser.rawValue }
        defer { browserSignIn.withLock { $0 = false } }
        return try await call(params)
    }

    func status(_ params: CheckSignInStatusParams) async throws(SessionError) -> SignInStatus { try await call(params) }

    func accounts(_ params: ListAccountsParams) async throws(SessionError) -> [SignInStatus] { try await call(params).accounts }

    func accessToken(_ params: GetAccessTokenParams) async throws(SessionError) -> AccessTokenResult { try await call(params) }

    func exchangeToken(_ params: ExchangeTokenParams) async throws(SessionError) -> AccessTokenResult { try await call(params) }

    func signOut(_ params: SignOutParams) async throws(SessionError) -> SignOutResult { try await call(params) }

    func plugins() async throws(SessionError) -> [PluginEntry] {
        try await call(ListProvidersParams()).plugins.map { PluginEntry(status: $0, fix: nil) }
    }

    var storage: StorageInfo { initialized.storage }

    /// Why the agent could not use the configuration file when it last read it (it names the file).
    var configurationProblem: String? { initialized.configurationProblem }

    func explained(_ error: SessionError) -> SessionError {
        guard error.reason == "pluginNotLoaded", let name = error.provider, let plugin = profile(name)?.plugin,
            let refused = plugins.lazy.compactMap({ status -> PluginStatus.Refused? in
                if case .refused(let refused) = status, refused.id == plugin { refused } else { nil }
            }).first
        else { return explainedForCommandLine(error) }
        var explained = error
        explained.message =
            "Profile \"\(name)\" uses plugin \"\(plugin)\", which the agent refused (\(refused.reason.rawValue)): "
            + "\(refused.message). Run `authbridge plugins` to see every plugin's state."
        return explained
    }

    var profileSource: String { "the agent at \(path)" }
    var profileNames: [String] { initialized.profiles.map(\.name) }
    var loadedPlugins: [String] {
        plugins.compactMap { if case .loaded(let plugin) = $0 { plugin.id } else { nil } }
    }

    /// The plugins the agent listed in `initialize`, as far as they read as the spec's.
    private var plugins: [PluginStatus] { initialized.providers.compactMap { try? PluginStatus(wire: $0) } }
    /// The agent's vault and key are its own, whatever this process's environment holds.
    var keyFromEnvironment: Bool { false }

    func flows(ofProfile name: String) -> [String] {
        profile(name)?.flows.map(\.rawValue) ?? []
    }

    private func profile(_ name: String) -> ProfileInfo? {
        initialized.profiles.first { $0.name == name }
    }

    /// One bridge call; the agent's error, an answer that is not the method's result, or the
    /// agent's going away, as a `SessionError`.
    private func call<Request: BridgeRequest>(_ params: Request) async throws(SessionError) -> Request.Result {
        let answer: JSON
        do {
            answer = try await client.call(Request.method, params.wire)
        } catch {
            switch error {
            case .error(let refusal): throw SessionError(refusal)
            case .closed:
                throw SessionError(
                    .providerUnavailable, "The authbridge agent on \(path) closed the connection (it stopped or was killed).",
                    reason: "agentGone")
            }
        }
        do throws(WireError) {
            return try Request.Result(wire: answer)
        } catch {
            throw SessionError(
                .pluginError, "The authbridge agent on \(path) answered \(Request.method) with what this command cannot read (\(error)).",
                reason: "badResponse")
        }
    }

    // MARK: - Closing

    /// The connections this command opened, ended before it exits.
    private static let open = Mutex<[AgentSessions]>([])

    /// Ends every connection the command opened: `exit`, then the socket is closed.
    static func closeAll() {
        for sessions in open.withLock({ opened in
            defer { opened.removeAll() }
            return opened
        }) {
            sessions.client.notify("exit")
            sessions.client.close()
            close(sessions.fd)
        }
    }
}
