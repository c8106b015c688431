import AuthBridgeJSON
import AuthBridgeURL

/// What the configuration file says about git (`authbridge git-credential`): which profile
/// answers for which URLs (the top-level `gitCredential` member, URL prefix → profile name),
/// and the user name each profile gives git (a profile's `gitUsername`, default `oauth2`).
///
///     {"profiles": {"corp": {"plugin": "oidc", "settings": {…}, "gitUsername": "oauth2"}},
///      "gitCredential": {"https://git.example.com": "corp", "https://git.example.com/team": "team"}}
///
/// A prefix matches as git matches `credential.<url>` settings: the same scheme, host and port,
/// and a path that is the prefix's path or lies below it (whole segments: `/team` matches
/// `/team/app.git`, not `/teamwork`). The longest matching prefix wins.
public struct GitCredentialRoutes: Sendable, Equatable {
    public struct Route: Sendable, Equatable {
        /// As written in the file.
        public var prefix: String
        public var profile: String
        let url: ParsedURL
        /// The prefix's path without a trailing "/" ("" for the whole host).
        let path: String
    }

    /// Longest path first: the first route that matches is the answer.
    public private(set) var routes: [Route] = []
    /// Profile name → the user name given to git.
    public private(set) var usernames: [String: String] = [:]

    public static let defaultUsername = "oauth2"

    public init() {}

    /// The user name `profile` gives git.
    public func username(of profile: String) -> String { usernames[profile] ?? Self.defaultUsername }

    /// What git asked about: its `protocol`, `host` (with the port, if any) and `path` (only
    /// when `credential.useHttpPath` is set, or for protocols whose path git always sends).
    public struct Request: Sendable, Equatable {
        public var scheme: String
        public var host: String
        public var path: String?

        public init(scheme: String, host: String, path: String?) {
            self.scheme = scheme
            self.host = host
            self.path = path
        }

        /// The request as a URL: `scheme://host/path`.
        public var url: String { "\(scheme)://\(host)/" + (path ?? "") }

        /// Whether `scheme` is a URL scheme and `host` a host name or IP literal with an optional
        /// port. git decodes %-escapes in a URL's host (`https://h%2f%40evil.example/x.git` asks
        /// for host `h/@evil.example`), and joined into `url` such a host would parse as another
        /// host, user, path, query or fragment: nothing is answered for it (fail closed).
        public var isWellFormed: Bool { ParsedURL.hasScheme(scheme + ":") && !scheme.contains(":") && Self.isHostAndPort(host) }

        var parsed: ParsedURL? { isWellFormed ? ParsedURL(url) : nil }

        /// `name[:port]` or `[IPv6][:port]`: a name of dot-separated labels of ASCII letters,
        /// digits, `-` and `_` (an IPv4 address is one; an internationalised name comes as its
        /// A-labels, `xn--…`), a port of 1 to 65535.
        static func isHostAndPort(_ text: String) -> Bool {
            var host = Substring(text)
            var port: Substring?
            if host.hasPrefix("[") {
                guard let close = host.firstIndex(of: "]") else { return false }
                let rest = host[host.index(after: close)...]
                host = host[host.index(after: host.startIndex)..<close]
                guard host.contains(":"), host.allSatisfy({ $0.isASCII && ($0.isHexDigit || $0 == ":" || $0 == ".") }) else { return false }
                if !rest.isEmpty {
                    guard rest.hasPrefix(":") else { return false }
                    port = rest.dropFirst()
                }
            } else {
                if let colon = host.lastIndex(of: ":") {
                    port = host[host.index(after: colon)...]
                    host = host[..<colon]
                }
                let labels = host.split(separator: ".", omittingEmptySubsequences: false)
                guard host.utf8.count <= 253,
                    labels.allSatisfy({ label in
                        (1...63).contains(label.utf8.count)
                            && label.allSatisfy { $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "-" || $0 == "_") }
                    })
                else { return false }
            }
            guard let port else { return true }
            return (1...5).contains(port.count) && port.allSatisfy { $0.isASCII && $0.isNumber } && (1...65535).contains(Int(port) ?? 0)
        }
    }

    public enum Match: Sendable, Equatable {
        case profile(String)
        /// No prefix matches. `needsPath`: one would, below this host, if git had sent the
        /// repository's path (`credential.useHttpPath`).
        case none(needsPath: Bool)
    }

    /// The profile for `request`, by the longest matching prefix.
    public func match(_ request: Request) -> Match {
        guard let url = request.parsed else { return .none(needsPath: false) }
        let path = request.path.map { "/" + $0.trimmingSlashes() } ?? ""
        var needsPath = false
        for route in routes where Self.sameOrigin(route.url, url) {
            if route.path.isEmpty || path == route.path || path.hasPrefix(route.path + "/") { return .profile(route.profile) }
            if request.path == nil { needsPath = true }
        }
        return .none(needsPath: needsPath)
    }

    private static func sameOrigin(_ a: ParsedURL, _ b: ParsedURL) -> Bool { a.origin == b.origin }

    /// Reads `gitCredential` and the profiles' `gitUsername` from a configuration file's JSON.
    public static func read(from json: JSON) throws(ConfigurationError) -> GitCredentialRoutes {
        var found = GitCredentialRoutes()
        for (name, entry) in (json["profiles"]?.objectValue ?? [:]) {
            guard let value = entry["gitUsername"] else { continue }
            guard let username = value.stringValue, !username.isEmpty, !username.contains(where: \.isNewline), !username.contains("\0") else {
                throw ConfigurationError("profile \"\(name)\": \"gitUsername\" must be a user name (a string of one line)")
            }
            found.usernames[name] = username
        }
        guard let routes = json["gitCredential"] else { return found }
        guard case .object(let members) = routes else {
            throw ConfigurationError("\"gitCredential\" must be an object of URL prefix → profile name")
        }
        var seen: [String: String] = [:]
        for (prefix, value) in members.sorted(by: { $0.key < $1.key }) {
            guard let profile = value.stringValue, Profile.problem(withName: profile) == nil else {
                throw ConfigurationError("\"gitCredential\" \"\(prefix)\": the value must be a profile name")
            }
            guard let url = ParsedURL(prefix), url.query == nil, url.fragment == nil, url.userInfo == nil else {
                throw ConfigurationError(
                    "\"gitCredential\" \"\(prefix)\": not a URL prefix (scheme://host[:port][/path], without user, query or fragment)")
            }
            let path = "/" + url.path.trimmingSlashes()
            let route = Route(prefix: prefix, profile: profile, url: url, path: path == "/" ? "" : path)
            let key = url.origin + route.path
            if let other = seen[key] {
                throw ConfigurationError("\"gitCredential\": \"\(other)\" and \"\(prefix)\" are the same URL prefix")
            }
            seen[key] = prefix
            found.routes.append(route)
        }
        found.routes.sort { $0.path.count > $1.path.count }
        return found
    }
}

extension String {
    /// Without leading and trailing "/".
    fileprivate func trimmingSlashes() -> String {
        var text = Substring(self)
        while text.first == "/" { text = text.dropFirst() }
        while text.last == "/" { text = text.dropLast() }
        return String(text)
    }
}
