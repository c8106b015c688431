import AuthBridgeJSON
@testable import AuthBridgeHost
import AuthBridgeRPC
import Testing

@Suite("initialize params")
struct InitializeTests {
    private func check(_ params: JSON?) -> RPCError? {
        BridgeServer.checkInitialize(Request(id: .int(1), method: "initialize", params: params))
    }

    @Test func aMissingProtocolVersionIsInvalidParams() {
        let error = check(["clientInfo": ["name": "test"]])
        #expect(error?.code == .invalidParams)
        #expect(error?.data?["field"] == "protocolVersion")
        #expect(check(nil)?.data?["field"] == "protocolVersion")
    }

    @Test(arguments: ["2.0", "0.9", "3.1"])
    func anotherMajorIsUnsupportedAndListsWhatIsSupported(_ version: String) {
        let error = check(["protocolVersion": .string(version)])
        #expect(error?.code.rawValue == -32010, "unsupportedProtocolVersion")
        #expect(error?.code.rawValue == -32010)
        #expect(error?.data?["supported"] == ["1.0"])
        #expect(error?.data?["retryable"] == false)
    }

    @Test(arguments: ["1", "1.0.0", "one", "1.x", "", "v1.0"] as [JSON])
    func malformedVersionsAreInvalidParams(_ version: JSON) {
        let error = check(["protocolVersion": version])
        #expect(error?.code == .invalidParams)
        #expect(error?.data?["field"] == "protocolVersion")
    }

    @Test(arguments: [1.0, 1, .null, ["1.0"]] as [JSON])
    func aVersionThatIsNotAStringIsInvalidParams(_ version: JSON) {
        #expect(check(["protocolVersion": version])?.data?["field"] == "protocolVersion")
    }

    @Test func aNewerMinorIsAcceptedAndNegotiatedDown() {
        #expect(check(["protocolVersion": "1.7"]) == nil)
        #expect(BridgeServer.negotiatedMinor("1.7") == 0)
        #expect(BridgeServer.negotiatedMinor("1.0") == 0)
        #expect(BridgeServer.negotiatedMinor("2.0") == nil)
        #expect(BridgeServer.negotiatedMinor("1") == nil)
    }

    @Test func unknownMembersAreIgnored() {
        #expect(
            check([
                "protocolVersion": "1.0", "clientInfo": ["name": "ide", "version": "9"], "capabilities": [:],
                "trace": "verbose", "futureFeature": [1, 2],
            ]) == nil)
    }

    @Test func knownMembersOfTheWrongTypeAreNamed() {
        #expect(check(["protocolVersion": "1.0", "clientInfo": "ide"])?.data?["field"] == "clientInfo")
        #expect(check(["protocolVersion": "1.0", "capabilities": []])?.data?["field"] == "capabilities")
    }

    @Test func positionalParamsAreInvalidParams() {
        let error = check(["1.0"])
        #expect(error?.code == .invalidParams)
        #expect(error?.data?["field"] == "params")
    }
}
