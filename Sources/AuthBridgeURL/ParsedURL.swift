// AuthBridgeURL: the URL pieces AuthBridge needs, once, for the host and the Swift plugin SDK (and,
// through ab_host_api's query_value, for C plugins) — without Foundation, which would cost
// start-up time. One rule each: what an absolute URL's parts are, which transport is secure
// (https, or http on a loopback IP literal), how a query is read (form encoding: `+` is a space,
// RFC 6749 appendix B), percent- and form-encoding, base64url.

/// An absolute hierarchical URL, `scheme://[userinfo@]host[:port][/path][?query][#fragment]`.
public struct ParsedURL: Sendable, Equatable {
    /// Lower-cased.
    public var scheme: String
    /// What stands before an `@` in the authority, when anything does (never part of `host`).
    public var userInfo: String?
    /// Lower-cased; an IPv6 literal without its brackets ("::1" for "[::1]").
    public var host: String
    /// 1 to 65535 as written (also a scheme's default), or nil when none is written.
    public var port: Int?
    /// "/" when the URL has none.
    public var path: String
    public var query: String?
    public var fragment: String?

    public init?(_ text: String) {
        guard let colon = text.firstIndex(of: ":"), Self.isScheme(text[..<colon]) else { return nil }
        var rest = text[text.index(after: colon)...]
        guard rest.hasPrefix("//") else { return nil }
        rest = rest.dropFirst(2)
        if let hash = rest.firstIndex(of: "#") {
            fragment = String(rest[rest.index(after: hash)...])
            rest = rest[..<hash]
        }
        let authorityEnd = rest.firstIndex(where: { $0 == "/" || $0 == "?" }) ?? rest.endIndex
        var authority = rest[..<authorityEnd]
        let afterAuthority = rest[authorityEnd...]
        if let at = authority.lastIndex(of: "@") {
            userInfo = String(authority[..<at])
            authority = authority[authority.index(after: at)...]
        }
        var host: Substring
        var portText: Substring?
        if authority.hasPrefix("[") {
            guard let close = authority.firstIndex(of: "]") else { return nil }
            host = authority[authority.index(after: authority.startIndex)..<close]
            let tail = authority[authority.index(after: close)...]
            if tail.hasPrefix(":") { portText = tail.dropFirst() } else if !tail.isEmpty { return nil }
        } else if let portColon = authority.lastIndex(of: ":") {
            host = authority[..<portColon]
            portText = authority[authority.index(after: portColon)...]
        } else {
            host = authority
        }
        if let portText, !portText.isEmpty {
            guard portText.allSatisfy({ $0.isASCII && $0.isNumber }), let value = Int(portText), (1...65535).contains(value) else {
                return nil
            }
            port = value
        }
        // A host never holds white space, a '%' or a '\' (browsers read "a\b" as a path).
        guard !host.isEmpty, !host.contains(where: { $0.isWhitespace || $0 == "%" || $0 == "\\" }) else { return nil }
        self.scheme = text[..<colon].lowercased()
        self.host = host.lowercased()
        if let question = afterAuthority.firstIndex(of: "?") {
            path = String(afterAuthority[..<question])
            query = String(afterAuthority[afterAuthority.index(after: question)...])
        } else {
            path = String(afterAuthority)
            query = nil
        }
        if path.isEmpty { path = "/" }
    }

    /// The query's parameters in order, form-decoded leniently (a broken escape stays as written).
    public var queryItems: [(name: String, value: String)] { FormEncoding.decode(query ?? "") }

    /// The first value of the query parameter `name`.
    public func queryValue(_ name: String) -> String? { queryItems.first(where: { $0.name == name })?.value }

    /// True for IP-literal loopback hosts: 127.0.0.0/8 (four decimal octets) and ::1. "localhost"
    /// is deliberately not loopback (RFC 8252 §8.3: it may resolve elsewhere).
    public var isLoopbackIPLiteral: Bool {
        if host == "::1" || host == "0:0:0:0:0:0:0:1" { return true }
        let octets = host.split(separator: ".", omittingEmptySubsequences: false)
        guard octets.count == 4,
            octets.allSatisfy({ octet in
                (1...3).contains(octet.count) && octet.allSatisfy { $0.isASCII && $0.isNumber } && Int(octet)! <= 255
            })
        else { return false }
        return octets[0] == "127"
    }

    /// https anywhere, http only on a loopback IP literal: the only URLs AuthBridge sends to.
    public var isSecureTransport: Bool { scheme == "https" || (scheme == "http" && isLoopbackIPLiteral) }

    /// scheme://host[:port] (RFC 6454): IPv6 hosts bracketed, a scheme's default port left out, so
    /// that equal origins compare equal.
    public var origin: String {
        let hostPart = host.contains(":") ? "[\(host)]" : host
        let defaultPort = scheme == "https" ? 443 : scheme == "http" ? 80 : nil
        return "\(scheme)://\(hostPart)" + (port.flatMap { $0 == defaultPort ? nil : ":\($0)" } ?? "")
    }

    /// Whether `url` begins with a scheme (RFC 3986 §3.1: a letter, then letters, digits, `+`, `-`
    /// or `.`, then `:`), i.e. is absolute. A path whose query holds a URL
    /// (`/query?q=… Website='https://acme.com'`, `/x?next=https://y`) is not: for hooks that
    /// resolve paths against an API base and must send credentials nowhere else.
    public static func hasScheme(_ url: String) -> Bool {
        guard let colon = url.firstIndex(of: ":") else { return false }
        return isScheme(url[..<colon])
    }

    static func isScheme(_ text: Substring) -> Bool {
        guard let first = text.first, first.isASCII, first.isLetter else { return false }
        return text.allSatisfy { $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "+" || $0 == "-" || $0 == ".") }
    }
}

/// A redirect a sign-in comes back on: any absolute URI with a scheme — `https://app.example/cb`, a
/// loopback `http://127.0.0.1:port/callback`, or a private-use scheme without a host
/// (`com.example.app:/oauth2redirect`, RFC 8252 §7.1) — whose query is read by name, leniently.
public struct CallbackURL: Sendable {
    public let queryItems: [(name: String, value: String)]

    public init?(_ text: String) {
        guard let colon = text.firstIndex(of: ":"), ParsedURL.isScheme(text[..<colon]) else { return nil }
        queryItems = FormEncoding.decode(URLQuery.text(of: text[text.index(after: colon)...]).map(String.init) ?? "")
    }

    public func queryValue(_ name: String) -> String? { queryItems.first(where: { $0.name == name })?.value }
}

/// A URL's query read strictly, by name (never by position): a name or value with a '%' not
/// followed by two hex digits (`ab%ZZcd`, `abc%4`) makes the whole query unreadable, because
/// guessing what a broken escape meant would store a value the provider never sent. `+` is a
/// space (form encoding, RFC 6749 appendix B). The rule of the Swift SDK and of C plugins
/// (ab_host_api's `query_value`).
public struct URLQuery: Sendable {
    public let items: [(name: String, value: String)]

    /// The query of `url` (from its first `?` to its `#`; none: no parameters); nil when malformed.
    /// `url` may be absolute, a private-use-scheme URI or a path.
    public init?(url: String) {
        guard let items = FormEncoding.decodeStrictly(Self.text(of: Substring(url)) ?? "") else { return nil }
        self.items = items
    }

    /// The first value of `name`, or nil when the query lacks it.
    public func value(_ name: String) -> String? { items.first(where: { $0.name == name })?.value }

    /// How many times `name` occurs.
    public func count(_ name: String) -> Int { items.count(where: { $0.name == name }) }

    /// The query text of a URL: after the first `?`, before the `#`.
    static func text(of url: Substring) -> Substring? {
        var text = url
        if let hash = text.firstIndex(of: "#") { text = text[..<hash] }
        guard let question = text.firstIndex(of: "?") else { return nil }
        return text[text.index(after: question)...]
    }
}
