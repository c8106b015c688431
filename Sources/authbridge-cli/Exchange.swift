import ArgumentParser
import AuthBridgeJSON
import AuthBridgeProtocol
import AuthBridgeSession

/// `authbridge exchange PROFILE`: token exchange (RFC 8693) — the session's access token (or ID
/// token) exchanged at the provider for a token for another audience, resource or scopes,
/// printed as `token` prints one.
struct Exchange: HumanCommand {
    static let configuration = CommandConfiguration(
        commandName: "exchange",
        abstract: "Print a token exchanged for the session's (RFC 8693 token exchange), for another audience, resource or scopes.",
        discussion: """
            The provider exchanges the session's access token (--subject-token-type idToken: its \
            ID token) for a new one, authenticating with the profile's client; e.g. authbridge \
            exchange work --audience billing --scope read. Only the token and a newline go to \
            stdout (--json: the whole answer). AuthBridge keeps the exchanged token and hands it \
            out again until it is about to expire. Exits 2 when the profile is not signed in.
            """)

    @OptionGroup var selection: AccountSelection

    @Option(help: ArgumentHelp("The logical name of the service the new token is for (RFC 8693 audience).", valueName: "AUDIENCE"))
    var audience: String?

    @Option(
        name: .customLong("resource"),
        help: ArgumentHelp("The protected resource the new token is for (an absolute URI; repeat for several).", valueName: "URI"))
    var resources: [String] = []

    @Option(name: .customLong("scope"), help: ArgumentHelp("A scope the new token should carry (repeat for several).", valueName: "SCOPE"))
    var scopes: [String] = []

    @Option(
        help: ArgumentHelp(
            "The token type to ask for: a token type URI, or accessToken, idToken or jwt (default: the server's choice).", valueName: "TYPE"))
    var requestedTokenType: String?

    @Option(help: ArgumentHelp("Which of the session's tokens is exchanged: accessToken (default) or idToken.", valueName: "TYPE"))
    var subjectTokenType: String?

    @Option(help: MinimumValidity.help)
    var minValidity: Int64?

    @Flag(help: "Print JSON: exchangeToken's AccessTokenResult (bridge-spec), as token --json prints getAccessToken's.")
    var json = false

    @OptionGroup(title: "Host options") var options: HostOptions

    @OptionGroup(title: "Host options") var agent: AgentChoice

    func validate() throws {
        try MinimumValidity.validate(minValidity)
        if let subjectTokenType, ExchangeTokenParams.SubjectTokenType(rawValue: subjectTokenType) == nil {
            throw ValidationError("--subject-token-type is accessToken or idToken, not \"\(Terminal.clean(subjectTokenType))\"")
        }
        if let resource = resources.first(where: { !$0.contains(":") || $0.contains("#") }) {
            throw ValidationError("--resource takes an absolute URI without a fragment, not \"\(Terminal.clean(resource))\"")
        }
    }

    func execute() async throws {
        let wanted = TokenFor(scopes: scopes, resources: resources)
        let params = ExchangeTokenParams(
            provider: selection.profile, account: selection.account, audience: audience, resource: wanted.resource,
            scopes: wanted.scopes, requestedTokenType: requestedTokenType,
            subjectTokenType: subjectTokenType.flatMap(ExchangeTokenParams.SubjectTokenType.init(rawValue:)) ?? .accessToken,
            minValidityMs: minValidity.map { $0 * 1000 })
        let sessions = try await SessionAccess.open(options, agent)
        let answer = try await sessions.waitingForProvider(of: selection.profile) { sessions throws(SessionError) in
            try await sessions.exchangeToken(params)
        }
        MinimumValidity.warnIfShort(answer, asked: minValidity)
        if json {
            print(Terminal.cleanJSON(answer.wire.prettyPrinted()))
            return
        }
        // A token is visible ASCII (RFC 6750 b64token): cleaning changes nothing but a hostile provider's.
        Terminal.standardOutput.line(Terminal.clean(answer.accessToken))
    }
}
