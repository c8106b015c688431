import ArgumentParser
import AuthBridgeCrypto
import AuthBridgeHost
import AuthBridgeJSON
import AuthBridgeProtocol
import AuthBridgeLaunch
import AuthBridgeSession
import AuthBridgeURL

#if canImport(Glibc)
import Glibc
#endif

/// `authbridge git-credential get|store|erase`: a git credential helper (gitcredentials(7)).
/// git writes `key=value` lines and a blank line on stdin; `get` answers on stdout with the
/// profile's access token as the password. Nothing is ever stored: `store` does nothing, and
/// `erase` (git saw the token rejected) renews the token rather than forgetting the session.
struct GitCredential: HumanCommand {
    static let configuration = CommandConfiguration(
        commandName: "git-credential",
        abstract: "Answer git's credential requests with a profile's access token (a git credential helper).",
        discussion: GitCredentialHelper.discussion)

    @OptionGroup var helper: GitCredentialArguments

    func execute() async throws { try await helper.execute() }
}

/// `git-credential-authbridge [--profile P] get|store|erase`: the same helper under the name git
/// runs for `credential.helper 'authbridge …'` (git prefixes `credential-` to a helper named
/// without '!', and finds `git-credential-authbridge` on PATH, as it finds its own helpers). The
/// program is this one, told apart by its name (argv[0]); usage errors name this form.
struct GitCredentialHelper: HumanCommand {
    /// The name git runs (`git credential-authbridge` → `git-credential-authbridge`).
    static let name = FastCommandLine.gitCredentialHelperName

    static let configuration = CommandConfiguration(
        commandName: name,
        abstract: "AuthBridge as a git credential helper: git config credential.helper 'authbridge --profile corp'.",
        usage: "\(name) [--profile <PROFILE>] [<options>] get|store|erase",
        discussion: discussion,
        version: BridgeServer.serverVersion)

    static let discussion = """
        Configure it for a host: git config --global credential.https://git.example.com.helper \
        'authbridge --profile corp' (git runs it as git-credential-authbridge --profile corp get; \
        '!authbridge git-credential --profile corp' is the same helper run as a shell command). \
        Without --profile, the \
        profile is the one of the longest matching URL prefix in the configuration file's \
        "gitCredential" member; a prefix with a path needs git config credential.useHttpPath \
        true (else git sends no path). get answers username (the request's, else \
        --username, the profile's "gitUsername" or oauth2) and password (an access token refreshed as \
        needed), and password_expiry_utc; only for https, or http to a loopback address. Not \
        signed in: nothing on stdout, a message on stderr and exit 2, and git asks its next \
        helper. erase, which git runs when the server refused the token, renews the token at \
        once (unless another process already did): the session stays, nothing is signed out. \
        store does nothing: AuthBridge keeps the tokens.
        """

    @OptionGroup var helper: GitCredentialArguments

    func execute() async throws { try await helper.execute() }

    /// Runs the helper for `arguments` (argv without the program name). `git-credential` first
    /// (`credential.helper 'authbridge git-credential …'`, as earlier versions had it written) is
    /// the same command.
    static func main(helperArguments arguments: [String]) async {
        await main(arguments.first == GitCredential._commandName ? Array(arguments.dropFirst()) : arguments)
    }
}

/// What the git credential helper reads, under either name, and what it does.
struct GitCredentialArguments: ParsableArguments {
    @Argument(help: ArgumentHelp("What git asks: get, store or erase (other operations are ignored, as git requires).", valueName: "OPERATION"))
    var operation: String

    @Option(help: ArgumentHelp("The profile (default: by the URL, from the configuration file's gitCredential).", valueName: "PROFILE"))
    var profile: String?

    @Option(help: ArgumentHelp("Which signed-in account (Account.id); default: the latest sign-in.", valueName: "ID"))
    var account: String?

    @Option(help: ArgumentHelp("The user name given to git (default: the profile's gitUsername, else oauth2).", valueName: "NAME"))
    var username: String?

    @OptionGroup var purpose: PurposeOptions

    @OptionGroup(title: "Host options") var options: HostOptions

    @OptionGroup(title: "Host options") var agent: AgentChoice

    func validate() throws {
        if let username, username.isEmpty || username.contains(where: \.isNewline) || username.contains("\0") {
            throw ValidationError("--username must be a user name of one line")
        }
    }

    func execute() async throws {
        // git writes the request before it reads anything, for every operation: read it whole.
        let request = GitCredentialRequest.read(from: 0)
        // store: AuthBridge keeps the tokens itself; other operations: ignored, as git asks of helpers.
        guard operation == "get" || operation == "erase" else { return }
        let err = Terminal.standardError
        guard let target = request.target else {
            if operation == "get" { err.line("authbridge: git's request names no protocol and host; nothing to answer.") }
            throw ExitCode(CommandExit.failure)
        }
        // git decodes %-escapes in a URL's host: `https://h%2f%40evil/x.git` asks for host `h/@evil`.
        guard target.isWellFormed else {
            if operation == "get" {
                err.line(
                    "authbridge: git's request names \(Terminal.clean(target.scheme))://\(Terminal.clean(target.host)), which is not a host name or IP address (with an optional port); nothing to answer."
                )
            }
            throw ExitCode(CommandExit.failure)
        }
        let routes: GitCredentialRoutes
        switch options.loadConfiguration() {
        case .success(let loaded): routes = loaded.git
        case .failure(let error):
            err.line("authbridge: configuration file \(error.message)")
            throw ExitCode(CommandExit.configuration)
        }
        let name: String
        if let profile {
            name = profile
        } else {
            switch routes.match(target) {
            case .profile(let matched): name = matched
            case .none(let needsPath):
                // Not ours: git asks its next helper. Said only when a setting of git is what is missing.
                if needsPath && operation == "get" {
                    err.line(
                        "authbridge: gitCredential names profiles for paths on \(Terminal.clean(target.scheme))://\(Terminal.clean(target.host)), but git sent no path: git config credential.useHttpPath true"
                    )
                }
                return
            }
        }
        guard ["http", "https"].contains(target.scheme), let url = ParsedURL(target.url), url.isSecureTransport else {
            if operation == "get" {
                err.line(
                    "authbridge: no token for \(Terminal.clean(target.scheme))://\(Terminal.clean(target.host)): AuthBridge sends tokens only over https (or http to a loopback address)."
                )
            }
            throw ExitCode(CommandExit.failure)
        }
        let sessions = try await openCredentialSessions(options: options, agent: agent, interactive: false)
        if operation == "get" {
            let user = request.username ?? username ?? routes.username(of: name)
            try await answer(profile: name, username: user, sessions: sessions)
        } else {
            try await renew(rejected: request.password, profile: name, sessions: sessions)
        }
    }

    /// `get`: the username and the token, or nothing (git then asks its next helper).
    private func answer(profile: String, username: String, sessions: any CredentialSessions) async throws {
        let token: AccessTokenResult
        do throws(SessionError) {
            token = try await sessions.accessToken(
                profile, account: account, minimumValidity: SessionEngine.defaultMinimumValidityMilliseconds, forceRefresh: false,
                purpose: purpose.tokenFor)
        } catch {
            if error.kind == .notSignedIn {
                // The message says how to sign in (`explained`).
                Terminal.standardError.line("authbridge: \(Terminal.clean(error.message))")
                throw ExitCode(CommandExit.notSignedIn)
            }
            throw sessions.report(error)
        }
        try token.refuseIfSenderConstrained(for: "git", profile: profile)
        // A token is visible ASCII (RFC 6750 b64token): anything else would break git's lines.
        let accessToken = token.accessToken
        guard !accessToken.isEmpty,
            accessToken.unicodeScalars.allSatisfy({ (0x21...0x7E).contains($0.value) })
        else {
            Terminal.standardError.line("authbridge: the provider's access token for \(Terminal.clean(profile)) cannot be given to git.")
            throw ExitCode(CommandExit.failure)
        }
        var lines = ["username=\(username)", "password=\(accessToken)"]
        // git 2.41+ drops a credential past this time; older versions ignore keys they do not know.
        if let expiresAt = token.expiresAt { lines.append("password_expiry_utc=\(expiresAt / 1000)") }
        Terminal.standardOutput.line(lines.joined(separator: "\n"))
    }

    /// `erase`: git saw `rejected` refused. Renewed at once, so that every later `get` (in any
    /// process) finds the new token in the vault, unless the session's token is already another
    /// one (renewed meanwhile). Never a sign-out: only the provider's answer ends a session.
    private func renew(rejected: String?, profile: String, sessions: any CredentialSessions) async throws {
        do throws(SessionError) {
            if let rejected {
                let current = try await sessions.accessToken(
                    profile, account: account, minimumValidity: 0, forceRefresh: false, purpose: purpose.tokenFor)
                guard constantTimeEquals(current.accessToken, rejected) else { return }
            }
            _ = try await sessions.accessToken(
                profile, account: account, minimumValidity: 0, forceRefresh: true, purpose: purpose.tokenFor)
        } catch {
            if error.kind == .notSignedIn && error.reason == "noTokens" { return } // not signed in: nothing to renew
            Terminal.standardError.line("authbridge: the token git reported refused could not be renewed: \(Terminal.clean(error.message))")
            throw sessions.report(error)
        }
    }
}

/// What git wrote to a credential helper: `key=value` lines up to a blank line or the end.
struct GitCredentialRequest: Equatable {
    var values: [String: String] = [:]

    /// Parses git's lines; a `url` key stands for its parts (git-credential(1)), later keys win.
    init(text: String) { self.init(bytes: Array(text.utf8)) }

    /// Lines end at LF, a CR before it dropped (a Windows-style caller). Split as bytes: in a
    /// Swift String "\r\n" is one Character, which a split at "\n" never finds.
    init(bytes: [UInt8]) {
        for line in bytes.split(separator: 0x0A, omittingEmptySubsequences: false) {
            let line = String(decoding: line.last == 0x0D ? line.dropLast() : line, as: UTF8.self)
            if line.isEmpty { break }
            guard let equals = line.firstIndex(of: "=") else { continue }
            let key = String(line[..<equals])
            let value = String(line[line.index(after: equals)...])
            if key == "url", let url = ParsedURL(value) {
                values["protocol"] = url.scheme
                let host = url.host.contains(":") ? "[\(url.host)]" : url.host // git writes an IPv6 literal bracketed
                values["host"] = url.port.map { "\(host):\($0)" } ?? host
                let path = String(url.path.drop(while: { $0 == "/" }))
                values["path"] = path.isEmpty ? nil : path
                if let user = url.userInfo?.split(separator: ":", maxSplits: 1).first { values["username"] = String(user) }
            } else {
                values[key] = value
            }
        }
    }

    /// Reads the request from `fd` (at most 1 MiB: git's requests are a few lines).
    static func read(from fd: Int32) -> GitCredentialRequest {
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 4096)
        while bytes.count < 1 << 20 {
            let count = chunk.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
            if count < 0 && errno == EINTR { continue }
            if count <= 0 { break }
            bytes += chunk[..<count]
            if endsWithBlankLine(bytes) { break }
        }
        return GitCredentialRequest(bytes: bytes)
    }

    /// Whether `bytes` end with the blank line that ends a request (LF or CR LF).
    static func endsWithBlankLine(_ bytes: [UInt8]) -> Bool {
        guard bytes.last == 0x0A else { return false }
        let line = bytes.dropLast()
        let blank = line.last == 0x0D ? line.dropLast() : line
        return blank.isEmpty || blank.last == 0x0A
    }

    var username: String? { values["username"].flatMap { $0.isEmpty ? nil : $0 } }
    var password: String? { values["password"].flatMap { $0.isEmpty ? nil : $0 } }

    /// What git asks about, when it says (protocol and host at least).
    var target: GitCredentialRoutes.Request? {
        guard let scheme = values["protocol"]?.lowercased(), !scheme.isEmpty, let host = values["host"], !host.isEmpty else { return nil }
        return GitCredentialRoutes.Request(scheme: scheme, host: host, path: values["path"].flatMap { $0.isEmpty ? nil : $0 })
    }
}
