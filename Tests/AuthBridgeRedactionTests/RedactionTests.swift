import AuthBridgeRedaction
import Testing

@Suite("Redaction")
struct RedactionTests {
    private let jwt = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.c2lnbmF0dXJl"

    @Test func jwtLookingWordsAreMasked() {
        let redacted = Redaction.redact("id token \(jwt) was refused")
        #expect(redacted == "id token [REDACTED] was refused")
        #expect(Redaction.redact("\"\(jwt)\"") == "\"[REDACTED]\"")
    }

    @Test func theWordAfterBearerIsMasked() {
        #expect(Redaction.redact("sent Bearer xyz123 to the API") == "sent Bearer [REDACTED] to the API")
        #expect(Redaction.redact("bearer\tabc") == "bearer\t[REDACTED]")
        #expect(!Redaction.redact("Authorization: Bearer opaque-token").contains("opaque-token"))
    }

    @Test(arguments: [
        ("access_token=abc123", "access_token=[REDACTED]"),
        ("https://app.example/cb?code=xyz789&state=s1", "https://app.example/cb?code=[REDACTED]&state=s1"),
        ("refresh_token=r1&grant_type=refresh_token", "refresh_token=[REDACTED]&grant_type=refresh_token"),
        (#"{"refresh_token":"r1"}"#, #"{"refresh_token":"[REDACTED]"}"#),
        ("client_secret=s3cr3t, password=hunter2", "client_secret=[REDACTED], password=[REDACTED]"),
        ("code_verifier=v", "code_verifier=[REDACTED]"),
    ])
    func secretNamedValuesAreMasked(_ input: String, _ expected: String) {
        #expect(Redaction.redact(input) == expected)
    }

    @Test(arguments: [
        "The provider is unavailable (HTTP 503), try again later.",
        "error: invalid_grant, state=abc, scope=openid email",
        "barcode=12 encode=x tokens=3",
        "",
    ])
    func ordinaryTextIsUnchanged(_ text: String) {
        #expect(Redaction.redact(text) == text)
    }

    @Test func longInputIsWithheldWhole() {
        let long = String(repeating: "a", count: 64 << 10)
        #expect(Redaction.redact(long) == "[65536 bytes withheld]")
        let justUnder = String(repeating: "b", count: (64 << 10) - 1)
        #expect(Redaction.redact(justUnder) == justUnder)
    }

    /// A secret-named key followed by a space (JSON written with ": ",
    /// `password: x`, `Authorization: Basic x`) masks the empty rest of the key's
    /// word and lets the value in the next word through.
    @Test(arguments: [
        (#"{"refresh_token": "r1-secret"}"#, "r1-secret"),
        ("password: hunter2", "hunter2"),
        ("Authorization: Basic dXNlcjpwYXNz", "dXNlcjpwYXNz"),
    ])
    func valueAfterASpacedSeparatorIsMasked(_ input: String, _ secret: String) {
        #expect(!Redaction.redact(input).contains(secret))
    }

    /// Every form of the security review (issue 12 §4 "Redaction gaps"): each printed its secret
    /// before. `secret` must be gone; `expected`, when given, is the exact output (the rest of the
    /// text is kept so that messages stay readable).
    @Test(arguments: [
        // A name's value with its scheme: header, form and JSON spellings.
        RedactionCase(#"{"Authorization":"Bearer tok-A1"}"#, secret: "tok-A1", expected: #"{"Authorization":"Bearer [REDACTED]"}"#),
        RedactionCase(#"{"Authorization": "Bearer tok-A2"}"#, secret: "tok-A2"),
        RedactionCase("Authorization=Bearer tok-A3&x=1", secret: "tok-A3", expected: "Authorization=Bearer [REDACTED]&x=1"),
        RedactionCase("Authorization: OAuth 00DAb0000001234!AQ4AQH0dMHZfz972Szmpsb9", secret: "AQ4AQH0dMHZfz972Szmpsb9"),
        RedactionCase("authorization: Token tok-A5", secret: "tok-A5", expected: "authorization: Token [REDACTED]"),
        RedactionCase("Proxy-Authorization: Basic dXNlcjpwYXNz", secret: "dXNlcjpwYXNz"),
        // Compact JSON and every member of it.
        RedactionCase(
            #"{"access_token":"at-C1","refresh_token":"rt-C1","token_type":"Bearer","expires_in":3600}"#, secret: "at-C1",
            expected: #"{"access_token":"[REDACTED]","refresh_token":"[REDACTED]","token_type":"Bearer","expires_in":3600}"#),
        RedactionCase(#"{"a":{"clientSecret":"cs-C2"}}"#, secret: "cs-C2"),
        RedactionCase(#"{"codeVerifier":"cv-C3","state":"s"}"#, secret: "cv-C3", expected: #"{"codeVerifier":"[REDACTED]","state":"s"}"#),
        // Salesforce session ids, bare or inside text.
        RedactionCase(
            "session 00DAb0000001234!AQ4AQH0dMHZfz972Szmpsb9 expired", secret: "AQ4AQH0dMHZfz972Szmpsb9",
            expected: "session [REDACTED] expired"),
        RedactionCase("(00DAb0000001234XYZ!AR8AQJXg5oj8jXSgxJfA0lBog.39AsX)", secret: "AR8AQJXg5oj8jXSgxJfA0lBog"),
        // Cookie and header names of the seed providers.
        RedactionCase("sid=00DAb0000001234!short", secret: "short"),
        RedactionCase(
            "Cookie: workgroup_session_id=wg-S1; XSRF-TOKEN=x-S1; other=ok", secret: "wg-S1",
            expected: "Cookie: [REDACTED]; XSRF-TOKEN=[REDACTED]; other=ok"),
        RedactionCase("Set-Cookie: sid=sid-S2; Path=/; Secure", secret: "sid-S2"),
        RedactionCase("X-Tableau-Auth: ta-S3", secret: "ta-S3", expected: "X-Tableau-Auth: [REDACTED]"),
        RedactionCase("x-tableau-auth:ta-S4", secret: "ta-S4"),
        // Parameter names of the OAuth steps.
        RedactionCase("clientSecret=cs-P1", secret: "cs-P1"),
        RedactionCase("device_code=dc-P2&grant_type=urn:ietf:params:oauth:grant-type:device_code", secret: "dc-P2"),
        RedactionCase("deviceCode: dc-P3", secret: "dc-P3"),
        RedactionCase("logout?id_token_hint=eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiIxIn0.c2ln&post_logout_redirect_uri=x", secret: "eyJzdWIiOiIxIn0"),
        RedactionCase("code_verifier=cv-P5", secret: "cv-P5"),
        // Percent-encoded: a callback URL inside another URL's parameter.
        RedactionCase(
            "redirect=https%3A%2F%2Fapp%2Fcb%3Fcode%3Dcode-E1%26state%3Ds1", secret: "code-E1",
            expected: "redirect=https%3A%2F%2Fapp%2Fcb%3Fcode%3D[REDACTED]%26state%3Ds1"),
        RedactionCase("next=%2Fcb%3Faccess_token%3dat-E2%26x%3D1", secret: "at-E2"),
        // JWTs anywhere, short opaque values after any secret name.
        RedactionCase("hint:eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJqd3QifQ.sig-J1", secret: "sig-J1"),
        RedactionCase("x=\"eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJqd3QifQ.sig-J2\"", secret: "sig-J2"),
        RedactionCase(#"{"token":"t1"}"#, secret: "t1", expected: #"{"token":"[REDACTED]"}"#),
        RedactionCase("password=p", secret: "=p", expected: "password=[REDACTED]"),
        RedactionCase("refresh_token: r", secret: ": r", expected: "refresh_token: [REDACTED]"),
    ])
    func everyFormOfTheReviewIsMasked(_ form: RedactionCase) {
        let redacted = Redaction.redact(form.input)
        #expect(!redacted.contains(form.secret), "\(form.input) → \(redacted)")
        if let expected = form.expected { #expect(redacted == expected) }
    }

    @Test(arguments: [
        "client_id=app&scope=openid%20email&state=abc", "Bearer of bad news", "the token expired; sign in again",
        #"{"token_type":"Bearer","expires_in":3600,"scope":"api"}"#, "error code 42: see https://example.com/help?topic=x",
    ])
    func textWithoutSecretsIsKept(_ text: String) {
        let unchangedUnlessNamed = Redaction.redact(text)
        if text.hasPrefix("Bearer") { #expect(unchangedUnlessNamed == "Bearer [REDACTED] bad news") } else { #expect(unchangedUnlessNamed == text) }
    }

    /// Names inside values (`{"a":{"b":…`, `a:b:…`) used to be read by a call per name, each
    /// copying the rest of the word: a word of 64 KiB nesting names overflowed the stack of the
    /// thread redacting it (a provider's `error_description`, a plugin's message) and took a
    /// second before. Now one pass, at any depth, and what is nested is still masked.
    @Test func namesNestedAnyNumberOfTimesAreReadInOnePass() {
        // (Compared as Bools: the texts are 60 KB.)
        let colons = String(repeating: "a:", count: 32_000)
        let colonsKept = Redaction.redact(colons) == colons
        #expect(colonsKept)
        let (open, close) = (String(repeating: #"{"a":"#, count: 10_000), String(repeating: "}", count: 10_000))
        let nestedMasked = Redaction.redact(open + #"{"client_secret":"cs-N1"}"# + close) == open + #"{"client_secret":"[REDACTED]"}"# + close
        #expect(nestedMasked)
        let urn = String(repeating: "urn%3A", count: 10_000)
        let urnMasked = Redaction.redact(urn + "code%3Dc-N2") == urn + "code%3D[REDACTED]"
        #expect(urnMasked)
    }
}

struct RedactionCase: Sendable, CustomTestStringConvertible {
    let input: String
    let secret: String
    let expected: String?

    init(_ input: String, secret: String, expected: String? = nil) {
        self.input = input
        self.secret = secret
        self.expected = expected
    }

    var testDescription: String { input }

}
