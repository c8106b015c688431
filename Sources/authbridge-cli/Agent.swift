import ArgumentParser
import AuthBridgeLaunch

/// `authbridge agent`: one broker per login session, on a Unix socket (AgentRunning). The
/// `authbridge` executable starts it without this parser when it can (FastCommandLine).
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
            newline to stdout. It reads the configuration file again when the file changes and on \
            SIGHUP: new profiles are served at once, changed or removed ones end their sessions, \
            the others keep theirs; a file that cannot be parsed changes nothing (it is logged, \
            and commands through the agent exit 78). SIGTERM or Ctrl-C stop it: running \
            requests get a second, every connection is closed, the socket and its lock file are \
            removed.
            """)

    @OptionGroup(title: "Host options") var options: ServerHostOptions

    @Option(
        help: ArgumentHelp("The socket's path (default: $AUTHBRIDGE_AGENT_SOCKET, else $XDG_RUNTIME_DIR/authbridge/agent.sock).", valueName: "PATH"))
    var socket: String?

    @Flag(help: "Also serve connections from root (by default only this user's are served).")
    var allowRoot = false

    @Flag(help: "Open browser sign-in pages with xdg-open (apps open the URL from the openUrl event).")
    var openBrowser = false

    @Flag(help: .hidden)
    var testClock = false

    var settings: AgentSettings {
        var settings = AgentSettings()
        settings.host = options.settings
        settings.socket = socket
        settings.allowRoot = allowRoot
        settings.openBrowser = openBrowser
        settings.testClock = testClock
        return settings
    }

    func run() async throws {
        await AgentRunning.run(settings)
    }
}
