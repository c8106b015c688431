/// One challenge of a `WWW-Authenticate` field (RFC 9110 §11.6.1): its scheme and its
/// parameters (names lowercased, quoted strings unquoted).
///
/// A field may carry several challenges (`Bearer realm="a", error="x", DPoP algs="ES256"`), and
/// a response may repeat the field (joined with ", " on the way in): `parse` reads them all. It
/// never fails; what it cannot read ends the challenge it is in.
public struct AuthenticationChallenge: Sendable, Equatable {
    /// The scheme, lowercased ("bearer", "dpop").
    public var scheme: String
    public var parameters: [String: String]

    public init(scheme: String, parameters: [String: String]) {
        self.scheme = scheme.lowercased()
        self.parameters = parameters
    }

    /// RFC 6750 §3: the `error` of a Bearer (or DPoP) challenge.
    public var error: String? { parameters["error"] }

    /// RFC 6750 §3: the space-separated `scope` the resource needs, as a list (nil when absent).
    public var scopes: [String]? {
        parameters["scope"].map { $0.split(separator: " ").map(String.init) }.flatMap { $0.isEmpty ? nil : $0 }
    }

    /// RFC 9728 §5.1: where the protected resource's metadata is.
    public var resourceMetadata: String? { parameters["resource_metadata"] }

    /// Every challenge of `field`.
    public static func parse(_ field: String) -> [AuthenticationChallenge] {
        var scanner = Scanner(Array(field.utf8))
        var challenges: [AuthenticationChallenge] = []
        var current: AuthenticationChallenge?
        while true {
            scanner.skip(whereIn: " \t,")
            guard let name = scanner.token() else { break }
            let afterName = scanner.position
            scanner.skip(whereIn: " \t")
            if scanner.peek == UInt8(ascii: "="), current != nil {
                scanner.advance()
                scanner.skip(whereIn: " \t")
                let value = scanner.quotedString() ?? scanner.token() ?? ""
                // The first of a repeated parameter counts (RFC 9110 §11.2: each name at most once).
                if current?.parameters[name.lowercased()] == nil { current?.parameters[name.lowercased()] = value }
                continue
            }
            scanner.position = afterName
            if let finished = current { challenges.append(finished) }
            current = AuthenticationChallenge(scheme: name, parameters: [:])
            // A token68 (`Basic dXNlcjpw`) is no parameter: skip it.
            scanner.skip(whereIn: " \t")
            let start = scanner.position
            if scanner.token68() != nil {
                scanner.skip(whereIn: " \t")
                if scanner.peek == UInt8(ascii: "=") || (scanner.peek != nil && scanner.peek != UInt8(ascii: ",")) { scanner.position = start }
            }
        }
        if let finished = current { challenges.append(finished) }
        return challenges
    }

    /// The first Bearer challenge of `field`, or nil.
    public static func bearer(in field: String?) -> AuthenticationChallenge? {
        field.flatMap { parse($0).first { $0.scheme == "bearer" } }
    }

    private struct Scanner {
        let bytes: [UInt8]
        var position = 0

        init(_ bytes: [UInt8]) { self.bytes = bytes }

        var peek: UInt8? { position < bytes.count ? bytes[position] : nil }

        mutating func advance() { position += 1 }

        mutating func skip(whereIn set: StaticString) {
            let members = UnsafeBufferPointer(start: set.utf8Start, count: set.utf8CodeUnitCount)
            while let byte = peek, members.contains(byte) { position += 1 }
        }

        /// RFC 9110 §5.6.2 tchar.
        static func isTokenCharacter(_ byte: UInt8) -> Bool {
            switch byte {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"): true
            default: "!#$%&'*+-.^_`|~".utf8.contains(byte)
            }
        }

        mutating func token() -> String? {
            let start = position
            while let byte = peek, Self.isTokenCharacter(byte) { position += 1 }
            return position > start ? String(decoding: bytes[start..<position], as: UTF8.self) : nil
        }

        mutating func token68() -> String? {
            let start = position
            while let byte = peek, Self.isTokenCharacter(byte) || byte == UInt8(ascii: "/") { position += 1 }
            while peek == UInt8(ascii: "=") { position += 1 }
            return position > start ? String(decoding: bytes[start..<position], as: UTF8.self) : nil
        }

        /// A quoted-string with its backslash escapes undone; nil when the next byte is no quote.
        mutating func quotedString() -> String? {
            guard peek == UInt8(ascii: "\"") else { return nil }
            position += 1
            var value: [UInt8] = []
            while let byte = peek {
                position += 1
                if byte == UInt8(ascii: "\"") { break }
                if byte == UInt8(ascii: "\\"), let escaped = peek {
                    position += 1
                    value.append(escaped)
                } else {
                    value.append(byte)
                }
            }
            return String(decoding: value, as: UTF8.self)
        }
    }
}
