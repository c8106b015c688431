import AuthBridgeHost
import AuthBridgeSystem
import CAuthBridgeProcess
import Logging

#if canImport(Glibc)
import Glibc
#endif

/// What `authbridge agent` is asked for: the host options and the agent's own.
public struct AgentSettings: Sendable, Equatable {
    public var host = HostSettings()
    /// The socket's path (`--socket`); nil: `AUTHBRIDGE_AGENT_SOCKET`, else the runtime folder's.
    public var socket: String?
    /// Serve root's connections too (`--allow-root`).
    public var allowRoot = false
    public var openBrowser = false
    public var testClock = false

    public init() {}
}

/// `agent`: the bridge for every app of this login session, on a Unix socket, until SIGTERM or
/// SIGINT. An idle agent stays in the background for the whole session: it starts from
/// `authbridge` as `serve` does, without ArgumentParser (bench/README, "Start-up"). It reads
/// the configuration file again when the file changes, and on SIGHUP (as sshd and nginx do;
/// `BridgeHost.reloadConfiguration` says what a reload keeps).
public enum AgentRunning {
    /// Where the signal handler writes to stop the agent.
    nonisolated(unsafe) private static var stopFD: Int32 = -1

    /// SIGTERM and SIGINT stop the agent: a plain handler, installed before the agent says it is
    /// ready (a signal sent as soon as the ready line is read must not be lost).
    private static func stopOnSignals(_ fd: Int32) {
        stopFD = fd
        for number in [SIGTERM, SIGINT] {
            signal(number) { _ in
                var byte: UInt8 = 1
                _ = write(AgentRunning.stopFD, &byte, 1)
            }
        }
    }

    /// Runs the agent and exits the process: 0 when stopped, 1 when it could not listen.
    public static func run(_ settings: AgentSettings) async -> Never {
        // Nothing a plugin prints may reach whoever reads the ready line: fd 1 points at stderr.
        let readyFD = fcntl(1, F_DUPFD_CLOEXEC, 3)
        guard readyFD >= 0, dup2(2, 1) >= 0 else { fail("cannot set up stdout") }
        signal(SIGPIPE, SIG_IGN)
        let logger = bootstrapLogging(settings.host.logLevel)
        // What a connection held goes back to the system when it ends (issue 26).
        if ab_process_return_freed_blocks() != 0 { logger.warning("cannot set how freed memory is returned (mallopt)") }

        let listener: Int32
        var bound: AgentSocket.Bound?
        if let passed = UnixSocket.passedDescriptors().first {
            guard UnixSocket.isListeningStream(passed) else {
                fail("the service manager passed fd \(passed), which is not a listening stream socket (check ListenStream= in authbridge.socket)")
            }
            _ = fcntl(passed, F_SETFL, fcntl(passed, F_GETFL) | O_NONBLOCK)
            listener = passed
        } else {
            guard let path = AgentSocket.path(settings.socket) else {
                fail("no place for the agent's socket: XDG_RUNTIME_DIR is not set. Pass --socket PATH or set \(AgentSocket.environmentVariable).")
            }
            do {
                bound = try AgentSocket.bind(path)
            } catch {
                fail(error.message)
            }
            listener = bound!.fd
        }
        let path = bound?.path ?? UnixSocket.boundPath(listener)

        var configuration = settings.host.hostConfiguration(
            testClock: settings.testClock, browser: settings.openBrowser ? BrowserLauncher() : nil)
        let store = settings.host.sessionStore(warnings: &configuration.warnings)
        for warning in configuration.warnings { logger.warning("\(warning)") }
        configuration.reloadsConfiguration = true
        let host = BridgeHost(configuration: configuration, store: store, logger: logger)
        let agent = BridgeAgent(host: host, listener: listener, logger: logger, policy: .init(allowRoot: settings.allowRoot))
        stopOnSignals(agent.stopDescriptor)
        let watcher = watchConfiguration(settings.host, host: host, logger: logger)
        // SIGHUP reads the file again, as sshd and nginx do; installed before the ready line, as the stop signals are.
        let hangUp = Interrupt(signals: [SIGHUP]) { watcher?.reloadNow() }
        let ready = Array((path + "\n").utf8)
        _ = ready.withUnsafeBytes { write(readyFD, $0.baseAddress, $0.count) }
        close(readyFD)
        logger.debug("agent listening", metadata: ["socket": "\(path)", "pid": "\(getpid())"])

        await agent.run()
        hangUp.stop()
        watcher?.stop()
        close(listener)
        bound?.remove()
        logger.debug("agent stopped")
        exit(0)
    }

    /// Watches the configuration file; each change is read and applied before the next one is
    /// looked at (the watcher's thread waits for the host).
    private static func watchConfiguration(_ settings: HostSettings, host: BridgeHost, logger: Logger) -> ConfigurationWatcher? {
        guard let path = settings.configPath else { return nil }
        let watcher = ConfigurationWatcher(path: path) {
            let read = settings.reloadConfiguration()
            let applied = Handoff<Bool>()
            Task {
                await host.reloadConfiguration(read)
                applied.put(true)
            }
            _ = applied.take()
        }
        if watcher == nil { logger.warning("cannot watch the configuration file \(path) (inotify); send SIGHUP to read it again") }
        return watcher
    }

    private static func fail(_ message: String) -> Never {
        StandardError.write("error: \(message)")
        exit(1)
    }
}
