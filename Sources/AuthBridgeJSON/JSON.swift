/// A JSON value: what crosses the wire and the plugin boundary.
///
/// Parsing and serialising go through jansson (see `JSON+Jansson.swift`); no
/// other module touches the C API. Integers and reals are kept apart so that
/// request ids and counters round-trip exactly.
public enum JSON: Sendable, Hashable {
    case null
    case bool(Bool)
    case int(Int64)
    case double(Double)
    case string(String)
    case array([JSON])
    case object([String: JSON])
}

// MARK: - Reading

extension JSON {
    /// The member `key` of an object, or nil for a missing member or a non-object.
    @inlinable
    public subscript(key: String) -> JSON? {
        if case .object(let members) = self { return members[key] }
        return nil
    }

    /// The element at `index` of an array, or nil.
    @inlinable
    public subscript(index: Int) -> JSON? {
        if case .array(let elements) = self, elements.indices.contains(index) { return elements[index] }
        return nil
    }

    @inlinable public var isNull: Bool { if case .null = self { return true } else { return false } }

    @inlinable public var stringValue: String? {
        if case .string(let value) = self { return value }
        return nil
    }

    @inlinable public var boolValue: Bool? {
        if case .bool(let value) = self { return value }
        return nil
    }

    /// The value as an integer; a real is accepted only when it is integral.
    @inlinable public var intValue: Int64? {
        switch self {
        case .int(let value): return value
        case .double(let value) where value.rounded() == value && abs(value) < 9.0e15: return Int64(value)
        default: return nil
        }
    }

    @inlinable public var doubleValue: Double? {
        switch self {
        case .int(let value): return Double(value)
        case .double(let value): return value
        default: return nil
        }
    }

    @inlinable public var arrayValue: [JSON]? {
        if case .array(let value) = self { return value }
        return nil
    }

    @inlinable public var objectValue: [String: JSON]? {
        if case .object(let value) = self { return value }
        return nil
    }

    /// A short name of the value's type for error messages ("string", "object"…).
    public var typeName: String {
        switch self {
        case .null: "null"
        case .bool: "boolean"
        case .int: "integer"
        case .double: "number"
        case .string: "string"
        case .array: "array"
        case .object: "object"
        }
    }
}

// MARK: - Building

extension JSON {
    /// An object with `value` set for `key` (nil removes it); other values are unchanged.
    public func setting(_ key: String, _ value: JSON?) -> JSON {
        guard case .object(var members) = self else { return self }
        members[key] = value
        return .object(members)
    }

    /// An object built from optional members: nil values are left out.
    public static func compactObject(_ members: KeyValuePairs<String, JSON?>) -> JSON {
        var result: [String: JSON] = [:]
        for (key, value) in members { if let value { result[key] = value } }
        return .object(result)
    }
}

extension JSON: ExpressibleByNilLiteral {
    public init(nilLiteral: ()) { self = .null }
}

extension JSON: ExpressibleByBooleanLiteral {
    public init(booleanLiteral value: Bool) { self = .bool(value) }
}

extension JSON: ExpressibleByIntegerLiteral {
    public init(integerLiteral value: Int64) { self = .int(value) }
}

extension JSON: ExpressibleByFloatLiteral {
    public init(floatLiteral value: Double) { self = .double(value) }
}

extension JSON: ExpressibleByStringLiteral {
    public init(stringLiteral value: String) { self = .string(value) }
}

extension JSON: ExpressibleByArrayLiteral {
    public init(arrayLiteral elements: JSON...) { self = .array(elements) }
}

extension JSON: ExpressibleByDictionaryLiteral {
    public init(dictionaryLiteral elements: (String, JSON)...) {
        self = .object(Dictionary(elements, uniquingKeysWith: { _, last in last }))
    }
}

extension JSON {
    public init(_ value: Int) { self = .int(Int64(value)) }
    public init(_ value: String?) { self = value.map(JSON.string) ?? .null }
}

extension JSON: CustomStringConvertible {
    /// The compact JSON text. Never use it to log values that may hold tokens.
    public var description: String { serializedString() }
}
