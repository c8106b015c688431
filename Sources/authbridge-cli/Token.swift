import ArgumentParser
import AuthBridgeJSON
import AuthBridgeLaunch
import AuthBridgeProtocol
import AuthBridgeSession
import AuthBridgePluginHost

/// `authbridge token PROFILE`: an access token on stdout, for scripts.
struct Token: HumanCommand {
    static let configuration = CommandConfiguration(
        commandName: "token",
        abstract: "Print a valid access token (refreshed first when needed) for scripts.",
        discussion: """
            Only the token and a newline go to stdout, e.g. curl -H "Authorization: Bearer \
            $(authbridge token work)". Exits 2 when the profile is not signed in. Refresh tokens \
            never leave AuthBridge. A token valid for less than --min-validity asks is still \
            printed (exit 0), with a warning on stderr.

            A DPoP-bound token (RFC 9449: the server lists DPoP, or the profile sets "dpop": true) \
            is good only with a proof of a key that stays in AuthBridge, made for one request: \
            --header METHOD URL prints the header lines that request needs (Authorization: DPoP … \
            and DPoP: …), e.g. curl -H @<(authbridge token work --header GET "$URL") "$URL". \
            Ask again for every request.

            --scope and --resource (each repeatable) print a token for exactly those scopes and \
            protected resources (RFC 8707) rather than the session's own, e.g. authbridge token \
            work --scope read --resource https://api.example.com/; the host keeps it beside the \
            session's and refreshes it ahead of expiry.
            """)

    @OptionGroup var selection: AccountSelection

    @Flag(
        help:
            "Print JSON: getAccessToken's AccessTokenResult (bridge-spec): provider, account, accessToken, tokenType, expiresAt, headers, cookies, and details when the provider gives any."
    )
    var json = false

    @Option(help: MinimumValidity.help)
    var minValidity: Int64?

    @Option(
        name: .customLong("header"), parsing: .upToNextOption,
        help: ArgumentHelp(
            "Print the header lines of one request instead of the token (with a DPoP-bound token: its proof for this method and URL).",
            valueName: "METHOD URL"))
    var request: [String] = []

    @OptionGroup var purpose: PurposeOptions

    @OptionGroup(title: "Host options") var options: HostOptions

    @OptionGroup(title: "Host options") var agent: AgentChoice

    func validate() throws {
        try MinimumValidity.validate(minValidity)
        guard request.isEmpty || request.count == 2 else {
            throw ValidationError("--header takes a method and a URL, e.g. --header GET https://api.example/v1/me")
        }
    }

    func execute() async throws {
        let sessions = try await SessionAccess.open(options, agent)
        let purpose = purpose.tokenFor
        let answer = try await sessions.waitingForProvider(of: selection.profile) { sessions throws(SessionError) in
            try await sessions.accessToken(
                GetAccessTokenParams(
                    provider: selection.profile, account: selection.account, minValidityMs: minValidity.map { $0 * 1000 },
                    method: request.first, url: request.last, scopes: purpose.scopes, resource: purpose.resource))
        }
        MinimumValidity.warnIfShort(answer, asked: minValidity)
        if json {
            print(Terminal.cleanJSON(answer.wire.prettyPrinted()))
            return
        }
        if !request.isEmpty {
            // One "Name: value" line per header, as curl -H @FILE reads them.
            let lines = answer.headers.sorted { $0.key < $1.key }.map { "\(Terminal.clean($0.key)): \(Terminal.clean($0.value))" }
            Terminal.standardOutput.line(lines.joined(separator: "\n"))
            return
        }
        if answer.tokenType.lowercased() == "dpop" {
            Terminal.standardError.warn(
                "this token is DPoP-bound (RFC 9449): a server accepts it only with a proof made for each request; use --header METHOD URL for the headers of one request"
            )
        }
        // A token is visible ASCII (RFC 6750 b64token): cleaning changes nothing but a hostile provider's.
        Terminal.standardOutput.line(Terminal.clean(answer.accessToken))
    }
}

/// `--min-validity SECONDS` of `token` and `exec`: how long the token must stay valid. The
/// engine renews a token first when less is left, but asks no more than half the token's own
/// lifetime (TokenSet.effectiveMinimumValidity: a provider's 5-minute tokens would otherwise
/// be renewed on every call), and a provider's tokens may not last as long as asked: the
/// token given may then be valid for less, which the command says.
enum MinimumValidity {
    static let help = ArgumentHelp(
        "The token should stay valid at least this long, in seconds (default: 60). It is renewed first when less is left, unless that is more than half the token's lifetime; a token valid for less than asked is given all the same, with a warning on stderr.",
        valueName: "SECONDS")

    /// The default, in seconds (the bridge's).
    static let defaultSeconds = SessionEngine.defaultMinimumValidityMilliseconds / 1000

    static func validate(_ seconds: Int64?) throws {
        guard (0...86_400).contains(seconds ?? 0) else { throw ValidationError("--min-validity must be 0…86400 seconds") }
    }

    /// Says once on stderr (without the token) when `answer`'s token expires sooner than the
    /// `asked` seconds given with --min-validity.
    static func warnIfShort(_ answer: AccessTokenResult, asked seconds: Int64?, now: Int64 = HostClock.nowMilliseconds()) {
        guard let seconds, let left = shortfall(answer, asked: seconds, now: now) else { return }
        Terminal.standardError.warn(
            "the token is valid for \(left) s more, less than the \(seconds) s asked with --min-validity: it is renewed only when less than half its lifetime is left, and the provider's tokens may not last that long"
        )
    }

    /// The seconds `answer`'s token has left when that is less than `asked`; nil otherwise (or no expiry known).
    static func shortfall(_ answer: AccessTokenResult, asked: Int64, now: Int64) -> Int64? {
        answer.secondsLeft(lessThan: asked, now: now)
    }
}

/// What a token is for, beyond the session's own (issue 30): `getAccessToken`'s `scopes` and
/// `resource` (RFC 8707), as the commands that hand out tokens pass them on.
struct TokenFor: Sendable, Equatable {
    var scopes: [String]?
    /// One URI as a string, several as an array (bridge-spec's Resources).
    var resource: JSON?

    /// The session's own token.
    static let session = TokenFor()

    init(scopes: [String]? = nil, resource: JSON? = nil) {
        (self.scopes, self.resource) = (scopes, resource)
    }

    /// From repeated `--scope` and `--resource` values (none: nil, the session's own).
    init(scopes: [String], resources: [String]) {
        self.scopes = scopes.isEmpty ? nil : scopes
        switch resources.count {
        case 0: self.resource = nil
        case 1: self.resource = .string(resources[0])
        default: self.resource = .array(resources.map { .string($0) })
        }
    }
}

/// `--scope S` and `--resource URI` (each repeatable) of `token`, `exec`, `exec-credential` and
/// `git-credential`: a token for exactly those scopes and resources rather than the session's
/// own (the host asks with a refresh grant carrying them and keeps that token beside it).
struct PurposeOptions: ParsableArguments {
    @Option(
        name: .customLong("scope"),
        help: ArgumentHelp(
            "A token for exactly these scopes (repeat for several): a subset of the sign-in's, or others its grant covers. Scopes it does not cover: an error naming them (sign in again with login --scope).",
            valueName: "SCOPE"))
    var scopes: [String] = []

    @Option(
        name: .customLong("resource"),
        help: ArgumentHelp(
            "A token for this protected resource (an absolute URI, RFC 8707; repeat for several): its audience is that resource.",
            valueName: "URI"))
    var resources: [String] = []

    func validate() throws {
        if let scope = scopes.first(where: { $0.isEmpty || $0.contains(where: { $0 == " " || $0.isNewline }) }) {
            throw ValidationError("--scope takes one scope (no spaces; repeat --scope for several), not \"\(Terminal.clean(scope))\"")
        }
        if let resource = resources.first(where: { !$0.contains(":") || $0.contains("#") }) {
            throw ValidationError(
                "--resource takes an absolute URI without a fragment, e.g. https://api.example.com/, not \"\(Terminal.clean(resource))\"")
        }
    }

    var tokenFor: TokenFor { TokenFor(scopes: scopes, resources: resources) }
}
