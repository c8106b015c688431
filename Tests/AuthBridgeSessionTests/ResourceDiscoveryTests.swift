import AuthBridgeJSON
import AuthBridgePluginHost
import Testing

@testable import AuthBridgeSession

/// The parts of a profile from a protected resource's URL (issue 31) that need no server: the
/// RFC 9728 §3.3 comparison, the registration request and answer (RFC 7591), and the step-up.
@Suite("Protected resources and dynamic registration")
struct ResourceDiscoveryTests {
    @Test func metadataMustBeAboutThatVeryResource() {
        #expect(StandardSteps.sameResource("https://api.example/mcp", "https://api.example/mcp"))
        #expect(StandardSteps.sameResource("https://api.example/", "https://api.example"), "an empty path is /")
        #expect(!StandardSteps.sameResource("https://api.example/mcp/", "https://api.example/mcp"))
        #expect(!StandardSteps.sameResource("https://evil.example/mcp", "https://api.example/mcp"))
        #expect(!StandardSteps.sameResource("https://api.example/other", "https://api.example/mcp"))
    }

    @Test func theResourceSettingComesFirstAmongTheResources() {
        let config = StandardSteps.withResourceSetting([
            "resource": "https://a.example/mcp", "resources": ["https://b.example", "https://a.example/mcp"],
        ])
        #expect(config["resources"] == ["https://a.example/mcp", "https://b.example"])
        #expect(StandardSteps.withResourceSetting(["issuer": "https://as.example"])["resources"] == nil)
    }

    @Test func aPublicNativeClientIsRegistered() throws {
        let request = ClientRegistration.request(
            endpoint: "https://as.example/register", clientName: "My App", redirectUris: ["http://127.0.0.1:4000/callback"],
            scopes: ["mcp:tools", "mcp:admin"])
        #expect(request["method"] == "POST" && request["url"] == "https://as.example/register")
        let body = try JSON.parse(request["body"]?.stringValue ?? "")
        #expect(body["token_endpoint_auth_method"] == "none" && body["grant_types"] == ["authorization_code", "refresh_token"])
        #expect(body["redirect_uris"] == ["http://127.0.0.1:4000/callback"] && body["client_name"] == "My App")
        #expect(body["scope"] == "mcp:tools mcp:admin" && body["application_type"] == "native")
    }

    @Test func theAnswerIsReadAndARefusalExplained() throws {
        let uris = ["http://127.0.0.1:4000/callback"]
        func parse(_ status: Int, _ body: String) -> Result<ClientRegistration, ProviderFailure> {
            ClientRegistration.parse(
                ["status": .int(Int64(status)), "body": .string(body)], issuer: "https://as.example/", clientName: "App", redirectUris: uris,
                scopes: [], now: 7)
        }
        let registered = try parse(201, #"{"client_id":"c1","token_endpoint_auth_method":"none"}"#).get()
        #expect(registered.clientId == "c1" && registered.clientSecret == nil && registered.redirectUris == uris && registered.registeredAt == 7)
        // A server that insists on a confidential client: its secret and method are used.
        let confidential = try parse(200, #"{"client_id":"c2","client_secret":"s","token_endpoint_auth_method":"client_secret_post"}"#).get()
        let config = confidential.applied(to: ["issuer": "https://as.example/"])
        #expect(config["clientId"] == "c2" && config["clientSecret"] == "s" && config["clientAuthentication"] == "client_secret_post")
        #expect(config["dynamicClient"] == true)
        #expect(SessionEngine.withoutRegistration(config) == ["issuer": "https://as.example/"])
        guard case .failure(let refused) = parse(400, #"{"error":"invalid_redirect_uri","error_description":"no loopback"}"#) else {
            Issue.record("a 400 is a refusal")
            return
        }
        #expect(refused.kind == .definitive && refused.reason == "registrationRefused" && refused.message.contains("invalid_redirect_uri"))
        guard case .failure(let down) = parse(503, "") else { return }
        #expect(down.kind == .transient)
        guard case .failure(let empty) = parse(201, "{}") else { return }
        #expect(empty.reason == "badResponse")
    }

    @Test func aRegistrationIsNeededOnlyWithoutAClientIdAndWithAnEndpoint() {
        let server: JSON = ["issuer": "https://as.example/", "registrationEndpoint": "https://as.example/register"]
        #expect(ClientRegistration.isNeeded(server, settings: [:]))
        #expect(!ClientRegistration.isNeeded(server, settings: ["clientId": "mine"]))
        #expect(!ClientRegistration.isNeeded(["issuer": "https://as.example/"], settings: [:]))
        // A Client ID Metadata Document URL is sent as is only where the server reads those.
        #expect(ClientRegistration.isNeeded(server, settings: ["clientId": "https://app.example/client.json"]))
        #expect(
            !ClientRegistration.isNeeded(server.setting("clientIdMetadataDocuments", true), settings: ["clientId": "https://app.example/client.json"])
        )
    }

    @Test func aStepUpAsksOnlyForWhatTheSignInLacks() {
        func response(_ status: Int64, _ challenge: String) -> JSON { ["status": .int(status), "headers": ["www-authenticate": .string(challenge)]] }
        let insufficient = response(403, #"Bearer error="insufficient_scope", scope="mcp:tools mcp:admin""#)
        #expect(SessionEngine.stepUpScopes(insufficient, held: ["mcp:tools"]) == ["mcp:tools", "mcp:admin"])
        #expect(SessionEngine.stepUpScopes(insufficient, held: ["mcp:tools", "mcp:admin"]) == nil, "nothing new: asking again would not help")
        #expect(SessionEngine.stepUpScopes(response(401, #"Bearer error="insufficient_scope", scope="x""#), held: []) == nil)
        #expect(SessionEngine.stepUpScopes(response(403, #"Bearer error="invalid_token""#), held: []) == nil)
        #expect(SessionEngine.stepUpScopes(["status": 403], held: []) == nil)
    }
}
