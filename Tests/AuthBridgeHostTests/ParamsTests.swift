import AuthBridgeJSON
@testable import AuthBridgeHost
import AuthBridgeRPC
import Testing

@Suite("Params")
struct ParamsTests {
    private func params(_ members: [String: JSON]) throws -> Params {
        try Params(Request(id: .string("r"), method: "m", params: .object(members)))
    }

    /// The field an invalid-params error names, or nil when `body` succeeds.
    private func field(_ body: () throws -> Void, sourceLocation: SourceLocation = #_sourceLocation) -> String? {
        do {
            try body()
            return nil
        } catch {
            let error = error as? RPCError
            #expect(error?.code == .invalidParams, sourceLocation: sourceLocation)
            #expect(error?.message.hasPrefix("Invalid params: ") == true, sourceLocation: sourceLocation)
            return error?.data?["field"]?.stringValue
        }
    }

    @Test func absentParamsAreAnEmptyObject() throws {
        #expect(try Params(Request(id: .int(1), method: "m", params: nil)).members.isEmpty)
    }

    @Test(arguments: [["x"], "x", 1, .null] as [JSON])
    func paramsMustBeAnObject(_ value: JSON) {
        #expect(field { _ = try Params(Request(id: .int(1), method: "m", params: value)) } == "params")
    }

    @Test(
        arguments: [
            (1_000, true), (3_600_000, true), (999, false), (3_600_001, false), (-1, false),
        ] as [(Int64, Bool)])
    func optionalIntsAreRangeChecked(_ value: Int64, _ accepted: Bool) throws {
        let params = try params(["timeoutMs": .int(value)])
        if accepted {
            #expect(try params.optionalInt("timeoutMs", in: 1_000...3_600_000) == value)
        } else {
            #expect(field { _ = try params.optionalInt("timeoutMs", in: 1_000...3_600_000) } == "timeoutMs")
        }
    }

    @Test func optionalIntsMustBeIntegers() throws {
        let params = try params(["a": 1.5, "b": "10", "c": .null])
        #expect(field { _ = try params.optionalInt("a", in: 0...10) } == "a")
        #expect(field { _ = try params.optionalInt("b", in: 0...10) } == "b")
        #expect(try params.optionalInt("c", in: 0...10) == nil)
    }

    @Test func allowOnlyNamesTheFirstUnknownField() throws {
        let params = try params(["provider": "p", "zeta": 1, "alpha": 2])
        #expect(field { try params.allowOnly(["provider"]) } == "alpha")
        #expect(field { try params.allowOnly(["provider", "alpha", "zeta"]) } == nil)
        #expect(field { try Params(Request(id: .int(0), method: "m", params: nil)).allowOnly([]) } == nil)
    }
}
