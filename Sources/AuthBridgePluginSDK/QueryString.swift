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

    static func decode(_ text: Substring) -> String {
        var bytes: [UInt8] = []
        var iterator = text.utf8.makeIterator()
        while let byte = iterator.next() {
            guard byte == UInt8(ascii: "%") else { bytes.append(byte == UInt8(ascii: "+") ? 0x20 : byte); continue }
            guard let high = iterator.next(), let low = iterator.next(),
                  let value = UInt8(String(decoding: [high, low], as: UTF8.self), radix: 16)
            else { bytes.append(byte); continue }
            bytes.append(value)
        }
        return String(decoding: bytes, as: UTF8.self)
    }
}
