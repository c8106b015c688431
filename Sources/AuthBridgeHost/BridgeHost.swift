import AuthBridgeJSON
import AuthBridgePluginHost
import AuthBridgeRPC
import AuthBridgeSession
import AuthBridgeSystem
import Logging
import Synchronization

/// What the bridge connections of one process share: the plugins and the
/// session engine, made once (so refreshes are single-flight across every
/// connection), and where the engine's events go (`EventRoutes`). `serve`
/// has one connection, on stdio; `authbridge agent` one per client.
public final class BridgeHost: Sendable {
    let configuration: HostConfiguration
    let logger: Logger
    /// Plugins load in the background from process start; `initialize` waits.
    let runtime: Task<Runtime, Never>
    /// The engine once it exists, for answers given on the reader thread.
    let readyEngine: ReadyEngine
    let events: EventRoutes
    /// `initialize` answers kept for the next connections that ask the same.
    let initializeAnswers = InitializeAnswers()
    /// Why the configuration file in use could not be read the last time it was (see
    /// `HostConfiguration.configurationProblem`); nil when it was read.
    private let problem: Mutex<String?>

    /// Set once, when plugins are loaded and the engine made.
    final class ReadyEngine: Sendable {
        let engine = Mutex<SessionEngine?>(nil)
    }

    struct Runtime: Sendable {
        var reports: [PluginReport]
        var engine: SessionEngine
    }

    /// Starts loading plugins at once, in the background.
    public init(configuration: HostConfiguration, store: SessionStore, logger: Logger) {
        self.configuration = configuration
        self.logger = logger
        self.problem = Mutex(configuration.configurationProblem)
        // The spec's params schemas are read while plugins load, off the path of the first frame.
        Task.detached { _ = ParamsSchema.shared.methods.count }
        let events = EventRoutes(logger: logger)
        self.events = events
        let readyEngine = ReadyEngine()
        self.readyEngine = readyEngine
        self.runtime = Task.detached {
            let reports = await configuration.loadPlugins(logger: logger)
            var openBrowser: SessionEngine.BrowserOpener?
            if let browser = configuration.browser {
                openBrowser = { url, failed in
                    browser.open(url) { reason in
                        logger.warning("could not open the browser: \(reason); the sign-in URL is in the openUrl progress event")
                        failed(reason)
                    }
                }
            }
            let engine = SessionEngine(
                plugins: reports.compactMap(\.plugin), profiles: configuration.profiles, store: store,
                logger: logger, openBrowser: openBrowser, pluginFolders: configuration.pluginFolders.map(\.path),
                emit: { method, params in events.deliver(method, params) })
            // A shared vault (PostgreSQL) relays other hosts' changes to this host's connections.
            engine.followVaultChanges()
            readyEngine.engine.withLock { $0 = engine }
            return Runtime(reports: reports, engine: engine)
        }
    }

    /// Why the configuration file could not be used when it was last read, or nil.
    public var configurationProblem: String? { problem.withLock { $0 } }

    /// Applies the configuration file as read again (the agent, when the file changed or on
    /// SIGHUP): its profiles' changes reach the engine (`SessionEngine.reloadConfiguration`)
    /// and every initialized connection hears of them (`profiles/changed`). A file that cannot
    /// be used changes nothing: the profiles last read stay, and the problem is logged, kept for
    /// `initialize` and `listProviders`, and sent. `read` nil: the file was removed — the
    /// profiles last read stay too (a file moved away by mistake must not sign every account
    /// out); a file of no profiles removes them. Called one reload at a time.
    public func reloadConfiguration(_ read: Result<LoadedConfiguration, ConfigurationError>?) async {
        var changes = ProfileChanges()
        let now: String?
        switch read {
        case nil:
            logger.warning(
                "the configuration file was removed; the profiles read from it stay until it is there again (a file of {\"profiles\": {}} removes them)"
            )
            now = nil
        case .failure(let error):
            logger.error("configuration file \(error.message); the profiles last read from it stay in use")
            now = error.message
        case .success(let loaded):
            for warning in loaded.warnings { logger.warning("configuration file \(warning)") }
            changes = await runtime.value.engine.reloadConfiguration(loaded.profiles)
            logger.info(
                "configuration file read again",
                metadata: ["added": "\(changes.added)", "changed": "\(changes.changed)", "removed": "\(changes.removed)"])
            now = nil
        }
        let before = problem.withLock { current in
            defer { current = now }
            return current
        }
        guard !changes.isEmpty || before != now else { return }
        var params = changes.json
        if let now { params = params.setting("configurationProblem", .string(now)) }
        events.deliver("profiles/changed", params)
    }

    /// Shuts the plugins down (after the hooks in flight, within their bound): step 3 of the
    /// process's shutdown, which AuthBridgeLaunch's `HostProcess` states and calls.
    public func shutDown() async {
        await runtime.value.engine.shutDownPlugins()
    }
}

/// Where the engine's events go. `session/changed` reaches every initialized
/// connection: a sign-out in one app signs every app out at once.
/// `signIn/progress` reaches only the connection whose request it belongs to:
/// the engine knows requests by ids unique in the host (`open`), since two
/// connections may each have a request 1, and the event goes back under the
/// request's own id.
final class EventRoutes: Sendable {
    private struct Route {
        let connection: BridgeServer
        let id: JSON
    }

    private struct State {
        var connections: [ObjectIdentifier: BridgeServer] = [:]
        var requests: [Int64: Route] = [:]
        var lastID: Int64 = 0
    }

    private let state = Mutex(State())
    private let logger: Logger

    init(logger: Logger) { self.logger = logger }

    func attach(_ connection: BridgeServer) { state.withLock { $0.connections[ObjectIdentifier(connection)] = connection } }

    func detach(_ connection: BridgeServer) { state.withLock { $0.connections[ObjectIdentifier(connection)] = nil } }

    /// The id the engine knows request `id` of `connection` by, until `close`.
    func open(_ id: JSON, from connection: BridgeServer) -> JSON {
        state.withLock { state in
            state.lastID += 1
            state.requests[state.lastID] = Route(connection: connection, id: id)
            return .int(state.lastID)
        }
    }

    func close(_ engineID: JSON) {
        guard let key = engineID.intValue else { return }
        _ = state.withLock { $0.requests.removeValue(forKey: key) }
    }

    /// Sends one of the engine's events where it belongs (outside the lock:
    /// a write only queues, but the lock is for the tables). An event for
    /// every connection is encoded once. A connection that has left too many
    /// events unread is dropped by its `Connection` rather than queued for
    /// (`Connection.maxUnreadEventBytes`): one app that never reads must not
    /// grow the agent that every app shares.
    func deliver(_ method: String, _ params: JSON) {
        if method == "signIn/progress" || method == "signOut/progress" {
            guard let key = params["requestId"]?.intValue, let route = state.withLock({ $0.requests[key] }) else {
                // Its request has been answered (a hook given up on, still reporting).
                logger.debug("dropped a progress event of a request that has ended")
                return
            }
            route.connection.notify(frame: OutgoingFrame.notification(method: method, params: params.setting("requestId", route.id)))
            return
        }
        let frame = OutgoingFrame.notification(method: method, params: params)
        for connection in state.withLock({ Array($0.connections.values) }) where connection.receivesEvents {
            connection.notify(frame: frame)
        }
    }
}
