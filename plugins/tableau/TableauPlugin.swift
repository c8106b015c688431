import AuthBridgePluginSDK

/// Tableau Server connected client (what the server does, and the public sources: README.md).
///
/// The frontend signs the user in on the server's own web page (in its web view) and hands the
/// host the `workgroup_session_id` that page set; this plugin trades it for long-lived tokens
/// registered to this installation as a *device* (`grant_type=session`), renews them with the
/// profile's site (`site_namespace`), asks the server whether the session still holds
/// (`getSessionInfo` with `X-XSRF-TOKEN`), hands the credentials out as Tableau's two cookies for
/// web views, and revokes both tokens with `token_hint` on sign-out, naming only this server's
/// cookies for deletion. Every other step (state, storage, single-flight refresh, events) is the
/// host's.
struct TableauPlugin: ProviderPlugin {
    static let id = "tableau"
    /// begin_sign_in (no authorization URL: the frontend owns the web sign-in) and
    /// classify_response (Tableau answers 401 for a dead session, the standard rule) stay standard.
    static let implementedHooks: Set<PluginHook>? = [.configure, .completeSignIn, .refresh, .revoke, .checkSession, .authorizeRequest]

    /// The cookies' lifetime in the original client (~30.4 days).
    static let cookieMaxAge: Int64 = 2_629_743
    static let accessCookie = "tableau_access_token"
    static let xsrfCookie = "XSRF-TOKEN"
    static let tokenTimeout: Int64 = 15_000
    static let revokeTimeout: Int64 = 10_000

    init(host: PluginHost) throws {}

    func describe() -> JSON {
        [
            "displayName": "Tableau",
            "flows": ["session"],
            "capabilities": ["revoke", "checkSession", "fetch", "cookies"],
            "settings": [
                "type": "object",
                "required": ["server"],
                "properties": [
                    "server": [
                        "type": "string", "format": "uri",
                        "description": "The Tableau Server's address, e.g. https://tableau.example.com (https; http only on a loopback IP)",
                    ],
                    "site": [
                        "type": "string", "default": "",
                        "description": "The site's content URL sent as site_namespace when tokens are renewed (\"\" = the default site)",
                    ],
                    "deviceName": [
                        "type": "string", "minLength": 1,
                        "description": "The device name a server administrator sees (default: this computer's host name)",
                    ],
                ],
            ],
        ]
    }

    // MARK: - configure

    func configure(_ input: JSON, _ call: PluginCall) throws(ProviderFailure) -> JSON? {
        let settings = input["settings"] ?? [:]
        guard let serverText = settings["server"]?.stringValue else {
            throw .configuration("missingSetting", "The profile needs the setting \"server\" (the Tableau Server's address).")
        }
        guard let server = ServerAddress(serverText) else {
            throw .configuration(
                "invalidSettings",
                "The setting \"server\" must be an absolute address such as https://tableau.example.com, without a query, fragment or user name.")
        }
        guard server.url.isSecureTransport else {
            throw .configuration("insecureUrl", "The setting \"server\" must be an https address (http only on a loopback IP address).")
        }
        let site = settings["site"]?.stringValue ?? ""
        if site.contains(where: { $0 == "/" || $0 == "?" || $0 == "#" || $0.isWhitespace }) {
            throw .configuration(
                "invalidSettings", "The setting \"site\" is a site's content URL (the part after /#/site/), without slashes or spaces.")
        }
        var config: [String: JSON] = [
            "server": .string(server.base), "site": .string(site),
            "cookieDomain": .string(server.url.host), "secureCookies": .bool(server.url.scheme == "https"),
            "tokenEndpoint": .string(server.base + "/oauth2/v1/token"),
            "revocationEndpoint": .string(server.base + "/oauth2/v1/revoke"),
            "sessionInfoEndpoint": .string(server.base + "/vizportal/api/web/v1/getSessionInfo"),
            "apiBaseUrl": .string(server.base),
        ]
        if let name = settings["deviceName"]?.stringValue {
            guard !name.trimmingWhitespace.isEmpty else {
                throw .configuration("invalidSettings", "The setting \"deviceName\" must not be empty.")
            }
            config["deviceName"] = .string(name)
        }
        return .object(config)
    }

    // MARK: - Sign-in: the session grant

    func completeSignIn(_ input: JSON, _ call: PluginCall) throws(ProviderFailure) -> JSON? {
        guard input["flow"]?.stringValue == "session" else {
            throw .configuration(
                "unsupported",
                "Tableau signs in with the session flow: the frontend signs the user in on the server's page and passes its workgroup_session_id.")
        }
        guard let sessionID = input["sessionId"]?.stringValue, !sessionID.isEmpty else {
            throw .definitive("missingSessionId", "The sign-in needs the workgroup_session_id of the web sign-in.")
        }
        let config = Self.config(input)
        let device = try Self.device(input, stored: nil)
        let form: JSON = [
            "grant_type": "session", "client_id": .string(device.id), "session_id": .string(sessionID),
            "device_id": .string(device.id), "device_name": .string(device.name),
        ]
        let tokens = try Self.tokenRequest(form, config: config, call: call)
        guard let xsrf = tokens.xsrf else {
            throw .transient("badResponse", "Tableau's token endpoint answered the sign-in without an XSRF token.")
        }
        var result: [String: JSON] = ["tokens": tokens.json(device: device, config: config)]
        // Who signed in: best effort (the sign-in stands without it).
        do {
            if case .valid(let account) = try Self.sessionInfo(access: tokens.access, xsrf: xsrf, config: config, call: call),
                let account
            {
                result["account"] = account
            }
        } catch {
            call.log(.notice, "getSessionInfo after the session grant failed (\(error.reason)); the account stays unknown")
        }
        call.log(.info, "signed in as a connected client (device \"\(device.name)\")")
        return .object(result)
    }

    // MARK: - Refresh with the site

    func refresh(_ input: JSON, _ call: PluginCall) throws(ProviderFailure) -> JSON? {
        guard let refreshToken = input["tokens"]?["refreshToken"]?.stringValue, !refreshToken.isEmpty else {
            throw .definitive("noRefreshToken", "The Tableau session has no refresh token; sign in again.")
        }
        let config = Self.config(input)
        // The tokens belong to the device they were issued to.
        let device = try Self.device(input, stored: input["tokens"]?["extras"]?["deviceId"]?.stringValue)
        let form: JSON = [
            "grant_type": "refresh_token", "refresh_token": .string(refreshToken),
            "client_id": .string(device.id), "device_id": .string(device.id),
            "site_namespace": .string(config["site"]?.stringValue ?? ""),
        ]
        let tokens: Tokens
        do { tokens = try Self.tokenRequest(form, config: config, call: call) } catch {
            // A 400 or 401 without Tableau's `error` member is still its answer about these tokens
            // (bridge-spec, "Standard token-endpoint answers"): the session ends, as with one.
            throw error.asRefreshRefusal
        }
        if tokens.xsrf == nil {
            // The refresh token has rotated already: dropping this answer would sign the user
            // out at the next renewal. The previous XSRF token stays (the host merges extras).
            call.log(.notice, "Tableau renewed the tokens without an XSRF token; the previous one is kept")
        }
        // The device name was registered at sign-in; the host keeps it in the details.
        return ["tokens": tokens.json(device: (device.id, nil), config: config)]
    }

    // MARK: - Session check: getSessionInfo

    func checkSession(_ input: JSON, _ call: PluginCall) throws(ProviderFailure) -> JSON? {
        let tokens = input["tokens"] ?? [:]
        guard let access = tokens["accessToken"]?.stringValue, let xsrf = tokens["extras"]?["xsrfToken"]?.stringValue,
            !xsrf.isEmpty
        else {
            return ["state": "expired"] // without the XSRF token the session cannot be used: renew it
        }
        switch try Self.sessionInfo(access: access, xsrf: xsrf, config: Self.config(input), call: call) {
        case .valid: return ["state": "valid"]
        case .expired: return ["state": "expired"]
        case .unknown(let message): return ["state": "unknown", "message": .string(message)]
        }
    }

    // MARK: - Credentials: two cookies and the XSRF header

    func authorizeRequest(_ input: JSON, _ call: PluginCall) throws(ProviderFailure) -> JSON? {
        let config = Self.config(input)
        guard let access = input["tokens"]?["accessToken"]?.stringValue else {
            throw .definitive("noTokens", "The Tableau session has no access token.")
        }
        let xsrf = input["tokens"]?["extras"]?["xsrfToken"]?.stringValue ?? ""
        let base = config["server"]?.stringValue ?? ""
        var request = input["request"]?.objectValue ?? [:]
        if let url = request["url"]?.stringValue {
            if ParsedURL.hasScheme(url) {
                // The cookies and header carry the session: only ever to this profile's server.
                guard let target = ServerAddress(url, allowQuery: true), let server = ServerAddress(base), target.url.origin == server.url.origin,
                    target.path == server.path || target.path.hasPrefix(server.path + "/")
                else {
                    throw .configuration(
                        "foreignUrl", "This profile only sends its Tableau credentials to \(base); use a path or an address on that server.")
                }
            } else {
                request["url"] = .string(Self.join(base, url))
            }
        }
        var headers = (request["headers"]?.objectValue ?? [:]).filter { $0.key.lowercased() != "x-xsrf-token" }
        if !xsrf.isEmpty { headers["X-XSRF-TOKEN"] = .string(xsrf) }
        request["headers"] = .object(headers)
        var cookies: [JSON] = [Self.cookie(Self.accessCookie, access, config)]
        if !xsrf.isEmpty { cookies.append(Self.cookie(Self.xsrfCookie, xsrf, config)) }
        return ["request": .object(request), "cookies": .array(cookies)]
    }

    // MARK: - Sign-out: two revocations with token_hint, this server's cookies only

    /// Both revocations run at once under one bound (`revokeTimeout`): against a server that
    /// does not answer, sign-out waits one timeout, not one per token.
    func revoke(_ input: JSON, _ call: PluginCall) throws(ProviderFailure) -> JSON? {
        let config = Self.config(input)
        let endpoint = config["revocationEndpoint"]?.stringValue ?? ""
        let hints = [("accessToken", "access_token"), ("refreshToken", "refresh_token")].compactMap { key, hint -> (hint: String, token: String)? in
            guard let token = input["tokens"]?[key]?.stringValue, !token.isEmpty else { return nil }
            return (hint, token)
        }
        // Tableau's parameter is `token_hint`, not RFC 7009's `token_type_hint`.
        let answers = call.http(
            concurrently: hints.map { hint, token in
                [
                    "method": "POST", "url": .string(endpoint), "timeoutMs": .int(Self.revokeTimeout),
                    "headers": ["Accept": "application/json"],
                    "form": ["token": .string(token), "token_hint": .string(hint)],
                ]
            })
        var revoked: [JSON] = []
        var failures: [JSON] = []
        for ((hint, _), answer) in zip(hints, answers) {
            switch answer {
            case .success(let response) where (200..<300).contains(response.status):
                revoked.append(.string(hint))
            case .success(let response):
                failures.append([
                    "token": .string(hint), "reason": "httpStatus",
                    "message": .string("Tableau's revocation endpoint answered HTTP \(response.status)."),
                ])
            case .failure(let error):
                failures.append(["token": .string(hint), "reason": .string(error.reason), "message": .string(error.message)])
            }
        }
        let domain = config["cookieDomain"]?.stringValue ?? ""
        let clear: [JSON] =
            domain.isEmpty
            ? []
            : [Self.accessCookie, Self.xsrfCookie].map {
                ["name": .string($0), "domain": .string(domain), "path": "/"]
            }
        return ["revoked": .array(revoked), "failures": .array(failures), "clearCookies": .array(clear)]
    }

    // MARK: - Helpers

    static func config(_ input: JSON) -> JSON { input["profile"]?["config"] ?? [:] }

    /// The device the tokens are (or will be) registered to, and the name an administrator sees.
    /// Tableau keeps one token set per device on a server, so each profile is a device of its
    /// own (two profiles on one server, e.g. one per site, would otherwise sign each other out):
    /// the host's `installation.profileId`, stable per installation and profile. Tokens keep
    /// the id they were issued to (`stored`).
    static func device(_ input: JSON, stored: String?) throws(ProviderFailure) -> (id: String, name: String) {
        let installation = input["installation"] ?? [:]
        guard let id = [stored, installation["profileId"]?.stringValue].compactMap({ $0 }).first(where: { !$0.isEmpty }) else {
            throw ProviderFailure(
                .internal, reason: "noInstallation", message: "The host gave no installation profileId to use as the Tableau device id.")
        }
        let configured = config(input)["deviceName"]?.stringValue
        let hostName = installation["name"]?.stringValue
        let name = [configured, hostName].compactMap { $0 }.first(where: { !$0.trimmingWhitespace.isEmpty }) ?? "AuthBridge"
        return (id, name)
    }

    struct Tokens {
        var access: String
        var refresh: String?
        /// Absent from a renewal that did not send one (the previous one stays).
        var xsrf: String?

        /// The TokenSet: `extras` for the plugin's own use, `details` for frontends (which
        /// server, site and device; the device name only when the sign-in registered it).
        func json(device: (id: String, name: String?), config: JSON) -> JSON {
            .compactObject([
                "accessToken": .string(access), "refreshToken": refresh.map(JSON.string),
                "extras": .compactObject(["xsrfToken": xsrf.map(JSON.string), "deviceId": .string(device.id)]),
                "details": .compactObject([
                    "server": config["server"], "site": config["site"] ?? "",
                    "deviceId": .string(device.id), "deviceName": device.name.map(JSON.string),
                ]),
            ])
        }
    }

    /// One call to `{server}/oauth2/v1/token`. Tableau gives no `expires_in`: expiry is learnt
    /// from getSessionInfo. A top-level `error` key is a refusal (the session ends); an
    /// unavailable server (5xx, 429, no answer) is transient and keeps the tokens.
    static func tokenRequest(_ form: JSON, config: JSON, call: PluginCall) throws(ProviderFailure) -> Tokens {
        guard let endpoint = config["tokenEndpoint"]?.stringValue else {
            throw .configuration("missingSetting", "The profile needs the setting \"server\".")
        }
        let response = try call.http([
            "method": "POST", "url": .string(endpoint), "form": form,
            "headers": ["Accept": "application/json"], "timeoutMs": .int(tokenTimeout),
        ])
        if response.status >= 500 || response.status == 429 {
            throw .transient(
                response.status == 429 ? "rateLimited" : "serverError",
                "The Tableau server is unavailable (HTTP \(response.status)).", status: response.status)
        }
        let body = response.json
        if let error = body?["error"], !error.isNull {
            throw refusal(error, description: body?["error_description"]?.stringValue, status: response.status)
        }
        guard (200..<300).contains(response.status) else {
            throw .transient("badResponse", "Tableau's token endpoint answered HTTP \(response.status) without an error.", status: response.status)
        }
        guard let access = body?["access_token"]?.stringValue, !access.isEmpty else {
            throw .transient("badResponse", "Tableau's token endpoint answered without an access token.", status: response.status)
        }
        let refresh = body?["refresh_token"]?.stringValue.flatMap { $0.isEmpty ? nil : $0 }
        let xsrf = body?["xsrf_token"]?.stringValue.flatMap { $0.isEmpty ? nil : $0 }
        return Tokens(access: access, refresh: refresh, xsrf: xsrf)
    }

    /// A token answer's `error` (a string, or an object with a code and a message) as a
    /// definitive failure. A code that is a word is kept as the reason (`invalid_grant` → the
    /// host reports `revoked`); anything else counts as `invalid_grant`.
    static func refusal(_ error: JSON, description: String?, status: Int) -> ProviderFailure {
        var code: String?
        var detail = description
        switch error {
        case .string(let text):
            code = text
        case .object:
            for key in ["code", "error", "name"] {
                if let text = error[key]?.stringValue {
                    code = text
                    break
                }
                if let number = error[key]?.intValue {
                    code = String(number)
                    break
                }
            }
            for key in ["message", "detail", "error_description", "summary"] where detail == nil {
                detail = error[key]?.stringValue
            }
        default:
            break
        }
        let isWord =
            code.map { word in
                !word.isEmpty && word.count <= 64 && word.first!.isLetter
                    && word.unicodeScalars.allSatisfy { ($0.isASCII && ($0.properties.isAlphabetic || ("0"..."9").contains($0))) || $0 == "_" }
            } ?? false
        let reason = isWord ? code! : "invalid_grant"
        var message = "Tableau refused the tokens"
        if let code, !code.isEmpty { message += " (\(String(code.prefix(64))))" }
        if let detail, !detail.isEmpty { message += ": " + String(detail.prefix(300)) }
        return .definitive(reason, message, status: status)
    }

    enum SessionState {
        case valid(account: JSON?)
        case expired
        case unknown(String)
    }

    /// `POST {server}/vizportal/api/web/v1/getSessionInfo` with the two cookies and the
    /// `X-XSRF-TOKEN` header. `result.errors` means the session expired.
    static func sessionInfo(access: String, xsrf: String, config: JSON, call: PluginCall) throws(ProviderFailure) -> SessionState {
        guard let endpoint = config["sessionInfoEndpoint"]?.stringValue else {
            throw .configuration("missingSetting", "The profile needs the setting \"server\".")
        }
        let request: JSON = [
            "method": "POST", "url": .string(endpoint), "timeoutMs": .int(tokenTimeout),
            "headers": [
                "Accept": "application/json", "X-XSRF-TOKEN": .string(xsrf),
                "Cookie": .string("\(accessCookie)=\(access); \(xsrfCookie)=\(xsrf)"),
            ],
            "json": ["method": "getSessionInfo", "params": [:]],
        ]
        let response = try call.http(request)
        if response.status >= 500 || response.status == 429 {
            throw .transient(
                response.status == 429 ? "rateLimited" : "serverError",
                "The Tableau server is unavailable (HTTP \(response.status)).", status: response.status)
        }
        let result = response.json?["result"]
        if let errors = result?["errors"], !errors.isNull { return .expired }
        if response.status == 401 || response.status == 403 { return .expired }
        guard (200..<300).contains(response.status), let result, result.objectValue != nil else {
            return .unknown("Tableau's session check answered HTTP \(response.status) without session information.")
        }
        return .valid(account: account(result["user"]))
    }

    /// The signed-in user: the user name identifies the account (a user's id differs per site).
    static func account(_ user: JSON?) -> JSON? {
        guard let user, user.objectValue != nil else { return nil }
        let username = (user["username"] ?? user["name"])?.stringValue
        let display = (user["displayName"] ?? user["name"])?.stringValue
        // `JSON` is nil-literal expressible: where the type is inferred, a bare
        // `nil` becomes `.null`, not an absent value. Say `.none`.
        func nonEmpty(_ text: String?) -> JSON? {
            guard let text, !text.isEmpty else { return .none }
            return .string(text)
        }
        let account: JSON = .compactObject([
            "id": nonEmpty(username), "name": nonEmpty(display), "email": nonEmpty(user["email"]?.stringValue),
        ])
        guard account.objectValue?.isEmpty == false else { return .none }
        return account
    }

    static func cookie(_ name: String, _ value: String, _ config: JSON) -> JSON {
        [
            "name": .string(name), "value": .string(value), "domain": .string(config["cookieDomain"]?.stringValue ?? ""),
            "path": "/", "maxAge": .int(cookieMaxAge), "secure": .bool(config["secureCookies"]?.boolValue ?? true),
        ]
    }

    static func join(_ base: String, _ path: String) -> String {
        if path.isEmpty { return base }
        return path.hasPrefix("/") ? base + path : base + "/" + path
    }
}

/// A Tableau Server's address: an absolute http(s) URL (the toolkit's `ParsedURL`) without white
/// space or a user name, and without a query or fragment unless `allowQuery` (a request's URL).
struct ServerAddress: Equatable {
    let url: ParsedURL
    /// "" or a path without a trailing slash ("/tableau").
    let path: String

    init?(_ text: String, allowQuery: Bool = false) {
        guard !text.contains(where: { $0.isWhitespace || $0.isNewline }), let url = ParsedURL(text),
            url.scheme == "https" || url.scheme == "http", url.userInfo == nil,
            allowQuery || (url.query == nil && url.fragment == nil)
        else { return nil }
        var path = url.path
        while path.hasSuffix("/") { path.removeLast() }
        self.url = url
        self.path = path
    }

    /// The origin and path, e.g. "https://example.com/tableau": what endpoints are built on.
    var base: String { url.origin + path }
}

extension String {
    var trimmingWhitespace: Substring {
        let start = firstIndex(where: { !$0.isWhitespace }) ?? endIndex
        let end = lastIndex(where: { !$0.isWhitespace }).map { index(after: $0) } ?? start
        return self[start..<max(start, end)]
    }
}

/// What the library's entry point returns (`Entry/`): `TableauPlugin`'s ABI tables.
public func pluginEntry() -> UnsafeRawPointer { PluginExport.entry(for: TableauPlugin.self) }
