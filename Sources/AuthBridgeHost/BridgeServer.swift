import AuthBridgeJSON
import AuthBridgePluginHost
import AuthBridgeProtocol
import AuthBridgeRPC
import AuthBridgeSession
import AuthBridgeSystem
import Logging
import Synchronization

/// What the host needs to start: where plugins and profiles come from.
public struct HostConfiguration: Sendable {
    public var pluginFolders: [PluginFolder]
    /// Where each plugin runs.
    public var isolation: IsolationPolicy
    public var profiles: [Profile]
    /// Problems found while reading the configuration; reported in `initialize`.
    public var warnings: [String]
    /// Why the configuration file could not be used (it names the file), or nil: reported in
    /// `initialize` and `listProviders` (`configurationProblem`), so a frontend — the CLI
    /// through the agent — can say what `authbridge status --no-agent` says.
    public var configurationProblem: String?
    /// The host re-reads the configuration file when it changes (the agent) and sends
    /// `profiles/changed` (`BridgeHost.reloadConfiguration`).
    public var reloadsConfiguration = false
    /// Enables `$/test/advanceClock` (test suites only).
    public var testClock: Bool
    /// Opens browser-flow URLs itself (`--open-browser`), besides telling the frontend.
    public var browser: BrowserLauncher?

    public init(
        pluginFolders: [PluginFolder], isolation: IsolationPolicy = IsolationPolicy(), profiles: [Profile] = [], warnings: [String] = [],
        testClock: Bool = false, browser: BrowserLauncher? = nil, configurationProblem: String? = nil
    ) {
        self.configurationProblem = configurationProblem
        self.pluginFolders = pluginFolders
        self.isolation = isolation
        self.profiles = profiles
        self.warnings = warnings
        self.testClock = testClock
        self.browser = browser
    }
}

extension HostConfiguration {
    /// Loads the configured plugins on a thread of its own: loading blocks
    /// (runners start, `init` and `describe` run under their deadlines) and
    /// must not hold a thread of the cooperative pool.
    public func loadPlugins(logger: Logger) async -> [PluginReport] {
        let loader = PluginLoader(folders: pluginFolders, policy: isolation, logger: logger)
        return await withCheckedContinuation { continuation in
            detachThread { continuation.resume(returning: loader.loadAll()) }
        }
    }
}

/// The bridge: AuthBridge's JSON-RPC methods on top of the session engine,
/// with the LSP-style lifecycle (initialize → initialized → … → shutdown → exit),
/// for one connection. What the connections of one process share — plugins,
/// engine, events — is its `BridgeHost`: `serve` has one connection (stdio),
/// `authbridge agent` one per client.
///
/// Threading: lifecycle state changes happen in `admit`/`received` on the
/// connection's reader thread, in arrival order; methods run concurrently.
public final class BridgeServer: ConnectionDelegate {
    public static let serverName = "authbridge"
    public static let serverVersion = hostVersion
    public static let protocolVersion = (major: 1, minor: 0)

    private enum Phase { case uninitialized, initialized, shuttingDown }

    private let host: BridgeHost
    private let phase = Mutex(Phase.uninitialized)
    private let connection: Connection
    /// Per method, the last params `answerAtOnce` saw pass the spec's check, and what they decoded to.
    private let lastTokenCall = Mutex<(raw: JSON, params: GetAccessTokenParams)?>(nil)
    private let lastStatusCall = Mutex<(raw: JSON, params: CheckSignInStatusParams)?>(nil)
    /// The app's name from `initialize` (`clientInfo.name`): the `client_name` of a client the
    /// host registers for it (RFC 7591).
    private let clientName = Mutex<String?>(nil)

    private var configuration: HostConfiguration { host.configuration }
    private var logger: Logger { host.logger }
    private var runtime: Task<BridgeHost.Runtime, Never> { host.runtime }

    /// One connection of `host`.
    public init(host: BridgeHost, connection: Connection) {
        self.host = host
        self.connection = connection
    }

    /// Serves this connection until its end of input, `exit`, or its peer
    /// going away; the host goes on (one connection of an agent ends; `serve`'s
    /// process then shuts the host down: AuthBridgeLaunch's `HostProcess`).
    public func serve() async -> Connection.Ending {
        start()
        return await ended()
    }

    /// Starts serving (the reader thread), from the calling thread: `serve` without its wait,
    /// for the agent's accepting thread. `ended` waits for the end.
    public func start() {
        host.events.attach(self)
        connection.start(delegate: self)
    }

    /// Waits for the end of what `start` began (`serve`).
    public func ended() async -> Connection.Ending {
        defer { host.events.detach(self) }
        return await connection.ended()
    }

    /// Whether the host's events reach this connection: once it is initialized.
    var receivesEvents: Bool { phase.withLock { $0 != .uninitialized } }

    /// Sends one of the host's events, encoded, to this connection's peer.
    func notify(frame: [UInt8]) { connection.notify(frame: frame) }

    // MARK: - ConnectionDelegate

    public func admit(_ request: Request) -> RPCError? {
        phase.withLock { phase in
            switch (phase, request.method) {
            case (.uninitialized, "initialize"):
                // Checked here, in arrival order: only a valid initialize
                // lets the requests behind it through.
                if let problem = Self.checkInitialize(request) { return problem }
                phase = .initialized
                return nil
            case (.uninitialized, _):
                return RPCError(.serverNotInitialized, "Server not initialized: send \"initialize\" first")
            case (.initialized, "initialize"):
                return RPCError.invalidRequest("the server is already initialized")
            case (.initialized, "shutdown"):
                // Only a valid shutdown starts shutting down; an invalid one is answered by `handle`.
                if (try? Self.decodedParams(request)) != nil { phase = .shuttingDown }
                return nil
            case (.initialized, _):
                return nil
            case (.shuttingDown, _):
                return RPCError.invalidRequest("the server is shutting down; only \"exit\" is accepted")
            }
        }
    }

    public func received(_ notification: Notification) -> Connection.Disposition {
        switch notification.method {
        case "exit":
            // Arrival order: a shutdown read before this exit counts even while its handler
            // has not run yet (a frontend may write both at once).
            return .exit(code: phase.withLock { $0 == .shuttingDown } ? 0 : 1)
        case "initialized":
            logger.debug("client initialized")
        default:
            logger.debug("ignored notification", metadata: ["method": "\(notification.method)"])
        }
        return .proceed
    }

    /// `getAccessToken` and `checkSignInStatus` for a session that needs
    /// nothing done, answered on the reader thread from what the engine
    /// answered before (`SessionEngine.accessTokenAtOnce`, `statusAtOnce`):
    /// no task, no actor. A status the plugin's inline `check_session`
    /// confirms runs it here, under its 50 ms mark: past it the plugin loses
    /// its inline hooks and `ifBlocked` moves reading to a new thread. Params
    /// are checked as `handle` checks them; any problem, and any call that
    /// needs the engine, goes to `handle`.
    /// A status check reports no progress: what a plugin emits in it is
    /// dropped (`requestID` nil; progress is routed by `EventRoutes`).
    public func answerAtOnce(_ request: Request, ifBlocked: @escaping @Sendable () -> Void) -> [UInt8]? {
        guard let engine = host.readyEngine.engine.withLock({ $0 }) else { return nil }
        switch request.method {
        case InitializeParams.method:
            // Admitted: its params passed the spec's check. The answer the last connection got, if
            // nothing it shows has changed since (`InitializeAnswers`).
            guard let params = try? Self.decodedParams(request) as? InitializeParams,
                let text = host.initializeAnswers.answer(Self.shape(params), at: InitializeAnswers.stamp(engine, host: host))
            else { return nil }
            clientName.withLock { $0 = params.clientInfo?.name }
            return text
        case GetAccessTokenParams.method:
            guard let call = decodedAtOnce(request, remembering: lastTokenCall), !call.forceRefresh, call.scopes == nil, call.resource == nil
            else { return nil }
            return engine.accessTokenAtOnce(
                call.provider, account: call.account,
                minimumValidity: call.minValidityMs ?? SessionEngine.defaultMinimumValidityMilliseconds,
                request: call.url.map { (call.method ?? "GET", $0, call.dpopNonce) })
        case CheckSignInStatusParams.method:
            guard let call = decodedAtOnce(request, remembering: lastStatusCall) else { return nil }
            return engine.statusAtOnce(call.provider, account: call.account, requestID: nil, runningHooks: true, ifBlocked: ifBlocked)?.text
        default:
            return nil
        }
    }

    /// `decodedParams` for `answerAtOnce`, remembering the last params of the
    /// method that passed: a frontend sends the same ones again and again, and
    /// the check (the spec's schema) and the decoding are pure functions of
    /// them. Typed per method: no existential to box and cast on the hot path.
    private func decodedAtOnce<Params: BridgeRequest>(
        _ request: Request, remembering last: borrowing Mutex<(raw: JSON, params: Params)?>
    ) -> Params? {
        let raw = request.params ?? .null
        if let known = last.withLock({ $0.flatMap { $0.raw == raw ? $0.params : nil } }) { return known }
        guard let params = try? Self.decodedParams(request) as? Params else { return nil }
        last.withLock { $0 = (raw, params) }
        return params
    }

    public func handle(_ request: Request) async throws -> JSON {
        do {
            return try await dispatch(request)
        } catch let error as SessionError {
            throw RPCError(error)
        }
    }

    // MARK: - Methods

    private func dispatch(_ request: Request) async throws -> JSON {
        if request.method == "$/test/advanceClock" && configuration.testClock { return try Self.advanceClock(request) }
        let params = try Self.decodedParams(request)
        switch params {
        case let params as InitializeParams: return try await initialize(params)
        case is ShutdownParams: return .null
        case is DiscoverParams: return try JSON.parse(OpenRPCDocument.text)
        default: break
        }
        let engine = await runtime.value.engine
        // The engine knows the request by an id unique in the host: a sign-in's progress
        // goes back to this connection under the request's own id.
        let requestID = host.events.open(request.id.json, from: self)
        defer { host.events.close(requestID) }
        switch params {
        case is ListProvidersParams:
            return ListProvidersResult(
                plugins: await runtime.value.reports.map(\.json), profiles: await engine.profileList(),
                configurationProblem: host.configurationProblem
            ).wire
        case let params as ConfigureProfileParams: return try await engine.configureProfile(params).wire
        case let params as RemoveProfileParams: return try await engine.removeProfile(params).wire
        case let params as ListAccountsParams: return try await engine.listAccounts(params).wire
        case let params as CheckSignInStatusParams:
            // A session the plugin's inline check_session confirms, when the reader could not
            // run it (the inline slot was taken): answered here without the engine.
            if let quick = engine.statusAtOnce(params.provider, account: params.account, requestID: requestID, runningHooks: true) {
                return quick.json
            }
            return try await engine.checkSignInStatus(params, requestID: requestID).wire
        case let params as RequestOAuthTokensParams:
            return try await engine.requestOAuthTokens(
                params, requestID: requestID, order: request.sequence, clientName: clientName.withLock { $0 }
            ).wire
        case let params as CompleteSignInParams: return try await engine.completeSignIn(params).wire
        case let params as CompleteSignOutParams: return try await engine.completeSignOut(params).wire
        case let params as SignOutParams: return try await engine.signOut(params, requestID: requestID).wire
        case let params as GetAccessTokenParams: return try await engine.getAccessToken(params, requestID: requestID).wire
        case let params as FetchParams: return try await engine.fetch(params, requestID: requestID).wire
        case let params as ExchangeTokenParams: return try await engine.exchangeToken(params, requestID: requestID).wire
        default: throw RPCError.methodNotFound(request.method)
        }
    }

    /// `$/test/advanceClock` (test suites only, not part of the protocol): moves the host's clock.
    private static func advanceClock(_ request: Request) throws(RPCError) -> JSON {
        let params = try Params(request)
        try params.allowOnly(["milliseconds"])
        guard let step = try params.optionalInt("milliseconds", in: -31_536_000_000...31_536_000_000) else {
            throw RPCError.invalidParams(field: "milliseconds", "is required")
        }
        HostClock.shift(by: step)
        return ["now": .int(HostClock.nowMilliseconds())]
    }

    /// The request's params, checked against the method's `x-params` schema in
    /// bridge-spec (`ParamsSchema`) and decoded into the method's type
    /// (`BridgeMethods`, generated from the same spec): one step, whose
    /// problems are -32602 naming the field. An unknown method is -32601
    /// whatever its params; so are the notifications a client sends, which are
    /// never requests.
    static func decodedParams(_ request: Request) throws(RPCError) -> any BridgeRequest {
        guard let type = BridgeMethods.requests[request.method] else { throw RPCError.methodNotFound(request.method) }
        _ = try Params(request)
        try ParamsSchema.shared.check(method: request.method, params: request.params)
        do {
            return try type.init(wire: request.params ?? .object([:]))
        } catch {
            throw RPCError.invalidParams(field: error.field.isEmpty ? "params" : error.field, error.message)
        }
    }

    /// Validates `initialize` params. Unknown members are ignored: a newer
    /// client sends them before it knows this host's version (the spec's
    /// InitializeParams allows them).
    static func checkInitialize(_ request: Request) -> RPCError? {
        do throws(RPCError) {
            guard let params = try decodedParams(request) as? InitializeParams else { return RPCError.methodNotFound(request.method) }
            let requested = params.protocolVersion
            guard negotiatedMinor(requested) != nil else {
                return RPCError(
                    RPCError.Code(.unsupportedProtocolVersion), "Protocol version \(requested) is not supported; this host speaks 1.x",
                    data: ["reason": "unsupportedProtocolVersion", "retryable": false, "supported": ["1.0"]])
            }
            return nil
        } catch {
            return error
        }
    }

    /// The minor version both sides speak, or nil for another major.
    static func negotiatedMinor(_ version: String) -> Int? {
        let parts = version.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 2, parts.allSatisfy({ !$0.isEmpty && $0.allSatisfy(\.isASCII) && $0.allSatisfy(\.isNumber) }),
            let major = Int(parts[0]), let minor = Int(parts[1]), major == protocolVersion.major
        else { return nil }
        return min(minor, protocolVersion.minor)
    }

    /// What shapes an `initialize` answer beyond the host's state.
    static func shape(_ params: InitializeParams) -> InitializeAnswers.Shape {
        InitializeAnswers.Shape(minor: negotiatedMinor(params.protocolVersion) ?? 0, settingsSchemas: params.settingsSchemas)
    }

    /// The answer, kept for the connections that ask the same next (`InitializeAnswers`).
    private func initialize(_ params: InitializeParams) async throws -> JSON {
        clientName.withLock { $0 = params.clientInfo?.name }
        let runtime = await runtime.value
        let before = InitializeAnswers.stamp(runtime.engine, host: host)
        let answer = await initializeResult(params, runtime: runtime).wire
        host.initializeAnswers.keep(
            answer.serialized(), for: Self.shape(params), before: before, after: InitializeAnswers.stamp(runtime.engine, host: host))
        return answer
    }

    private func initializeResult(_ params: InitializeParams, runtime: BridgeHost.Runtime) async -> InitializeResult {
        let agreedMinor = Self.shape(params).minor
        let flows = Set(runtime.reports.compactMap(\.plugin).flatMap { $0.descriptor["flows"]?.arrayValue?.compactMap(\.stringValue) ?? [] })
        let notifications: [ServerCapabilities.NotificationMethod] =
            [.sessionChanged, .signInProgress, .signOutProgress] + (configuration.reloadsConfiguration ? [.profilesChanged] : [])
        return InitializeResult(
            protocolVersion: "\(Self.protocolVersion.major).\(agreedMinor)", serverInfo: .init(version: Self.serverVersion),
            capabilities: ServerCapabilities(flows: flows.sorted().compactMap(Flow.init(rawValue:)), notifications: notifications),
            providers: params.settingsSchemas ? runtime.reports.map(\.json) : runtime.reports.map(\.jsonWithoutSettings),
            profiles: await runtime.engine.profileList(), storage: runtime.engine.storageInfo,
            warnings: configuration.warnings + (await runtime.engine.configurationSettingsWarnings()).map { "configuration file \($0)" },
            configurationProblem: host.configurationProblem)
    }
}
