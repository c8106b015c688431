import AuthBridgeJSON
import AuthBridgePluginHost
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
    /// Per method, the last params `answerAtOnce` saw pass the spec's check.
    private let lastCheckedParams = Mutex<[String: JSON]>([:])

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
        host.events.attach(self)
        defer { host.events.detach(self) }
        return await connection.run(delegate: self)
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
                if (try? Self.checkedParams(request)) != nil { phase = .shuttingDown }
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
        guard request.method == "getAccessToken" || request.method == "checkSignInStatus",
            let engine = host.readyEngine.engine.withLock({ $0 }),
            let params = checkedAtOnce(request)
        else { return nil }
        if request.method == "getAccessToken" {
            guard let call = try? AccessTokenCall(params), !call.forceRefresh else { return nil }
            return engine.accessTokenAtOnce(call.provider, account: call.account, minimumValidity: call.minimumValidity)?.text
        }
        do {
            return engine.statusAtOnce(
                try params.string("provider"), account: try params.optionalNonEmptyString("account"), requestID: nil,
                runningHooks: true, ifBlocked: ifBlocked)?.text
        } catch {
            return nil
        }
    }

    /// `checkedParams` for `answerAtOnce`, remembering per method the last
    /// params that passed: a frontend sends the same ones again and again, and
    /// the check (the spec's schema) is a pure function of them.
    private func checkedAtOnce(_ request: Request) -> Params? {
        let raw = request.params ?? .null
        if lastCheckedParams.withLock({ $0[request.method] == raw }) { return try? Params(request) }
        guard let params = try? Self.checkedParams(request, testClock: configuration.testClock) else { return nil }
        lastCheckedParams.withLock { $0[request.method] = raw }
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
        let params = try Self.checkedParams(request, testClock: configuration.testClock)
        switch request.method {
        case "initialize": return try await initialize(params)
        case "shutdown":
            return .null
        case "rpc.discover": return try JSON.parse(OpenRPCDocument.text)
        default: break
        }
        let engine = await runtime.value.engine
        // The engine knows the request by an id unique in the host: a sign-in's progress
        // goes back to this connection under the request's own id.
        let requestID = host.events.open(request.id.json, from: self)
        defer { host.events.close(requestID) }
        switch request.method {
        case "listProviders":
            return .compactObject([
                "plugins": .array(await runtime.value.reports.map(\.json)), "profiles": .array(await engine.profileList()),
                "configurationProblem": host.configurationProblem.map(JSON.string),
            ])
        case "configureProfile":
            let settings = JSON.object(try params.optionalObject("settings") ?? [:])
            return try await engine.configureProfile(name: try params.string("name"), plugin: try params.string("plugin"), settings: settings)
        case "removeProfile":
            return ["removed": .bool(try await engine.removeProfile(try params.string("name")))]
        case "listAccounts":
            return ["accounts": .array(try await engine.listAccounts(try params.optionalString("provider")))]
        case "checkSignInStatus":
            // A session the plugin's inline check_session confirms, when the reader could not
            // run it (the inline slot was taken): answered here without the engine.
            if let quick = engine.statusAtOnce(
                try params.string("provider"), account: try params.optionalNonEmptyString("account"), requestID: requestID,
                runningHooks: true)
            {
                return quick.json
            }
            return try await engine.checkSignInStatus(
                try params.string("provider"), account: try params.optionalNonEmptyString("account"),
                requestID: requestID)
        case "requestOAuthTokens":
            return try await engine.requestOAuthTokens(
                try params.string("provider"), params: .object(params.members), requestID: requestID,
                order: request.sequence)
        case "completeSignIn":
            return try await engine.completeSignIn(try params.string("provider"), callbackURL: try params.string("callbackUrl"))
        case "signOut":
            return try await engine.signOut(
                try params.string("provider"), account: try params.optionalNonEmptyString("account"),
                requestID: requestID)
        case "getAccessToken":
            let call = try AccessTokenCall(params)
            return try await engine.getAccessToken(
                call.provider, account: call.account, minimumValidity: call.minimumValidity, forceRefresh: call.forceRefresh,
                requestID: requestID)
        case "fetch":
            let outgoing: JSON = .compactObject([
                "method": .string(try params.optionalString("method") ?? "GET"),
                "url": .string(try params.string("url")),
                "headers": .object(try params.optionalObject("headers") ?? [:]),
                "body": try params.optionalString("body").map(JSON.string),
                "timeoutMs": try params.optionalInt("timeoutMs", in: 1_000...300_000).map(JSON.int),
            ])
            return try await engine.fetch(
                try params.string("provider"), account: try params.optionalNonEmptyString("account"), request: outgoing,
                requestID: requestID)
        case "$/test/advanceClock" where configuration.testClock:
            guard let step = try params.optionalInt("milliseconds", in: -31_536_000_000...31_536_000_000) else {
                throw RPCError.invalidParams(field: "milliseconds", "is required")
            }
            HostClock.shift(by: step)
            return ["now": .int(HostClock.nowMilliseconds())]
        default:
            throw RPCError.methodNotFound(request.method)
        }
    }

    /// The request's params, checked against the method's `x-params` schema in
    /// bridge-spec (`ParamsSchema`): every method's checks come from the spec.
    /// An unknown method is -32601 whatever its params.
    static func checkedParams(_ request: Request, testClock: Bool = false) throws(RPCError) -> Params {
        let schemas = ParamsSchema.shared
        if request.method == "$/test/advanceClock" && testClock {
            // Test suites only, not part of the protocol: checked by hand.
            let params = try Params(request)
            try params.allowOnly(["milliseconds"])
            return params
        }
        // Notifications a client sends are in the spec too, but are never requests.
        guard schemas.knows(request.method), !["initialized", "exit", "$/cancelRequest"].contains(request.method) else {
            throw RPCError.methodNotFound(request.method)
        }
        let params = try Params(request)
        try schemas.check(method: request.method, params: request.params)
        return params
    }

    /// Validates `initialize` params. Unknown members are ignored: a newer
    /// client sends them before it knows this host's version (the spec's
    /// InitializeParams allows them).
    static func checkInitialize(_ request: Request) -> RPCError? {
        do throws(RPCError) {
            let params = try checkedParams(request)
            let requested = try params.string("protocolVersion")
            guard negotiatedMinor(requested) != nil else {
                return RPCError(
                    .unsupportedProtocolVersion, "Protocol version \(requested) is not supported; this host speaks 1.x",
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

    private func initialize(_ params: Params) async throws -> JSON {
        let agreedMinor = Self.negotiatedMinor(try params.string("protocolVersion")) ?? 0
        let runtime = await runtime.value
        let flows = Set(runtime.reports.compactMap(\.plugin).flatMap { $0.descriptor["flows"]?.arrayValue?.compactMap(\.stringValue) ?? [] })
        let result: JSON = [
            "protocolVersion": .string("\(Self.protocolVersion.major).\(agreedMinor)"),
            "serverInfo": ["name": .string(Self.serverName), "version": .string(Self.serverVersion)],
            "capabilities": [
                "batches": false,
                "cancellation": true,
                "flows": .array(flows.sorted().map(JSON.string)),
                "notifications": .array(
                    (["session/changed", "signIn/progress"] + (configuration.reloadsConfiguration ? ["profiles/changed"] : [])).map(JSON.string)),
            ],
            "providers": .array(runtime.reports.map(\.json)),
            "profiles": .array(await runtime.engine.profileList()),
            "storage": runtime.engine.storageInfo,
            "warnings": .array(
                (configuration.warnings + (await runtime.engine.configurationSettingsWarnings()).map { "configuration file \($0)" })
                    .map(JSON.string)),
        ]
        return host.configurationProblem.map { result.setting("configurationProblem", .string($0)) } ?? result
    }
}

/// `getAccessToken`'s params, read alike by `handle` and `answerAtOnce`.
private struct AccessTokenCall {
    var provider: String
    var account: String?
    var minimumValidity: Int64
    var forceRefresh: Bool

    init(_ params: Params) throws(RPCError) {
        provider = try params.string("provider")
        account = try params.optionalNonEmptyString("account")
        minimumValidity = try params.optionalInt("minValidityMs", in: 0...86_400_000) ?? SessionEngine.defaultMinimumValidityMilliseconds
        forceRefresh = try params.optionalBool("forceRefresh") ?? false
    }
}
