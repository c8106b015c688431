/// The fallback behind `JSON.parse` for valid JSON that jansson refuses
/// whole: numbers beyond its range, and (for `parse(_:truncatingBeyond:)`)
/// nesting beyond its depth limit.
///
/// It rewrites the text for a second jansson parse, touching only what
/// jansson cannot hold: a lexer that knows strings (and their escapes) from
/// the rest finds each number token; one outside `Int64` (for an integer) or
/// outside a double's range becomes a string sentinel `"\u0000<nonce>#<k>"`,
/// and after the parse `restore` turns each sentinel back into its number as
/// a `.double`. The nonce is random per parse, so no input can forge a
/// sentinel. Tokens that are not JSON numbers are left for jansson to refuse.
struct WideNumbers {
    /// The rewritten text.
    private(set) var text: [UInt8] = []
    private var values: [Double] = []
    private let marker: String

    /// Nil when no number needed rewriting.
    init?(_ bytes: UnsafeRawBufferPointer) {
        var generator = SystemRandomNumberGenerator()
        marker = "\u{0}" + String(generator.next() as UInt64, radix: 36) + String(generator.next() as UInt64, radix: 36) + "#"
        text.reserveCapacity(bytes.count + 64)
        var index = 0
        var copied = 0
        while index < bytes.count {
            let byte = bytes[index]
            if byte == UInt8(ascii: "\"") {
                index = Self.endOfString(bytes, from: index)
            } else if byte == UInt8(ascii: "-") || (byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9")) {
                var end = index
                while end < bytes.count, Self.isNumberByte(bytes[end]) { end += 1 }
                let token = UnsafeRawBufferPointer(rebasing: bytes[index..<end])
                if let wide = Self.outOfRange(token) {
                    text.append(contentsOf: UnsafeRawBufferPointer(rebasing: bytes[copied..<index]))
                    text.append(contentsOf: Array("\"\\u0000\(marker.dropFirst())\(values.count)\"".utf8))
                    values.append(wide)
                    copied = end
                }
                index = end
            } else {
                index += 1
            }
        }
        guard !values.isEmpty else { return nil }
        text.append(contentsOf: UnsafeRawBufferPointer(rebasing: bytes[copied...]))
    }

    /// `value` with every sentinel string replaced by its number.
    func restore(_ value: JSON) -> JSON {
        switch value {
        case .string(let string) where string.hasPrefix(marker):
            guard let index = Int(string.dropFirst(marker.count)), values.indices.contains(index) else { return value }
            return .double(values[index])
        case .array(let elements): return .array(elements.map(restore))
        case .object(let members): return .object(members.mapValues(restore))
        default: return value
        }
    }

    /// The number a JSON number token stands for, when jansson cannot hold it;
    /// nil for numbers it can hold and for tokens that are not JSON numbers.
    static func outOfRange(_ token: UnsafeRawBufferPointer) -> Double? {
        guard isJSONNumber(token) else { return nil }
        let text = String(decoding: token, as: UTF8.self)
        let isInteger = !token.contains(where: { $0 == UInt8(ascii: ".") || $0 == UInt8(ascii: "e") || $0 == UInt8(ascii: "E") })
        if isInteger {
            return Int64(text) == nil ? Double(text) : nil
        }
        guard let value = Double(text), value.isInfinite else { return nil }
        return value
    }

    /// RFC 8259 §6: `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`
    static func isJSONNumber(_ token: UnsafeRawBufferPointer) -> Bool {
        var index = 0
        func digits() -> Int {
            let start = index
            while index < token.count, token[index] >= UInt8(ascii: "0"), token[index] <= UInt8(ascii: "9") { index += 1 }
            return index - start
        }
        if index < token.count, token[index] == UInt8(ascii: "-") { index += 1 }
        guard index < token.count else { return false }
        if token[index] == UInt8(ascii: "0") {
            index += 1
        } else if digits() == 0 {
            return false
        }
        if index < token.count, token[index] == UInt8(ascii: ".") {
            index += 1
            guard digits() > 0 else { return false }
        }
        if index < token.count, token[index] == UInt8(ascii: "e") || token[index] == UInt8(ascii: "E") {
            index += 1
            if index < token.count, token[index] == UInt8(ascii: "+") || token[index] == UInt8(ascii: "-") { index += 1 }
            guard digits() > 0 else { return false }
        }
        return index == token.count
    }

    private static func isNumberByte(_ byte: UInt8) -> Bool {
        (byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9")) || byte == UInt8(ascii: "-") || byte == UInt8(ascii: "+")
            || byte == UInt8(ascii: ".") || byte == UInt8(ascii: "e") || byte == UInt8(ascii: "E")
    }

    /// The index just past the string that starts (with its quote) at `start`.
    static func endOfString(_ bytes: UnsafeRawBufferPointer, from start: Int) -> Int {
        var index = start + 1
        while index < bytes.count {
            switch bytes[index] {
            case UInt8(ascii: "\\"): index += 2
            case UInt8(ascii: "\""): return index + 1
            default: index += 1
            }
        }
        return bytes.count
    }

    /// The text with every array or object opened deeper than `depth` levels
    /// replaced by `null` (skipped to its closing bracket, strings respected).
    static func truncating(_ bytes: UnsafeRawBufferPointer, beyond depth: Int) -> (text: [UInt8], truncated: Bool) {
        var text: [UInt8] = []
        text.reserveCapacity(min(bytes.count, 1 << 20))
        var level = 0
        var truncated = false
        var index = 0
        var copied = 0
        while index < bytes.count {
            switch bytes[index] {
            case UInt8(ascii: "\""):
                index = endOfString(bytes, from: index)
            case UInt8(ascii: "["), UInt8(ascii: "{"):
                level += 1
                guard level > depth else {
                    index += 1
                    break
                }
                // Skip this container whole.
                text.append(contentsOf: UnsafeRawBufferPointer(rebasing: bytes[copied..<index]))
                text.append(contentsOf: Array("null".utf8))
                var inner = 1
                index += 1
                while index < bytes.count, inner > 0 {
                    switch bytes[index] {
                    case UInt8(ascii: "\""):
                        index = endOfString(bytes, from: index)
                        continue
                    case UInt8(ascii: "["), UInt8(ascii: "{"): inner += 1
                    case UInt8(ascii: "]"), UInt8(ascii: "}"): inner -= 1
                    default: break
                    }
                    index += 1
                }
                level -= 1
                copied = index
                truncated = true
            case UInt8(ascii: "]"), UInt8(ascii: "}"):
                level -= 1
                index += 1
            default:
                index += 1
            }
        }
        text.append(contentsOf: UnsafeRawBufferPointer(rebasing: bytes[min(copied, bytes.count)...]))
        return (text, truncated)
    }
}
