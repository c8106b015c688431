import AuthBridgePluginHost
import Testing

@Suite("Redaction")
struct RedactionTests {
    private let jwt = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.c2lnbmF0dXJl"

    @Test func jwtLookingWordsAreMasked() {
        let redacted = Redaction.redact("id token \(jwt) was refused")
        #expect(redacted == "id token [REDACTED] was refused")
        #expect(Redaction.redact("\"\(jwt)\"") == "[REDACTED]")
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
        (#"{"refresh_token":"r1"}"#, #"{"refresh_token":[REDACTED]"#),
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
}
