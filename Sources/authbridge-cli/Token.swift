import ArgumentParser
import AuthBridgeJSON
import AuthBridgeSession

/// `authbridge token PROFILE`: an access token on stdout, for scripts.
struct Token: HumanCommand {
    static let configuration = CommandConfiguration(
        commandName: "token",
        abstract: "Print a valid access token (refreshed first when needed) for scripts.",
        discussion: """
            Only the token and a newline go to stdout, e.g. curl -H "Authorization: Bearer \
            $(authbridge token work)". Exits 2 when the profile is not signed in. Refresh tokens \
            never leave AuthBridge.
            """)

    @OptionGroup var selection: AccountSelection

    @Flag(
        help:
            "Print JSON: getAccessToken's AccessTokenResult (bridge-spec): provider, account, accessToken, tokenType, expiresAt, headers, cookies, and details when the provider gives any."
    )
    var json = false

    @OptionGroup var options: HostOptions

    @OptionGroup var agent: AgentChoice

    func execute() async throws {
        let sessions = try await SessionAccess.open(options, agent)
        let answer = try await sessions.waitingForProvider(of: selection.profile) { sessions throws(SessionError) in
            try await sessions.accessToken(selection.profile, account: selection.account, minimumValidity: nil, forceRefresh: false)
        }
        if json {
            print(Terminal.cleanJSON(answer.prettyPrinted()))
            return
        }
        // A token is visible ASCII (RFC 6750 b64token): cleaning changes nothing but a hostile provider's.
        Terminal.standardOutput.line(Terminal.clean(answer["accessToken"]?.stringValue ?? ""))
    }
}
