import AuthBridgeHost
import AuthBridgeRPC
import Logging

#if canImport(Glibc)
import Glibc
#endif

/// What `authbridge serve` is asked for: the host options and serve's own.
public struct ServeSettings: Sendable, Equatable {
    public var host = HostSettings()
    /// Open browser sign-in pages with xdg-open (`--open-browser`).
    public var openBrowser = false
    /// The test clock (`--test-clock`, hidden).
    public var testClock = false

    public init() {}
}

/// `serve`: the JSON-RPC bridge on stdin/stdout, until end of input, SIGTERM or SIGHUP.
public enum Serving {
    /// Runs the bridge and exits the process with its code.
    public static func run(_ settings: ServeSettings) async -> Never {
        // stdout is the protocol: frames go to the private copy of fd 1.
        let process = HostProcess.start(logLevel: settings.host.logLevel, failure: "Error: cannot set up stdout for the protocol")
        let connection = Connection(input: 0, output: process.output, logger: process.logger)
        let host = process.makeHost(
            settings.host, testClock: settings.testClock, openBrowser: settings.openBrowser, reloadsConfiguration: false, logsWarnings: false)
        // Asked to end (a service manager, a frontend's kill()): as at end of input, requests get
        // their grace and plugins are shut down — isolated ones' runners and what they started too.
        await process.run(
            StdioService(server: BridgeServer(host: host, connection: connection), connection: connection), host: host,
            stopSignals: [SIGTERM, SIGHUP])
    }
}

/// The bridge's one connection, on stdio: the process ends with it.
private final class StdioService: HostService {
    let server: BridgeServer
    let connection: Connection

    init(server: BridgeServer, connection: Connection) {
        self.server = server
        self.connection = connection
    }

    func start() {}

    func serve() async -> Int32 {
        switch await server.serve() {
        case .exit(let code): return code
        case .endOfInput, .peerGone: return 0
        }
    }

    func stop() { connection.stopReading() }

    func finish() { connection.flush() }
}
