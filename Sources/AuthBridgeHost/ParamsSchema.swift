import AuthBridgeJSON
import AuthBridgeRPC
import AuthBridgeURL
import Synchronization

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Request params checked against bridge-spec itself: each method's
/// `x-params` schema in the OpenRPC document compiled into the host
/// (`OpenRPCDocument`, `make spec`), so the host's checks and the spec cannot
/// drift apart. A problem is answered -32602 with `data.field` the dotted
/// path of the offending member (bridge-spec README §3).
///
/// The validator implements the part of JSON Schema 2020-12 that the params
/// schemas use — `$ref` (local), `type`, `const`, `enum`, `minimum`,
/// `maximum`, `exclusiveMinimum`, `exclusiveMaximum`, `minLength`,
/// `maxLength`, `pattern`, `items`, `minItems`, `maxItems`, `required`,
/// `properties`, `additionalProperties`, `propertyNames`, `allOf`, `anyOf`,
/// `oneOf`, `not`, `if`/`then`/`else` — and ignores annotations
/// (`description`, `default`, `format`…). A test fails when a params schema
/// uses a keyword outside this list. Numbers follow 2020-12: `1000.0` and
/// `1e3` are integers. A number beyond a double's range (`1e999`, read as
/// infinity by `JSON.parse`) is refused wherever it appears. `null` is a
/// value like any other: an optional member is absent or valid, never null.
/// `pattern`s are matched as POSIX extended regular expressions, which agree
/// with ECMA-262 on the subset the spec uses (anchors, classes, groups,
/// alternation, quantifiers).
struct ParamsSchema: Sendable {
    /// The spec's params schemas (`OpenRPCDocument.paramsText`: the document's `x-params` and
    /// the schemas they reach, a tenth of the whole), parsed once.
    static let shared = ParamsSchema(document: (try? JSON.parse(OpenRPCDocument.paramsText)) ?? .null)

    static let supportedKeywords: Set<String> = [
        "$ref", "type", "const", "enum", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
        "minLength", "maxLength", "pattern", "items", "minItems", "maxItems", "required", "properties",
        "additionalProperties", "propertyNames", "allOf", "anyOf", "oneOf", "not", "if", "then", "else",
    ]
    static let annotations: Set<String> = [
        "description", "default", "format", "title", "examples", "$comment", "deprecated", "readOnly", "writeOnly",
    ]

    let document: JSON
    /// Method name → its `x-params` schema.
    let methods: [String: JSON]
    /// `$ref` → the schema it names.
    let references: [String: JSON]

    init(document: JSON) {
        self.document = document
        var methods: [String: JSON] = document["methods"]?.objectValue ?? [:]
        // The whole OpenRPC document lists methods in an array (with the host's own notifications).
        for method in document["methods"]?.arrayValue ?? [] where method["x-direction"] != "server-to-client" {
            if let name = method["name"]?.stringValue, let params = method["x-params"] { methods[name] = params }
        }
        self.methods = methods
        self.references = Self.references(in: document)
    }

    /// Whether the spec defines `method`.
    func knows(_ method: String) -> Bool { methods[method] != nil }

    /// Checks `params` (absent = `{}`) of `method`; -32602 naming the field.
    func check(method: String, params: JSON?) throws(RPCError) {
        guard let schema = methods[method] else { return }
        let instance = params ?? .object([:])
        if let problem = firstNonFinite(instance, path: []) ?? self.problem(instance, schema, path: []) {
            throw RPCError.invalidParams(field: problem.field, problem.message)
        }
    }

    struct Problem: Sendable, Equatable {
        var path: [PathStep]
        var message: String
        /// The dotted path of bridge-spec's `data.field`: "provider", "headers.Accept", "scopes[0]"; "params" for the whole.
        var field: String {
            guard !path.isEmpty else { return "params" }
            var text = ""
            for step in path {
                switch step {
                case .member(let name): text += text.isEmpty ? name : ".\(name)"
                case .index(let index): text += "[\(index)]"
                }
            }
            return text
        }
    }

    enum PathStep: Sendable, Equatable {
        case member(String)
        case index(Int)
    }

    /// A number JSON can write but a double cannot hold, anywhere in `value`.
    private func firstNonFinite(_ value: JSON, path: [PathStep]) -> Problem? {
        switch value {
        case .double(let number) where !number.isFinite:
            return Problem(path: path, message: "is a number out of range")
        case .array(let elements):
            for (index, element) in elements.enumerated() {
                if let problem = firstNonFinite(element, path: path + [.index(index)]) { return problem }
            }
        case .object(let members):
            for key in members.keys.sorted() {
                if let problem = firstNonFinite(members[key]!, path: path + [.member(key)]) { return problem }
            }
        default: break
        }
        return nil
    }

    /// The first way `instance` fails `schema`, or nil. Deterministic:
    /// members are checked in name order, after `required`.
    func problem(_ instance: JSON, _ schema: JSON, path: [PathStep]) -> Problem? {
        switch schema {
        case .bool(true): return nil
        case .bool(false): return Problem(path: path, message: "is not allowed")
        case .object(let keywords): return problem(instance, keywords, path: path)
        default: return nil
        }
    }

    private func problem(_ instance: JSON, _ schema: [String: JSON], path: [PathStep]) -> Problem? {
        if let reference = schema["$ref"]?.stringValue {
            guard let target = resolve(reference) else { return Problem(path: path, message: "cannot be checked (unknown schema \(reference))") }
            if let problem = problem(instance, target, path: path) { return problem }
        }
        if let type = schema["type"], !Self.matches(instance, type: type) {
            let expected = (type.arrayValue ?? [type]).compactMap(\.stringValue)
            let article = expected.count == 1 ? (["integer", "array", "object"].contains(expected[0]) ? "an " : "a ") : ""
            return Problem(path: path, message: "must be \(article)\(expected.joined(separator: " or ")), not \(Self.describe(instance))")
        }
        if let constant = schema["const"], !Self.equal(instance, constant) {
            return Problem(path: path, message: "must be \(constant.serializedString())")
        }
        if let allowed = schema["enum"]?.arrayValue, !allowed.contains(where: { Self.equal(instance, $0) }) {
            return Problem(path: path, message: "must be one of \(allowed.map { $0.serializedString() }.joined(separator: ", "))")
        }
        if let number = instance.doubleValue {
            if let problem = rangeProblem(number, schema, path: path) { return problem }
        }
        if case .string(let text) = instance {
            let length = text.unicodeScalars.count
            if let minimum = schema["minLength"]?.intValue, length < minimum {
                return Problem(path: path, message: minimum == 1 ? "must not be empty" : "must be at least \(minimum) characters long")
            }
            if let maximum = schema["maxLength"]?.intValue, length > maximum {
                return Problem(path: path, message: "must be at most \(maximum) characters long")
            }
            if let pattern = schema["pattern"]?.stringValue, !PatternCache.shared.matches(text, pattern) {
                // The schema's description says it for people ("MAJOR.MINOR", e.g. "1.0").
                let described = schema["description"]?.stringValue.map { " (\($0.hasSuffix(".") ? String($0.dropLast()) : $0))" } ?? ""
                return Problem(path: path, message: "must match \(pattern)\(described)")
            }
        }
        if case .array(let elements) = instance {
            if let minimum = schema["minItems"]?.intValue, elements.count < minimum {
                return Problem(path: path, message: "must have at least \(minimum) elements")
            }
            if let maximum = schema["maxItems"]?.intValue, elements.count > maximum {
                return Problem(path: path, message: "must have at most \(maximum) elements")
            }
            if let items = schema["items"] {
                for (index, element) in elements.enumerated() {
                    if let problem = problem(element, items, path: path + [.index(index)]) { return problem }
                }
            }
        }
        if case .object(let members) = instance, let problem = objectProblem(members, schema, path: path) { return problem }
        for part in schema["allOf"]?.arrayValue ?? [] {
            if let problem = problem(instance, part, path: path) { return problem }
        }
        if let choices = schema["anyOf"]?.arrayValue {
            let problems = choices.map { problem(instance, $0, path: path) }
            if !problems.contains(where: { $0 == nil }) { return problems.first! }
        }
        if let choices = schema["oneOf"]?.arrayValue {
            let problems = choices.map { problem(instance, $0, path: path) }
            let passed = problems.filter { $0 == nil }.count
            if passed == 0 { return problems.first ?? Problem(path: path, message: "matches no allowed shape") }
            if passed > 1 { return Problem(path: path, message: "matches more than one allowed shape") }
        }
        if let excluded = schema["not"], problem(instance, excluded, path: path) == nil {
            return Problem(path: path, message: "is not allowed here")
        }
        if let condition = schema["if"] {
            let branch = problem(instance, condition, path: path) == nil ? schema["then"] : schema["else"]
            if let branch, let problem = problem(instance, branch, path: path) { return problem }
        }
        return nil
    }

    private func rangeProblem(_ number: Double, _ schema: [String: JSON], path: [PathStep]) -> Problem? {
        let minimum = schema["minimum"]?.doubleValue, maximum = schema["maximum"]?.doubleValue
        func bounds() -> String {
            switch (minimum, maximum) {
            case let (low?, high?): "must be between \(Self.text(low)) and \(Self.text(high))"
            case let (low?, nil): "must be at least \(Self.text(low))"
            case let (nil, high?): "must be at most \(Self.text(high))"
            default: "is out of range"
            }
        }
        if let minimum, number < minimum { return Problem(path: path, message: bounds()) }
        if let maximum, number > maximum { return Problem(path: path, message: bounds()) }
        if let low = schema["exclusiveMinimum"]?.doubleValue, number <= low {
            return Problem(path: path, message: "must be more than \(Self.text(low))")
        }
        if let high = schema["exclusiveMaximum"]?.doubleValue, number >= high {
            return Problem(path: path, message: "must be less than \(Self.text(high))")
        }
        return nil
    }

    private func objectProblem(_ members: [String: JSON], _ schema: [String: JSON], path: [PathStep]) -> Problem? {
        for name in schema["required"]?.arrayValue?.compactMap(\.stringValue) ?? [] where members[name] == nil {
            return Problem(path: path + [.member(name)], message: "is required")
        }
        let properties = schema["properties"]?.objectValue ?? [:]
        for name in members.keys.sorted() {
            let memberPath = path + [.member(name)]
            if let names = schema["propertyNames"], problem(.string(name), names, path: memberPath) != nil {
                return Problem(path: memberPath, message: "is not an allowed name")
            }
            if let property = properties[name] {
                if let problem = problem(members[name]!, property, path: memberPath) { return problem }
            } else if let additional = schema["additionalProperties"] {
                if additional == .bool(false) {
                    return Problem(path: memberPath, message: path.isEmpty ? "is not a parameter of this method" : "is not an allowed member")
                }
                if let problem = problem(members[name]!, additional, path: memberPath) { return problem }
            }
        }
        return nil
    }

    /// A local reference ("#/components/schemas/Name"): a JSON pointer into the
    /// document, resolved once at start (a check resolves several per request).
    func resolve(_ reference: String) -> JSON? {
        references[reference] ?? Self.resolve(reference, in: document)
    }

    /// Every `$ref` the document holds, resolved.
    static func references(in document: JSON) -> [String: JSON] {
        var found: [String: JSON] = [:]
        func walk(_ node: JSON) {
            switch node {
            case .object(let members):
                if let reference = members["$ref"]?.stringValue, found[reference] == nil {
                    found[reference] = resolve(reference, in: document)
                }
                for value in members.values { walk(value) }
            case .array(let items):
                for item in items { walk(item) }
            default:
                break
            }
        }
        walk(document)
        return found.compactMapValues { $0 }
    }

    static func resolve(_ reference: String, in document: JSON) -> JSON? {
        guard reference.hasPrefix("#") else { return nil }
        var node = document
        for token in reference.dropFirst().split(separator: "/", omittingEmptySubsequences: true) {
            let key = String(token).replacingEvery("~1", with: "/").replacingEvery("~0", with: "~")
            if let next = node[key] {
                node = next
            } else if let index = Int(key), let next = node[index] {
                node = next
            } else {
                return nil
            }
        }
        return node
    }

    static func matches(_ instance: JSON, type: JSON) -> Bool {
        if case .array(let types) = type { return types.contains { matches(instance, type: $0) } }
        switch (type.stringValue, instance) {
        case ("null", .null), ("boolean", .bool), ("string", .string), ("array", .array), ("object", .object): return true
        case ("integer", .int): return true
        case ("integer", .double(let value)): return value.isFinite && value.rounded() == value
        case ("number", .int): return true
        case ("number", .double(let value)): return value.isFinite
        default: return false
        }
    }

    /// JSON Schema equality: numbers by value (1 == 1.0), containers deeply.
    static func equal(_ left: JSON, _ right: JSON) -> Bool {
        switch (left, right) {
        case (.int(let a), .int(let b)): return a == b
        case (.int, .double), (.double, .int), (.double, .double): return left.doubleValue == right.doubleValue
        case (.array(let a), .array(let b)): return a.count == b.count && zip(a, b).allSatisfy { equal($0, $1) }
        case (.object(let a), .object(let b)):
            return a.count == b.count && a.allSatisfy { key, value in b[key].map { equal(value, $0) } ?? false }
        default: return left == right
        }
    }

    private static func describe(_ value: JSON) -> String {
        switch value {
        case .string(let text) where text.isEmpty: "an empty string"
        case .double(let number) where number.isFinite && number.rounded() != number: "a fraction"
        default: value.typeName
        }
    }

    private static func text(_ number: Double) -> String {
        number.rounded() == number && abs(number) < 1e15 ? String(Int64(number)) : String(number)
    }
}

/// Compiled `pattern`s (POSIX extended regular expressions), compiled once each.
final class PatternCache: Sendable {
    static let shared = PatternCache()

    private let compiled = Mutex<[String: CompiledPattern]>([:])

    /// Whether `text` matches `pattern` (unanchored unless the pattern says
    /// so, as in JSON Schema). A pattern that does not compile matches nothing.
    func matches(_ text: String, _ pattern: String) -> Bool {
        let regex = compiled.withLock { table -> CompiledPattern in
            if let found = table[pattern] { return found }
            let made = CompiledPattern(pattern)
            table[pattern] = made
            return made
        }
        return regex.matches(text)
    }

    /// Whether `pattern` compiles.
    func compiles(_ pattern: String) -> Bool { CompiledPattern(pattern).valid }
}

/// One `regex_t`. `regexec` may be called from several threads at once (POSIX).
final class CompiledPattern: @unchecked Sendable {
    private let regex = UnsafeMutablePointer<regex_t>.allocate(capacity: 1)
    let valid: Bool

    init(_ pattern: String) {
        valid = regcomp(regex, pattern, REG_EXTENDED | REG_NOSUB) == 0
    }

    deinit {
        if valid { regfree(regex) }
        regex.deallocate()
    }

    func matches(_ text: String) -> Bool {
        guard valid else { return false }
        var text = text
        return text.withUTF8 { utf8 in
            // REG_STARTEND: the bounds come from `range`, so a NUL inside the string counts.
            var range = regmatch_t(rm_so: 0, rm_eo: regoff_t(utf8.count))
            return utf8.withMemoryRebound(to: CChar.self) { chars in
                guard let base = chars.baseAddress else { return regexec(regex, "", 1, &range, REG_STARTEND) == 0 }
                return regexec(regex, base, 1, &range, REG_STARTEND) == 0
            }
        }
    }
}
