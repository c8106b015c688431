import ArgumentParser
import AuthBridgeHost
import AuthBridgeRPC
import AuthBridgeSession
import Logging

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// `authbridge serve`: the JSON-RPC bridge on stdin/stdout.
struct Serve: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "serve",
        abstract: "Serve the JSON-RPC 2.0 bridge on stdin/stdout (the default).")

    @OptionGroup var options: HostOptions

    @Flag(help: "Open browser sign-in pages with xdg-open (for use by hand; frontends open the URL from the openUrl event).")
    var openBrowser = false

    @Flag(help: .hidden)
    var testClock = false

    func run() async throws {
        // stdout is the protocol: keep a private copy of fd 1 for frames and
        // point fd 1 at stderr, so nothing a plugin prints can corrupt it.
        let protocolFD = fcntl(1, F_DUPFD_CLOEXEC, 3)
        guard protocolFD >= 0, dup2(2, 1) >= 0 else {
            throw ValidationError("cannot set up stdout for the protocol")
        }
        signal(SIGPIPE, SIG_IGN)
        let logger = bootstrapLogging(options.logLevel)
        let connection = Connection(input: 0, output: protocolFD, logger: logger)
        var configuration = options.hostConfiguration(testClock: testClock, browser: openBrowser ? BrowserLauncher() : nil)
        let store = options.sessionStore(warnings: &configuration.warnings)
        let server = BridgeServer(configuration: configuration, connection: connection, store: store, logger: logger)
        // Asked to end (a service manager, a frontend's kill()): as at end of input, requests get
        // their grace and plugins are shut down — isolated ones' runners and what they started too.
        let termination = Interrupt(signals: [SIGTERM, SIGHUP]) { connection.stopReading() }
        let code = await server.run()
        termination.stop()
        Glibc.exit(code)
    }
}

func bootstrapLogging(_ level: String) -> Logger {
    let logLevel = Logger.Level(rawValue: level) ?? .info
    LoggingSystem.bootstrap { label in
        var handler = ScrubbingLogHandler(wrapping: StreamLogHandler.standardError(label: label))
        handler.logLevel = logLevel
        return handler
    }
    return Logger(label: "authbridge")
}
