import AuthBridgeSession
import Testing

@Suite("Parsed URL")
struct ParsedURLTests {
    @Test func ipv6HostPortPathAndQuery() throws {
        let url = try #require(ParsedURL("http://[::1]:8080/cb?x=1"))
        #expect(url.scheme == "http")
        #expect(url.host == "::1")
        #expect(url.port == 8080)
        #expect(url.path == "/cb")
        #expect(url.query == "x=1")
        #expect(url.origin == "http://[::1]:8080")
    }

    @Test func schemeAndHostAreLowerCasedAndPathDefaultsToSlash() throws {
        let url = try #require(ParsedURL("HTTPS://Login.Example.COM?prompt=login#frag"))
        #expect(url.scheme == "https" && url.host == "login.example.com")
        #expect(url.port == nil)
        #expect(url.path == "/")
        #expect(url.query == "prompt=login")
    }

    @Test func userinfoIsStripped() throws {
        let url = try #require(ParsedURL("https://user:p%40ss@idp.example:8443/authorize"))
        #expect(url.host == "idp.example")
        #expect(url.port == 8443)
        #expect(url.origin == "https://idp.example:8443")
    }

    @Test func theFragmentNeverNamesTheHost() throws {
        #expect(try #require(ParsedURL("https://evil.example#@good.example/")).host == "evil.example")
    }

    @Test(arguments: [
        "idp.example/authorize", "/relative/path", "localhost:8080/cb", "https:/one-slash", "https://",
        "https://host:99999/", "https://host:-1/", "https://host:http/", "http://[::1/", "http://[::1]x/", "ht tp://x/",
    ])
    func malformedOrRelativeURLsAreNil(_ text: String) {
        #expect(ParsedURL(text) == nil)
    }

    @Test func queryValuesArePercentDecoded() throws {
        let url = try #require(ParsedURL("http://127.0.0.1:1234/cb?code=a%2Fb%3D%3D&state=x+y%20z&empty=&flag&code=second"))
        #expect(url.queryValue("code") == "a/b==")
        #expect(url.queryValue("state") == "x y z")
        #expect(url.queryValue("empty") == "")
        #expect(url.queryValue("flag") == "")
        #expect(url.queryValue("missing") == nil)
        #expect(url.queryItems.count == 5)
    }

    @Test(arguments: [
        ("http://127.0.0.1/", true), ("http://127.5.6.7:9/", true), ("http://[::1]/", true),
        ("http://[0:0:0:0:0:0:0:1]/", true), ("http://localhost/", false), ("http://128.0.0.1/", false),
        ("http://127.0.0.1.nip.io/", false), ("http://127.0.0/", false), ("http://127.0.0.256/", false),
        ("http://[::2]/", false),
    ])
    func loopbackIPLiterals(_ text: String, _ loopback: Bool) throws {
        #expect(try #require(ParsedURL(text)).isLoopbackIPLiteral == loopback)
    }

    @Test(arguments: [
        ("https://idp.example/", true), ("https://localhost/", true), ("http://127.0.0.1:8400/cb", true),
        ("http://[::1]:80/", true), ("http://idp.example/", false), ("http://localhost:8400/", false),
        ("ftp://127.0.0.1/", false), ("custom-app://cb", false),
    ])
    func secureTransportIsHTTPSOrLoopbackHTTP(_ text: String, _ secure: Bool) throws {
        #expect(try #require(ParsedURL(text)).isSecureTransport == secure)
    }
}

@Suite("Form encoding")
struct FormEncodingTests {
    @Test func pairsRoundTripIncludingUnicodeAndReservedCharacters() {
        let pairs = [
            ("redirect_uri", "http://127.0.0.1:8400/cb?x=1&y=2#f"), ("scope", "openid email"),
            ("name", "Zoë 🎉 日本"), ("reserved", "!*'();:@&=+$,/?%#[] ~"), ("empty", ""), ("a&b=c", "d"),
        ]
        let encoded = FormEncoding.encode(pairs)
        #expect(FormEncoding.decode(encoded).map { [$0.name, $0.value] } == pairs.map { [$0.0, $0.1] })
        #expect(!encoded.contains(" ") && !encoded.contains("+") && encoded.split(separator: "&").count == pairs.count)
    }

    @Test func onlyUnreservedCharactersStayLiteral() {
        #expect(FormEncoding.percentEncode("AZaz09-._~") == "AZaz09-._~")
        #expect(FormEncoding.percentEncode("a b+c/é") == "a%20b%2Bc%2F%C3%A9")
    }

    @Test func objectMembersAreSortedByKey() {
        #expect(FormEncoding.encode(["b": "2", "a": "1 1", "c": ""]) == "a=1%201&b=2&c=")
    }

    @Test func decodingTreatsPlusAsSpaceAndSkipsEmptyPairs() {
        #expect(FormEncoding.decode("a=1+2&&b").map(\.name) == ["a", "b"])
        #expect(FormEncoding.percentDecode("1+2%3D3") == "1 2=3")
        #expect(FormEncoding.percentDecode("%E2%98%83") == "☃")
    }

    /// A `%` not followed by two hex digits stays as it is (WHATWG URL
    /// "percent-decode"); a sign is not a hex digit, and `+` is still a space.
    @Test(arguments: [("100%zz", "100%zz"), ("50%", "50%"), ("a%4", "a%4"), ("%+9", "% 9"), ("%-0x", "%-0x")])
    func malformedEscapesAreKeptLiterally(_ text: String, _ expected: String) {
        #expect(FormEncoding.percentDecode(text[...]) == expected)
    }
}

@Suite("Base64url and constant-time comparison")
struct Base64URLTests {
    /// RFC 4648 §10, without padding.
    @Test(arguments: [("", ""), ("f", "Zg"), ("fo", "Zm8"), ("foo", "Zm9v"), ("foob", "Zm9vYg"),
                      ("fooba", "Zm9vYmE"), ("foobar", "Zm9vYmFy")])
    func rfc4648Vectors(_ input: String, _ expected: String) {
        #expect(Base64URL.encode(Array(input.utf8)) == expected)
    }

    @Test func usesTheURLAlphabet() {
        #expect(Base64URL.encode([0xFB, 0xFF]) == "-_8")
        #expect(Base64URL.encode([0xFB, 0xEF, 0xBE]) == "----")
        #expect(Base64URL.encode([0xFF, 0xFF, 0xFF]) == "____")
        #expect(Base64URL.encode([0x00]) == "AA")
    }

    @Test func constantTimeComparison() {
        #expect(constantTimeEquals("state-123", "state-123"))
        #expect(constantTimeEquals("", ""))
        #expect(!constantTimeEquals("state-123", "state-124"))
        #expect(!constantTimeEquals("abc", "abc\u{0}"))
        #expect(!constantTimeEquals("abc", "ab"))
        #expect(!constantTimeEquals("", "a"))
        #expect(!constantTimeEquals("é", "e\u{301}"))
    }

    @Test func callbacksOnPrivateUseSchemesAreReadByName() throws {
        let url = try #require(CallbackURL("com.example.app:/oauth2redirect?state=s%201&code=c+2#frag"))
        #expect(url.queryValue("code") == "c 2" && url.queryValue("state") == "s 1")
        #expect(CallbackURL("https://app.example/cb?code=x")?.queryValue("code") == "x")
        #expect(CallbackURL("myapp:cb")?.queryItems.isEmpty == true)
        #expect(CallbackURL("no scheme?code=x") == nil)
        #expect(CallbackURL(":/?code=x") == nil)
    }
}
