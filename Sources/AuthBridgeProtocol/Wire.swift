import AuthBridgeJSON

/// A part of a bridge message with a wire form: read from and written to the
/// JSON the bridge carries. The types `scripts/spec.py` writes from
/// bridge-spec/openrpc.json (`Messages.swift`) conform, and so do the scalars,
/// arrays, optionals and maps they are made of.
///
/// Reading assumes nothing about the source: a request's params were checked
/// against the spec before (`ParamsSchema`, whose errors name the same
/// fields), but an agent's answer read by the command line was not.
public protocol WireCodable: Sendable, Equatable {
    /// Reads the value; a `WireError` names the member at fault.
    init(wire: JSON) throws(WireError)
    /// The value as the wire carries it.
    var wire: JSON { get }
}

/// A bridge method called with params of this type, answered with a `Result`
/// (as sourcekit-lsp's requests: one type per request, its response type named).
public protocol BridgeRequest: WireCodable {
    associatedtype Result: WireCodable
    /// The method's name on the wire.
    static var method: String { get }
}

/// A notification whose params are this type.
public protocol BridgeNotification: WireCodable {
    /// The notification's method name on the wire.
    static var method: String { get }
}

/// A word of the wire's closed sets (a state, a flow, a stage): its raw value
/// is the word as bridge-spec spells it.
public protocol WireWord: WireCodable, RawRepresentable, CaseIterable where RawValue == String {}

extension WireWord {
    public init(wire: JSON) throws(WireError) {
        guard case .string(let word) = wire else { throw WireError("must be a string, not \(wire.typeName)") }
        guard let value = Self(rawValue: word) else {
            throw WireError("must be one of \(Self.allCases.map { "\"\($0.rawValue)\"" }.joined(separator: ", "))")
        }
        self = value
    }

    public var wire: JSON { .string(rawValue) }
}

/// What is wrong with a message: the member at fault, as bridge-spec's
/// `data.field` names it ("provider", "account.id", "scopes[0]"; empty for
/// the value itself), and what is wrong with it.
public struct WireError: Error, Sendable, Equatable, CustomStringConvertible {
    public var field: String
    public var message: String

    public init(field: String = "", _ message: String) {
        self.field = field
        self.message = message
    }

    /// The same problem seen from the value that holds this one under `step`
    /// (a member's name, or `[index]`).
    public func inside(_ step: String) -> WireError {
        let path = field.isEmpty ? step : field.hasPrefix("[") ? step + field : "\(step).\(field)"
        return WireError(field: path, message)
    }

    public var description: String { field.isEmpty ? message : "\(field) \(message)" }
}

/// The members of a wire object, read by the generated types' `init(wire:)`.
public struct WireObject {
    public let members: [String: JSON]

    public init(_ wire: JSON) throws(WireError) {
        guard case .object(let members) = wire else { throw WireError("must be an object, not \(wire.typeName)") }
        self.members = members
    }

    /// A member the spec requires (a nullable one may be null: `T` is then an optional).
    public func required<T: WireCodable>(_ name: String) throws(WireError) -> T {
        guard let value = members[name] else { throw WireError(field: name, "is required") }
        do {
            return try T(wire: value)
        } catch {
            throw error.inside(name)
        }
    }

    /// A member the spec does not require: nil when absent (or null).
    public func optional<T: WireCodable>(_ name: String) throws(WireError) -> T? {
        guard let value = members[name], !value.isNull else { return nil }
        do {
            return try T(wire: value)
        } catch {
            throw error.inside(name)
        }
    }
}

// MARK: - What messages are made of

extension String: WireCodable {
    public init(wire: JSON) throws(WireError) {
        guard case .string(let text) = wire else { throw WireError("must be a string, not \(wire.typeName)") }
        self = text
    }

    public var wire: JSON { .string(self) }
}

extension Bool: WireCodable {
    public init(wire: JSON) throws(WireError) {
        guard case .bool(let value) = wire else { throw WireError("must be a boolean, not \(wire.typeName)") }
        self = value
    }

    public var wire: JSON { .bool(self) }
}

extension Int64: WireCodable {
    /// An integer; an integral real (`1e3`) counts, as JSON Schema 2020-12 says.
    public init(wire: JSON) throws(WireError) {
        guard let value = wire.intValue else { throw WireError("must be an integer, not \(wire.typeName)") }
        self = value
    }

    public var wire: JSON { .int(self) }
}

extension Double: WireCodable {
    public init(wire: JSON) throws(WireError) {
        guard let value = wire.doubleValue else { throw WireError("must be a number, not \(wire.typeName)") }
        self = value
    }

    public var wire: JSON { .double(self) }
}

/// Any JSON: where the spec leaves a member's shape open (details, a plugin's settings).
extension JSON: WireCodable {
    public init(wire: JSON) { self = wire }
    public var wire: JSON { self }
}

/// A nullable value: null on the wire is nil.
extension Optional: WireCodable where Wrapped: WireCodable {
    public init(wire: JSON) throws(WireError) {
        self = wire.isNull ? nil : try Wrapped(wire: wire)
    }

    public var wire: JSON { map(\.wire) ?? .null }
}

extension Array: WireCodable where Element: WireCodable {
    public init(wire: JSON) throws(WireError) {
        guard case .array(let elements) = wire else { throw WireError("must be an array, not \(wire.typeName)") }
        var values: [Element] = []
        values.reserveCapacity(elements.count)
        for (index, element) in elements.enumerated() {
            do {
                values.append(try Element(wire: element))
            } catch {
                throw error.inside("[\(index)]")
            }
        }
        self = values
    }

    public var wire: JSON { .array(map(\.wire)) }
}

/// An object whose members the spec does not name (headers, details).
extension Dictionary: WireCodable where Key == String, Value: WireCodable {
    public init(wire: JSON) throws(WireError) {
        let object = try WireObject(wire)
        var values: [String: Value] = [:]
        for (name, member) in object.members {
            do {
                values[name] = try Value(wire: member)
            } catch {
                throw error.inside(name)
            }
        }
        self = values
    }

    public var wire: JSON { .object(mapValues(\.wire)) }
}
