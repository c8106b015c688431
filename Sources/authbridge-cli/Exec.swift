import ArgumentParser
import AuthBridgeJSON
import AuthBridgeProtocol
import AuthBridgePluginHost
import AuthBridgeSession
import CAuthBridgeProcess

#if canImport(Glibc)
import Glibc
#endif

/// `authbridge exec PROFILE -- COMMAND…`: runs a command with the profile's access token in
/// one environment variable, as `env` would, and ends as it ends.
struct Exec: HumanCommand {
    static let configuration = CommandConfiguration(
        commandName: "exec",
        abstract: "Run a command with the profile's access token in an environment variable.",
        discussion: """
            e.g. authbridge exec corp -- sh -c 'curl -H "Authorization: Bearer $AUTHBRIDGE_TOKEN" \
            https://api.example.com/me'. The token (refreshed first when it has less than \
            --min-validity seconds left, up to half its lifetime; a token valid for less than asked \
            is given all the same, with a warning) is only in the command's environment: never on a command \
            line, never written anywhere. The command gets this process's stdin, stdout, stderr, \
            environment and descriptors; Ctrl-C reaches it from the terminal, and SIGINT, SIGTERM, \
            SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 sent to authbridge are sent on to it. The exit \
            status is the command's (128+N when signal N ended it; 127: no such command, 126: it \
            cannot be run). The token is not renewed while the command runs: a command that \
            outlives it must ask again (authbridge token, or a shorter run each time).
            """)

    @Argument(help: ArgumentHelp("The profile.", valueName: "PROFILE"))
    var profile: String

    @Option(help: ArgumentHelp("Which signed-in account (Account.id); default: the latest sign-in.", valueName: "ID"))
    var account: String?

    @Option(name: .customLong("env"), help: ArgumentHelp("The environment variable that holds the token.", valueName: "NAME"))
    var variable = "AUTHBRIDGE_TOKEN"

    @Option(help: MinimumValidity.help)
    var minValidity: Int64?

    @OptionGroup var purpose: PurposeOptions

    @OptionGroup(title: "Host options") var options: HostOptions

    @OptionGroup(title: "Host options") var agent: AgentChoice

    @Argument(parsing: .postTerminator, help: ArgumentHelp("The command and its arguments, after --.", valueName: "COMMAND"))
    var command: [String] = []

    func validate() throws {
        guard !command.isEmpty else { throw ValidationError("name the command to run after --, e.g. authbridge exec \(profile) -- env") }
        guard let first = variable.unicodeScalars.first, first == "_" || first.isASCIILetter,
            variable.unicodeScalars.allSatisfy({ $0 == "_" || $0.isASCIILetter || ("0"..."9").contains($0) })
        else { throw ValidationError("--env must be a variable name (letters, digits and _, not starting with a digit)") }
        try MinimumValidity.validate(minValidity)
    }

    func execute() async throws {
        let sessions = try await openCredentialSessions(options: options, agent: agent, interactive: false)
        let answer: AccessTokenResult
        do throws(SessionError) {
            answer = try await sessions.accessToken(
                profile, account: account, minimumValidity: (minValidity ?? MinimumValidity.defaultSeconds) * 1000, forceRefresh: false,
                purpose: purpose.tokenFor)
        } catch {
            throw sessions.report(error)
        }
        MinimumValidity.warnIfShort(answer, asked: minValidity)
        try answer.refuseIfSenderConstrained(for: "a program given the token in \(variable)", profile: profile)
        let token = answer.accessToken
        guard !token.isEmpty, !token.contains("\0") else {
            Terminal.standardError.error("the provider gave no access token")
            throw ExitCode(CommandExit.failure)
        }
        // Nothing of this process (plugin runners, hook threads) outlives the token's hand-over.
        await LocalEngine.closeAll()
        throw ExitCode(run(command, adding: "\(variable)=\(token)"))
    }

    /// Runs `command` with `entry` added to (or replacing its name in) the environment; its exit
    /// status as a shell reports it.
    private func run(_ command: [String], adding entry: String) -> Int32 {
        let name = entry.prefix(while: { $0 != "=" }) + "="
        let environment = ChildProcess.currentEnvironment().filter { !$0.hasPrefix(name) } + [entry]
        var argv: [UnsafeMutablePointer<CChar>?] = command.map { strdup($0) } + [nil]
        var envp: [UnsafeMutablePointer<CChar>?] = environment.map { strdup($0) } + [nil]
        defer {
            argv.forEach { free($0) }
            for pointer in envp {
                // The token's copy is wiped before it is freed.
                if let pointer { memset(pointer, 0, strlen(pointer)) }
                free(pointer)
            }
        }
        var status: Int32 = 0
        let failure = ab_process_run_command(command[0], &argv, &envp, &status)
        switch failure {
        case 0: break
        case ENOENT:
            Terminal.standardError.error("\(command[0]): command not found")
            return 127
        default:
            Terminal.standardError.error("\(command[0]): cannot run it (\(String(cString: strerror(failure))))")
            return 126
        }
        let signal = status & 0x7f
        return signal == 0 ? (status >> 8) & 0xff : 128 + signal
    }
}

extension Unicode.Scalar {
    fileprivate var isASCIILetter: Bool { ("a"..."z").contains(self) || ("A"..."Z").contains(self) }
}
