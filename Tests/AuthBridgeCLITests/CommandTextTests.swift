import AuthBridgeJSON
import AuthBridgeProtocol
import Testing

@testable import authbridge_cli

@Suite("The command line's words for people")
struct CommandTextTests {
    @Test("An unknown profile: the source, the closest name, the profiles")
    func unknownProfile() {
        #expect(
            CommandText.unknownProfile("cor", known: ["tv", "corp"], source: "the configuration file /c.json")
                == "No profile is named \"cor\" in the configuration file /c.json. Did you mean \"corp\"? Its profiles: corp, tv.")
        #expect(CommandText.unknownProfile("payroll", known: [], source: "the agent at /s").hasSuffix("/s. It has no profiles."))
    }

    @Test("A token valid for less than --min-validity asks is a shortfall; enough, or no expiry, is none")
    func shortfall() {
        let now: Int64 = 1_000_000
        let token = { (expiresAt: Int64?) in
            AccessTokenResult(provider: "p", accessToken: "t", tokenType: "Bearer", expiresAt: expiresAt, headers: [:], cookies: [])
        }
        #expect(MinimumValidity.shortfall(token(now + 3_600_000), asked: 7_200, now: now) == 3_600)
        #expect(MinimumValidity.shortfall(token(now + 3_600_000), asked: 600, now: now) == nil)
        #expect(MinimumValidity.shortfall(token(nil), asked: 7_200, now: now) == nil)
    }
}
