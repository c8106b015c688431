import ArgumentParser
import AuthBridgeLaunch
import Testing

@testable import authbridge_cli

/// `authbridge`'s fast start reads `serve`'s, `agent`'s and `token`'s command lines without ArgumentParser;
/// whatever it accepts must mean exactly what the CLI's declarations make of it, and whatever it
/// declines goes to the CLI, which explains.
@Suite("The fast start's command line against ArgumentParser")
struct FastCommandLineTests {
    /// What the CLI makes of `arguments` as `authbridge ARGUMENTS`: the command, or nil for
    /// another one or an error.
    static func reference(_ arguments: [String]) -> FastCommandLine.Command? {
        guard let command = try? AuthBridgeCommand.parseAsRoot(arguments) else { return nil }
        if let serve = command as? Serve { return .serve(serve.settings) }
        if let agent = command as? Agent { return .agent(agent.settings) }
        // `token` is taken with the session's own token in plain text, without host options or --agent.
        if let token = command as? Token {
            guard !token.json, token.request.isEmpty, token.purpose.tokenFor == .session, token.options.settings == HostSettings(),
                token.agent.agent != true
            else { return nil }
            var words = ["token", token.selection.profile]
            if let account = token.selection.account { words += ["--account", account] }
            if let seconds = token.minValidity { words += ["--min-validity", String(seconds)] }
            if token.agent.agent == false { words.append("--no-agent") }
            return TokenCommandLine(words).map { .token($0) }
        }
        if let runner = command as? PluginRunner {
            return PluginRunnerCommandLine([
                "plugin-runner", "--parent", String(runner.parent), "--plugin", runner.plugin,
                "--memory-limit-mb", String(runner.memoryLimitMB),
            ]).map { .pluginRunner($0) }
        }
        return nil
    }

    static func fast(_ arguments: [String]) -> FastCommandLine.Command? {
        FastCommandLine.command(arguments, standardInputIsTerminal: false)
    }

    static let accepted: [[String]] = [
        [],
        ["serve"],
        ["serve", "--vault", "memory"],
        ["--vault", "memory", "--log-level", "warning"],
        [
            "serve", "--no-default-plugins", "--vault", "memory", "--plugins", "/a", "--config", "/c.json", "--log-level", "warning",
            "--plugin-isolation", "none",
        ],
        ["serve", "--plugins", "/a", "--plugins=/b", "--plugin-isolation", "oidc=process", "--plugin-isolation=none"],
        ["serve", "--plugin-memory-limit", "512", "--vault-dir", "/v", "--vault-key-file", "/k", "--require-secure-storage"],
        ["serve", "--vault=secret-service", "--open-browser", "--test-clock"],
        ["serve", "--vault", "postgresql", "--vault-url", "postgresql://u@127.0.0.1/db"],
        ["serve", "--config=/with=equals.json"],
        ["agent"],
        ["agent", "--socket", "/run/user/1000/authbridge/agent.sock", "--allow-root"],
        ["agent", "--socket=/s.sock", "--open-browser", "--test-clock", "--no-default-plugins", "--plugins", "/p", "--vault", "memory"],
        ["plugin-runner", "--parent", "42", "--plugin", "oidc", "--memory-limit-mb", "512"],
        ["token", "work"], ["token", "--no-agent", "work"], ["token", "work", "--account", "ada@example.com", "--min-validity=300"],
        ["token", "--account=a", "work", "--no-agent", "--min-validity", "0"], ["token", "work", "--min-validity", "86400"],
    ]

    static let declined: [[String]] = [
        ["status"], ["login", "work"], ["--help"], ["serve", "--help"], ["-h"], ["serve", "-h"], ["--version"], ["help"],
        ["serve", "--vault"], ["serve", "--vault", "--config", "x"], ["serve", "--vault", "nonsense"],
        ["serve", "--log-level", "loud"], ["serve", "--plugin-memory-limit", "12"], ["serve", "--plugin-memory-limit", "many"],
        ["serve", "--vault-url", "postgresql://x"], ["serve", "--plugin-isolation", "sideways"],
        ["serve", "--unknown"], ["serve", "extra"], ["serve", "--open-browser=yes"], ["serve", "--vault", "memory", "--vault", "memory"],
        ["serve", "--open-browser", "--open-browser"], ["serve", "--config="], ["serve", "--"], ["stauts"],
        ["--experimental-dump-help"], ["serve", "--generate-completion-script", "bash"],
        ["serve", "--socket", "/s.sock"], ["serve", "--allow-root"], ["--allow-root"], ["agent", "--help"], ["agent", "--socket"],
        ["agent", "--allow-root", "--allow-root"], ["agent", "extra"],
        ["plugin-runner", "--plugin", "oidc", "--parent", "42", "--memory-limit-mb", "512"],
        ["plugin-runner", "--parent", "x", "--plugin", "oidc", "--memory-limit-mb", "512"],
        ["token"], ["token", "--help"], ["token", "work", "--json"], ["token", "work", "--agent"], ["token", "work", "--no-agent", "--agent"],
        ["token", "work", "--no-agent", "--no-agent"], ["token", "work", "--header", "GET", "https://a.example/"],
        ["token", "work", "--scope", "read"], ["token", "work", "--resource", "https://a.example/"], ["token", "work", "--vault", "memory"],
        ["token", "work", "--plugins", "/p"], ["token", "work", "--config", "/c.json"], ["token", "work", "other"],
        ["token", "work", "--min-validity", "86401"], ["token", "work", "--min-validity", "-1"], ["token", "work", "--min-validity", "+5"],
        ["token", "work", "--min-validity", "soon"], ["token", "work", "--account"], ["token", "work", "--account="],
        ["token", "work", "--account", "a", "--account", "b"], ["token", "-work"], ["token", "work", "--"],
    ]

    @Test(arguments: accepted)
    func whatTheFastStartAcceptsTheCLIReadsTheSame(_ arguments: [String]) throws {
        let fast = try #require(Self.fast(arguments))
        #expect(Self.reference(arguments) == fast)
    }

    @Test(arguments: declined)
    func everythingElseGoesToTheCLI(_ arguments: [String]) {
        #expect(Self.fast(arguments) == nil)
    }

    @Test func noArgumentsOnATerminalIsHelpNotAServer() {
        #expect(FastCommandLine.command([], standardInputIsTerminal: true) == nil)
        #expect(FastCommandLine.command([], standardInputIsTerminal: false) == .serve(ServeSettings()))
    }
}
