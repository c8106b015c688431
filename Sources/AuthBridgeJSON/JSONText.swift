/// Reading one value out of a JSON text, exactly as it is written.
///
/// `JSON.parse` reads every number with a fraction or an exponent as the
/// nearest double (RFC 8259 §6 allows it), and a double cannot tell `1e-999`
/// (a fraction, too small for a double: read as 0) or `1.0000000000000000001`
/// (read as 1) from an integer. Where another number must never pass for the
/// one written — a request id, answered as the very number it came as — the
/// value is read again from its text.
public enum JSONText {
    /// Where the value at `path` (member names, from the top-level object
    /// down) lies in `text`, a JSON text that parsed; nil when it is absent,
    /// or a step is not an object. Keys written with escapes (`"\u0069d"`)
    /// are matched by what they spell.
    public static func span(of path: [String], in text: UnsafeRawBufferPointer) -> Range<Int>? {
        var index = skipSpace(text, from: 0)
        for name in path {
            guard index < text.count, text[index] == UInt8(ascii: "{") else { return nil }
            index = skipSpace(text, from: index + 1)
            var found = false
            while !found {
                guard index < text.count, text[index] == UInt8(ascii: "\"") else { return nil }
                let keyEnd = WideNumbers.endOfString(text, from: index)
                found = key(UnsafeRawBufferPointer(rebasing: text[index..<keyEnd]), is: name)
                index = skipSpace(text, from: keyEnd)
                guard index < text.count, text[index] == UInt8(ascii: ":") else { return nil }
                index = skipSpace(text, from: index + 1)
                if found { break }
                index = skipSpace(text, from: endOfValue(text, from: index))
                guard index < text.count, text[index] == UInt8(ascii: ",") else { return nil }
                index = skipSpace(text, from: index + 1)
            }
        }
        guard index < text.count else { return nil }
        return index..<endOfValue(text, from: index)
    }

    /// The integer a JSON number token denotes exactly: `7`, `7.0`, `1e3`,
    /// `3.14e2` (314), `-0.0` (0). Nil when it denotes a fraction, however
    /// small (`1.5`, `1e-999`, `1.0000000000000000001`), an integer outside
    /// `Int64`, or is not a JSON number (RFC 8259 §6).
    public static func exactInteger(_ token: UnsafeRawBufferPointer) -> Int64? {
        guard WideNumbers.isJSONNumber(token) else { return nil }
        let isDigit = { (byte: UInt8) in byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9") }
        var index = 0
        let negative = token[0] == UInt8(ascii: "-")
        if negative { index += 1 }
        // The digits before and after the point, as one significand, and how many follow the point.
        var digits: [UInt8] = []
        var fractionDigits = 0
        while index < token.count, isDigit(token[index]) {
            digits.append(token[index] - UInt8(ascii: "0"))
            index += 1
        }
        if index < token.count, token[index] == UInt8(ascii: ".") {
            index += 1
            while index < token.count, isDigit(token[index]) {
                digits.append(token[index] - UInt8(ascii: "0"))
                fractionDigits += 1
                index += 1
            }
        }
        // The exponent, saturated: past ±10^6 only its sign matters (no Int64 has 10^6 digits).
        var exponent = 0
        if index < token.count {
            index += 1 // e or E
            var exponentNegative = false
            if token[index] == UInt8(ascii: "+") || token[index] == UInt8(ascii: "-") {
                exponentNegative = token[index] == UInt8(ascii: "-")
                index += 1
            }
            while index < token.count {
                exponent = min(exponent * 10 + Int(token[index] - UInt8(ascii: "0")), 1_000_000)
                index += 1
            }
            if exponentNegative { exponent = -exponent }
        }
        // significand × 10^scale, with the significand's leading and trailing zeros taken off.
        guard let first = digits.firstIndex(where: { $0 != 0 }) else { return 0 }
        let last = digits.lastIndex(where: { $0 != 0 })!
        let significand = digits[first...last]
        let scale = exponent - fractionDigits + (digits.count - 1 - last)
        // A fraction; or more than 19 digits, beyond Int64.
        guard scale >= 0, significand.count + scale <= 19 else { return nil }
        var magnitude: UInt64 = 0
        for digit in significand { magnitude = magnitude * 10 + UInt64(digit) }
        for _ in 0..<scale {
            let (product, overflow) = magnitude.multipliedReportingOverflow(by: 10)
            guard !overflow else { return nil }
            magnitude = product
        }
        if negative {
            guard magnitude <= UInt64(Int64.max) + 1 else { return nil }
            return magnitude == UInt64(Int64.max) + 1 ? .min : -Int64(magnitude)
        }
        return magnitude <= UInt64(Int64.max) ? Int64(magnitude) : nil
    }

    /// Whether a key's string token spells `name`.
    private static func key(_ token: UnsafeRawBufferPointer, is name: String) -> Bool {
        guard token.count >= 2 else { return false }
        if !token.contains(UInt8(ascii: "\\")) { return token[1..<(token.count - 1)].elementsEqual(name.utf8) }
        return (try? JSON.parse(token))?.stringValue == name
    }

    /// The index just past the value that starts at `start`: a string, an
    /// array or object (strings in it skipped whole), or a scalar token.
    private static func endOfValue(_ text: UnsafeRawBufferPointer, from start: Int) -> Int {
        guard start < text.count else { return start }
        switch text[start] {
        case UInt8(ascii: "\""):
            return WideNumbers.endOfString(text, from: start)
        case UInt8(ascii: "{"), UInt8(ascii: "["):
            var depth = 0
            var index = start
            while index < text.count {
                switch text[index] {
                case UInt8(ascii: "\""):
                    index = WideNumbers.endOfString(text, from: index)
                    continue
                case UInt8(ascii: "{"), UInt8(ascii: "["): depth += 1
                case UInt8(ascii: "}"), UInt8(ascii: "]"):
                    depth -= 1
                    if depth == 0 { return index + 1 }
                default: break
                }
                index += 1
            }
            return index
        default:
            var index = start
            while index < text.count, !isSpace(text[index]), ![UInt8(ascii: ","), UInt8(ascii: "}"), UInt8(ascii: "]")].contains(text[index]) {
                index += 1
            }
            return index
        }
    }

    private static func skipSpace(_ text: UnsafeRawBufferPointer, from start: Int) -> Int {
        var index = start
        while index < text.count, isSpace(text[index]) { index += 1 }
        return index
    }

    private static func isSpace(_ byte: UInt8) -> Bool {
        byte == 0x20 || byte == 0x09 || byte == 0x0A || byte == 0x0D
    }
}
