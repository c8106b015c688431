import ArgumentParser
import AuthBridgeHost
import AuthBridgeLaunch

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
            which share the profiles, plugins and vault with `serve`; git, kubectl and scripts \
            use git-credential, exec-credential and exec. status, token and plugins print JSON \
            with --json. Logs go to stderr. A command's --help lists the everyday host options \
            (--config, --plugins, --vault, --log-level); --help-hidden lists them all.

            Exit codes: 0 success (or `exit` after `shutdown`); 1 a failed command, e.g. a \
            sign-in not completed in time (or `exit` without `shutdown`); 2 not signed in; 3 the \
            provider could not be reached or did not answer in time (the session is kept); \
            4 cancelled (Ctrl-C, or the user declined); 64 usage error; 78 the configuration \
            file cannot be read or is not valid JSON of profiles (the message names the file and \
            the problem).
            """,
        version: BridgeServer.serverVersion,
        subcommands: [
            Serve.self, Agent.self, Login.self, Status.self, Token.self, Exchange.self, Logout.self, Plugins.self, GitCredential.self,
            ExecCredential.self,
            Exec.self, PluginRunner.self,
        ],
        defaultSubcommand: Serve.self
    )

    /// A person typing `authbridge` alone gets help, not a silent JSON-RPC server.
    static func main() async {
        ProcessHardening.apply()
        let arguments = Array(CommandLine.arguments.dropFirst())
        if FastCommandLine.isGitCredentialHelper(CommandLine.arguments.first ?? "") {
            await GitCredentialHelper.main(helperArguments: arguments)
            return
        }
        if arguments.isEmpty && isatty(0) == 1 {
            print(helpMessage())
            return
        }
        // `serve` is the default subcommand, so without this a typo (`authbridge stauts`)
        // would be parsed as serve's argument and answered with serve's usage.
        if let word = arguments.first, !word.hasPrefix("-"), !commandNames.contains(word) {
            let guess = closestCommand(to: word).map { " Did you mean '\($0)'?" } ?? ""
            Terminal.standardError.error("unknown command '\(word)'.\(guess)")
            Terminal.standardError.line("Run 'authbridge --help' for the commands.")
            exit(withError: ExitCode.validationFailure)
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

    /// The words that may come first: the subcommands, and `help`.
    static var commandNames: [String] {
        configuration.subcommands.map { $0._commandName } + ["help"]
    }

    /// The command nearest to a mistyped one (at most 2 edits away), if any.
    static func closestCommand(to word: String) -> String? { CommandText.closest(to: word, among: commandNames) }
}

/// Levenshtein distance (with adjacent transpositions counted as one edit: "stauts").
func editDistance(_ a: String, _ b: String) -> Int {
    let a = Array(a), b = Array(b)
    guard !a.isEmpty, !b.isEmpty else { return max(a.count, b.count) }
    var table = [[Int]](repeating: [Int](repeating: 0, count: b.count + 1), count: a.count + 1)
    for i in 0...a.count { table[i][0] = i }
    for j in 0...b.count { table[0][j] = j }
    for i in 1...a.count {
        for j in 1...b.count {
            let cost = a[i - 1] == b[j - 1] ? 0 : 1
            table[i][j] = min(table[i - 1][j] + 1, table[i][j - 1] + 1, table[i - 1][j - 1] + cost)
            if i > 1, j > 1, a[i - 1] == b[j - 2], a[i - 2] == b[j - 1] {
                table[i][j] = min(table[i][j], table[i - 2][j - 2] + 1)
            }
        }
    }
    return table[a.count][b.count]
}
