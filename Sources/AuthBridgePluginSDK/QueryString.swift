/// Reads the query of a callback URL by parameter name (never by position),
/// with percent-decoding. For providers whose sign-in ends at a URL carrying
/// tokens (Duke) or codes.
///
/// A query with a malformed escape (`ab%ZZcd`, `abc%4`) is refused, not
/// guessed at: keeping the `%` would store a value the provider never sent.
public enum QueryString {
    /// The parameters of `url`'s query, in order; the fragment is ignored.
    /// Throws a definitive `invalidCallback` failure (nothing is stored) when
    /// any name or value holds a `%` not followed by two hex digits.
    public static func items(of url: String) throws(PluginFailure) -> [(name: String, value: String)] {
        var text = Substring(url)
        if let hash = text.firstIndex(of: "#") { text = text[..<hash] }
        guard let question = text.firstIndex(of: "?") else { return [] }
        var items: [(name: String, value: String)] = []
        for pair in text[text.index(after: question)...].split(separator: "&") {
            let name: String?, value: String?
            if let equals = pair.firstIndex(of: "=") {
                (name, value) = (decode(pair[..<equals]), decode(pair[pair.index(after: equals)...]))
            } else {
                (name, value) = (decode(pair), "")
            }
            guard let name, let value else { throw malformed }
            items.append((name, value))
        }
        return items
    }

    /// The first value of parameter `name` in `url`'s query (see `items(of:)`).
    public static func value(_ name: String, in url: String) throws(PluginFailure) -> String? {
        try items(of: url).first(where: { $0.name == name })?.value
    }

    /// The failure for a query that is not well formed: a definitive refusal
    /// of the callback (`-32004` `invalidCallback`), naming no value.
    public static let malformed = PluginFailure.definitive(
        "invalidCallback",
        "The sign-in ended at a callback URL that is not well formed (a '%' not followed by two hex digits); nothing was stored. Sign in again.")

    /// Percent-decoding (and `+` as a space, as forms write it); nil when a
    /// `%` is not followed by two hex digits (RFC 3986 §2.1).
    static func decode(_ text: Substring) -> String? {
        let input = Array(text.utf8)
        var bytes: [UInt8] = []
        bytes.reserveCapacity(input.count)
        var index = 0
        while index < input.count {
            let byte = input[index]
            if byte == UInt8(ascii: "%") {
                guard index + 2 < input.count, let high = hexValue(input[index + 1]), let low = hexValue(input[index + 2]) else {
                    return nil
                }
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
