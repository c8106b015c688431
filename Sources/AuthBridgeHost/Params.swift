import AuthBridgeJSON
import AuthBridgeRPC

/// Named params of a request, read with errors that name the field (-32602).
/// The bridge's methods check their params against bridge-spec first
/// (`ParamsSchema`); these readers then only take out typed values.
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

    func string(_ name: String) throws(RPCError) -> String {
        guard let value = members[name] else { throw RPCError.invalidParams(field: name, "is required") }
        guard case .string(let text) = value, !text.isEmpty else {
            throw RPCError.invalidParams(
                field: name, "must be a non-empty string, not \(value.typeName == "string" ? "an empty string" : value.typeName)")
        }
        return text
    }

    func optionalString(_ name: String) throws(RPCError) -> String? {
        guard let value = members[name], !value.isNull else { return nil }
        guard case .string(let text) = value else { throw RPCError.invalidParams(field: name, "must be a string, not \(value.typeName)") }
        return text
    }

    /// An optional string that, when given, is not empty (an account id, say).
    func optionalNonEmptyString(_ name: String) throws(RPCError) -> String? {
        guard let value = members[name], !value.isNull else { return nil }
        return try string(name)
    }

    func optionalBool(_ name: String) throws(RPCError) -> Bool? {
        guard let value = members[name], !value.isNull else { return nil }
        guard case .bool(let flag) = value else { throw RPCError.invalidParams(field: name, "must be true or false, not \(value.typeName)") }
        return flag
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

    func optionalObject(_ name: String) throws(RPCError) -> [String: JSON]? {
        guard let value = members[name], !value.isNull else { return nil }
        guard case .object(let object) = value else { throw RPCError.invalidParams(field: name, "must be an object, not \(value.typeName)") }
        return object
    }

    func optionalStringArray(_ name: String) throws(RPCError) -> [String]? {
        guard let value = members[name], !value.isNull else { return nil }
        guard case .array(let elements) = value else {
            throw RPCError.invalidParams(field: name, "must be an array of strings, not \(value.typeName)")
        }
        var strings: [String] = []
        for (index, element) in elements.enumerated() {
            guard case .string(let text) = element else { throw RPCError.invalidParams(field: "\(name)[\(index)]", "must be a string") }
            strings.append(text)
        }
        return strings
    }

    func optionalEnum(_ name: String, _ allowed: [String]) throws(RPCError) -> String? {
        guard let text = try optionalString(name) else { return nil }
        guard allowed.contains(text) else {
            throw RPCError.invalidParams(field: name, "must be one of \(allowed.map { "\"\($0)\"" }.joined(separator: ", "))")
        }
        return text
    }

    /// Rejects members the method does not know, so typos are caught.
    func allowOnly(_ names: Set<String>) throws(RPCError) {
        if let unknown = members.keys.sorted().first(where: { !names.contains($0) }) {
            throw RPCError.invalidParams(field: unknown, "is not a parameter of this method")
        }
    }
}
