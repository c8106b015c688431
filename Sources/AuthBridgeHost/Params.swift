import AuthBridgeJSON
import AuthBridgeRPC

/// Named params of a request, read with errors that name the field (-32602):
/// that they are an object at all, for every method (`BridgeServer.decodedParams`),
/// and the few members of the test suites' `$/test/advanceClock`, which is not in
/// the spec. The spec's methods are decoded into their generated types instead.
struct Params {
    let members: [String: JSON]

    init(_ request: Request) throws(RPCError) {
        switch request.params {
        case nil: members = [:]
        case .object(let object)?: members = object
        case .array?: throw RPCError.invalidParams(field: "params", "AuthBridge methods take named params (an object), not an array")
        default: throw RPCError.invalidParams(field: "params", "must be an object")
        }
    }

    /// An integer: in JSON Schema 2020-12 (bridge-spec's dialect) `1000.0` and `1e3` are integers too.
    func optionalInt(_ name: String, in range: ClosedRange<Int64>) throws(RPCError) -> Int64? {
        guard let value = members[name], !value.isNull else { return nil }
        guard let number = value.intValue else {
            throw RPCError.invalidParams(field: name, "must be an integer, not \(value.typeName)")
        }
        guard range.contains(number) else { throw RPCError.invalidParams(field: name, "must be between \(range.lowerBound) and \(range.upperBound)") }
        return number
    }

    /// Rejects members the method does not know, so typos are caught.
    func allowOnly(_ names: Set<String>) throws(RPCError) {
        if let unknown = members.keys.sorted().first(where: { !names.contains($0) }) {
            throw RPCError.invalidParams(field: unknown, "is not a parameter of this method")
        }
    }
}
