import ArgumentParser
import AuthBridgeJSON
import AuthBridgeSession

/// `authbridge token PROFILE`: an access token on stdout, for scripts.
struct Token: HumanCommand {
    static let configuration = CommandConfiguration(
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

    func execute() async throws {
        let local = try LocalEngine(options: options) { _, _ in }
        let answer = try await local.waitingForProvider(of: selection.profile) { engine throws(SessionError) in
            try await engine.getAccessToken(selection.profile, account: selection.account)
        }
        if json {
            print(Terminal.cleanJSON(answer.prettyPrinted()))
            return
        }
        // A token is visible ASCII (RFC 6750 b64token): cleaning changes nothing but a hostile provider's.
        Terminal.standardOutput.line(Terminal.clean(answer["accessToken"]?.stringValue ?? ""))
    }
}
