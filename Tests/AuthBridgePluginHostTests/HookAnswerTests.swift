import AuthBridgeJSON
import CAuthBridgePlugin
@testable import AuthBridgePluginHost
import Testing

/// What a hook hands back through `set_result` and `set_error`, as its outcome: the last
/// answer stands; one that does not parse, or an error that is not an object, is the plugin's
/// fault, named in the outcome.
@Suite("Hook answers")
struct HookAnswerTests {
    private func call() -> HookCall {
        HookCall(pluginID: "swifttest", hook: .checkSession, logger: quietLogger, environment: RecordingEnvironment())
    }

    private func give(_ text: String, _ setter: (HookCall) -> (UnsafeRawBufferPointer) -> Bool, to call: HookCall) -> Bool {
        Array(text.utf8).withUnsafeBytes { setter(call)($0) }
    }

    @Test func theLastAnswerGivenStands() {
        let call = call()
        #expect(give(#"{"state":"valid"}"#, HookCall.setResult, to: call))
        #expect(give(#"{"reason":"x","message":"m"}"#, HookCall.setError, to: call))
        guard case .failure = call.outcome(status: AB_ERROR) else {
            Issue.record("the error given last stands")
            return
        }
        #expect(give(#"{"state":"expired"}"#, HookCall.setResult, to: call))
        guard case .result(let result) = call.outcome(status: AB_OK) else {
            Issue.record("the result given last stands")
            return
        }
        #expect(result == ["state": "expired"])
        guard case .failure(let failure) = call.outcome(status: AB_ERROR) else {
            Issue.record("no error is left")
            return
        }
        #expect(failure.message.contains("returned AB_ERROR without set_error"))
    }

    @Test func anAnswerThatDoesNotParseIsThePluginsFault() {
        let call = call()
        #expect(!give("{not json", HookCall.setResult, to: call))
        guard case .failure(let failure) = call.outcome(status: AB_OK) else {
            Issue.record("no result")
            return
        }
        #expect(failure.message.contains("set_result with invalid JSON"))
        #expect(!give("[1]", HookCall.setError, to: call))
        guard case .failure(let refused) = call.outcome(status: AB_ERROR) else {
            Issue.record("no error")
            return
        }
        #expect(refused.message.contains("set_error needs a JSON object"))
        #expect(!give("{", HookCall.setError, to: call))
        guard case .failure(let broken) = call.outcome(status: AB_ERROR) else {
            Issue.record("no error")
            return
        }
        #expect(broken.message.contains("set_error with invalid JSON"))
    }
}
