import AuthBridgePluginSDK
import Testing

@Suite("Callback query")
struct CallbackQueryTests {
    @Test func aWellFormedCallbackIsReadByName() throws {
        let query = try URLQuery.callback("https://duke.example/app/ios/token?netid=ab123&session_token=s%2B1&access_token=a+b")
        #expect(query.value("access_token") == "a b" && query.value("session_token") == "s+1")
    }

    @Test(arguments: ["https://x.example/cb?v=ab%ZZcd", "https://x.example/cb?v=ok&flag%", "com.example.app:/cb?code=%4"])
    func aMalformedCallbackIsTheDefinitiveInvalidCallbackFailure(url: String) {
        #expect(throws: ProviderFailure.malformedCallback) { try URLQuery.callback(url) }
        #expect(ProviderFailure.malformedCallback.kind == .definitive && ProviderFailure.malformedCallback.reason == "invalidCallback")
    }
}
