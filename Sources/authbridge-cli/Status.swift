import ArgumentParser
import AuthBridgeJSON
import AuthBridgeProtocol
import AuthBridgeLaunch
import AuthBridgeSession

#if canImport(Glibc)
import Glibc
#endif

/// `authbridge status [PROFILE]`: who is signed in where, as checkSignInStatus finds it.
struct Status: HumanCommand {
    static let configuration = CommandConfiguration(
        commandName: "status",
        abstract: "Show each profile's accounts: state, expiry and where tokens are kept.",
        discussion: """
            Each signed-in account is checked as checkSignInStatus checks it: a token that has \
            not expired is signedIn from what AuthBridge holds, without asking the provider \
            (unless its plugin checks sessions with the provider, as the Salesforce and Tableau \
            ones do), so a provider that is down or a session ended there shows once the token \
            expires; an expired token is refreshed first, and the account is offline when the \
            provider cannot be reached. Profiles are checked at once, each for at most --timeout \
            seconds; one not checked in time is shown as offline, the others \
            are still listed. STORAGE says where the tokens are and what \
            protects them: an encrypted file whose key is in the desktop keyring or in a key \
            file, the keyring itself, or memory. With PROFILE, exits 2 when it is not signed in \
            and 3 when its provider could not be reached.
            """)

    @Argument(help: ArgumentHelp("Only this profile.", valueName: "PROFILE"))
    var profile: String?

    @Flag(
        help: """
            Print JSON on stdout: an array of SignInStatus (bridge-spec), one per signed-in account and one per profile \
            not signed in: provider, state, reason, account, expiresAt, storage, details, message. A profile that could \
            not be checked is {provider, state: offline or error, account: null, expiresAt: null, reason, message}.
            """)
    var json = false

    @OptionGroup(title: "Host options") var options: HostOptions

    @OptionGroup(title: "Host options") var agent: AgentChoice

    @Option(
        help: ArgumentHelp(
            "How long to wait for each profile's provider, in seconds; a profile not checked in time is shown offline.",
            valueName: "SECONDS"))
    var timeout: Int64 = 10

    func execute() async throws {
        guard (1...3_600).contains(timeout) else { throw ValidationError("--timeout must be 1…3600 seconds") }
        let sessions = try await SessionAccess.open(options, agent)
        var names: [String]
        if let profile {
            names = [profile]
        } else {
            do throws(SessionError) { names = try await sessions.profiles().map(\.name) } catch {
                throw sessions.report(error)
            }
        }
        // Every profile at once, each under its own bound: one dead provider costs one bound, not the sum.
        let bound = Duration.seconds(timeout)
        let progress = WaitNotice(after: .seconds(1)) { waiting in
            "waiting for the provider of \(waiting.sorted().joined(separator: ", ")) (at most \(timeout) s)…"
        }
        var found: [String: Result<[SignInStatus], SessionError>] = [:]
        await withTaskGroup(of: (String, Result<[SignInStatus], SessionError>).self) { group in
            for name in names {
                progress.started(name)
                group.addTask {
                    let result =
                        await firstOf(within: bound) { await Self.check(name, sessions: sessions) }
                        ?? .failure(
                            SessionError(
                                .timeout, "Profile \"\(name)\": the provider did not answer within \(timeout) s.",
                                provider: name, reason: "timeout"))
                    return (name, result)
                }
            }
            for await (name, result) in group {
                progress.finished(name)
                found[name] = result
            }
        }
        await progress.finish()
        var rows: [Row] = []
        for name in names {
            switch found[name] {
            case .success(let statuses)?: rows += statuses.map(Row.checked)
            case .failure(let error)?:
                // One profile's trouble (a provider unreachable, a bad setting) is a row, not the end.
                if profile != nil { throw sessions.report(error) }
                rows.append(.failed(profile: name, error: error, message: sessions.explained(error).message))
            case nil: break
            }
        }
        if json {
            print(Terminal.cleanJSON(JSON.array(rows.map(\.json)).prettyPrinted()))
        } else {
            printTable(rows, storage: sessions.storage, keyFromEnvironment: sessions.keyFromEnvironment)
        }
        if let profile, !rows.contains(where: { $0.state == .signedIn }) {
            let offline = rows.contains { $0.state == .offline }
            if rows.isEmpty { Terminal.standardError.error("no profile is named \"\(profile)\"") }
            throw ExitCode(offline ? CommandExit.unavailable : CommandExit.notSignedIn)
        }
    }

    /// The statuses of one profile's accounts (one row when none is signed in).
    private static func check(_ name: String, sessions: any Sessions) async -> Result<[SignInStatus], SessionError> {
        do throws(SessionError) {
            let accounts = try await sessions.accounts(ListAccountsParams(provider: name))
            if accounts.isEmpty { return .success([try await sessions.status(CheckSignInStatusParams(provider: name))]) }
            var rows: [SignInStatus] = []
            for account in accounts {
                rows.append(try await sessions.status(CheckSignInStatusParams(provider: name, account: account.account?.id)))
            }
            return .success(rows)
        } catch {
            return .failure(error)
        }
    }

    /// One row of the answer: an account's status as the bridge gave it, or a profile that
    /// could not be checked.
    private enum Row {
        case checked(SignInStatus)
        case failed(profile: String, error: SessionError, message: String)

        /// The row's state; nil for a profile that could not be checked ("error").
        var state: SessionState? {
            switch self {
            case .checked(let status): status.state
            case .failed(_, let error, _): error.retryable ? .offline : nil
            }
        }

        /// The state's word: the spec's, or "error".
        var stateWord: String { state?.rawValue ?? "error" }

        var provider: String {
            switch self {
            case .checked(let status): status.provider
            case .failed(let profile, _, _): profile
            }
        }

        var message: String? {
            switch self {
            case .checked(let status): status.message
            case .failed(_, _, let message): message
            }
        }

        /// `--json`'s form: the SignInStatus, or one of its shape for a profile not checked.
        var json: JSON {
            switch self {
            case .checked(let status): return status.wire
            case .failed(let profile, let error, let message):
                return [
                    "provider": .string(profile), "state": .string(stateWord), "account": .null, "expiresAt": .null,
                    "reason": .string(error.reason ?? stateWord), "message": .string(message),
                ]
            }
        }
    }

    private func printTable(_ rows: [Row], storage: StorageInfo, keyFromEnvironment: Bool) {
        let out = Terminal.standardOutput
        if rows.isEmpty {
            out.line("No profiles are configured (see --config, or configureProfile from a frontend).")
            return
        }
        let header = ["PROFILE", "ACCOUNT", "STATE", "EXPIRES", "STORAGE"]
        let cells: [[String]] = rows.map { row in
            let status: SignInStatus? = if case .checked(let status) = row { status } else { nil }
            let reasonWord = status?.reason ?? { if case .failed(_, let error, _) = row { error.reason ?? row.stateWord } else { nil } }()
            let reason = reasonWord.map { $0 == "valid" || $0 == "refreshed" && row.state == .signedIn ? "" : " (\($0))" } ?? ""
            // A sender-constrained session (RFC 9449) is worth knowing: git and kubectl cannot use its tokens.
            let bound = status?.tokenType == "DPoP" && row.state != .notSignedIn ? ", DPoP-bound" : ""
            return [
                row.provider, accountLabel(status?.account), row.stateWord + reason + bound,
                row.state == .notSignedIn ? "-" : relativeTime(status?.expiresAt),
                Status.storageLabel(status?.storage ?? storage, keyFromEnvironment: keyFromEnvironment),
            ].map(Terminal.clean)
        }
        let table = TextTable([header] + cells)
        out.line(table.line(header, on: out) { _ in .bold })
        for (row, line) in zip(rows, cells) {
            let colour: Terminal.Style =
                switch row.state {
                case .signedIn: .green
                case .offline, .licenseRevoked: .yellow
                case .notSignedIn, nil: .red
                }
            out.line(table.line(line, on: out) { $0 == 2 ? colour : nil })
        }
        // A profile made from a resource's URL: where it signs in, which the table does not say.
        for row in rows {
            guard case .checked(let status) = row, let issuer = status.issuer, status.dynamicClient == true else { continue }
            out.line(out.styled(Terminal.clean("\(row.provider): signs in at \(issuer) as a client AuthBridge registered there (RFC 7591)"), .dim))
        }
        for row in rows {
            if let message = row.message, row.state != .signedIn {
                Terminal.standardError.line(Terminal.clean("\(row.provider): \(message)"))
            }
        }
    }
}

extension Status {
    /// Where the tokens are and what protects them, as people ask it: is the vault key in the
    /// keyring or in a file next to the vault? (The row's own StorageInfo once the vault is
    /// open: a missing keyring means a key file.)
    static func storageLabel(_ storage: StorageInfo, keyFromEnvironment: Bool) -> String {
        switch storage.backend {
        case .encryptedFile:
            if storage.protection == .keyring { return "encrypted file (key in keyring)" }
            return keyFromEnvironment ? "encrypted file (key from AUTHBRIDGE_VAULT_KEY)" : "encrypted file (key file)"
        case .secretService: return "keyring"
        case .postgresql:
            return keyFromEnvironment ? "PostgreSQL, sealed (key from AUTHBRIDGE_VAULT_KEY)" : "PostgreSQL, sealed (key file)"
        case .memory: return "memory (not kept)"
        }
    }
}

extension String {
    func trimmingTrailingSpaces() -> String {
        var text = self
        while text.last == " " { text.removeLast() }
        return text
    }
}
