import AuthBridgePluginSDK

/// MarketSharp with named licenses (the requirements and the model: README.md).
///
/// No public documentation of MarketSharp's mobile OAuth exists, so the
/// endpoints are modelled on its REST API at restapi.marketsharpm.com
/// (`POST /token` answering a Bearer token; data under `/companies/{companyId}/`)
/// and every one of them is an assumption listed in README.md. What the plugin
/// adds to standard OAuth 2.0 (authorization code + PKCE, RFC 7009 revocation):
///
/// - the named-license refusals at sign-in, with the required messages
///   (`orgNotOnNamedLicenses`, `noLicenseAssigned`);
/// - the account (company and user) from the token answer, the company id
///   filled into relative API paths (`{companyId}`) and given to frontends
///   in `details`;
/// - lifetimes: 365-day access token, 396-day refresh token, rotated by every
///   refresh (the host stores the new one before anyone sees the new access token);
/// - a license removed while signed in: `classify_response` and `check_session`
///   answer `licenseRevoked` with the required message, and the host announces it
///   and signs the account out after `licenseGracePeriodMs`.
struct MarketSharpPlugin: ProviderPlugin {
    static let id = "marketsharp"
    /// `revoke` is the host's standard RFC 7009 step (refresh token, then access token).
    static let implementedHooks: Set<PluginHook>? = [
        .configure, .beginSignIn, .completeSignIn, .refresh, .checkSession,
        .authorizeRequest, .classifyResponse,
    ]

    static let defaultBaseURL = "https://restapi.marketsharpm.com"
    static let defaultScopes: [String] = ["api"]
    /// The requirements (README.md): "The access token expires after 365 days. The refresh token lasts 396 days."
    static let accessLifetimeMilliseconds: Int64 = 365 * 86_400_000
    static let refreshLifetimeMilliseconds: Int64 = 396 * 86_400_000
    /// Modelled: "get current user", the request the requirements name first.
    static let currentUserPath = "/companies/{companyId}/users/current"

    init(host: PluginHost) throws {}

    func describe() -> JSON {
        let url: JSON = ["type": "string", "format": "uri"]
        return [
            "displayName": "MarketSharp",
            "flows": ["browser", "external"],
            "capabilities": ["revoke", "checkSession", "fetch"],
            "settings": [
                "type": "object",
                "required": ["clientId"],
                "properties": [
                    "baseUrl": [
                        "type": "string", "format": "uri", "default": .string(Self.defaultBaseURL),
                        "description": "MarketSharp's REST API (https; http only on a loopback IP, for tests)",
                    ],
                    "clientId": ["type": "string", "description": "The application's client id at MarketSharp (public client: no secret)"],
                    "scopes": ["type": "array", "items": ["type": "string"], "default": ["api"]],
                    "redirectUri": ["type": "string", "description": "The redirect URI registered for the client id (external flow)"],
                    "authorizationEndpoint": url.setting("description", "Default {baseUrl}/oauth/authorize (assumed)"),
                    "tokenEndpoint": url.setting("description", "Default {baseUrl}/token (assumed)"),
                    "revocationEndpoint": url.setting("description", "Default {baseUrl}/oauth/revoke (assumed)"),
                    "licenseGracePeriodMs": [
                        "type": "integer", "default": 5_000,
                        "description": "Host setting: how long a revoked-license message shows before the account is signed out",
                    ],
                ],
            ],
        ]
    }

    // MARK: - configure

    func configure(_ input: JSON, _ call: PluginCall) throws(ProviderFailure) -> JSON? {
        let settings = input["settings"] ?? [:]
        guard let clientID = settings["clientId"]?.stringValue, !clientID.isEmpty else {
            throw .configuration("missingSetting", "The MarketSharp profile needs the setting \"clientId\".")
        }
        var base = settings["baseUrl"]?.stringValue ?? Self.defaultBaseURL
        while base.hasSuffix("/") { base.removeLast() }
        guard Self.isSecure(base) else { throw Self.insecure("baseUrl") }
        var config: [String: JSON] = ["baseUrl": .string(base), "apiBaseUrl": .string(base), "clientId": .string(clientID)]
        for (key, path) in [("authorizationEndpoint", "/oauth/authorize"), ("tokenEndpoint", "/token"), ("revocationEndpoint", "/oauth/revoke")] {
            let endpoint = settings[key]?.stringValue ?? base + path
            guard Self.isSecure(endpoint) else { throw Self.insecure(key) }
            config[key] = .string(endpoint)
        }
        let scopes = settings["scopes"]?.arrayValue?.compactMap(\.stringValue) ?? Self.defaultScopes
        config["scopes"] = .array((scopes.isEmpty ? Self.defaultScopes : scopes).map(JSON.string))
        if let redirect = settings["redirectUri"]?.stringValue { config["redirectUri"] = .string(redirect) }
        return .object(config)
    }

    // MARK: - Sign-in

    func beginSignIn(_ input: JSON, _ call: PluginCall) throws(ProviderFailure) -> JSON? {
        guard input["redirectUri"]?.stringValue != nil else {
            throw .configuration(
                "missingSetting", "The external flow needs the profile setting \"redirectUri\" (the redirect URI registered for the client id).")
        }
        // Plain OAuth 2.0, not OpenID Connect: no nonce (MarketSharp issues no ID token).
        return try call.standard(.beginSignIn, input.setting("nonce", nil))
    }

    func completeSignIn(_ input: JSON, _ call: PluginCall) throws(ProviderFailure) -> JSON? {
        // A license refusal may come back on the redirect (the sign-in page knows the user)…
        // A callback that is not well formed is refused here (URLQuery.callback), before any exchange.
        if let callback = input["callbackUrl"]?.stringValue {
            let query = try URLQuery.callback(callback)
            if let error = query.value("error"), let problem = LicenseProblem(oauthError: error) {
                guard let expected = input["state"]?.stringValue, query.value("state") == expected else {
                    throw .definitive("stateMismatch", "The callback's state does not match this sign-in; it was ignored.")
                }
                throw problem.signInRefusal
            }
        }
        // …or from the token endpoint when the code is exchanged (the simulator's default).
        let answer: JSON
        do {
            answer = try call.standard(.completeSignIn, input)
        } catch {
            if let problem = LicenseProblem(oauthError: error.reason) { throw problem.signInRefusal }
            throw error
        }
        return try Self.completed(answer, previous: nil, now: call.now)
    }

    // MARK: - Refresh (rotation)

    func refresh(_ input: JSON, _ call: PluginCall) throws(ProviderFailure) -> JSON? {
        let tokens = input["tokens"] ?? [:]
        let answer: JSON
        do {
            answer = try call.standard(.refresh, input)
        } catch {
            // The standard step names a 400 it refused `refreshRefused`; the server's own word is `oauthError`.
            if let problem = LicenseProblem(oauthError: error.oauthError ?? error.reason) {
                // The host ends the session with reason licenseRevoked and this message.
                throw .definitive("licenseRevoked", problem.message, status: error.status)
            }
            if error.reason == "invalid_grant", let until = tokens["extras"]?["refreshTokenExpiresAt"]?.intValue, until <= call.now {
                throw .definitive(
                    "expired", "Your MarketSharp sign-in has expired (unused for more than 396 days). Please sign in again.",
                    status: error.status)
            }
            throw error
        }
        if answer["tokens"]?["refreshToken"] == nil {
            call.log(.warning, "MarketSharp renewed the access token without a new refresh token; the previous one is kept")
        }
        return try Self.completed(answer, previous: tokens, now: call.now)
    }

    /// A token answer made into the session's TokenResult: the required lifetimes
    /// when the answer omits them, the refresh token's expiry, and the account.
    static func completed(_ answer: JSON, previous: JSON?, now: Int64) throws(ProviderFailure) -> JSON {
        guard var tokens = answer["tokens"]?.objectValue else {
            throw .transient("badResponse", "MarketSharp's token answer could not be read.")
        }
        var extras = previous?["extras"]?.objectValue ?? [:]
        for (key, value) in tokens["extras"]?.objectValue ?? [:] { extras[key] = value }
        if tokens["expiresAt"] == nil { tokens["expiresAt"] = .int(now + accessLifetimeMilliseconds) }
        if tokens["refreshToken"] != nil {
            let seconds = extras["refresh_token_expires_in"].flatMap(Self.integer)
            extras["refreshTokenExpiresAt"] = .int(now + (seconds.map { min(max($0, 0), 315_360_000) * 1000 } ?? refreshLifetimeMilliseconds))
        }
        extras["refresh_token_expires_in"] = nil
        // The company and user the tokens belong to: kept as strings.
        for key in ["companyId", "userId"] {
            if let value = extras[key], let text = Self.text(value) { extras[key] = .string(text) } else { extras[key] = nil }
        }
        guard let company = extras["companyId"]?.stringValue, let user = extras["userId"]?.stringValue else {
            throw .transient("badResponse", "MarketSharp's token answer did not name the company and the user.")
        }
        tokens["extras"] = .object(extras)
        // Frontends may build API paths with it (not a secret: also the first half of Account.id).
        tokens["details"] = ["companyId": .string(company)]
        let account: JSON = .compactObject([
            "id": .string("\(company):\(user)"),
            "name": extras["userName"]?.stringValue.map(JSON.string),
            "email": extras["email"]?.stringValue.map(JSON.string),
        ])
        return ["tokens": .object(tokens), "account": account]
    }

    // MARK: - Session check

    func checkSession(_ input: JSON, _ call: PluginCall) throws(ProviderFailure) -> JSON? {
        let tokens = input["tokens"] ?? [:]
        if let expiresAt = tokens["expiresAt"]?.intValue, expiresAt <= call.now { return ["state": "expired"] }
        let config = input["profile"]?["config"] ?? [:]
        guard let base = config["baseUrl"]?.stringValue, let company = tokens["extras"]?["companyId"]?.stringValue,
            let access = tokens["accessToken"]?.stringValue
        else { return ["state": "valid"] }
        // Ask MarketSharp who the user is: the answer tells a valid session, an
        // expired token (401), or a license that is gone (403, see classify).
        let response = try call.http([
            "method": "GET", "url": .string(base + Self.fillCompany(Self.currentUserPath, company)),
            "headers": ["Authorization": .string("Bearer \(access)")], "timeoutMs": 15_000,
        ])
        switch response.status {
        case 200..<300: return ["state": "valid"]
        case 401: return ["state": "expired"]
        default:
            if let problem = LicenseProblem(status: response.status, body: response.body) {
                return ["state": "licenseRevoked", "message": .string(problem.message)]
            }
            return ["state": "unknown", "message": .string("MarketSharp could not confirm the session (HTTP \(response.status)).")]
        }
    }

    // MARK: - Requests

    func authorizeRequest(_ input: JSON, _ call: PluginCall) throws(ProviderFailure) -> JSON? {
        // Relative paths may name the user's company as {companyId}: frontends
        // do not hold it (it rides in the token answer, kept in extras).
        guard let url = input["request"]?["url"]?.stringValue, !ParsedURL.hasScheme(url),
            let company = input["tokens"]?["extras"]?["companyId"]?.stringValue
        else {
            return try call.standard(.authorizeRequest, input)
        }
        let request = (input["request"] ?? [:]).setting("url", .string(Self.fillCompany(url, company)))
        return try call.standard(.authorizeRequest, input.setting("request", request))
    }

    func classifyResponse(_ input: JSON, _ call: PluginCall) throws(ProviderFailure) -> JSON? {
        let status = Int(input["response"]?["status"]?.intValue ?? 0)
        if status == 401 { return ["outcome": "sessionExpired"] }
        // License answers count only when MarketSharp's API gave them.
        if let base = input["profile"]?["config"]?["baseUrl"]?.stringValue,
            let url = input["request"]?["url"]?.stringValue, url == base || url.hasPrefix(base + "/")
        {
            if let problem = LicenseProblem(status: status, body: input["response"]?["body"]?.stringValue ?? "") {
                return ["outcome": "licenseRevoked", "message": .string(problem.message)]
            }
        }
        return ["outcome": "ok"]
    }

    // MARK: - Helpers

    static func fillCompany(_ path: String, _ company: String) -> String {
        var result = path
        for placeholder in ["{companyId}", "%7BcompanyId%7D", "%7bcompanyId%7d"] {
            result = result.replacingEvery(placeholder, with: company)
        }
        return result
    }

    static func text(_ value: JSON) -> String? {
        if let string = value.stringValue, !string.isEmpty { return string }
        if let number = value.intValue { return String(number) }
        return nil
    }

    static func integer(_ value: JSON) -> Int64? {
        value.intValue ?? value.stringValue.flatMap { Int64($0) }
    }

    /// https, or http on a loopback IP literal without a user name (the toolkit's rule).
    static func isSecure(_ text: String) -> Bool {
        guard let url = ParsedURL(text) else { return false }
        return url.isSecureTransport && (url.scheme == "https" || url.userInfo == nil)
    }

    static func insecure(_ name: String) -> ProviderFailure {
        .configuration("insecureUrl", "The setting \"\(name)\" must be an https URL (http only on a loopback IP address).")
    }
}

/// The named-license outcomes of the requirements (README.md), as MarketSharp reports them
/// (modelled: OAuth error codes at sign-in, `errorCode` in 403 API answers).
enum LicenseProblem {
    /// "In order to log into MarketSharp, the company needs to be on the named license format."
    case orgNotOnNamedLicenses
    /// "…the next check will be whether they have a license assigned to them or not."
    case noLicenseAssigned

    init?(oauthError: String) {
        switch oauthError {
        case "named_licenses_required": self = .orgNotOnNamedLicenses
        case "no_license_assigned": self = .noLicenseAssigned
        default: return nil
        }
    }

    init?(apiErrorCode: String) {
        switch apiErrorCode {
        case "OrganizationNotOnNamedLicenses": self = .orgNotOnNamedLicenses
        case "NoLicenseAssigned": self = .noLicenseAssigned
        default: return nil
        }
    }

    /// A 403 whose JSON body names a license problem (`errorCode`, or ASP.NET's `ErrorCode`).
    init?(status: Int, body text: String) {
        guard status == 403, let body = try? JSON.parse(text),
            let code = (body["errorCode"] ?? body["ErrorCode"])?.stringValue
        else { return nil }
        self.init(apiErrorCode: code)
    }

    /// The bridge's reason word (error.data.reason of a refused sign-in).
    var reason: String {
        switch self {
        case .orgNotOnNamedLicenses: "orgNotOnNamedLicenses"
        case .noLicenseAssigned: "noLicenseAssigned"
        }
    }

    /// The required texts (their typo "account't" corrected).
    var message: String {
        switch self {
        case .orgNotOnNamedLicenses:
            "We're sorry, this application does not support your current version of MarketSharp. Please have your account's System Admin contact your MarketSharp Account Representative."
        case .noLicenseAssigned:
            "You do not have a license assigned. Please contact your system administrator to have a license assigned to you."
        }
    }

    var signInRefusal: ProviderFailure { .definitive(reason, message) }
}

/// What the library's entry point returns (`Entry/`): `MarketSharpPlugin`'s ABI tables.
public func pluginEntry() -> UnsafeRawPointer { PluginExport.entry(for: MarketSharpPlugin.self) }
