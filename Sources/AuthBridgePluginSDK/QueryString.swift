/// Reads the query of a URL by parameter name (never by position), with
/// percent-decoding. For providers whose sign-in ends at a URL carrying
/// tokens (Duke) or codes.
public enum QueryString {
    /// The parameters of `url`'s query, in order; the fragment is ignored.
    public static func items(of url: String) -> [(name: String, value: String)] {
        var text = Substring(url)
        if let hash = text.firstIndex(of: "#") { text = text[..<hash] }
        guard let question = text.firstIndex(of: "?") else { return [] }
        return text[text.index(after: question)...].split(separator: "&").map { pair in
            guard let equals = pair.firstIndex(of: "=") else { return (decode(pair), "") }
            return (decode(pair[..<equals]), decode(pair[pair.index(after: equals)...]))
        }
    }

    /// The first value of parameter `name` in `url`'s query.
    public static func value(_ name: String, in url: String) -> String? {
        items(of: url).first(where: { $0.name == name })?.value
    }

    /// Percent-decoding (and `+` as a space, as forms write it). A `%` not followed by two hex
    /// digits is kept as it stands, with what follows it (as WHATWG URL decoding does).
    static func decode(_ text: Substring) -> String {
        let input = Array(text.utf8)
        var bytes: [UInt8] = []
        bytes.reserveCapacity(input.count)
        var index = 0
        while index < input.count {
            let byte = input[index]
            if byte == UInt8(ascii: "%"), index + 2 < input.count,
               let high = hexValue(input[index + 1]), let low = hexValue(input[index + 2]) {
                bytes.append(high << 4 | low)
                index += 3
            } else {
                bytes.append(byte == UInt8(ascii: "+") ? 0x20 : byte)
                index += 1
            }
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
