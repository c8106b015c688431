/// Base64 (RFC 4648 §4, padded) and base64url (§5, unpadded): PKCE and state values, JWS
/// segments, and the encoded forms of a secret that logs must not show.
public enum Base64 {
    private static let standard = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".utf8)
    private static let url = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)

    /// RFC 4648 §4, with `=` padding.
    public static func encode(_ bytes: some Sequence<UInt8>) -> String { encode(Array(bytes), alphabet: standard, padded: true) }

    private static func encode(_ input: [UInt8], alphabet: [UInt8], padded: Bool) -> String {
        var output: [UInt8] = []
        output.reserveCapacity((input.count + 2) / 3 * 4)
        var index = 0
        while index < input.count {
            let chunk = input[index..<min(index + 3, input.count)]
            let value = chunk.enumerated().reduce(UInt32(0)) { $0 | UInt32($1.element) << (16 - 8 * UInt32($1.offset)) }
            for position in 0...chunk.count { output.append(alphabet[Int(value >> (18 - 6 * UInt32(position)) & 63)]) }
            if padded { output += Array(repeating: UInt8(ascii: "="), count: 3 - chunk.count) }
            index += 3
        }
        return String(decoding: output, as: UTF8.self)
    }

    /// RFC 4648 §4, padded: the bytes, or nil for a character outside the alphabet, a length
    /// that is not a multiple of 4, or padding anywhere but at the end.
    public static func decode(_ text: some StringProtocol) -> [UInt8]? {
        let characters = Array(text.utf8)
        guard characters.count % 4 == 0 else { return nil }
        let padding = characters.reversed().prefix(while: { $0 == UInt8(ascii: "=") }).count
        guard padding <= 2 else { return nil }
        let body = characters.dropLast(padding).map { $0 == UInt8(ascii: "+") ? UInt8(ascii: "-") : $0 == UInt8(ascii: "/") ? UInt8(ascii: "_") : $0 }
        // The URL alphabet's decoder, once + and / are its - and _ (which the standard alphabet lacks).
        guard !characters.contains(UInt8(ascii: "-")), !characters.contains(UInt8(ascii: "_")) else { return nil }
        return Base64URL.decode(body)
    }

    fileprivate static func encodeURL(_ bytes: [UInt8]) -> String { encode(bytes, alphabet: url, padded: false) }
}

/// Base64url without padding (RFC 4648 §5), as PKCE (RFC 7636) and JWS compact serialisation use it.
public enum Base64URL {
    public static func encode(_ bytes: some Sequence<UInt8>) -> String { Base64.encodeURL(Array(bytes)) }

    /// The decoded bytes, or nil for a character outside the url alphabet, padding, or an
    /// impossible length.
    public static func decode(_ text: some Collection<UInt8>) -> [UInt8]? {
        guard text.count % 4 != 1 else { return nil }
        var output: [UInt8] = []
        output.reserveCapacity(text.count * 3 / 4)
        var accumulator: UInt32 = 0
        var bits = 0
        for character in text {
            guard let value = sextet(character) else { return nil }
            accumulator = (accumulator << 6) | UInt32(value)
            bits += 6
            if bits >= 8 {
                bits -= 8
                output.append(UInt8(truncatingIfNeeded: accumulator >> UInt32(bits)))
            }
        }
        return output
    }

    private static func sextet(_ character: UInt8) -> UInt8? {
        switch character {
        case UInt8(ascii: "A")...UInt8(ascii: "Z"): character - UInt8(ascii: "A")
        case UInt8(ascii: "a")...UInt8(ascii: "z"): character - UInt8(ascii: "a") + 26
        case UInt8(ascii: "0")...UInt8(ascii: "9"): character - UInt8(ascii: "0") + 52
        case UInt8(ascii: "-"): 62
        case UInt8(ascii: "_"): 63
        default: nil
        }
    }
}
