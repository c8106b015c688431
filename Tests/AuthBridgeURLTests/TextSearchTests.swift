import AuthBridgeURL
import Testing

@Suite("Text search and standard base64")
struct TextSearchTests {
    @Test func substringsAreFoundAnywhere() {
        #expect("cannot open shared object file: No such".hasSubstring("cannot open shared object file"))
        #expect("a$ORIGIN/lib".hasSubstring("$ORIGIN"))
        #expect("abc".hasSubstring(""))
        #expect(!"abc".hasSubstring("abcd"))
        #expect(!"ab".hasSubstring("ba"))
        #expect("x-password =y"[...].hasSubstring("password ="))
        #expect("aaab".hasSubstring("aab"), "a partial match must not hide the next start")
        #expect("naïve café".hasSubstring("é"))
    }

    @Test func everyOccurrenceIsReplacedLeftToRight() {
        #expect("a~1b~1c".replacingEvery("~1", with: "/") == "a/b/c")
        #expect("~01".replacingEvery("~0", with: "~").replacingEvery("~1", with: "/") == "~1".replacingEvery("~1", with: "/"))
        #expect("aaaa".replacingEvery("aa", with: "b") == "bb", "not overlapping")
        #expect("token and token".replacingEvery("token", with: "***") == "*** and ***")
        #expect("abc".replacingEvery("", with: "x") == "abc")
        #expect("abc".replacingEvery("z", with: "x") == "abc")
        #expect("€1€".replacingEvery("€", with: "EUR") == "EUR1EUR")
    }

    @Test func standardBase64RoundTripsAndRefusesWhatFoundationRefuses() {
        for length in 0..<40 {
            let bytes = (0..<length).map { UInt8(truncatingIfNeeded: $0 &* 37 &+ 250) }
            #expect(Base64.decode(Base64.encode(bytes)) == bytes)
        }
        #expect(Base64.decode("+/+/") == [0xFB, 0xFF, 0xBF])
        #expect(Base64.decode("-_-_") == nil, "the URL alphabet is not the standard one")
        #expect(Base64.decode("YWJj\n") == nil)
        #expect(Base64.decode("YWJ") == nil, "padding is required")
        #expect(Base64.decode("Y===") == nil)
        #expect(Base64.decode("YQ==YQ==") == nil, "padding only at the end")
        #expect(Base64.decode("") == [])
    }
}
