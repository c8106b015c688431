import AuthBridgeHost
import AuthBridgeSystem
import CAuthBridgeProcess
import Logging
import Synchronization

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
    /// Runs the agent and exits the process: 0 when stopped, 1 when it could not listen.
    public static func run(_ settings: AgentSettings) async -> Never {
        // Nothing a plugin prints may reach whoever reads the ready line: it goes to the private copy of fd 1.
        let process = HostProcess.start(logLevel: settings.host.logLevel, failure: "error: cannot set up stdout")
        let logger = process.logger
        // What a connection held goes back to the system when it ends (issue 26).
        if ab_process_return_freed_blocks() != 0 { logger.warning("cannot set how freed memory is returned (mallopt)") }
        // Its threads share two arenas, which keep less free memory between bursts (issue 32).
        if ab_process_limit_arenas(2) != 0 { logger.warning("cannot limit the memory arenas (mallopt)") }
        // And what a burst of requests held, once it is over (issue 32).
        if !FreedMemory.startTrimming() { logger.warning("cannot start the thread that returns freed memory") }

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

        let host = process.makeHost(
            settings.host, testClock: settings.testClock, openBrowser: settings.openBrowser, reloadsConfiguration: true, logsWarnings: true)
        let agent = BridgeAgent(host: host, listener: listener, logger: logger, policy: .init(allowRoot: settings.allowRoot))
        let service = AgentService(
            agent: agent, settings: settings.host, host: host, listener: listener, bound: bound, readyFD: process.output, logger: logger)
        // SIGTERM and SIGINT stop the agent; handled before the ready line (a signal sent as soon
        // as the ready line is read must not be lost).
        await process.run(service, host: host, stopSignals: [SIGTERM, SIGINT])
    }

    private static func fail(_ message: String) -> Never {
        StandardError.write("error: \(message)")
        exit(1)
    }
}

/// The agent's socket, served until a stop signal: its configuration file watched, and read
/// again on SIGHUP, as long as it runs.
private final class AgentService: HostService {
    private let agent: BridgeAgent
    private let settings: HostSettings
    private let host: BridgeHost
    private let listener: Int32
    private let bound: AgentSocket.Bound?
    private let readyFD: Int32
    private let logger: Logger
    /// The watcher and the SIGHUP handler, from `start` to `finish`.
    private let reloading = Mutex<(watcher: ConfigurationWatcher?, hangUp: Interrupt)?>(nil)

    init(
        agent: BridgeAgent, settings: HostSettings, host: BridgeHost, listener: Int32, bound: AgentSocket.Bound?, readyFD: Int32,
        logger: Logger
    ) {
        self.agent = agent
        self.settings = settings
        self.host = host
        self.listener = listener
        self.bound = bound
        self.readyFD = readyFD
        self.logger = logger
    }

    /// Watches the configuration, handles SIGHUP (both before the ready line, as the stop
    /// signals are), then writes the socket's path on the ready line.
    func start() {
        let path = bound?.path ?? UnixSocket.boundPath(listener)
        let watcher = Self.watchConfiguration(settings, host: host, logger: logger)
        // SIGHUP reads the file again, as sshd and nginx do.
        let hangUp = Interrupt(signals: [SIGHUP]) { watcher?.reloadNow() }
        reloading.withLock { $0 = (watcher, hangUp) }
        let ready = Array((path + "\n").utf8)
        _ = ready.withUnsafeBytes { write(readyFD, $0.baseAddress, $0.count) }
        close(readyFD)
        logger.debug("agent listening", metadata: ["socket": "\(path)", "pid": "\(getpid())"])
    }

    func serve() async -> Int32 {
        await agent.run()
        return 0
    }

    func stop() { agent.stop() }

    /// Stops reloading, closes the socket and removes it (and its lock file) if it is still this agent's.
    func finish() {
        if let started = reloading.withLock({ $0 }) {
            started.hangUp.stop()
            started.watcher?.stop()
        }
        close(listener)
        bound?.remove()
        logger.debug("agent stopped")
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
}

/// The agent's trimming thread (issue 32). glibc keeps what is freed in its arenas and gives back
/// only the top of each: a burst of pipelined requests — 2,048 in flight on 4 connections, each a
/// task with its frames — left 50 MiB resident in 15 arenas after it was over, and each later
/// burst that peaked in another arena added to it. Every `period` this thread asks glibc to give
/// back the free pages inside the arenas when they hold `threshold` bytes or more of free memory
/// and anything was allocated or freed since it last did (`ab_process_trim_freed_memory`): an
/// idle agent costs one `mallinfo2` per period. bench/agent_memory.py measures it.
enum FreedMemory {
    static let period: UInt32 = 5 // seconds
    static let threshold = 4 << 20

    /// Starts the thread; false when it could not be started (the agent runs without it).
    static func startTrimming() -> Bool {
        startThread {
            while true {
                sleep(period)
                _ = ab_process_trim_freed_memory(threshold)
            }
        }
    }
}
