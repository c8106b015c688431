import ArgumentParser
import AuthBridgeHost

/// `authbridge`: the token broker host. Without a subcommand it serves the
/// JSON-RPC bridge on stdin/stdout.
@main
struct AuthBridgeCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "authbridge",
        abstract: "Sign users in to OAuth providers through plugins, and keep them signed in.",
        discussion: """
            Frontends run `authbridge serve` as a child process and speak JSON-RPC 2.0 on its
            stdin/stdout (see bridge-spec/README.md). Logs go to stderr.

            Exit codes: 0 success (or `exit` after `shutdown`), 1 `exit` without `shutdown` or a
            failed command, 64 usage error.
            """,
        version: BridgeServer.serverVersion,
        subcommands: [Serve.self, Plugins.self],
        defaultSubcommand: Serve.self
    )
}
