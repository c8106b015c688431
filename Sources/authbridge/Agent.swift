import ArgumentParser
import AuthBridgeHost
import AuthBridgeRPC
import AuthBridgeSystem
import Logging

#if canImport(Glibc)
import Glibc
#endif

/// `authbridge agent`: one broker per login session, on a Unix socket.
struct Agent: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "agent",
        abstract: "Serve the bridge to every app of this login session on a Unix socket (one broker per user).",
        discussion: """
            Apps (the Python and Node clients with agent set) and the commands of this program \
            connect to it instead of running a host each: refreshes are shared, and a sign-in or \
            sign-out anywhere reaches every app at once. The socket is --socket, else \
            $AUTHBRIDGE_AGENT_SOCKET, else $XDG_RUNTIME_DIR/authbridge/agent.sock (folder 0700, \
            socket 0600); a connection from another user is refused before anything is read \
            (root too, unless --allow-root). Under systemd (authbridge.socket), the socket comes \
            from the service manager. When it listens, the agent writes the socket's path and a \
            newline to stdout. SIGTERM, SIGHUP or Ctrl-C stop it: running requests get a second, \
            every connection is closed, the socket is removed.
            """)

    @OptionGroup var options: HostOptions

    @Option(
        help: ArgumentHelp("The socket's path (default: $AUTHBRIDGE_AGENT_SOCKET, else $XDG_RUNTIME_DIR/authbridge/agent.sock).", valueName: "PATH"))
    var socket: String?

    @Flag(help: "Also serve connections from root (by default only this user's are served).")
    var allowRoot = false

    @Flag(help: "Open browser sign-in pages with xdg-open (apps open the URL from the openUrl event).")
    var openBrowser = false

    @Flag(help: .hidden)
    var testClock = false

    /// Where the signal handler writes to stop the agent.
    nonisolated(unsafe) private static var stopFD: Int32 = -1

    /// SIGTERM, SIGHUP and SIGINT stop the agent: a plain handler, installed before the agent says
    /// it is ready (a dispatch source arms itself later, and a signal sent at once would be lost).
    private static func stopOnSignals(_ fd: Int32) {
        stopFD = fd
        for number in [SIGTERM, SIGHUP, SIGINT] {
            signal(number) { _ in
                var byte: UInt8 = 1
                _ = write(Agent.stopFD, &byte, 1)
            }
        }
    }

    func run() async throws {
        // Nothing a plugin prints may reach whoever reads the ready line: fd 1 points at stderr.
        let readyFD = fcntl(1, F_DUPFD_CLOEXEC, 3)
        guard readyFD >= 0, dup2(2, 1) >= 0 else { throw ValidationError("cannot set up stdout") }
        signal(SIGPIPE, SIG_IGN)
        let logger = bootstrapLogging(options.logLevel)
        let err = Terminal.standardError

        let listener: Int32
        var bound: AgentSocket.Bound?
        if let passed = UnixSocket.passedDescriptors().first {
            guard UnixSocket.isListeningStream(passed) else {
                err.error(
                    "the service manager passed fd \(passed), which is not a listening stream socket (check ListenStream= in authbridge.socket)")
                throw ExitCode(CommandExit.failure)
            }
            _ = fcntl(passed, F_SETFL, fcntl(passed, F_GETFL) | O_NONBLOCK)
            listener = passed
        } else {
            guard let path = AgentSocket.path(socket) else {
                err.error(
                    "no place for the agent's socket: XDG_RUNTIME_DIR is not set. Pass --socket PATH or set \(AgentSocket.environmentVariable).")
                throw ExitCode(CommandExit.failure)
            }
            do {
                bound = try AgentSocket.bind(path)
            } catch {
                err.error(error.message)
                throw ExitCode(CommandExit.failure)
            }
            listener = bound!.fd
        }
        let path = bound?.path ?? UnixSocket.boundPath(listener)

        var configuration = options.hostConfiguration(testClock: testClock, browser: openBrowser ? BrowserLauncher() : nil)
        let store = options.sessionStore(warnings: &configuration.warnings)
        for warning in configuration.warnings { logger.warning("\(warning)") }
        let host = BridgeHost(configuration: configuration, store: store, logger: logger)
        let agent = BridgeAgent(host: host, listener: listener, logger: logger, policy: .init(allowRoot: allowRoot))
        Agent.stopOnSignals(agent.stopDescriptor)
        Terminal(fd: readyFD).line(path)
        close(readyFD)
        logger.debug("agent listening", metadata: ["socket": "\(path)", "pid": "\(getpid())"])

        await agent.run()
        close(listener)
        bound?.remove()
        logger.debug("agent stopped")
        Glibc.exit(0)
    }
}
