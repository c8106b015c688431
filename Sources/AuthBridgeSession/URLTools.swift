/// The URL pieces AuthBridge needs — without Foundation, which would cost
/// start-up time. Handles absolute `scheme://authority/path?query#fragment`
/// URLs only.
/// A redirect a sign-in comes back on: any absolute URI with a scheme —
/// `https://app.example/cb`, a loopback `http://127.0.0.1:port/callback`, or
/// a private-use scheme without a host (`com.example.app:/oauth2redirect`,
/// RFC 8252 §7.1) — whose query is read by name.
public struct CallbackURL: Sendable {
    public let queryItems: [(name: String, value: String)]

    public init?(_ text: String) {
        guard let colon = text.firstIndex(of: ":"), colon != text.startIndex,
              text[..<colon].allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || "+-.".contains($0)) }),
              text.first!.isLetter else { return nil }
        var rest = text[text.index(after: colon)...]
        if let hash = rest.firstIndex(of: "#") { rest = rest[..<hash] }
        guard let question = rest.firstIndex(of: "?") else {
            queryItems = []
            return
        }
        queryItems = FormEncoding.decode(String(rest[rest.index(after: question)...]))
    }

    public func queryValue(_ name: String) -> String? { queryItems.first(where: { $0.name == name })?.value }
}

public struct ParsedURL: Sendable, Equatable {
    public var scheme: String
    /// Host without brackets ("::1" for "[::1]"), lower-cased.
    public var host: String
    public var port: Int?
    public var path: String
    public var query: String?

    public init?(_ text: String) {
        guard let colon = text.firstIndex(of: ":") else { return nil }
        let scheme = text[..<colon].lowercased()
        guard !scheme.isEmpty, scheme.allSatisfy({ $0.isLetter || $0.isNumber || "+-.".contains($0) }) else { return nil }
        var rest = text[text.index(after: colon)...]
        guard rest.hasPrefix("//") else { return nil }
        rest = rest.dropFirst(2)
        if let hash = rest.firstIndex(of: "#") { rest = rest[..<hash] }
        let authorityEnd = rest.firstIndex(where: { $0 == "/" || $0 == "?" }) ?? rest.endIndex
        var authority = rest[..<authorityEnd]
        let afterAuthority = rest[authorityEnd...]
        if let at = authority.lastIndex(of: "@") { authority = authority[authority.index(after: at)...] }
        var host: Substring
        var port: Int?
        if authority.hasPrefix("[") {
            guard let close = authority.firstIndex(of: "]") else { return nil }
            host = authority[authority.index(after: authority.startIndex)..<close]
            let tail = authority[authority.index(after: close)...]
            if tail.hasPrefix(":") { guard let value = Int(tail.dropFirst()), (0...65535).contains(value) else { return nil }; port = value }
            else if !tail.isEmpty { return nil }
        } else if let portColon = authority.lastIndex(of: ":") {
            host = authority[..<portColon]
            let portText = authority[authority.index(after: portColon)...]
            if !portText.isEmpty {
                guard let value = Int(portText), (0...65535).contains(value) else { return nil }
                port = value
            }
        } else {
            host = authority
        }
        guard !host.isEmpty else { return nil }
        self.scheme = scheme
        self.host = host.lowercased()
        self.port = port
        if let question = afterAuthority.firstIndex(of: "?") {
            path = String(afterAuthority[..<question])
            query = String(afterAuthority[afterAuthority.index(after: question)...])
        } else {
            path = String(afterAuthority)
            query = nil
        }
        if path.isEmpty { path = "/" }
    }

    /// The query's parameters in order, percent-decoded (`+` is a space).
    public var queryItems: [(name: String, value: String)] { FormEncoding.decode(query ?? "") }

    /// The first value of the query parameter `name`.
    public func queryValue(_ name: String) -> String? { queryItems.first(where: { $0.name == name })?.value }

    /// True for IP-literal loopback hosts: 127.0.0.0/8 and ::1. "localhost"
    /// is deliberately not loopback (RFC 8252 §8.3: it may resolve elsewhere).
    public var isLoopbackIPLiteral: Bool {
        if host == "::1" || host == "0:0:0:0:0:0:0:1" { return true }
        let octets = host.split(separator: ".", omittingEmptySubsequences: false)
        guard octets.count == 4, octets.allSatisfy({ UInt8($0) != nil }) else { return false }
        return octets[0] == "127"
    }

    /// https anywhere, http only on a loopback IP literal.
    public var isSecureTransport: Bool { scheme == "https" || (scheme == "http" && isLoopbackIPLiteral) }

    /// scheme://host[:port] — the origin, with IPv6 hosts bracketed.
    public var origin: String {
        let hostPart = host.contains(":") ? "[\(host)]" : host
        return "\(scheme)://\(hostPart)" + (port.map { ":\($0)" } ?? "")
    }
}

/// `application/x-www-form-urlencoded` and RFC 3986 percent-encoding.
public enum FormEncoding {
    /// Encodes pairs in the given order.
    public static func encode(_ pairs: [(String, String)]) -> String {
        pairs.map { "\(percentEncode($0.0))=\(percentEncode($0.1))" }.joined(separator: "&")
    }

    /// Encodes an object's string/number/bool members, sorted by key for stable output.
    public static func encode(_ members: [String: String]) -> String {
        encode(members.sorted(by: { $0.key < $1.key }).map { ($0.key, $0.value) })
    }

    public static func decode(_ query: String) -> [(name: String, value: String)] {
        query.split(separator: "&", omittingEmptySubsequences: true).map { pair in
            if let equals = pair.firstIndex(of: "=") {
                return (percentDecode(pair[..<equals]), percentDecode(pair[pair.index(after: equals)...]))
            }
            return (percentDecode(pair), "")
        }
    }

    /// Percent-encodes everything but RFC 3986's unreserved characters.
    public static func percentEncode(_ text: String) -> String {
        var output = ""
        output.reserveCapacity(text.utf8.count)
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"),
                 UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "."),
                 UInt8(ascii: "_"), UInt8(ascii: "~"):
                output.unicodeScalars.append(Unicode.Scalar(byte))
            default:
                let hex = Array("0123456789ABCDEF".utf8)
                output.unicodeScalars.append("%")
                output.unicodeScalars.append(Unicode.Scalar(hex[Int(byte >> 4)]))
                output.unicodeScalars.append(Unicode.Scalar(hex[Int(byte & 0xF)]))
            }
        }
        return output
    }

    public static func percentDecode(_ text: Substring) -> String {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(text.utf8.count)
        var iterator = text.utf8.makeIterator()
        while let byte = iterator.next() {
            if byte == UInt8(ascii: "+") { bytes.append(0x20); continue }
            guard byte == UInt8(ascii: "%") else { bytes.append(byte); continue }
            // Exactly two hex digits; anything else stays as written.
            var lookahead = iterator
            guard let high = lookahead.next(), let low = lookahead.next(),
                  let highValue = hexValue(high), let lowValue = hexValue(low)
            else { bytes.append(byte); continue }
            iterator = lookahead
            bytes.append(highValue << 4 | lowValue)
        }
        return String(decoding: bytes, as: UTF8.self)
    }
}

private func hexValue(_ byte: UInt8) -> UInt8? {
    switch byte {
    case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
    case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
    case UInt8(ascii: "A")...UInt8(ascii: "F"): byte - UInt8(ascii: "A") + 10
    default: nil
    }
}

/// Base64url without padding (RFC 4648 §5), for PKCE and state values.
public enum Base64URL {
    private static let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)

    public static func encode(_ bytes: some Sequence<UInt8>) -> String {
        let input = Array(bytes)
        var output: [UInt8] = []
        output.reserveCapacity((input.count * 4 + 2) / 3)
        var index = 0
        while index + 2 < input.count {
            let value = UInt32(input[index]) << 16 | UInt32(input[index + 1]) << 8 | UInt32(input[index + 2])
            for shift in stride(from: 18, through: 0, by: -6) { output.append(alphabet[Int(value >> UInt32(shift) & 63)]) }
            index += 3
        }
        let remaining = input.count - index
        if remaining == 1 {
            let value = UInt32(input[index]) << 16
            output.append(alphabet[Int(value >> 18 & 63)])
            output.append(alphabet[Int(value >> 12 & 63)])
        } else if remaining == 2 {
            let value = UInt32(input[index]) << 16 | UInt32(input[index + 1]) << 8
            output.append(alphabet[Int(value >> 18 & 63)])
            output.append(alphabet[Int(value >> 12 & 63)])
            output.append(alphabet[Int(value >> 6 & 63)])
        }
        return String(decoding: output, as: UTF8.self)
    }
}

/// Compares secrets without an early exit, so timing does not reveal a prefix.
public func constantTimeEquals(_ lhs: String, _ rhs: String) -> Bool {
    let a = Array(lhs.utf8), b = Array(rhs.utf8)
    var difference = UInt8(a.count == b.count ? 0 : 1)
    for index in 0..<max(a.count, b.count) {
        difference |= (index < a.count ? a[index] : 0) ^ (index < b.count ? b[index] : 0)
    }
    return difference == 0
}
