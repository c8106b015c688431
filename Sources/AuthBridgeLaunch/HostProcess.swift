import AuthBridgeHost
import Logging

#if canImport(Glibc)
import Glibc
#endif

/// What a host process serves until it ends: the stdio connection (`serve`) or the agent's
/// socket (`agent`). `HostProcess.run` calls its parts in the order it states.
protocol HostService: Sendable {
    /// Once the stop signals are handled, before serving: what must be in place before the
    /// process says it is ready (the agent's ready line).
    func start()
    /// Serves until the end of input, `exit` or `stop`, then ends each connection as at end of
    /// input (`Connection.run`); returns the process's exit code. The plugins are left running.
    func serve() async -> Int32
    /// Asked to end (from the signal thread): stop reading or accepting, as at end of input.
    /// Safe from any thread, any number of times.
    func stop()
    /// Once the plugins are shut down: writes what is still queued and lets go of what the
    /// service holds (the agent's socket and its lock file).
    func finish()
}

/// One process lifecycle for `serve` and `agent`, as an application over a service run: the
/// start-up both share, and the one graceful shutdown a stop signal turns into.
///
/// Start-up (`start`): fd 1 becomes stderr and the process keeps a private copy of it (the
/// protocol's output, or the agent's ready line), so nothing a plugin prints can reach whoever
/// reads it; SIGPIPE is ignored (a peer gone is an error, not a signal); logging goes to stderr,
/// tokens scrubbed. `makeHost` then reads the configuration and opens the session store.
///
/// Shutdown (`run`), in this order and only here:
/// 1. the service stops taking work: end of input or `exit` (`serve`), or a stop signal, which
///    `Interrupt` (the one signal path) turns into `HostService.stop`;
/// 2. each connection ends as at end of input: running and waiting requests get their grace,
///    then are cancelled and answered -32800, and what is queued is written (`Connection.run`);
/// 3. the plugins are shut down after the hooks in flight, within their bound — isolated ones'
///    runners and what they started too (`BridgeHost.shutDown`, `SessionEngine.shutDownPlugins`);
/// 4. what the shutdown queued is written, and the service lets go of what it holds
///    (`HostService.finish`);
/// 5. the stop signals get their default back and the process exits with the service's code.
struct HostProcess {
    /// The private copy of fd 1.
    let output: Int32
    let logger: Logger

    /// The shared start-up; `failure` is the line written on stderr (and the process exits 1)
    /// when fd 1 cannot be set aside.
    static func start(logLevel: String, failure: String) -> HostProcess {
        let output = fcntl(1, F_DUPFD_CLOEXEC, 3)
        guard output >= 0, dup2(2, 1) >= 0 else {
            StandardError.write(failure)
            exit(1)
        }
        signal(SIGPIPE, SIG_IGN)
        return HostProcess(output: output, logger: bootstrapLogging(logLevel))
    }

    /// The host of this process: its configuration read, its session store opened, its plugins
    /// loading in the background. `logsWarnings`: the configuration's problems are logged too
    /// (the agent, whose `initialize` answers no one is watching), not only reported in `initialize`.
    func makeHost(
        _ settings: HostSettings, testClock: Bool, openBrowser: Bool, reloadsConfiguration: Bool, logsWarnings: Bool
    )
        -> BridgeHost
    {
        var configuration = settings.hostConfiguration(testClock: testClock, browser: openBrowser ? BrowserLauncher() : nil)
        let store = settings.sessionStore(warnings: &configuration.warnings)
        if logsWarnings { for warning in configuration.warnings { logger.warning("\(warning)") } }
        configuration.reloadsConfiguration = reloadsConfiguration
        return BridgeHost(configuration: configuration, store: store, logger: logger)
    }

    /// Runs `service` over `host` until it ends, shuts down in the order above, and exits.
    /// `stopSignals` are handled before the service starts: one sent as soon as the process says
    /// it is ready is not lost.
    ///
    /// `any`, not `some`: specialised for the agent's service, Swift 6.3.1's release build of
    /// this function never ran the service (no ready line, `serve` returned at once) and then
    /// released a freed closure context (SIGSEGV in the signal thread); the debug build and the
    /// existential one are sound. Tests/dist's agent test runs the release build's agent.
    func run(_ service: any HostService, host: BridgeHost, stopSignals: [Int32]) async -> Never {
        let termination = Interrupt(signals: stopSignals) { service.stop() }
        service.start()
        let code = await service.serve()
        await host.shutDown()
        service.finish()
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
