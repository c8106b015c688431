import AuthBridgePluginABI
import Testing

/// The hooks as plugin.h numbers and names them (`ab_hook`, the function table), read from the header.
struct PluginHookTests {
    @Test func theHooksArePluginHsNumbersInOrder() {
        #expect(PluginHook.allCases.map(\.rawValue) == Array(1...10))
        #expect(PluginHook.allCases.allSatisfy { PluginHook(rawValue: $0.rawValue) == $0 })
        #expect(PluginHook(rawValue: 0) == nil && PluginHook(rawValue: 11) == nil)
    }

    @Test func aHookIsFoundByItsFunctionTableName() {
        #expect(
            PluginHook.allCases.map(\.description) == [
                "describe", "configure", "begin_sign_in", "complete_sign_in", "refresh", "revoke", "check_session",
                "authorize_request", "classify_response", "exchange_token",
            ])
        #expect(PluginHook.allCases.allSatisfy { PluginHook(name: $0.description) == $0 })
        #expect(PluginHook(name: "beginSignIn") == nil)
    }
}
