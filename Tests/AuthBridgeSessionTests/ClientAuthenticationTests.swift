import AuthBridgeCrypto
import AuthBridgeJSON
import AuthBridgePluginHost
import AuthBridgeURL
import Testing

@testable import AuthBridgeSession

#if canImport(Glibc)
import Glibc
#endif

/// How the host authenticates a client (RFC 6749 §2.3, RFC 7523) and what a purpose's token
/// requests name (RFC 8707): the parts of issue 30 that need no server.
@Suite("Client authentication and token purposes")
struct ClientAuthenticationTests {
    static let request: JSON = ["method": "POST", "url": "https://as.example/token", "form": ["grant_type": "client_credentials"]]

    static func config(_ members: [String: JSON]) -> JSON {
        JSON.object(["clientId": "app one", "tokenEndpoint": "https://as.example/token", "issuer": "https://as.example"].merging(members) { $1 })
    }

    static func claims(_ jwt: String) -> JSON? {
        let parts = jwt.split(separator: ".")
        guard parts.count == 3, let payload = Base64URL.decode(Array(parts[1].utf8)) else { return nil }
        return try? JSON.parse(String(decoding: payload, as: UTF8.self))
    }

    @Test func aSecretGoesWhereTheServerSaysAndNowhereElse() throws {
        let basic = try ClientAuthentication.authenticate(
            Self.request, config: Self.config(["clientSecret": "s&cret", "tokenEndpointAuthMethods": ["client_secret_post", "client_secret_basic"]])
        ).get()
        // RFC 6749 §2.3.1: each part form-encoded, then Base64.
        #expect(basic["headers"]?["Authorization"]?.stringValue == "Basic " + Base64.encode(Array("app%20one:s%26cret".utf8)))
        #expect(basic["form"]?["client_secret"] == nil && basic["form"]?["client_id"] == nil)
        let post = try ClientAuthentication.authenticate(
            Self.request, config: Self.config(["clientSecret": "s", "tokenEndpointAuthMethods": ["client_secret_post"]])
        ).get()
        #expect(post["form"]?["client_secret"] == "s" && post["form"]?["client_id"] == "app one" && post["headers"]?["Authorization"] == nil)
        let none = try ClientAuthentication.authenticate(Self.request, config: Self.config([:])).get()
        #expect(none["form"]?["client_id"] == "app one" && none["form"]?["client_secret"] == nil)
    }

    @Test func aSettingThatCannotWorkIsRefusedWithWhatItNeeds() {
        let post = ClientAuthentication.method(Self.config(["clientAuthentication": "client_secret_post"]))
        #expect(throws: ProviderFailure.self) { try post.get() }
        if case .failure(let failure) = post { #expect(failure.reason == "missingSetting" && failure.message.contains("clientSecret")) }
        let jwt = ClientAuthentication.method(Self.config(["clientAuthentication": "private_key_jwt"]))
        if case .failure(let failure) = jwt { #expect(failure.message.contains("privateKeyFile")) } else { Issue.record("accepted without a key") }
        let unknown = ClientAuthentication.method(Self.config(["clientAuthentication": "tls_client_auth"]))
        if case .failure(let failure) = unknown {
            #expect(failure.reason == "invalidSettings")
        } else {
            Issue.record("an unknown method was accepted")
        }
        // `where` must hold for each method: with a secret, every secret method is accepted.
        for method in ["client_secret_basic", "client_secret_post", "client_secret_jwt"] {
            #expect(
                (try? ClientAuthentication.method(Self.config(["clientAuthentication": .string(method), "clientSecret": "s"])).get())?.rawValue
                    == method)
        }
    }

    @Test func aSecretAssertionIsAnHS256JWTForTheTokenEndpoint() throws {
        let now: Int64 = 1_800_000_000_000
        let authenticated = try ClientAuthentication.authenticate(
            Self.request, config: Self.config(["clientSecret": "secret", "clientAuthentication": "client_secret_jwt"]), now: now
        ).get()
        #expect(authenticated["form"]?["client_assertion_type"]?.stringValue == "urn:ietf:params:oauth:client-assertion-type:jwt-bearer")
        let assertion = try #require(authenticated["form"]?["client_assertion"]?.stringValue)
        let claims = try #require(Self.claims(assertion))
        #expect(claims["iss"] == "app one" && claims["sub"] == "app one" && claims["aud"] == "https://as.example/token")
        #expect(claims["iat"]?.intValue == 1_800_000_000 && claims["exp"]?.intValue == 1_800_000_060 && claims["jti"]?.stringValue?.isEmpty == false)
        let input = assertion.split(separator: ".").prefix(2).joined(separator: ".")
        let mac = try HMACSHA256.authenticationCode(Array(input.utf8), key: Array("secret".utf8))
        #expect(assertion.hasSuffix("." + Base64URL.encode(mac)))
        let issuer = try ClientAuthentication.authenticate(
            Self.request,
            config: Self.config(["clientSecret": "s", "clientAuthentication": "client_secret_jwt", "clientAssertionAudience": "issuer"])
        ).get()
        #expect(Self.claims(issuer["form"]?["client_assertion"]?.stringValue ?? "")?["aud"] == "https://as.example")
    }

    /// RFC 4231 test case 2: the HMAC the assertions rest on.
    @Test func hmacSHA256IsRFC4231s() throws {
        let code = try HMACSHA256.authenticationCode(Array("what do ya want for nothing?".utf8), key: Array("Jefe".utf8))
        #expect(
            code.map { String($0, radix: 16).count == 1 ? "0" + String($0, radix: 16) : String($0, radix: 16) }.joined()
                == "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843")
    }

    @Test func aPrivateKeyFileMustBePrivateAndHoldAKey() throws {
        let folder = "/tmp/authbridge-client-key-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        #expect(mkdir(folder, 0o700) == 0)
        defer {
            _ = unlink(folder + "/key.pem")
            _ = rmdir(folder)
        }
        let path = folder + "/key.pem"
        // A P-256 key in SEC 1 PEM, made for this test only.
        let pem = """
            -----BEGIN EC PRIVATE KEY-----
            MHcCAQEEIKko0IwAmg+61k4ExnLISjsrwJ4XSSlkP4YxnDtEGSvVoAoGCCqGSM49
            AwEHoUQDQgAEPDwkpr4QD8xSelfWL5ODKhHlxdsu9qBQTgMKieDXMlEVIF298Oy5
            9jRetMW/50gml5INUtDPZ4SAZhLvFdew7A==
            -----END EC PRIVATE KEY-----
            """
        let file = fopen(path, "w")
        fputs(pem, file)
        fclose(file)
        chmod(path, 0o644)
        let config = Self.config(["privateKeyFile": .string(path), "privateKeyId": "k1"])
        if case .failure(let failure) = ClientKeys.shared.key(config) {
            #expect(failure.reason == "insecurePermissions" && failure.message.contains("chmod 600 \(path)"))
        } else {
            Issue.record("a key file others may read was used")
        }
        chmod(path, 0o600)
        let key = try ClientKeys.shared.key(config).get()
        #expect(key.algorithm == .es256)
        let authenticated = try ClientAuthentication.authenticate(Self.request, config: config).get()
        let assertion = try #require(authenticated["form"]?["client_assertion"]?.stringValue)
        let header = try #require(
            Base64URL.decode(Array(assertion.split(separator: ".")[0].utf8)).flatMap { try? JSON.parse(String(decoding: $0, as: UTF8.self)) })
        #expect(header["alg"] == "ES256" && header["kid"] == "k1")
        #expect(!String(describing: key).contains(Base64URL.encode(key.privateKey)))
        // Not a key: refused as such.
        let other = fopen(path, "w")
        fputs("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n", other)
        fclose(other)
        if case .failure(let failure) = ClientKeys.shared.key(config) {
            #expect(failure.reason == "invalidSettings")
        } else {
            Issue.record("garbage was a key")
        }
    }

    @Test func aTokenRequestNamesOneResourceAndAPurposeHasOneName() {
        let config: JSON = ["resources": ["https://a.example/", "https://b.example/"]]
        #expect(StandardSteps.tokenResources([:], config: config) == ["https://a.example/"])
        #expect(StandardSteps.tokenResources(["resources": ["https://b.example/"]], config: config) == ["https://b.example/"])
        #expect(StandardSteps.tokenResources(["resources": []], config: config).isEmpty)
        #expect(StandardSteps.isResourceIndicator("https://api.example/v1") && StandardSteps.isResourceIndicator("urn:example:api"))
        #expect(!StandardSteps.isResourceIndicator("/relative") && !StandardSteps.isResourceIndicator("https://a/#frag"))
        let one = TokenPurpose(scopes: ["write", "read", "read"], resources: ["https://b/", "https://a/"])
        let same = TokenPurpose(scopes: ["read", "write"], resources: ["https://a/", "https://b/"])
        #expect(one.key == same.key && one.scopes == ["read", "write"])
        #expect(TokenPurpose(scopes: nil, resources: ["https://a/"]).key != TokenPurpose(scopes: [], resources: ["https://a/"]).key)
        let exchange = TokenPurpose(
            scopes: nil, resources: ["https://a/"], exchange: .init(audience: nil, requestedTokenType: nil, subjectTokenType: "accessToken"))
        #expect(exchange.key != TokenPurpose(scopes: nil, resources: ["https://a/"]).key)
        #expect(TokenPurpose.resources("https://a/") == ["https://a/"] && TokenPurpose.resources(["x:y", "z:w"]) == ["x:y", "z:w"])
        #expect(TokenPurpose.resources(nil) == nil)
    }
}
