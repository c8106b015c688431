import AuthBridgeURL
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
    @Test(arguments: [
        ("", ""), ("f", "Zg"), ("fo", "Zm8"), ("foo", "Zm9v"), ("foob", "Zm9vYg"),
        ("fooba", "Zm9vYmE"), ("foobar", "Zm9vYmFy"),
    ])
    func rfc4648Vectors(_ input: String, _ expected: String) {
        #expect(Base64URL.encode(Array(input.utf8)) == expected)
    }

    @Test func usesTheURLAlphabet() {
        #expect(Base64URL.encode([0xFB, 0xFF]) == "-_8")
        #expect(Base64URL.encode([0xFB, 0xEF, 0xBE]) == "----")
        #expect(Base64URL.encode([0xFF, 0xFF, 0xFF]) == "____")
        #expect(Base64URL.encode([0x00]) == "AA")
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

@Suite("URL query (strict)")
struct URLQueryTests {
    @Test func parametersAreReadByNameAndFormDecoded() throws {
        let query = try #require(URLQuery(url: "https://duke.example/app/ios/token?netid=ab123&session_token=s%2B1&access_token=a+b%20c#frag"))
        #expect(query.value("access_token") == "a b c") // `+` is a space (RFC 6749 appendix B)
        #expect(query.value("session_token") == "s+1") // a plus is written %2B
        #expect(query.value("missing") == nil)
        #expect(query.count("netid") == 1 && query.count("missing") == 0)
        #expect(try #require(URLQuery(url: "https://x.example/")).items.isEmpty)
        #expect(try #require(URLQuery(url: "com.example.app:/cb?code=c&code=d")).count("code") == 2)
    }

    @Test(arguments: [
        ("caf%C3%A9", "café"),
        ("%e2%82%ac", "€"), // lower-case hex digits
        ("%25", "%"), // an escaped '%'
        ("", ""),
    ])
    func wellFormedEscapesAreDecoded(encoded: String, decoded: String) throws {
        #expect(URLQuery(url: "https://x.example/?v=\(encoded)")?.value("v") == decoded)
    }

    /// A query that is not well formed is refused as a whole, whichever parameter holds the broken
    /// escape: keeping the '%' would store a value nobody issued.
    @Test(arguments: [
        "v=ab%ZZcd", // not hex
        "v=abc%4", // cut short at the end
        "v=%",
        "v=%%41", // the first '%' starts no escape
        "v=%4g1",
        "v=ok&other=%zz", // in a parameter nobody asked for
        "na%2me=x&v=ok", // in a name
        "v=ok&flag%", // a name without a value
    ])
    func malformedEscapesRefuseTheQuery(query: String) {
        #expect(URLQuery(url: "https://x.example/cb?\(query)#%zz") == nil)
    }

    @Test func theFragmentIsNotRead() throws {
        #expect(URLQuery(url: "https://x.example/cb?v=1#frag%zz")?.value("v") == "1")
    }

    @Test(arguments: ["https://acme.my.salesforce.com/x", "HTTP://127.0.0.1:8080", "com.example.app:/done", "mailto:a@b.example"])
    func urlsWithASchemeAreAbsolute(url: String) {
        #expect(ParsedURL.hasScheme(url))
    }

    @Test(arguments: [
        "/services/data/v60.0/query?q=SELECT+Id+FROM+Account+WHERE+Website='https://acme.com'",
        "services/data?next=https://x.example", "/x#https://y", "", "1http://x", "//evil.example/x", "/a:b",
    ])
    func pathsAreNot(url: String) {
        #expect(!ParsedURL.hasScheme(url))
    }
}

@Suite("Base64")
struct Base64Tests {
    @Test func standardBase64IsPadded() {
        #expect(Base64.encode(Array("f".utf8)) == "Zg==")
        #expect(Base64.encode(Array("fo".utf8)) == "Zm8=")
        #expect(Base64.encode(Array("foo".utf8)) == "Zm9v")
        #expect(Base64.encode([0xFB, 0xFF]) == "+/8=")
    }

    @Test func base64URLRoundTrips() {
        for length in 0..<10 {
            let bytes = (0..<length).map { UInt8(truncatingIfNeeded: $0 * 37 + 250) }
            #expect(Base64URL.decode(Array(Base64URL.encode(bytes).utf8)) == bytes)
        }
        #expect(Base64URL.decode(Array("Zg==".utf8)) == nil) // padding is refused
        #expect(Base64URL.decode(Array("Z".utf8)) == nil) // an impossible length
        #expect(Base64URL.decode(Array("+/".utf8)) == nil) // the standard alphabet's characters
    }
}
