import AuthBridgeJSON
import AuthBridgeProtocol
@testable import AuthBridgeHost
import AuthBridgeRPC
import AuthBridgeSession
import Testing

@Suite("Bridge error codes")
struct BridgeErrorsTests {
    /// bridge-spec/README.md, "Error codes".
    @Test(arguments: [
        (SessionError.Kind.notSignedIn, -32001), (.providerUnknown, -32003), (.providerRefused, -32004),
        (.userCancelled, -32005), (.timeout, -32006), (.providerUnavailable, -32007), (.pluginError, -32008),
        (.unsupported, -32009), (.storageError, -32011), (.noPendingSignIn, -32012), (.configurationError, -32013),
        (.invalidParams, -32602),
    ])
    func everySessionErrorKindHasItsCode(_ kind: SessionError.Kind, _ code: Int) {
        let error = RPCError(SessionError(kind, "Something happened.", provider: "work", reason: "why"))
        #expect(error.code.rawValue == code)
        #expect(error.message == "Something happened.")
        #expect(error.data?["provider"] == "work")
        #expect(error.data?["reason"] == "why")
        #expect(error.data?["retryable"] == .bool(kind == .timeout || kind == .providerUnavailable))
    }

    @Test func theFieldTravelsInData() {
        let error = RPCError(SessionError(.invalidParams, "bad", field: "sessionId"))
        #expect(error.json == ["code": -32602, "message": "bad", "data": ["field": "sessionId", "retryable": false]])
    }

    @Test func applicationCodesAreDistinctAndOutsideJSONRPCs() {
        let protocolCodes: Set<Int> = [-32700, -32600, -32601, -32602, -32603, -32002, -32800]
        let codes = BridgeErrorCode.allCases.map(\.rawValue).filter { !protocolCodes.contains($0) }
        #expect(codes.count == 12)
        #expect(Set(codes).count == codes.count)
        #expect(codes.allSatisfy { (-32099 ... -32000).contains($0) })
        #expect(!codes.contains(RPCError.Code.serverNotInitialized.rawValue))
    }

    /// What the agent answers comes back to the command line as the engine raised it.
    @Test(arguments: BridgeErrorCode.allCases)
    func aCodeComesBackAsTheKindThatSentIt(_ code: BridgeErrorCode) {
        let back = SessionError(RPCError(RPCError.Code(code), "m", data: ["provider": "work", "reason": "why"]))
        switch code {
        case .requestCancelled: #expect(back.kind == .userCancelled)
        case .parseError, .invalidRequest, .methodNotFound, .internalError, .serverNotInitialized, .unsupportedProtocolVersion:
            #expect(back.kind == .pluginError)
        default: #expect(back.kind == code && back.provider == "work" && back.reason == "why")
        }
    }
}
