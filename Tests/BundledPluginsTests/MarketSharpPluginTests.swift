import AuthBridgePluginSDK
@testable import MarketSharpPlugin
import Testing

/// MarketSharp's pure rules: the named-license outcomes and their messages, the token answer made
/// into a session, the URL rule (plugins/marketsharp/README.md).
@Suite("MarketSharp plugin")
struct MarketSharpPluginTests {
    @Test func signInRefusalsMapToTheirReasonsAndMessages() {
        let org = LicenseProblem(oauthError: "named_licenses_required")
        #expect(org?.signInRefusal.kind == .definitive && org?.reason == "orgNotOnNamedLicenses")
        #expect(org?.message.hasPrefix("We're sorry, this application does not support your current version of MarketSharp.") == true)
        let user = LicenseProblem(oauthError: "no_license_assigned")
        #expect(user?.reason == "noLicenseAssigned")
        #expect(user?.message == "You do not have a license assigned. Please contact your system administrator to have a license assigned to you.")
        #expect(LicenseProblem(oauthError: "invalid_grant") == nil)
    }

    @Test(arguments: [
        (403, #"{"errorCode":"NoLicenseAssigned","message":"x"}"#, "noLicenseAssigned"),
        (403, #"{"ErrorCode":"OrganizationNotOnNamedLicenses"}"#, "orgNotOnNamedLicenses"),
        (403, #"{"errorCode":"Forbidden"}"#, nil),
        (401, #"{"errorCode":"NoLicenseAssigned"}"#, nil),
        (403, "NoLicenseAssigned", nil),
    ])
    func apiAnswersNameALicenseProblemOnlyAs403JSON(status: Int, body: String, reason: String?) {
        #expect(LicenseProblem(status: status, body: body)?.reason == reason)
    }

    @Test func aTokenAnswerBecomesASessionWithTheDefaultLifetimes() throws {
        let now: Int64 = 1_000_000
        let answer: JSON = [
            "tokens": [
                "accessToken": "a", "refreshToken": "r",
                "extras": ["companyId": 42, "userId": "u7", "userName": "Ada", "refresh_token_expires_in": "60"],
            ]
        ]
        let result = try MarketSharpPlugin.completed(answer, previous: nil, now: now)
        #expect(result["tokens"]?["expiresAt"]?.intValue == now + MarketSharpPlugin.accessLifetimeMilliseconds)
        #expect(result["tokens"]?["extras"]?["refreshTokenExpiresAt"]?.intValue == now + 60_000)
        #expect(result["tokens"]?["extras"]?["refresh_token_expires_in"] == nil)
        #expect(result["tokens"]?["details"] == ["companyId": "42"])
        #expect(result["account"] == ["id": "42:u7", "name": "Ada"])
        #expect(throws: ProviderFailure.self) { try MarketSharpPlugin.completed(["tokens": ["accessToken": "a"]], previous: nil, now: now) }
    }

    @Test func theCompanyFillsRelativePaths() {
        #expect(MarketSharpPlugin.fillCompany("/companies/{companyId}/x", "42") == "/companies/42/x")
        #expect(MarketSharpPlugin.fillCompany("/companies/%7BcompanyId%7D/x", "42") == "/companies/42/x")
    }

    @Test(arguments: [
        ("https://restapi.marketsharpm.com", true), ("https://user@restapi.marketsharpm.com", true), ("http://127.0.0.1:8080", true),
        ("http://[::1]/", true), ("http://restapi.marketsharpm.com", false), ("http://evil@127.0.0.1/", false),
        ("http://127.0.0.1@evil.example/", false), ("restapi.marketsharpm.com", false),
    ])
    func endpointsAreHTTPSOrLoopback(url: String, secure: Bool) {
        #expect(MarketSharpPlugin.isSecure(url) == secure)
    }
}
