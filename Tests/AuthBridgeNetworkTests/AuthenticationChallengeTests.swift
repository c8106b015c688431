import Testing

@testable import AuthBridgeNetwork

/// `WWW-Authenticate` as resource servers send it (RFC 9110 §11.6.1, RFC 6750 §3, RFC 9728 §5.1):
/// what the MCP discovery and the step-up read.
@Suite("WWW-Authenticate challenges")
struct AuthenticationChallengeTests {
    @Test func theMCPDiscoveryChallengeNamesTheMetadataAndTheScope() {
        let field = #"Bearer resource_metadata="http://127.0.0.1:8000/.well-known/oauth-protected-resource/mcp", scope="mcp:tools""#
        let challenge = AuthenticationChallenge.bearer(in: field)
        #expect(challenge?.resourceMetadata == "http://127.0.0.1:8000/.well-known/oauth-protected-resource/mcp")
        #expect(challenge?.scopes == ["mcp:tools"] && challenge?.error == nil)
    }

    @Test func severalChallengesQuotedStringsAndTokenValues() {
        let field = #"Basic realm="x, y", Bearer realm="api", error=insufficient_scope, scope="a b\"c", DPoP algs="ES256 RS256""#
        let challenges = AuthenticationChallenge.parse(field)
        #expect(challenges.map(\.scheme) == ["basic", "bearer", "dpop"])
        #expect(challenges[0].parameters == ["realm": "x, y"])
        #expect(challenges[1].error == "insufficient_scope" && challenges[1].scopes == ["a", "b\"c"])
        #expect(challenges[2].parameters["algs"] == "ES256 RS256")
    }

    @Test func token68NamesAndBrokenFieldsDoNotConfuseIt() {
        #expect(AuthenticationChallenge.parse("Negotiate YII=, Bearer error=\"invalid_token\"").map(\.scheme) == ["negotiate", "bearer"])
        #expect(AuthenticationChallenge.bearer(in: "Negotiate YII=, Bearer error=\"invalid_token\"")?.error == "invalid_token")
        #expect(AuthenticationChallenge.parse("").isEmpty)
        #expect(AuthenticationChallenge.bearer(in: "Bearer scope=\"unterminated")?.scopes == ["unterminated"])
        // Parameter names are case-insensitive; the first of a repeated one counts.
        #expect(AuthenticationChallenge.bearer(in: "BEARER Error=\"a\", error=\"b\"")?.error == "a")
        #expect(AuthenticationChallenge.bearer(in: "Bearer scope=\"  \"")?.scopes == nil)
    }
}
