import AuthBridgePluginSDK
@testable import SalesforcePlugin
import Testing

/// Salesforce's pure rules, without the simulator: how token-endpoint refusals are told apart, where
/// a token may go, and how the login host is read (plugins/salesforce/README.md).
@Suite("Salesforce plugin")
struct SalesforcePluginTests {
    @Test(arguments: [
        // (status, body, kind, reason)
        (400, #"{"error":"invalid_grant","error_description":"expired access/refresh token"}"#, ProviderFailure.Kind.definitive, "invalid_grant"),
        (400, #"{"error":"invalid_grant","error_description":"inactive user"}"#, .definitive, "inactive_user"),
        (400, #"{"error":"invalid_grant","error_description":"inactive organization"}"#, .definitive, "inactive_org"),
        (400, #"{"error":"inactive_org"}"#, .definitive, "inactive_org"),
        (400, #"{"error":"invalid_grant","error_description":"token request is already being processed"}"#, .transient, "requestInProgress"),
        (400, #"{"error":"invalid_client_id","error_description":"client identifier invalid"}"#, .definitive, "invalid_client_id"),
        (400, #"{"error":"rate_limit_exceeded"}"#, .transient, "rateLimited"),
        (400, #"{"error":"unknown_thing"}"#, .transient, "unknown_thing"),
        (400, "<html>Bad Request</html>", .transient, "badResponse"),
        (429, "", .transient, "rateLimited"),
        (503, #"{"error":"invalid_grant"}"#, .transient, "serverError"),
        (0, "", .transient, "serverError"),
    ])
    func tokenRefusalsAreToldApart(status: Int, body: String, kind: ProviderFailure.Kind, reason: String) {
        let failure = SalesforcePlugin.tokenFailure(status: status, body: try? JSON.parse(body))
        #expect(failure.kind == kind)
        #expect(failure.reason == reason)
        #expect(failure.status == status)
    }

    @Test func aRefusalCarriesSalesforcesWordsCutShort() {
        let long = String(repeating: "x", count: 500)
        let failure = SalesforcePlugin.tokenFailure(status: 400, body: ["error": "invalid_grant", "error_description": .string(long)])
        #expect(failure.message == "invalid_grant: " + String(long.prefix(300)))
    }

    @Test(arguments: [
        "https://na1.salesforce.com", "https://acme.my.salesforce.com", "https://acme.lightning.force.com",
        "https://acme--uat.sandbox.my.salesforce.com", "https://acme.my.salesforce.mil", "https://acme.my-salesforce.com",
        "https://login.example.org", // the login host itself
        "https://api.agency.example.gov", // under a domain of instanceDomains
        "http://127.0.0.1:8443", // loopback (tests); as login host
    ])
    func trustedInstances(instance: String) {
        let config: JSON = ["loginHost": "https://login.example.org", "instanceDomains": ["agency.example.gov"]]
        let loopback: JSON = ["loginHost": "http://127.0.0.1:8443"]
        #expect(SalesforcePlugin.untrustedInstance(instance, config: instance.hasPrefix("http:") ? loopback : config) == nil)
    }

    @Test(arguments: [
        ("https://salesforce.com.evil.example", "untrustedInstance"), ("https://evilsalesforce.com", "untrustedInstance"),
        ("https://user@na1.salesforce.com", "untrustedInstance"), ("http://na1.salesforce.com", "insecureUrl"),
        ("not a url", "badResponse"),
    ])
    func untrustedInstances(instance: String, reason: String) {
        #expect(SalesforcePlugin.untrustedInstance(instance, config: [:])?.reason == reason)
    }

    @Test(arguments: [
        ("production", "https://login.salesforce.com"), ("Sandbox", "https://test.salesforce.com"),
        ("acme.my.salesforce.com", "https://acme.my.salesforce.com"), ("https://acme.my.site.com/partners/", "https://acme.my.site.com/partners"),
        ("https://acme.my.salesforce.com:443", "https://acme.my.salesforce.com"), ("http://127.0.0.1:9000", "http://127.0.0.1:9000"),
    ])
    func loginHosts(setting: String, base: String) throws {
        #expect(try SalesforcePlugin.loginHostURL(setting) == base)
    }

    @Test(arguments: [
        ("http://login.example.com", "insecureUrl"), ("https://u@acme.my.salesforce.com", "invalidSettings"),
        ("https://acme.my.salesforce.com?x=1", "invalidSettings"), ("https://acme.my.salesforce.com#f", "invalidSettings"),
    ])
    func badLoginHosts(setting: String, reason: String) {
        #expect(throws: ProviderFailure.self) { try SalesforcePlugin.loginHostURL(setting) }
        do { _ = try SalesforcePlugin.loginHostURL(setting) } catch { #expect(error.reason == reason) }
    }

    @Test func instanceDomainsAreNamesWithoutWildcards() throws {
        #expect(try SalesforcePlugin.instanceDomains(["*.Agency.example.gov", ".x.example"]) == ["agency.example.gov", "x.example"])
        for bad: JSON in [["127.0.0.1"], ["localhost"], ["-a.example"], [1], "x.example"] {
            #expect(throws: ProviderFailure.self) { try SalesforcePlugin.instanceDomains(bad) }
        }
    }

    @Test func identityURLsNameTheOrganizationAndTheUser() {
        let ids = SalesforcePlugin.identityIDs("https://login.salesforce.com/id/00D5g000004SiMuEAA/0055g00000SiMu1AAB")
        #expect(ids?.organization == "00D5g000004SiMuEAA" && ids?.user == "0055g00000SiMu1AAB")
        #expect(SalesforcePlugin.identityIDs("https://login.salesforce.com/id/00D/../x") == nil)
        #expect(SalesforcePlugin.identityErrorCode(" Bad_OAuth_Token\n") == "Bad_OAuth_Token")
        #expect(SalesforcePlugin.identityErrorCode(#"{"error":"x"}"#) == nil)
    }
}
