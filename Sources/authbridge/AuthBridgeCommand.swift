import ArgumentParser
import AuthBridgeHost

#if canImport(Glibc)
import Glibc
#endif

/// `authbridge`: the token broker host. Without a subcommand it serves the
/// JSON-RPC bridge on stdin/stdout.
@main
struct AuthBridgeCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "authbridge",
        abstract: "Sign users in to OAuth providers through plugins, and keep them signed in.",
        discussion: """
            Frontends run `authbridge serve` as a child process and speak JSON-RPC 2.0 on its \
            stdin/stdout (see bridge-spec/README.md); `serve` is also what runs without a \
            subcommand when stdin is not a terminal. People use login, status, token and logout, \
            which share the profiles, plugins and vault with `serve`. Logs go to stderr.

            Exit codes: 0 success (or `exit` after `shutdown`); 1 a failed command (or `exit` \
            without `shutdown`); 2 not signed in; 3 the provider could not be reached or did not \
            answer in time (the session is kept); 4 cancelled (Ctrl-C, or the user declined); \
            64 usage error.
            """,
        version: BridgeServer.serverVersion,
        subcommands: [Serve.self, Login.self, Status.self, Token.self, Logout.self, Plugins.self],
        defaultSubcommand: Serve.self
    )

    /// A person typing `authbridge` alone gets help, not a silent JSON-RPC server.
    static func main() async {
        let arguments = Array(CommandLine.arguments.dropFirst())
        if arguments.isEmpty && isatty(0) == 1 {
            print(helpMessage())
            return
        }
        do {
            var command = try parseAsRoot(arguments)
            if var asyncCommand = command as? AsyncParsableCommand {
                try await asyncCommand.run()
            } else {
                try command.run()
            }
        } catch {
            exit(withError: error)
        }
    }
}
