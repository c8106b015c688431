import AuthBridgeJSON
@testable import AuthBridgePluginHost
import AuthBridgeRedaction
import Testing

@Suite("Provider failures")
struct ProviderFailureTests {
    @Test func missingMembersGetDefaults() {
        let failure = ProviderFailure(json: [:])
        #expect(failure.kind == .internal)
        #expect(failure.reason == "unspecified")
        #expect(failure.message == "the provider plugin reported an error")
        #expect(failure.status == nil)
    }

    @Test func anUnknownKindIsInternal() {
        #expect(ProviderFailure(json: ["kind": "fatal", "reason": "x"]).kind == .internal)
        #expect(ProviderFailure(json: ["kind": "transient"]).kind == .transient)
    }

    @Test func aPluginsMessageIsRedacted() {
        let failure = HookCall.failure(fromPlugin: ["kind": "definitive", "reason": "r", "message": "refused access_token=abc123", "status": 400])
        #expect(failure.message == "refused access_token=[REDACTED]")
        #expect(failure.status == 400)
    }

    @Test func jsonRoundTrips() {
        let failure = ProviderFailure(.transient, reason: "timeout", message: "slow", status: 504)
        #expect(ProviderFailure(json: failure.json) == failure)
        #expect(ProviderFailure(.cancelled, reason: "c", message: "m").json["status"] == nil)
    }

    @Test func knownSecretsAreMaskedInEveryFailure() {
        KnownSecrets.shared.remember("secret-value-4711")
        let failure = ProviderFailure(.definitive, reason: "r", message: "the server echoed secret-value-4711")
        #expect(failure.message == "the server echoed [REDACTED]")
    }
}
