import AuthBridgeJSON
import AuthBridgePluginHost
import AuthBridgeRedaction
@testable import AuthBridgeSession
import AuthBridgeURL
import Testing

@Suite("Standard steps: token responses")
struct TokenResponseTests {
    private let now: Int64 = 1_700_000_000_000

    private func response(_ status: Int64, _ body: String) -> JSON {
        ["status": .int(status), "headers": ["content-type": "application/json"], "body": .string(body)]
    }

    private func tokens(_ status: Int64, _ body: String) throws -> JSON {
        switch StandardSteps.parseTokenResponse(response(status, body), now: now) {
        case .success(let answer): return try #require(answer["tokens"])
        case .failure(let failure):
            Issue.record("unexpected failure \(failure)")
            throw failure
        }
    }

    private func failure(_ status: Int64, _ body: String) -> ProviderFailure? {
        if case .failure(let failure) = StandardSteps.parseTokenResponse(response(status, body), now: now) { return failure }
        return nil
    }

    @Test func aSuccessfulAnswerBecomesATokenSet() throws {
        let tokens = try tokens(
            200,
            #"""
            {"access_token":"at","token_type":"bearer","expires_in":3600,"refresh_token":"rt",
             "id_token":"idt","scope":"openid email"}
            """#)
        #expect(
            tokens == [
                "accessToken": "at", "tokenType": "Bearer", "expiresAt": .int(now + 3_600_000),
                "refreshToken": "rt", "idToken": "idt", "scope": "openid email",
            ])
        #expect(TokenSet(json: tokens)?.expiresAt == now + 3_600_000)
    }

    @Test func expiresInMayBeAString() throws {
        #expect(try tokens(200, #"{"access_token":"at","expires_in":"120"}"#)["expiresAt"] == .int(now + 120_000))
    }

    @Test func withoutExpiresInThereIsNoExpiry() throws {
        let tokens = try tokens(201, #"{"access_token":"at","refresh_token":""}"#)
        #expect(tokens["expiresAt"] == nil)
        #expect(tokens["refreshToken"] == nil)
        #expect(tokens["tokenType"] == "Bearer")
    }

    @Test func unknownMembersAreKeptAsExtrasButNeverTheTokenFields() throws {
        let tokens = try tokens(
            200,
            #"""
            {"access_token":"at","refresh_token":"rt","id_token":"it","token_type":"Bearer","scope":"api",
             "expires_in":60,"instance_url":"https://na1.example","issued_at":"1700000000000","signature":"sig"}
            """#)
        #expect(tokens["extras"] == ["instance_url": "https://na1.example", "issued_at": "1700000000000", "signature": "sig"])
    }

    @Test(arguments: [
        #"{"token_type":"bearer"}"#, #"{"access_token":""}"#, #"{"access_token":42}"#,
        "<html>oops</html>", "", "[]",
    ])
    func aSuccessStatusWithoutAnAccessTokenIsTransient(_ body: String) {
        let failure = failure(200, body)
        #expect(failure?.kind == .transient)
        #expect(failure?.reason == "badResponse")
        #expect(failure?.status == 200)
    }

    @Test(
        arguments: [
            (400, "invalid_grant"), (400, "unauthorized_client"), (401, "invalid_client"), (400, "access_denied"),
        ] as [(Int64, String)])
    func theProvidersRefusalsAreDefinitive(_ status: Int64, _ error: String) {
        let failure = failure(status, #"{"error":"\#(error)","error_description":"refresh token code=abc123 expired"}"#)
        #expect(failure?.kind == .definitive)
        #expect(failure?.reason == error)
        #expect(failure?.status == Int(status))
        #expect(failure?.message.contains(error) == true)
        #expect(failure?.message.contains("abc123") == false)
    }

    @Test(arguments: ["invalid_request", "invalid_scope", "unsupported_grant_type", "temporarily_unavailable"])
    func otherOAuthErrorsAreTransient(_ error: String) {
        let failure = failure(400, #"{"error":"\#(error)"}"#)
        #expect(failure?.kind == .transient)
        #expect(failure?.reason == error)
    }

    @Test(arguments: [(500, "serverError"), (503, "serverError"), (429, "rateLimited"), (0, "serverError")] as [(Int64, String)])
    func serverTroubleIsTransientEvenWithAnOAuthError(_ status: Int64, _ reason: String) {
        let failure = failure(status, #"{"error":"invalid_grant"}"#)
        #expect(failure?.kind == .transient)
        #expect(failure?.reason == reason)
    }

    @Test(arguments: [(400, "not json"), (403, #"{"message":"no"}"#), (302, "")] as [(Int64, String)])
    func anErrorStatusWithoutAnOAuthErrorIsTransient(_ status: Int64, _ body: String) {
        #expect(failure(status, body)?.kind == .transient)
        #expect(failure(status, body)?.reason == "badResponse")
    }

    /// Issue 25 §2.2: a refresh answered 400 or 401 is the provider's definitive answer, whatever
    /// its body. Before, glewlwyd's bodyless 400 and idpyoidc's `invalid_request` were transient
    /// (`-32007 badResponse`, retryable forever) and the session sat `offline` indefinitely.
    @Test(
        arguments: [
            (400, "", nil), (400, #"{"error":"invalid_request","error_description":"Refresh token inactive"}"#, "invalid_request"),
            (401, "", nil), (400, "<html>Bad Request</html>", nil), (401, #"{"error":"invalid_token"}"#, "invalid_token"),
        ] as [(Int64, String, String?)])
    func aRefreshAnswered400Or401IsRefusedForGood(_ status: Int64, _ body: String, _ oauthError: String?) throws {
        let refused = try #require(failure(status, body)?.asRefreshRefusal)
        #expect(refused.kind == .definitive)
        #expect(refused.reason == ProviderFailure.refreshRefusedReason)
        #expect(refused.status == Int(status))
        #expect(refused.oauthError == oauthError)
        #expect(refused.message.contains("HTTP \(status)"))
        if let oauthError { #expect(refused.message.contains(oauthError)) }
        // What was definitive already keeps its own word.
        #expect(failure(400, #"{"error":"invalid_grant"}"#)?.asRefreshRefusal.reason == "invalid_grant")
    }

    /// …and only those: no answer, 408, 429 and 5xx never sign anyone out.
    @Test(arguments: [(408, ""), (429, ""), (500, #"{"error":"invalid_grant"}"#), (503, ""), (0, ""), (403, "")] as [(Int64, String)])
    func aRefreshThatFailedForNowStaysTransient(_ status: Int64, _ body: String) {
        #expect(failure(status, body)?.asRefreshRefusal.kind == .transient)
        let network = ProviderFailure(.transient, reason: "refused", message: "Connection refused")
        #expect(network.asRefreshRefusal == network)
        // A server saying the trouble is its own and passing, even with a 400, has refused nothing.
        #expect(failure(400, #"{"error":"temporarily_unavailable"}"#)?.asRefreshRefusal.kind == .transient)
        #expect(failure(400, #"{"error":"server_error"}"#)?.asRefreshRefusal.kind == .transient)
    }

    /// `now + expires_in * 1000` is computed with trapping arithmetic, so a
    /// token endpoint answering a huge `expires_in` crashes the host instead
    /// of being treated as a bad (transient) answer.
    @Test func aHugeExpiresInDoesNotCrash() async {
        await #expect(processExitsWith: .success) {
            let answer: JSON = ["status": 200, "body": #"{"access_token":"a","expires_in":9223372036854775807}"#]
            _ = StandardSteps.parseTokenResponse(answer, now: 1_700_000_000_000)
        }
    }
}

@Suite("Standard steps: sign-in and requests")
struct StandardRequestStepsTests {
    private let config: JSON = ["authorizationEndpoint": "https://idp.example/oauth2/authorize", "clientId": "client one"]

    private func url(_ result: Result<JSON, ProviderFailure>) throws -> ParsedURL {
        let text = try #require(try result.get()["url"]?.stringValue)
        return try #require(ParsedURL(text))
    }

    @Test func beginSignInPercentEncodesEveryParameter() throws {
        let input: JSON = [
            "redirectUri": "http://127.0.0.1:8400/cb?x=1", "scopes": ["openid", "email"], "state": "s&t=1",
            "nonce": "n+1", "codeChallenge": "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM", "loginHint": "zoë@example.com",
        ]
        let result = StandardSteps.beginSignIn(
            input, config: config.setting("extraAuthorizationParams", ["prompt": "select account", "audience": "api"]))
        let text = try #require(try result.get()["url"]?.stringValue)
        #expect(text.hasPrefix("https://idp.example/oauth2/authorize?response_type=code&client_id=client%20one&"))
        #expect(text.contains("redirect_uri=http%3A%2F%2F127.0.0.1%3A8400%2Fcb%3Fx%3D1"))
        #expect(text.contains("scope=openid%20email"))
        #expect(text.hasSuffix("&audience=api&prompt=select%20account"))
        let url = try url(result)
        let expected: [String: String] = [
            "response_type": "code", "client_id": "client one", "redirect_uri": "http://127.0.0.1:8400/cb?x=1",
            "scope": "openid email", "state": "s&t=1", "nonce": "n+1", "code_challenge": "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM",
            "code_challenge_method": "S256", "login_hint": "zoë@example.com", "audience": "api", "prompt": "select account",
        ]
        #expect(Dictionary(url.queryItems.map { ($0.name, $0.value) }, uniquingKeysWith: { first, _ in first }) == expected)
        #expect(url.queryItems.count == expected.count)
    }

    /// Issue 12 §4: a setting must not replace what the host puts in the
    /// authorization request (PKCE, state, the redirect).
    @Test(arguments: ["state", "redirect_uri", "code_challenge_method", "code_challenge", "nonce", "response_type", "client_id"])
    func extraParametersMustNotSetTheHostsOwn(_ name: String) {
        let result = StandardSteps.beginSignIn(
            ["state": "s", "codeChallenge": "c"],
            config: config.setting("extraAuthorizationParams", .object([name: "plain"])))
        guard case .failure(let failure) = result else {
            Issue.record("\(name) was accepted")
            return
        }
        #expect(failure.kind == .configuration && failure.reason == "invalidSettings" && failure.message.contains(name))
    }

    @Test func aCallbackIsCheckedForItsStateAndIssuerBeforeAnythingElse() throws {
        let forged = try #require(CallbackURL("https://app.example/cb?error=access_denied&state=other"))
        #expect(StandardSteps.callbackMismatch(forged, state: "mine", issuer: nil)?.reason == "stateMismatch")
        let mixUp = try #require(CallbackURL("https://app.example/cb?code=c&state=mine&iss=https://evil.example"))
        #expect(StandardSteps.callbackMismatch(mixUp, state: "mine", issuer: "https://idp.example", issuerRequired: true)?.reason == "issuerMismatch")
        let ours = try #require(CallbackURL("https://app.example/cb?code=c&state=mine&iss=https://idp.example"))
        #expect(StandardSteps.callbackMismatch(ours, state: "mine", issuer: "https://idp.example", issuerRequired: true) == nil)
        // RFC 9207: where the server advertises it, a code without `iss` is refused; a denial without one still ends the sign-in.
        let bare = try #require(CallbackURL("https://app.example/cb?code=c&state=mine"))
        #expect(StandardSteps.callbackMismatch(bare, state: "mine", issuer: "https://idp.example", issuerRequired: true)?.reason == "issuerMismatch")
        let denied = try #require(CallbackURL("https://app.example/cb?error=access_denied&state=mine"))
        #expect(StandardSteps.callbackMismatch(denied, state: "mine", issuer: "https://idp.example", issuerRequired: true) == nil)
    }

    /// Issue 25 §2.1 (RFC 9207 §2.4): glewlwyd and idpyoidc send `iss` without advertising it.
    /// Before: the issuer was compared only where advertised, so a mix-up callback naming another
    /// issuer had its code redeemed. A present `iss` is compared whatever the metadata says; a
    /// missing one is still accepted from a server that never promised it.
    @Test func aPresentIssuerIsComparedEvenWhereTheServerDoesNotAdvertiseIt() throws {
        let mixUp = try #require(CallbackURL("https://app.example/cb?code=c&state=mine&iss=https%3A%2F%2Fattacker.example%2F"))
        #expect(StandardSteps.callbackMismatch(mixUp, state: "mine", issuer: "https://idp.example")?.reason == "issuerMismatch")
        // No normalisation: a trailing slash is another issuer.
        let slash = try #require(CallbackURL("https://app.example/cb?code=c&state=mine&iss=https%3A%2F%2Fidp.example%2F"))
        #expect(StandardSteps.callbackMismatch(slash, state: "mine", issuer: "https://idp.example")?.reason == "issuerMismatch")
        let ours = try #require(CallbackURL("https://app.example/cb?code=c&state=mine&iss=https%3A%2F%2Fidp.example"))
        #expect(StandardSteps.callbackMismatch(ours, state: "mine", issuer: "https://idp.example") == nil)
        let bare = try #require(CallbackURL("https://app.example/cb?code=c&state=mine"))
        #expect(StandardSteps.callbackMismatch(bare, state: "mine", issuer: "https://idp.example") == nil)
    }

    /// OpenID Connect Core §11: offline access is asked for with prompt=consent (idpyoidc refuses
    /// the request otherwise); a prompt the profile sets itself is left alone.
    @Test func offlineAccessAsksForConsent() throws {
        let offline = try url(StandardSteps.beginSignIn([:], config: config.setting("scopes", ["openid", "offline_access"])))
        #expect(offline.queryValue("prompt") == "consent")
        let chosen = config.setting("scopes", ["openid", "offline_access"]).setting("extraAuthorizationParams", ["prompt": "login"])
        #expect(try url(StandardSteps.beginSignIn([:], config: chosen)).queryValue("prompt") == "login")
        #expect(try url(StandardSteps.beginSignIn([:], config: config.setting("scopes", ["openid"]))).queryValue("prompt") == nil)
    }

    @Test func anEndpointWithAQueryGetsMoreParametersAppended() throws {
        let config = self.config.setting("authorizationEndpoint", "https://idp.example/authorize?tenant=t1")
        let url = try url(StandardSteps.beginSignIn([:], config: config.setting("scopes", ["api"])))
        #expect(url.queryValue("tenant") == "t1")
        #expect(url.queryValue("response_type") == "code")
        #expect(url.queryValue("scope") == "api")
        #expect(url.queryValue("code_challenge") == nil)
    }

    @Test(arguments: ["http://idp.example/authorize", "http://localhost:8080/authorize", "ftp://idp.example/"])
    func insecureEndpointsAreAConfigurationError(_ endpoint: String) {
        guard case .failure(let failure) = StandardSteps.beginSignIn([:], config: config.setting("authorizationEndpoint", .string(endpoint))) else {
            Issue.record("accepted \(endpoint)")
            return
        }
        #expect(failure.kind == .configuration)
        #expect(failure.reason == "insecureUrl")
    }

    @Test func loopbackHTTPEndpointsAreAllowed() throws {
        let url = try url(StandardSteps.beginSignIn([:], config: config.setting("authorizationEndpoint", "http://127.0.0.1:9000/auth")))
        #expect(url.port == 9000 && url.queryValue("client_id") == "client one")
    }

    @Test func missingSettingsAreNamed() {
        for (config, setting) in [
            (config.setting("authorizationEndpoint", nil), "authorizationEndpoint"),
            (config.setting("authorizationEndpoint", "not a url"), "authorizationEndpoint"),
            (config.setting("clientId", nil), "clientId"),
        ] {
            guard case .failure(let failure) = StandardSteps.beginSignIn([:], config: config) else {
                Issue.record("no failure without \(setting)")
                continue
            }
            #expect(failure.kind == .configuration && failure.reason == "missingSetting")
            #expect(failure.message.contains("\"\(setting)\""))
        }
    }

    @Test(arguments: [
        ("https://api.example/", "/v1/me", "https://api.example/v1/me"),
        ("https://api.example", "v1/me", "https://api.example/v1/me"),
        ("https://api.example/base/", "v1/me", "https://api.example/base/v1/me"),
        ("https://api.example/base", "/v1/me", "https://api.example/base/v1/me"),
    ])
    func joinURL(_ base: String, _ path: String, _ joined: String) {
        #expect(StandardSteps.joinURL(base, path) == joined)
    }

    @Test func authorizeRequestResolvesRelativeURLsAndSetsABearerHeader() throws {
        let input: JSON = [
            "tokens": ["accessToken": "at-1", "tokenType": "bearer"],
            "request": ["method": "GET", "url": "/v1/me", "headers": ["Accept": "application/json"]],
        ]
        let answer = try StandardSteps.authorizeRequest(input, config: ["apiBaseUrl": "https://api.example/"]).get()
        #expect(answer["request"]?["url"] == "https://api.example/v1/me")
        #expect(answer["request"]?["headers"] == ["Accept": "application/json", "Authorization": "Bearer at-1"])
        #expect(answer["request"]?["method"] == "GET")
        #expect(answer["cookies"] == [])
    }

    @Test func authorizeRequestKeepsAbsoluteURLsAndOtherTokenTypes() throws {
        let input: JSON = ["tokens": ["accessToken": "at-1", "tokenType": "DPoP"], "request": ["url": "https://other.example/x"]]
        let answer = try StandardSteps.authorizeRequest(input, config: [:]).get()
        #expect(answer["request"]?["url"] == "https://other.example/x")
        #expect(answer["request"]?["headers"]?["Authorization"] == "DPoP at-1")
        let noType = try StandardSteps.authorizeRequest(["tokens": ["accessToken": "t"]], config: [:]).get()
        #expect(noType["request"]?["headers"]?["Authorization"] == "Bearer t")
    }

    @Test func authorizeRequestFailures() {
        guard
            case .failure(let relative) = StandardSteps.authorizeRequest(
                ["tokens": ["accessToken": "t"], "request": ["url": "/v1/me"]], config: [:])
        else {
            Issue.record("a relative URL without apiBaseUrl was accepted")
            return
        }
        #expect(relative.kind == .configuration && relative.reason == "relativeUrl")
        guard case .failure(let noTokens) = StandardSteps.authorizeRequest(["request": ["url": "https://a.example/"]], config: [:]) else {
            Issue.record("a request without tokens was authorized")
            return
        }
        #expect(noTokens.kind == .definitive && noTokens.reason == "noTokens")
    }

    @Test func checkSessionComparesExpiryWithNow() {
        let now: Int64 = 1_000_000
        #expect(StandardSteps.checkSession(["tokens": ["accessToken": "t"]], now: now) == ["state": "valid"])
        #expect(StandardSteps.checkSession(["tokens": ["expiresAt": .int(now + 1)]], now: now) == ["state": "valid"])
        #expect(StandardSteps.checkSession(["tokens": ["expiresAt": .int(now)]], now: now) == ["state": "expired"])
        #expect(StandardSteps.checkSession(["tokens": ["expiresAt": .int(now - 1)]], now: now) == ["state": "expired"])
    }

    @Test(arguments: [(401, "sessionExpired"), (200, "ok"), (403, "ok"), (500, "ok"), (0, "ok")] as [(Int64, String)])
    func classifyResponse(_ status: Int64, _ outcome: String) {
        #expect(StandardSteps.classifyResponse(["response": ["status": .int(status)]])["outcome"] == .string(outcome))
    }
}

@Suite("Session errors")
struct SessionErrorTests {
    @Test(arguments: [
        (ProviderFailure.Kind.definitive, "invalid_grant", SessionError.Kind.providerRefused),
        (.transient, "serverError", .providerUnavailable),
        (.transient, "timeout", .timeout),
        (.configuration, "missingSetting", .configurationError),
        (.configuration, "unsupported", .unsupported),
        (.internal, "pluginError", .pluginError),
        (.cancelled, "cancelled", .userCancelled),
    ])
    func providerFailuresMapOntoBridgeKinds(_ kind: ProviderFailure.Kind, _ reason: String, _ expected: SessionError.Kind) {
        let error = SessionError(ProviderFailure(kind, reason: reason, message: "m"), provider: "work")
        #expect(error.kind == expected)
        #expect(error.provider == "work" && error.reason == reason)
        // A failure to reach the provider names the profile (the transport's message names the URL).
        #expect(error.message == (reason == "timeout" ? "Profile \"work\": m" : "m"))
        #expect(error.retryable == (expected == .providerUnavailable || expected == .timeout))
        #expect(error.data == .compactObject(["provider": "work", "reason": .string(reason), "retryable": .bool(error.retryable)]))
    }

    @Test func knownSecretsNeverReachAMessage() {
        // Issue 12 §4: a provider that echoes the tokens it was sent.
        let refresh = TokenSet(accessToken: "at-9f8e7d6c5b4a", refreshToken: "rt-0a1b2c3d4e5f")
        let echoed = "refresh token \(refresh.refreshToken!) busy; access \(refresh.accessToken) (rt-0a1b2c3d4e5f%2B)"
        let error = SessionError(ProviderFailure(.transient, reason: "temporarily_unavailable", message: echoed), provider: "work")
        #expect(!error.message.contains("rt-0a1b2c3d4e5f") && !error.message.contains("at-9f8e7d6c5b4a"), "\(error.message)")
        #expect(error.message.contains("busy"))
        let base64 = SessionError(.providerRefused, "Basic cnQtMGExYjJjM2Q0ZTVm", provider: "work")
        #expect(!base64.message.contains("cnQtMGExYjJjM2Q0ZTVm"))
    }

    @Test func dataNamesTheField() {
        let error = SessionError(.invalidParams, "bad", provider: nil, field: "sessionId")
        #expect(error.data == ["field": "sessionId", "retryable": false])
        #expect(error.description == "invalidParams: bad")
    }
}

/// Issue 27 §6: what a provider's error says reaches people (the CLI's terminal, a frontend's
/// dialog, the browser page) only as plain, bounded text, and ends the sign-in with a sensible code.
@Suite("Standard steps: a provider's error responses")
struct ProviderErrorResponseTests {
    @Test func anErrorRedirectEndsTheSignInWithTheProvidersErrorAndWords() throws {
        let denied = try #require(CallbackURL("http://127.0.0.1:1/callback?error=access_denied&state=s"))
        let cancelled = try #require(StandardSteps.callbackError(denied))
        #expect(cancelled.kind == .cancelled && cancelled.reason == "access_denied")
        #expect(SessionError(cancelled, provider: "p").kind == .userCancelled)

        let scope = try #require(
            CallbackURL("http://127.0.0.1:1/callback?error=invalid_scope&error_description=Unknown+scope+%22x%22.&state=s"))
        let refused = try #require(StandardSteps.callbackError(scope))
        #expect(refused.kind == .definitive && refused.reason == "invalid_scope" && refused.oauthError == "invalid_scope")
        #expect(refused.message == "The provider refused the sign-in (invalid_scope): Unknown scope \"x\".")
        #expect(SessionError(refused, provider: "p").kind == .providerRefused)

        let bare = try #require(CallbackURL("http://127.0.0.1:1/callback?error=invalid_request&state=s"))
        #expect(StandardSteps.callbackError(bare)?.message == "The provider refused the sign-in (invalid_request).")
        let code = try #require(CallbackURL("http://127.0.0.1:1/callback?code=c&state=s"))
        #expect(StandardSteps.callbackError(code) == nil)
    }

    @Test func anErrorThatIsNoOAuthCodeIsNotPassedOnAsAReason() throws {
        for error in ["%1B%5B31mred", "two+words", String(repeating: "a", count: 65)] {
            let url = try #require(CallbackURL("http://127.0.0.1:1/callback?error=\(error)&state=s"))
            let failure = try #require(StandardSteps.callbackError(url))
            #expect(failure.kind == .definitive && failure.reason == "invalidCallback" && failure.oauthError == nil, "\(error)")
            #expect(!failure.message.unicodeScalars.contains { $0.value < 0x20 })
        }
    }

    /// Before: the description was only redacted, so escape sequences (with their strings: a
    /// window title), newlines and bidirectional overrides went on to every frontend, at any length.
    @Test func theDescriptionLosesControlCharactersAndIsBounded() throws {
        let hostile = "Bad%1B%5B2J%1B%5D0%3Btitle%07+request%0D%0Aforged+line%E2%80%AEreversed%C2%9B" + String(repeating: "x", count: 5_000)
        let url = try #require(CallbackURL("http://127.0.0.1:1/callback?error=invalid_request&error_description=\(hostile)&state=s"))
        let message = try #require(StandardSteps.callbackError(url)).message
        let invisible = message.unicodeScalars.filter {
            [.control, .format].contains($0.properties.generalCategory) || $0.properties.isWhitespace && $0 != " "
        }
        #expect(invisible.isEmpty, "\(message.prefix(120))")
        #expect(message.hasPrefix("The provider refused the sign-in (invalid_request): Bad request forged linereversedxxx"))
        #expect(message.count <= 60 + StandardSteps.providerTextLimit && message.hasSuffix("…."))
        // A secret a provider echoes is masked as before.
        #expect(StandardSteps.providerText("refresh_token=abc123 is busy") == "refresh_token=\(Redaction.mask) is busy")
    }

    /// The device flow and refreshes read the token endpoint's errors: the same words, the same care.
    @Test func aTokenEndpointsDescriptionIsQuotedTheSameWay() {
        let body: JSON = ["error": "invalid_scope", "error_description": .string("no\u{1B}[31m\nsuch\u{202E} scope")]
        let failure = StandardSteps.classifyTokenError(status: 400, body: body)
        #expect(failure.reason == "invalid_scope" && failure.message == "invalid_scope: no such scope")
    }
}

/// Issue 27 §6 (a): a provider that does not know the client id, or does not allow the redirect
/// URI, shows its own page and never redirects; the timeout is all the host sees, so its message
/// says what to check. Before: "The sign-in timed out after 15 s without a callback."
@Suite("Sign-in: the timeout's message")
struct NoCallbackMessageTests {
    @Test func aLoopbackSignInNamesTheProfileClientAndTheRedirectToRegister() {
        let message = SessionEngine.noCallbackMessage(
            profile: "corp", seconds: 15, clientID: "my-app", redirectURI: "http://127.0.0.1:41234/callback", loopbackPinned: false,
            listening: true)
        #expect(message.hasPrefix("The sign-in to \"corp\" was not completed within 15 s: nothing came back to http://127.0.0.1:41234/callback."))
        #expect(message.contains("invalid_client") && message.contains("the client id \"my-app\""))
        #expect(message.contains("the redirect URI \"http://127.0.0.1/callback\" on any port") && message.contains("loopbackPort"))
        #expect(message.hasSuffix("Otherwise the sign-in was not finished in the browser."))
    }

    @Test func aPinnedPortIsTheExactURIAndTheExternalFlowNamesItsOwn() {
        let pinned = SessionEngine.noCallbackMessage(
            profile: "corp", seconds: 300, clientID: "my-app", redirectURI: "http://127.0.0.1:8400/cb", loopbackPinned: true, listening: true)
        #expect(pinned.contains("does not allow it the redirect URI \"http://127.0.0.1:8400/cb\" (exactly that URI"))
        let external = SessionEngine.noCallbackMessage(
            profile: "app", seconds: 60, clientID: nil, redirectURI: "com.example.app:/oauth2redirect", loopbackPinned: false, listening: false)
        #expect(external.contains("completeSignIn was not called") && external.contains("\"com.example.app:/oauth2redirect\""))
        #expect(external.contains("does not know the client id, or"))
        // What a profile names is shown, never a control character from it.
        let odd = SessionEngine.noCallbackMessage(
            profile: "p", seconds: 1, clientID: "a\u{1B}[2Jb", redirectURI: nil, loopbackPinned: false, listening: false)
        #expect(!odd.unicodeScalars.contains { $0.value == 0x1B })
    }
}

@Suite("Standard steps: pushed authorization requests (RFC 9126)")
struct PushedAuthorizationTests {
    private let now: Int64 = 1_700_000_000_000
    private let config: JSON = [
        "authorizationEndpoint": "https://idp.example/authorize", "clientId": "app",
        "pushedAuthorizationRequestEndpoint": "https://idp.example/par",
    ]

    private func response(_ status: Int64, _ body: String) -> JSON {
        ["status": .int(status), "headers": ["content-type": "application/json"], "body": .string(body)]
    }

    @Test func aPushedAnswerGivesTheRequestURIAndWhenItExpires() throws {
        let body = #"{"request_uri":"urn:ietf:params:oauth:request_uri:abc","expires_in":90}"#
        let pushed = try StandardSteps.parsePushedAuthorization(response(201, body), now: now).get()
        #expect(pushed.requestURI == "urn:ietf:params:oauth:request_uri:abc" && pushed.expiresAt == now + 90_000)
    }

    @Test(arguments: [#"{"expires_in":90}"#, #"{"request_uri":"","expires_in":90}"#, #"{"request_uri":"u"}"#, #"{"request_uri":"u","expires_in":0}"#])
    func anAnswerWithoutARequestURIOrLifetimeIsRefused(_ body: String) {
        guard case .failure(let failure) = StandardSteps.parsePushedAuthorization(response(201, body), now: now) else {
            Issue.record("accepted \(body)")
            return
        }
        #expect(failure.kind == .transient && failure.reason == "badResponse")
    }

    @Test func aRefusalIsClassifiedAsTheTokenEndpointsAre() {
        let refused = StandardSteps.parsePushedAuthorization(response(401, #"{"error":"invalid_client"}"#), now: now)
        let busy = StandardSteps.parsePushedAuthorization(response(503, ""), now: now)
        guard case .failure(let client) = refused, case .failure(let server) = busy else {
            Issue.record("accepted a refusal")
            return
        }
        #expect(client.kind == .definitive && client.reason == "invalid_client")
        #expect(server.kind == .transient && server.reason == "serverError")
    }

    @Test func aLongLifetimeIsClampedToADay() throws {
        let body = #"{"request_uri":"u","expires_in":99999999999}"#
        #expect(try StandardSteps.parsePushedAuthorization(response(201, body), now: now).get().expiresAt == now + 86_400_000)
    }

    @Test(arguments: [(nil, true), ("auto", true), (true, true), (false, false)] as [(JSON?, Bool)])
    func parDecidesWhetherToPush(_ par: JSON?, _ pushes: Bool) throws {
        let settings = par.map { config.setting("par", $0) } ?? config
        #expect(try StandardSteps.pushedAuthorizationEndpoint(settings).get() == (pushes ? "https://idp.example/par" : nil))
    }

    @Test func autoWithoutAnEndpointSendsTheClassicURL() throws {
        let classic = config.setting("pushedAuthorizationRequestEndpoint", .null)
        #expect(try StandardSteps.pushedAuthorizationEndpoint(classic).get() == nil)
        let url = try #require(try StandardSteps.beginSignIn(["state": "s"], config: classic).get()["url"]?.stringValue)
        #expect(url == "https://idp.example/authorize?response_type=code&client_id=app&state=s")
    }

    @Test func parTrueWithoutAnEndpointIsAConfigurationError() throws {
        let problem = try #require(
            StandardSteps.pushedAuthorizationProblem(config.setting("pushedAuthorizationRequestEndpoint", .null).setting("par", true)))
        #expect(problem.kind == .configuration && problem.reason == "missingSetting" && problem.message.contains("RFC 9126"))
    }

    @Test func parFalseWhereTheServerRequiresPushesIsAConfigurationError() throws {
        let problem = try #require(
            StandardSteps.pushedAuthorizationProblem(config.setting("par", false).setting("requirePushedAuthorizationRequests", true)))
        #expect(problem.kind == .configuration && problem.reason == "invalidSettings")
    }

    @Test(arguments: ["always", "yes"])
    func parIsAutoTrueOrFalse(_ word: String) throws {
        let problem = try #require(StandardSteps.pushedAuthorizationProblem(config.setting("par", .string(word))))
        #expect(problem.reason == "invalidSettings")
    }

    @Test func anInsecurePushEndpointIsRefused() throws {
        let problem = try #require(
            StandardSteps.pushedAuthorizationProblem(config.setting("pushedAuthorizationRequestEndpoint", "http://idp.example/par")))
        #expect(problem.reason == "insecureUrl")
    }
}

@Suite("RP-initiated logout: the end-session URL")
struct EndSessionURLTests {
    @Test func itCarriesTheIDTokenClientRedirectAndState() throws {
        let text = SessionEngine.endSessionURL(
            "https://idp.example/logout?tenant=a", idToken: "h.p.s", clientID: "app one", redirectURI: "http://127.0.0.1:8400/callback",
            state: "st")
        let url = try #require(ParsedURL(text))
        #expect(text.hasPrefix("https://idp.example/logout?tenant=a&id_token_hint=h.p.s&"))
        #expect(
            Dictionary(url.queryItems.map { ($0.name, $0.value) }, uniquingKeysWith: { first, _ in first }) == [
                "tenant": "a", "id_token_hint": "h.p.s", "client_id": "app one", "post_logout_redirect_uri": "http://127.0.0.1:8400/callback",
                "state": "st",
            ])
    }

    /// OpenID Connect RP-Initiated Logout 1.0 §2: state is only for the post-logout redirect.
    @Test func withoutARedirectThereIsNoState() {
        let text = SessionEngine.endSessionURL("https://idp.example/logout", idToken: "h.p.s", clientID: nil, redirectURI: nil, state: "st")
        #expect(text == "https://idp.example/logout?id_token_hint=h.p.s")
    }
}
