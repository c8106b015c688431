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
        // stdout is the protocol: keep a private copy of fd 1 for frames and
        // point fd 1 at stderr, so nothing a plugin prints can corrupt it.
        let protocolFD = fcntl(1, F_DUPFD_CLOEXEC, 3)
        guard protocolFD >= 0, dup2(2, 1) >= 0 else {
            StandardError.write("Error: cannot set up stdout for the protocol")
            exit(1)
        }
        signal(SIGPIPE, SIG_IGN)
        let logger = bootstrapLogging(settings.host.logLevel)
        let connection = Connection(input: 0, output: protocolFD, logger: logger)
        var configuration = settings.host.hostConfiguration(
            testClock: settings.testClock, browser: settings.openBrowser ? BrowserLauncher() : nil)
        let store = settings.host.sessionStore(warnings: &configuration.warnings)
        let server = BridgeServer(configuration: configuration, connection: connection, store: store, logger: logger)
        // Asked to end (a service manager, a frontend's kill()): as at end of input, requests get
        // their grace and plugins are shut down — isolated ones' runners and what they started too.
        let termination = Interrupt(signals: [SIGTERM, SIGHUP]) { connection.stopReading() }
        let code = await server.run()
        termination.stop()
        exit(code)
    }
}

/// Logs on stderr at `level` (info when it is not a level), tokens scrubbed.
public func bootstrapLogging(_ level: String) -> Logger {
    let logLevel = Logger.Level(rawValue: level) ?? .info
    LoggingSystem.bootstrap { label in
        var handler = ScrubbingLogHandler(wrapping: StreamLogHandler.standardError(label: label))
        handler.logLevel = logLevel
        return handler
    }
    return Logger(label: "authbridge")
}

/// One line on stderr, for the moments before logging is set up.
public enum StandardError {
    public static func write(_ line: String) {
        let bytes = Array((line + "\n").utf8)
        var offset = 0
        while offset < bytes.count {
            let written = bytes[offset...].withUnsafeBytes { Glibc.write(2, $0.baseAddress, $0.count) }
            if written < 0 && errno == EINTR { continue }
            guard written > 0 else { return }
            offset += written
        }
    }
}
