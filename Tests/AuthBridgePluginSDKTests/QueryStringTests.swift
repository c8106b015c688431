import AuthBridgePluginSDK
import Testing

@Suite("QueryString")
struct QueryStringTests {
    @Test func parametersAreReadByNameAndDecoded() {
        let url = "https://duke.example/app/ios/token?netid=ab123&session_token=s%2B1&access_token=a+b%20c#frag"
        #expect(QueryString.value("access_token", in: url) == "a b c")
        #expect(QueryString.value("session_token", in: url) == "s+1")
        #expect(QueryString.value("missing", in: url) == nil)
        #expect(QueryString.items(of: "https://x.example/").isEmpty)
    }

    @Test(arguments: [
        ("%zz", "%zz"),          // not hex: kept, with what follows
        ("a%4", "a%4"),          // cut short at the end
        ("%", "%"),
        ("%%41", "%A"),          // the first % is literal, the second an escape
        ("%4g1", "%4g1"),
        ("caf%C3%A9", "café"),
        ("%e2%82%ac", "€"),      // lower-case hex digits
    ])
    func malformedEscapesAreKeptLiterally(encoded: String, decoded: String) {
        #expect(QueryString.value("v", in: "https://x.example/?v=\(encoded)") == decoded)
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
