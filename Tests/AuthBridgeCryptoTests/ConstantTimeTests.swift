import AuthBridgeCrypto
import Testing

@Suite("Constant-time comparison")
struct ConstantTimeTests {
    @Test func constantTimeComparison() {
        #expect(constantTimeEquals("state-123", "state-123"))
        #expect(constantTimeEquals("", ""))
        #expect(!constantTimeEquals("state-123", "state-124"))
        #expect(!constantTimeEquals("abc", "abc\u{0}"))
        #expect(!constantTimeEquals("abc", "ab"))
        #expect(!constantTimeEquals("", "a"))
        #expect(!constantTimeEquals("é", "e\u{301}"))
    }
}
