import AuthBridgePluginABI
import Testing

/// The ABI's shared words are written once and keep their wire spelling.
struct ProviderFailureVocabularyTests {
    /// Every cancelled request is answered with this one failure (host, session engine, SDK).
    @Test func theCancelledFailureKeepsItsWords() {
        let cancelled = ProviderFailure.cancelled
        #expect(cancelled.kind == .cancelled)
        #expect(cancelled.reason == "cancelled")
        #expect(cancelled.message == "The request was cancelled.")
        #expect(cancelled.status == nil && cancelled.oauthError == nil)
    }
}
