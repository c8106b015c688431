import AuthBridgePluginSDK

/// Salesforce (production, sandbox, My Domain): OAuth 2.0 web-server flow
/// with PKCE against a connected app, the org's API at the `instance_url`
/// the token endpoint names, and the user's identity from the identity URL.
///
/// What differs from standard OAuth 2.0, and so what the hooks do:
/// - `configure`: the login host (production, sandbox or a My Domain URL)
///   gives the three endpoints; scopes always include `refresh_token`.
/// - `begin_sign_in`: scopes of the request also get `refresh_token`.
/// - `complete_sign_in`: the standard exchange, then the account from the
///   identity URL (`id`) the token response carries; an answer the session
///   cannot use (no https `instance_url`, or one outside Salesforce's own
///   domains and the login host) has its fresh grant revoked.
/// - `refresh`: `format=json`; no refresh token comes back (the host keeps
///   the old one); Salesforce's refusals are told apart ("inactive user",
///   "inactive org", and the concurrent-request refusal, which is NOT the end
///   of the session although it arrives as `invalid_grant`, and is tried
///   once more after a short wait); an `instance_url` outside the trusted
///   domains is refused.
/// - `revoke`: one `token=` POST (the refresh token ends the whole grant).
/// - `check_session`: the identity URL answers for the session.
/// - `authorize_request`: relative URLs go to the session's `instance_url`;
///   the token is only ever sent to the org's own hosts.
/// - `classify_response`: 401 (`INVALID_SESSION_ID`), and the identity
///   service's 403 `Bad_OAuth_Token`, mean "refresh and replay".
///
/// Token responses have no `expires_in` (session lifetime is an org policy):
/// `expiresAt` stays null and expiry is learnt from a 401.
struct SalesforcePlugin: ProviderPlugin {
    static let id = "salesforce"
    static let implementedHooks: Set<PluginHook>? = [
        .configure, .beginSignIn, .completeSignIn, .refresh, .revoke, .checkSession, .authorizeRequest, .classifyResponse,
    ]

    static let productionHost = "https://login.salesforce.com"
    static let sandboxHost = "https://test.salesforce.com"
    static let defaultScopes = ["api", "refresh_token"]
    /// Salesforce's own domains: an org's `instance_url` must be one of them or
    /// under one (or on the login host, or under a domain of the profile's
    /// `instanceDomains`), so that the access token never goes elsewhere.
    /// Source: the Salesforce CLI's list of Salesforce-owned domains
    /// (forcedotcom/sfdx-core, src/util/sfdcUrl.ts: `isSalesforceDomain`, which
    /// cites Salesforce Help article 000003652, and `toLightningDomain` for
    /// My Domain's `my.salesforce.mil` and `my-salesforce.com` forms); see README.md.
    static let salesforceDomains = ["salesforce.com", "force.com", "cloudforce.com", "my-salesforce.com", "salesforce.mil", "crmforce.mil"]
    /// How long to wait before trying a refresh again that Salesforce refused
    /// with "token request is already being processed" (another request with
    /// the same refresh token was running; it takes a moment).
    static let busyRetryDelayMs = 1_000
    /// Parameters the host itself puts in the authorization URL.
    static let reservedAuthorizationParams: Set<String> = [
        "response_type", "client_id", "redirect_uri", "scope", "state", "nonce", "code_challenge", "code_challenge_method", "login_hint",
    ]

    init(host: PluginHost) throws {}

    func describe() -> JSON {
        [
            "displayName": "Salesforce",
            "flows": ["browser", "external"],
            "capabilities": ["revoke", "checkSession", "fetch"],
            "settings": [
                "type": "object",
                "required": ["clientId"],
                "properties": [
                    "clientId": ["type": "string", "description": "The connected app's consumer key"],
                    "clientSecret": [
                        "type": "string",
                        "description":
                            "The consumer secret, only when the connected app requires it for the web-server and refresh flows (public apps use PKCE alone)",
                    ],
                    "loginHost": [
                        "type": "string",
                        "description":
                            "\"production\" (https://login.salesforce.com, the default), \"sandbox\" (https://test.salesforce.com), or the org's My Domain login URL (https://acme.my.salesforce.com, or a bare host name)",
                    ],
                    "redirectUri": ["type": "string", "description": "The connected app's callback URL (external flow)"],
                    "scopes": [
                        "type": "array", "items": ["type": "string"],
                        "description": "OAuth scopes (default api refresh_token); refresh_token is always added",
                    ],
                    "extraAuthorizationParams": [
                        "type": "object",
                        "description": "Added to the authorization URL, e.g. {\"prompt\": \"login\"} or {\"display\": \"touch\"}",
                    ],
                    "instanceDomains": [
                        "type": "array", "items": ["type": "string"],
                        "description":
                            "Further domains the org's instance_url may be on (e.g. [\"example.gov\"]), besides Salesforce's own and the login host",
                    ],
                ],
            ],
        ]
    }

    // MARK: - Configuration

    func configure(_ input: JSON, _ call: PluginCall) throws(ProviderFailure) -> JSON? {
        let settings = input["settings"] ?? [:]
        guard let clientID = settings["clientId"]?.stringValue, !clientID.isEmpty else {
            throw .configuration("missingSetting", "The profile needs \"clientId\": the connected app's consumer key.")
        }
        let loginHost = try Self.loginHostURL(settings["loginHost"]?.stringValue ?? "production")
        var scopes: [String] = []
        if let given = settings["scopes"]?.arrayValue {
            for scope in given {
                guard let text = scope.stringValue, !text.isEmpty, !text.contains(" ") else {
                    throw .configuration(
                        "invalidSettings", "\"scopes\" must be a list of scope names without spaces (e.g. [\"api\", \"refresh_token\"]).")
                }
                scopes.append(text)
            }
        } else {
            scopes = Self.defaultScopes
        }
        var config: [String: JSON] = [
            "clientId": .string(clientID),
            "loginHost": .string(loginHost),
            "authorizationEndpoint": .string(loginHost + "/services/oauth2/authorize"),
            "tokenEndpoint": .string(loginHost + "/services/oauth2/token"),
            "revocationEndpoint": .string(loginHost + "/services/oauth2/revoke"),
            "scopes": .array(Self.withRefreshScope(scopes).map(JSON.string)),
        ]
        if let secret = settings["clientSecret"]?.stringValue, !secret.isEmpty { config["clientSecret"] = .string(secret) }
        if let redirect = settings["redirectUri"]?.stringValue, !redirect.isEmpty { config["redirectUri"] = .string(redirect) }
        if let extra = settings["extraAuthorizationParams"] {
            guard let members = extra.objectValue else {
                throw .configuration("invalidSettings", "\"extraAuthorizationParams\" must be an object of parameter names to strings.")
            }
            for (name, value) in members {
                guard value.stringValue != nil else {
                    throw .configuration("invalidSettings", "\"extraAuthorizationParams.\(name)\" must be a string.")
                }
                guard !Self.reservedAuthorizationParams.contains(name) else {
                    throw .configuration("invalidSettings", "\"extraAuthorizationParams\" must not set \"\(name)\": AuthBridge sets it.")
                }
            }
            config["extraAuthorizationParams"] = extra
        }
        if let given = settings["instanceDomains"] {
            config["instanceDomains"] = .array(try Self.instanceDomains(given).map(JSON.string))
        }
        return .object(config)
    }

    /// The `instanceDomains` setting: domain names, lower-cased, a leading `*.` or `.` dropped.
    static func instanceDomains(_ setting: JSON) throws(ProviderFailure) -> [String] {
        let problem = ProviderFailure.configuration(
            "invalidSettings",
            "\"instanceDomains\" must be a list of domain names such as [\"example.gov\"] (a host on one of them, or under it, may be the org's instance_url)."
        )
        guard let items = setting.arrayValue else { throw problem }
        var domains: [String] = []
        for item in items {
            guard var text = item.stringValue?.lowercased() else { throw problem }
            if text.hasPrefix("*.") { text.removeFirst(2) } else if text.hasPrefix(".") { text.removeFirst() }
            let labels = text.split(separator: ".", omittingEmptySubsequences: false)
            guard labels.count >= 2,
                labels.allSatisfy({ label in
                    !label.isEmpty && label.count <= 63 && label.first != "-" && label.last != "-"
                        && label.allSatisfy { $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "-") }
                }), labels.last!.contains(where: \.isLetter)
            else { throw problem } // a name, not an IP address
            domains.append(text)
        }
        return domains
    }

    /// Why `instance` may not receive the session's token, or nil when it may: it must be https
    /// (http only on a loopback IP), without user info, and on Salesforce's own domains, the
    /// login host, or a domain of the profile's `instanceDomains`.
    static func untrustedInstance(_ instance: String, config: JSON) -> ProviderFailure? {
        guard let url = ParsedURL(instance) else {
            return .transient("badResponse", "Salesforce named an instance_url that is not a URL.")
        }
        guard url.isSecureTransport else {
            return .configuration("insecureUrl", "Salesforce named an instance_url that is not https; its API cannot be used safely.")
        }
        let extra = config["instanceDomains"]?.arrayValue?.compactMap(\.stringValue) ?? []
        if url.userInfo == nil { // user info has no place in an API base (and hides the real host)
            if let login = config["loginHost"]?.stringValue.flatMap(ParsedURL.init), login.host == url.host { return nil }
            if (salesforceDomains + extra).contains(where: { url.host == $0 || url.host.hasSuffix("." + $0) }) { return nil }
        }
        return .configuration(
            "untrustedInstance",
            "Salesforce named the instance_url host \(url.host), which is not a Salesforce domain (\(salesforceDomains.joined(separator: ", "))) nor the login host; no token is sent there. If your org's API really is on that host, add its domain to the profile setting \"instanceDomains\"."
        )
    }

    /// The login host's base URL (no trailing slash) for a `loginHost` setting.
    static func loginHostURL(_ setting: String) throws(ProviderFailure) -> String {
        let value = setting.trimmingSpaces
        switch value.lowercased() {
        case "production", "login", "login.salesforce.com": return productionHost
        case "sandbox", "test", "test.salesforce.com": return sandboxHost
        default: break
        }
        let candidate = value.hasSubstring("://") ? value : "https://" + value
        guard let url = ParsedURL(candidate), !url.host.isEmpty, url.userInfo == nil, url.query == nil, url.fragment == nil else {
            throw .configuration(
                "invalidSettings",
                "\"loginHost\" must be \"production\", \"sandbox\", or the org's My Domain login URL such as https://acme.my.salesforce.com.")
        }
        guard url.isSecureTransport else {
            throw .configuration("insecureUrl", "\"loginHost\" must be an https URL (http only on a loopback IP address).")
        }
        var path = url.path
        while path.hasSuffix("/") { path.removeLast() }
        return url.origin + path
    }

    static func withRefreshScope(_ scopes: [String]) -> [String] {
        scopes.contains("refresh_token") ? scopes : scopes + ["refresh_token"]
    }

    // MARK: - Sign-in

    func beginSignIn(_ input: JSON, _ call: PluginCall) throws(ProviderFailure) -> JSON? {
        guard input["redirectUri"]?.stringValue != nil else {
            throw .configuration("missingSetting", "The external flow needs the profile setting \"redirectUri\": the connected app's callback URL.")
        }
        let config = input["profile"]?["config"] ?? [:]
        let requested = (input["scopes"] ?? config["scopes"])?.arrayValue?.compactMap(\.stringValue) ?? Self.defaultScopes
        // Without refresh_token Salesforce issues no refresh token: the session would end with its first 401.
        let scopes = Self.withRefreshScope(requested.isEmpty ? Self.defaultScopes : requested)
        return try call.standard(.beginSignIn, input.setting("scopes", .array(scopes.map(JSON.string))))
    }

    func completeSignIn(_ input: JSON, _ call: PluginCall) throws(ProviderFailure) -> JSON? {
        // The standard step checks the callback (error, state, code) and redeems the code with the PKCE verifier.
        let result = try call.standard(.completeSignIn, input)
        let config = input["profile"]?["config"] ?? [:]
        // An ID token (scope openid) is not kept: the account comes from the identity URL.
        guard let issued = result["tokens"], let access = issued["accessToken"]?.stringValue else {
            Self.discard(result["tokens"], config: config, call)
            throw .transient("badResponse", "Salesforce answered the sign-in without an access token.")
        }
        let extras = issued["extras"] ?? [:]
        guard let instance = extras["instance_url"]?.stringValue, ParsedURL(instance) != nil else {
            Self.discard(issued, config: config, call)
            throw .transient("badResponse", "Salesforce answered the sign-in without the org's instance_url.")
        }
        if let refusal = Self.untrustedInstance(instance, config: config) {
            Self.discard(issued, config: config, call)
            throw refusal
        }
        let tokens = issued.setting("idToken", nil).setting("details", Self.details(extras))
        if tokens["refreshToken"]?.stringValue == nil {
            call.log(
                .warning,
                "Salesforce issued no refresh token (is refresh_token among the connected app's OAuth scopes?); the session ends when the org's session does"
            )
        }
        let account = identify(idURL: extras["id"]?.stringValue, accessToken: access, call)
        return .compactObject(["tokens": tokens, "account": account])
    }

    /// The account: `<organization id>/<user id>` as the identity URL names
    /// them, with the display name and email its service returns. When that
    /// service cannot be reached the sign-in still succeeds, named from the URL.
    func identify(idURL: String?, accessToken: String, _ call: PluginCall) -> JSON? {
        guard let idURL else {
            call.log(.warning, "Salesforce's token response carried no identity URL (id); the account stays unnamed")
            return nil
        }
        let named = Self.identityIDs(idURL)
        var identity: JSON?
        do {
            let response = try call.http([
                "method": "GET", "url": .string(idURL), "timeoutMs": 15_000,
                "headers": ["Authorization": .string("Bearer \(accessToken)")],
            ])
            if response.status == 200, let body = response.json, body.objectValue != nil {
                identity = body
            } else {
                call.log(.notice, "the Salesforce identity service answered HTTP \(response.status); the account is named from the identity URL")
            }
        } catch {
            call.log(.notice, "the Salesforce identity service could not be reached (\(error.reason)); the account is named from the identity URL")
        }
        if let named, let stated = identity,
            (stated["user_id"]?.stringValue.map { $0 != named.user } ?? false)
                || (stated["organization_id"]?.stringValue.map { $0 != named.organization } ?? false)
        {
            call.log(.warning, "the Salesforce identity service named another user than the identity URL; only the URL is trusted")
            identity = nil
        }
        guard let organization = named?.organization ?? identity?["organization_id"]?.stringValue,
            let user = named?.user ?? identity?["user_id"]?.stringValue
        else { return nil }
        let name = identity?["display_name"]?.stringValue ?? identity?["username"]?.stringValue
        return .compactObject([
            "id": .string("\(organization)/\(user)"), "name": name.map(JSON.string),
            "email": identity?["email"]?.stringValue.map(JSON.string),
        ])
    }

    /// The organization and user ids at the end of an identity URL
    /// (`https://login.salesforce.com/id/<orgId>/<userId>`).
    static func identityIDs(_ url: String) -> (organization: String, user: String)? {
        guard let parsed = ParsedURL(url) else { return nil }
        let parts = parsed.path.split(separator: "/").map(String.init)
        guard let index = parts.lastIndex(of: "id"), parts.count == index + 3 else { return nil }
        let organization = parts[index + 1], user = parts[index + 2]
        guard organization.allSatisfy({ $0.isLetter || $0.isNumber }), user.allSatisfy({ $0.isLetter || $0.isNumber }) else { return nil }
        return (organization, user)
    }
}

extension String {
    var trimmingSpaces: String {
        var text = Substring(self)
        while let first = text.first, first.isWhitespace { text.removeFirst() }
        while let last = text.last, last.isWhitespace { text.removeLast() }
        return String(text)
    }
}

/// What the library's entry point returns (`Entry/`): `SalesforcePlugin`'s ABI tables.
public func pluginEntry() -> UnsafeRawPointer { PluginExport.entry(for: SalesforcePlugin.self) }
