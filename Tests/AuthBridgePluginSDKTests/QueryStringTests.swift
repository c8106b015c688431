import AuthBridgePluginSDK
import Testing

@Suite("QueryString")
struct QueryStringTests {
    @Test func parametersAreReadByNameAndDecoded() throws {
        let url = "https://duke.example/app/ios/token?netid=ab123&session_token=s%2B1&access_token=a+b%20c#frag"
        #expect(try QueryString.value("access_token", in: url) == "a b c")
        #expect(try QueryString.value("session_token", in: url) == "s+1")
        #expect(try QueryString.value("missing", in: url) == nil)
        #expect(try QueryString.items(of: "https://x.example/").isEmpty)
    }

    @Test(arguments: [
        ("caf%C3%A9", "café"),
        ("%e2%82%ac", "€"),      // lower-case hex digits
        ("%25", "%"),            // an escaped '%'
        ("", ""),
    ])
    func wellFormedEscapesAreDecoded(encoded: String, decoded: String) throws {
        #expect(try QueryString.value("v", in: "https://x.example/?v=\(encoded)") == decoded)
    }

    /// A callback whose query is not well formed is refused as a whole (nothing stored), whichever
    /// parameter holds the broken escape: keeping the '%' would store a value nobody issued.
    @Test(arguments: [
        "v=ab%ZZcd",             // not hex
        "v=abc%4",               // cut short at the end
        "v=%",
        "v=%%41",                // the first '%' starts no escape
        "v=%4g1",
        "v=ok&other=%zz",        // in a parameter nobody asked for
        "na%2me=x&v=ok",         // in a name
        "v=ok&flag%",            // a name without a value
    ])
    func malformedEscapesRefuseTheCallback(query: String) {
        let url = "https://x.example/cb?\(query)#%zz"
        #expect(throws: QueryString.malformed) { try QueryString.value("v", in: url) }
        #expect(QueryString.malformed.kind == .definitive && QueryString.malformed.reason == "invalidCallback")
    }

    @Test func theFragmentIsNotRead() throws {
        #expect(try QueryString.value("v", in: "https://x.example/cb?v=1#frag%zz") == "1")
    }
}

@Suite("URLText")
struct URLTextTests {
    @Test(arguments: ["https://acme.my.salesforce.com/x", "HTTP://127.0.0.1:8080", "com.example.app:/done", "mailto:a@b.example"])
    func urlsWithASchemeAreAbsolute(url: String) {
        #expect(URLText.hasScheme(url))
    }

    @Test(arguments: [
        "/services/data/v60.0/query?q=SELECT+Id+FROM+Account+WHERE+Website='https://acme.com'",
        "services/data?next=https://x.example", "/x#https://y", "", "1http://x", "//evil.example/x", "/a:b",
    ])
    func pathsAreNot(url: String) {
        #expect(!URLText.hasScheme(url))
    }
}
