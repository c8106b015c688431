import AuthBridgePluginSDK
@testable import TableauPlugin
import Testing

/// Tableau's pure rules: what a server address may be, how a token refusal is read, who signed in
/// (plugins/tableau/README.md).
@Suite("Tableau plugin")
struct TableauPluginTests {
    @Test(arguments: [
        ("https://Tableau.Example.com/", "https://tableau.example.com", "tableau.example.com"),
        ("https://example.com/tableau//", "https://example.com/tableau", "example.com"),
        ("https://example.com:443", "https://example.com", "example.com"),
        ("https://example.com:8443/t", "https://example.com:8443/t", "example.com"),
        ("http://[::1]:8080", "http://[::1]:8080", "::1"),
    ])
    func serverAddresses(text: String, base: String, host: String) throws {
        let server = try #require(ServerAddress(text))
        #expect(server.base == base)
        #expect(server.url.host == host)
    }

    @Test(arguments: [
        "tableau.example.com", "ftp://tableau.example.com", "https://user@tableau.example.com", "https://tableau.example.com/?x=1",
        "https://tableau.example.com/#/site/a", "https://tableau example.com", "https://tableau.example.com:0", "https://",
    ])
    func notServerAddresses(text: String) {
        #expect(ServerAddress(text) == nil)
    }

    @Test func aRequestURLMayHaveAQuery() throws {
        let target = try #require(ServerAddress("https://example.com/tableau/api/3.1/sites?x=1", allowQuery: true))
        #expect(target.path == "/tableau/api/3.1/sites" && target.url.query == "x=1")
    }

    @Test(arguments: [
        ("http://127.0.0.1:9000", true), ("http://[::1]/", true), ("https://tableau.example.com", true),
        ("http://tableau.example.com", false), ("http://localhost:9000", false), ("http://127.0.0.1.nip.io", false),
    ])
    func onlyHTTPSOrLoopbackIsSecure(text: String, secure: Bool) throws {
        #expect(try #require(ServerAddress(text)).url.isSecureTransport == secure)
    }

    @Test func tokenRefusalsKeepAWordAsTheReason() {
        let plain = TableauPlugin.refusal("invalid_grant", description: "session expired", status: 400)
        #expect(plain.kind == .definitive && plain.reason == "invalid_grant")
        #expect(plain.message == "Tableau refused the tokens (invalid_grant): session expired")
        let object = TableauPlugin.refusal(
            ["code": "connected_clients_disabled", "message": "disabled by an administrator"], description: nil, status: 401)
        #expect(object.reason == "connected_clients_disabled" && object.message.hasSuffix(": disabled by an administrator"))
        let numeric = TableauPlugin.refusal(["code": 16], description: nil, status: 400)
        #expect(numeric.reason == "invalid_grant" && numeric.message == "Tableau refused the tokens (16)")
        #expect(TableauPlugin.refusal(.null, description: nil, status: 400).reason == "invalid_grant")
    }

    @Test func theAccountIsTheUserName() {
        let account = TableauPlugin.account(["name": "ada", "displayName": "Ada Lovelace", "email": "ada@example.com"])
        #expect(account == ["id": "ada", "name": "Ada Lovelace", "email": "ada@example.com"])
        #expect(TableauPlugin.account(["username": "", "name": ""]) == nil)
        #expect(TableauPlugin.account("ada") == nil)
    }

    @Test func pathsJoinTheServer() {
        #expect(TableauPlugin.join("https://t.example/tableau", "api/x") == "https://t.example/tableau/api/x")
        #expect(TableauPlugin.join("https://t.example", "/api/x") == "https://t.example/api/x")
        #expect(TableauPlugin.join("https://t.example", "") == "https://t.example")
    }
}
