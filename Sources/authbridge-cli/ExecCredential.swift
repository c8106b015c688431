import ArgumentParser
import AuthBridgeJSON
import AuthBridgeProtocol
import AuthBridgeSession

#if canImport(Glibc)
import Glibc
#endif

/// `authbridge exec-credential PROFILE`: a kubectl (client-go) exec credential plugin, as
/// kubelogin's `get-token`: an `ExecCredential` with the profile's access token on stdout.
struct ExecCredential: HumanCommand {
    static let configuration = CommandConfiguration(
        commandName: "exec-credential",
        abstract: "Print a Kubernetes ExecCredential with the profile's access token (a kubectl exec credential plugin).",
        discussion: """
            In a kubeconfig user: exec: {apiVersion: client.authentication.k8s.io/v1, command: \
            authbridge, args: [exec-credential, PROFILE], interactiveMode: IfAvailable}. Prints \
            {"apiVersion", "kind": "ExecCredential", "spec": {"interactive"}, "status": {"token", \
            "expirationTimestamp"}} in the apiVersion KUBERNETES_EXEC_INFO names (v1 or v1beta1; \
            v1 without it); expirationTimestamp is the token's expiry in RFC 3339 UTC (absent when \
            the provider gives none), and kubectl reuses the token until then. The token is valid \
            for at least a minute (refreshed first when needed). Not signed in: when kubectl says \
            the plugin may interact (spec.interactive; without KUBERNETES_EXEC_INFO, when stdin is \
            a terminal) the browser sign-in runs as in `authbridge login`, its progress on stderr; \
            otherwise it exits 2 with a message and starts nothing.
            """)

    @Argument(help: ArgumentHelp("The profile.", valueName: "PROFILE"))
    var profile: String

    @Option(help: ArgumentHelp("Which signed-in account (Account.id); default: the latest sign-in.", valueName: "ID"))
    var account: String?

    @OptionGroup var purpose: PurposeOptions

    @OptionGroup var wait: SignInWait

    @OptionGroup(title: "Host options") var options: HostOptions

    @OptionGroup(title: "Host options") var agent: AgentChoice

    func execute() async throws {
        let info = try ExecInfo.fromEnvironment()
        let sessions = try await openCredentialSessions(options: options, agent: agent, interactive: info.interactive)
        var token: AccessTokenResult
        do throws(SessionError) {
            token = try await fetch(sessions)
        } catch {
            guard error.kind == .notSignedIn else { throw sessions.report(error) }
            guard info.interactive else {
                Terminal.standardError.error(
                    "\(error.message), then run kubectl again: it runs authbridge without a terminal, so no sign-in was started."
                )
                throw ExitCode(CommandExit.notSignedIn)
            }
            _ = try await sessions.signIn(profile, timeoutSeconds: wait.seconds)
            do throws(SessionError) {
                token = try await fetch(sessions)
            } catch {
                throw sessions.report(error)
            }
        }
        try token.refuseIfSenderConstrained(for: "kubectl", profile: profile)
        Terminal.standardOutput.line(try info.credential(for: token).serializedString(sortKeys: true))
    }

    private func fetch(_ sessions: any CredentialSessions) async throws(SessionError) -> AccessTokenResult {
        try await sessions.accessToken(
            profile, account: account, minimumValidity: SessionEngine.defaultMinimumValidityMilliseconds, forceRefresh: false,
            purpose: purpose.tokenFor)
    }
}

/// What kubectl tells an exec plugin in KUBERNETES_EXEC_INFO: the ExecCredential's apiVersion
/// to answer in, and whether the plugin may interact with the user.
struct ExecInfo: Equatable {
    static let apiVersions = ["client.authentication.k8s.io/v1", "client.authentication.k8s.io/v1beta1"]

    var apiVersion: String
    var interactive: Bool

    /// From KUBERNETES_EXEC_INFO; without it (run by hand), v1, and interactive on a terminal.
    static func fromEnvironment() throws -> ExecInfo {
        guard let raw = getenv("KUBERNETES_EXEC_INFO"), raw.pointee != 0 else {
            return ExecInfo(apiVersion: apiVersions[0], interactive: isatty(0) == 1)
        }
        switch parse(String(cString: raw)) {
        case .success(let info): return info
        case .failure(let problem):
            Terminal.standardError.error(problem.message)
            throw ExitCode(CommandExit.failure)
        }
    }

    struct Problem: Error { let message: String }

    static func parse(_ text: String) -> Result<ExecInfo, Problem> {
        guard let json = try? JSON.parse(text), let apiVersion = json["apiVersion"]?.stringValue else {
            return .failure(Problem(message: "KUBERNETES_EXEC_INFO is not an ExecCredential (JSON with an apiVersion)"))
        }
        guard apiVersions.contains(apiVersion) else {
            return .failure(
                Problem(
                    message:
                        "KUBERNETES_EXEC_INFO asks for \(apiVersion); authbridge answers \(apiVersions.joined(separator: " or ")): set the kubeconfig's exec apiVersion to one of them"
                ))
        }
        return .success(ExecInfo(apiVersion: apiVersion, interactive: json["spec"]?["interactive"]?.boolValue ?? false))
    }

    /// The ExecCredential for a getAccessToken answer.
    func credential(for token: AccessTokenResult) throws -> JSON {
        let accessToken = token.accessToken
        guard !accessToken.isEmpty else {
            Terminal.standardError.error("the provider gave no access token")
            throw ExitCode(CommandExit.failure)
        }
        var status: [String: JSON] = ["token": .string(accessToken)]
        if let expiresAt = token.expiresAt { status["expirationTimestamp"] = .string(rfc3339(milliseconds: expiresAt)) }
        return [
            "apiVersion": .string(apiVersion), "kind": "ExecCredential", "spec": ["interactive": .bool(interactive)],
            "status": .object(status),
        ]
    }
}

/// `2025-01-31T12:00:00Z`: a time in RFC 3339, UTC, whole seconds (Kubernetes' metav1.Time).
func rfc3339(milliseconds: Int64) -> String {
    var seconds = time_t(milliseconds / 1000)
    var parts = tm()
    gmtime_r(&seconds, &parts)
    var buffer = [CChar](repeating: 0, count: 32)
    let count = strftime(&buffer, buffer.count, "%Y-%m-%dT%H:%M:%SZ", &parts)
    return String(decoding: buffer[..<count].map { UInt8(bitPattern: $0) }, as: UTF8.self)
}
