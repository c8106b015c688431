/// `application/x-www-form-urlencoded` (the HTML and WHATWG URL rule: `+` is a space) and
/// RFC 3986 percent-encoding.
public enum FormEncoding {
    /// Encodes pairs in the given order.
    public static func encode(_ pairs: [(String, String)]) -> String {
        pairs.map { "\(percentEncode($0.0))=\(percentEncode($0.1))" }.joined(separator: "&")
    }

    /// Encodes members sorted by key, for stable output.
    public static func encode(_ members: [String: String]) -> String {
        encode(members.sorted(by: { $0.key < $1.key }).map { ($0.key, $0.value) })
    }

    /// The pairs of a query, leniently: a broken escape stays as written.
    public static func decode(_ query: String) -> [(name: String, value: String)] {
        pairs(Substring(query)).map { (percentDecode($0.name), percentDecode($0.value)) }
    }

    /// The pairs of a query, or nil when any name or value holds a '%' not followed by two hex
    /// digits (RFC 3986 §2.1).
    public static func decodeStrictly(_ query: Substring) -> [(name: String, value: String)]? {
        var items: [(name: String, value: String)] = []
        for pair in pairs(query) {
            guard let name = decode(pair.name, strictly: true), let value = decode(pair.value, strictly: true) else { return nil }
            items.append((name, value))
        }
        return items
    }

    /// Percent-encodes everything but RFC 3986's unreserved characters.
    public static func percentEncode(_ text: String) -> String {
        let hex = Array("0123456789ABCDEF".utf8)
        var output: [UInt8] = []
        output.reserveCapacity(text.utf8.count)
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"),
                UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "."),
                UInt8(ascii: "_"), UInt8(ascii: "~"):
                output.append(byte)
            default:
                output += [UInt8(ascii: "%"), hex[Int(byte >> 4)], hex[Int(byte & 0xF)]]
            }
        }
        return String(decoding: output, as: UTF8.self)
    }

    /// Form-decodes `text` (`+` is a space); a broken escape stays as written.
    public static func percentDecode(_ text: Substring) -> String { decode(text, strictly: false)! }

    private static func pairs(_ query: Substring) -> [(name: Substring, value: Substring)] {
        query.split(separator: "&", omittingEmptySubsequences: true).map { pair in
            guard let equals = pair.firstIndex(of: "=") else { return (pair, "") }
            return (pair[..<equals], pair[pair.index(after: equals)...])
        }
    }

    private static func decode(_ text: Substring, strictly: Bool) -> String? {
        let input = Array(text.utf8)
        var bytes: [UInt8] = []
        bytes.reserveCapacity(input.count)
        var index = 0
        while index < input.count {
            let byte = input[index]
            if byte == UInt8(ascii: "%") {
                if index + 2 < input.count, let high = hexValue(input[index + 1]), let low = hexValue(input[index + 2]) {
                    bytes.append(high << 4 | low)
                    index += 3
                    continue
                }
                if strictly { return nil }
            }
            bytes.append(byte == UInt8(ascii: "+") ? 0x20 : byte)
            index += 1
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    private static func hexValue(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): byte - UInt8(ascii: "A") + 10
        default: nil
        }
    }
}
