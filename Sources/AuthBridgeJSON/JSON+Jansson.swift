import CJansson

/// Why a text is not JSON, with jansson's position information.
public struct JSONParseError: Error, Sendable, CustomStringConvertible {
    /// jansson's message, e.g. "invalid token near 'x'". Never contains more
    /// than a few characters of the input.
    public var message: String
    public var line: Int
    public var column: Int
    /// True when the text is valid JSON nested deeper than jansson's limit (2048 levels).
    public var isTooDeep: Bool = false

    public init(message: String, line: Int, column: Int, isTooDeep: Bool = false) {
        self.message = message
        self.line = line
        self.column = column
        self.isTooDeep = isTooDeep
    }

    public var description: String { "\(message) (line \(line), column \(column))" }
}

extension JSON {
    /// How deep arrays and objects may nest (jansson's JSON_PARSER_MAX_DEPTH).
    public static let maximumDepth = 2048

    /// Parses one JSON value (any type at top level) from UTF-8 bytes.
    ///
    /// Invalid UTF-8, duplicate object keys, trailing garbage and nesting
    /// deeper than jansson's limit (2048) are errors. `\u0000` in strings is allowed.
    ///
    /// Numbers are never a reason to refuse valid JSON (RFC 8259 §6 sets no
    /// range): integers become `.int`, other numbers `.double`; an integer
    /// beyond 64 bits becomes the nearest `.double` (RFC 8259 §6 allows that
    /// approximation) and a number beyond a double's range `.double(±.infinity)`,
    /// so that a reader can refuse that one value (naming it) rather than the
    /// whole text. jansson refuses the whole text instead
    /// (`json_error_numeric_overflow`), so on that error, and only then, the
    /// text is parsed again with each such number token swapped for a string
    /// sentinel carrying a random per-parse nonce (`WideNumbers`), and the
    /// sentinels are turned back into those doubles. The common path costs
    /// nothing extra, and jansson still does all the parsing and checking.
    public static func parse(_ bytes: UnsafeRawBufferPointer) throws(JSONParseError) -> JSON {
        switch parseWithJansson(bytes) {
        case .success(let value): return value
        case .failure(let failure):
            guard failure.code == json_error_numeric_overflow else { throw failure.error }
            guard let rewritten = WideNumbers(bytes) else { throw failure.error }
            let reparsed = rewritten.text.withUnsafeBytes { parseWithJansson($0) }
            switch reparsed {
            case .success(let value): return rewritten.restore(value)
            case .failure(let again): throw again.error
            }
        }
    }

    /// Parses like `parse`, except that every array or object nested deeper
    /// than `depth` levels is read as `null`, and `truncated` says whether any
    /// was. For reading a message's envelope (its id) when the whole is too
    /// deep for jansson. The replaced parts are skipped, not checked.
    public static func parse(_ bytes: UnsafeRawBufferPointer, truncatingBeyond depth: Int) throws(JSONParseError) -> (value: JSON, truncated: Bool) {
        let (text, truncated) = WideNumbers.truncating(bytes, beyond: max(1, depth))
        let value = try text.withUnsafeBytes { buffer in
            Result { () throws(JSONParseError) in try parse(buffer) }
        }.get()
        return (value, truncated)
    }

    private struct JanssonFailure: Error {
        var error: JSONParseError
        var code: json_error_code
    }

    private static func parseWithJansson(_ bytes: UnsafeRawBufferPointer) -> Result<JSON, JanssonFailure> {
        var error = json_error_t()
        let flags = JSON_DECODE_ANY | JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL
        guard let base = bytes.baseAddress?.assumingMemoryBound(to: CChar.self),
            let root = json_loadb(base, bytes.count, Int(flags), &error)
        else {
            if bytes.isEmpty {
                return .failure(
                    JanssonFailure(error: JSONParseError(message: "empty input", line: 1, column: 0), code: json_error_premature_end_of_input))
            }
            let message = withUnsafeBytes(of: &error.text) { raw in
                String(decoding: raw.prefix(while: { $0 != 0 }), as: UTF8.self)
            }
            // json_error_code() is an inline function Swift cannot import: the code is the text's last byte.
            let code = withUnsafeBytes(of: &error.text) { raw in json_error_code(rawValue: UInt32(raw[raw.count - 1])) }
            return .failure(
                JanssonFailure(
                    error: JSONParseError(
                        message: message, line: Int(error.line), column: Int(error.column),
                        isTooDeep: code == json_error_stack_overflow),
                    code: code))
        }
        defer { cjansson_decref(root) }
        return .success(JSON(borrowing: root))
    }

    /// Parses one JSON value from UTF-8 bytes.
    public static func parse(_ bytes: some Collection<UInt8>) throws(JSONParseError) -> JSON {
        let result: Result<JSON, JSONParseError>? = bytes.withContiguousStorageIfAvailable { buffer in
            Result { () throws(JSONParseError) in try parse(UnsafeRawBufferPointer(buffer)) }
        }
        if let result { return try result.get() }
        let copy = Array(bytes)
        return try copy.withUnsafeBytes { buffer in
            Result { () throws(JSONParseError) in try parse(buffer) }
        }.get()
    }

    /// Parses one JSON value from a string.
    public static func parse(_ text: String) throws(JSONParseError) -> JSON {
        var text = text
        return try text.withUTF8 { buffer in
            Result { () throws(JSONParseError) in try parse(UnsafeRawBufferPointer(buffer)) }
        }.get()
    }

    /// Converts a jansson value without taking ownership of it.
    init(borrowing value: UnsafeMutablePointer<json_t>) {
        switch json_type(rawValue: UInt32(cjansson_typeof(value))) {
        case JSON_OBJECT:
            var members: [String: JSON] = [:]
            members.reserveCapacity(json_object_size(value))
            var iterator = json_object_iter(value)
            while let current = iterator {
                let keyLength = json_object_iter_key_len(current)
                let key = json_object_iter_key(current)!.withMemoryRebound(to: UInt8.self, capacity: keyLength) {
                    String(decoding: UnsafeBufferPointer(start: $0, count: keyLength), as: UTF8.self)
                }
                members[key] = JSON(borrowing: json_object_iter_value(current))
                iterator = json_object_iter_next(value, current)
            }
            self = .object(members)
        case JSON_ARRAY:
            let count = json_array_size(value)
            var elements: [JSON] = []
            elements.reserveCapacity(count)
            for index in 0..<count { elements.append(JSON(borrowing: json_array_get(value, index))) }
            self = .array(elements)
        case JSON_STRING:
            let length = json_string_length(value)
            let text = json_string_value(value)!.withMemoryRebound(to: UInt8.self, capacity: length) {
                String(decoding: UnsafeBufferPointer(start: $0, count: length), as: UTF8.self)
            }
            self = .string(text)
        case JSON_INTEGER: self = .int(Int64(json_integer_value(value)))
        case JSON_REAL: self = .double(json_real_value(value))
        case JSON_TRUE: self = .bool(true)
        case JSON_FALSE: self = .bool(false)
        default: self = .null
        }
    }

    /// A new jansson value (reference count 1) equal to this value.
    func makeJansson() -> UnsafeMutablePointer<json_t> {
        switch self {
        case .null: return json_null()
        case .bool(let value): return value ? json_true() : json_false()
        case .int(let value): return json_integer(json_int_t(value))
        case .double(let value): return json_real(value) ?? json_null() // NaN and infinities: null
        case .string(var text):
            return text.withUTF8 { utf8 in
                utf8.withMemoryRebound(to: CChar.self) { json_stringn_nocheck($0.baseAddress ?? emptyCString, $0.count) }
            }
        case .array(let elements):
            let array = json_array()!
            for element in elements { json_array_append_new(array, element.makeJansson()) }
            return array
        case .object(let members):
            let object = json_object()!
            for (key, member) in members {
                var key = key
                key.withUTF8 { utf8 in
                    utf8.withMemoryRebound(to: CChar.self) {
                        _ = json_object_setn_new_nocheck(object, $0.baseAddress ?? emptyCString, $0.count, member.makeJansson())
                    }
                }
            }
            return object
        }
    }

    /// Compact UTF-8 JSON text, appended to `buffer`. Never contains a raw
    /// newline (control characters in strings are escaped), so it is a valid
    /// line-delimited frame.
    public func serialize(into buffer: inout [UInt8], sortKeys: Bool = false) {
        let root = makeJansson()
        defer { cjansson_decref(root) }
        Self.dump(root, into: &buffer, sortKeys: sortKeys)
    }

    /// Compact UTF-8 JSON text.
    public func serialized(sortKeys: Bool = false) -> [UInt8] {
        var buffer: [UInt8] = []
        serialize(into: &buffer, sortKeys: sortKeys)
        return buffer
    }

    /// Compact JSON text as a string.
    public func serializedString(sortKeys: Bool = false) -> String {
        String(decoding: serialized(sortKeys: sortKeys), as: UTF8.self)
    }

    /// Indented JSON text for humans (sorted keys, two spaces).
    public func prettyPrinted() -> String {
        let root = makeJansson()
        defer { cjansson_decref(root) }
        guard let text = json_dumps(root, Int(JSON_ENCODE_ANY | JSON_SORT_KEYS) | 2) else { return "null" }
        defer { free(text) }
        return String(cString: text)
    }

    static func dump(_ root: UnsafeMutablePointer<json_t>, into buffer: inout [UInt8], sortKeys: Bool) {
        var flags = Int(JSON_COMPACT | JSON_ENCODE_ANY)
        if sortKeys { flags |= Int(JSON_SORT_KEYS) }
        withUnsafeMutablePointer(to: &buffer) { pointer in
            _ = json_dump_callback(
                root,
                { chunk, size, context in
                    guard let chunk, let context else { return -1 }
                    let target = context.assumingMemoryBound(to: [UInt8].self)
                    chunk.withMemoryRebound(to: UInt8.self, capacity: size) {
                        target.pointee.append(contentsOf: UnsafeBufferPointer(start: $0, count: size))
                    }
                    return 0
                }, pointer, flags)
        }
    }
}

/// A valid pointer for zero-length strings (an empty buffer may have no base address).
nonisolated(unsafe) private let emptyCString: UnsafePointer<CChar> = {
    let pointer = UnsafeMutablePointer<CChar>.allocate(capacity: 1)
    pointer.initialize(to: 0)
    return UnsafePointer(pointer)
}()

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
