import AuthBridgePluginSDK

/// The hooks of a signed-in session: refresh, revocation, the session check, and the API
/// requests with their answers.
extension SalesforcePlugin {
    // MARK: - Refresh

    /// Salesforce's refresh grant: `format=json`, no refresh token back (the
    /// host keeps the old one; with refresh-token rotation enabled on the
    /// connected app a new one comes and replaces it), no `expires_in`.
    func refresh(_ input: JSON, _ call: PluginCall) throws(ProviderFailure) -> JSON? {
        let config = input["profile"]?["config"] ?? [:]
        guard let refreshToken = input["tokens"]?["refreshToken"]?.stringValue else {
            throw .definitive("noRefreshToken", "The Salesforce session has no refresh token; sign in again.")
        }
        guard let endpoint = config["tokenEndpoint"]?.stringValue, let clientID = config["clientId"]?.stringValue else {
            throw .configuration("missingSetting", "The profile's token endpoint or consumer key is missing.")
        }
        var form: [String: JSON] = [
            "grant_type": "refresh_token", "refresh_token": .string(refreshToken),
            "client_id": .string(clientID), "format": "json",
        ]
        form["client_secret"] = config["clientSecret"]
        let request: JSON = [
            "method": "POST", "url": .string(endpoint), "form": .object(form), "timeoutMs": 30_000,
            "headers": ["Accept": "application/json"],
        ]
        let result: JSON
        do {
            do {
                result = try Self.tokenResult(call.http(request), now: call.now)
            } catch  where error.reason == "requestInProgress" {
                // Another request with this refresh token (another device or process) is running:
                // it ends in a moment, so one more try after a short wait usually succeeds.
                call.log(.notice, "Salesforce is already processing a token request for this session; trying again in \(Self.busyRetryDelayMs) ms")
                try call.pause(milliseconds: Self.busyRetryDelayMs)
                result = try Self.tokenResult(call.http(request), now: call.now)
            }
        } catch  where error.reason != "requestInProgress" {
            // Any other 400 or 401 to a refresh is Salesforce's answer about this grant, whatever
            // its body (bridge-spec, "Standard token-endpoint answers"): the session ends.
            throw error.asRefreshRefusal
        }
        // A moved org is followed, but only to Salesforce's own hosts.
        if let instance = result["tokens"]?["extras"]?["instance_url"]?.stringValue,
            let refusal = Self.untrustedInstance(instance, config: config)
        {
            throw refusal
        }
        return result
    }

    /// A token endpoint answer as a TokenResult, or the Failure it means.
    static func tokenResult(_ response: HTTPResponse, now: Int64) throws(ProviderFailure) -> JSON {
        let body = response.json
        guard (200..<300).contains(response.status) else { throw tokenFailure(status: response.status, body: body) }
        guard var members = body?.objectValue, let access = members["access_token"]?.stringValue, !access.isEmpty else {
            throw .transient("badResponse", "Salesforce's token endpoint answered without an access token.", status: response.status)
        }
        var tokens: [String: JSON] = [
            "accessToken": .string(access),
            "tokenType": .string(bearer(members["token_type"]?.stringValue)),
        ]
        if let refresh = members["refresh_token"]?.stringValue, !refresh.isEmpty { tokens["refreshToken"] = .string(refresh) }
        if let scope = members["scope"]?.stringValue { tokens["scope"] = .string(scope) }
        // Salesforce sends no expires_in; should one come, it is honoured.
        if let seconds = members["expires_in"]?.intValue ?? members["expires_in"]?.stringValue.flatMap({ Int64($0) }) {
            tokens["expiresAt"] = .int(now + min(max(seconds, 0), 315_360_000) * 1000)
        }
        // An ID token (scope openid) is not kept: the account comes from the identity URL.
        for key in ["access_token", "refresh_token", "token_type", "scope", "expires_in", "id_token"] { members[key] = nil }
        if !members.isEmpty { tokens["extras"] = .object(members) } // instance_url, id, issued_at, signature
        tokens["details"] = details(.object(members))
        return ["tokens": .object(tokens)]
    }

    /// What frontends may know of the session (no secret): where its API is
    /// (`instanceUrl`), who it is (`identityUrl`, `orgId`, `userId`) and when
    /// Salesforce issued the access token (`issuedAt`, ms). A refresh answer
    /// brings them again (`instance_url` included), so a moved org is followed.
    static func details(_ extras: JSON) -> JSON? {
        let identity = extras["id"]?.stringValue
        let named = identity.flatMap(identityIDs)
        let issuedAt = extras["issued_at"]?.intValue ?? extras["issued_at"]?.stringValue.flatMap { Int64($0) }
        let details: JSON = .compactObject([
            "instanceUrl": extras["instance_url"]?.stringValue.map(JSON.string),
            "identityUrl": identity.map(JSON.string),
            "orgId": named.map { .string($0.organization) }, "userId": named.map { .string($0.user) },
            "issuedAt": issuedAt.map(JSON.int),
        ])
        return details.objectValue?.isEmpty == false ? details : nil
    }

    /// Salesforce's token-endpoint refusals. `invalid_grant` covers very
    /// different things there: a revoked or expired grant (the end), an
    /// inactive user or org (the end, with its own reason), and "token request
    /// is already being processed" (another request with the same refresh
    /// token is running: try again, the session is fine).
    static func tokenFailure(status: Int, body: JSON?) -> ProviderFailure {
        if status == 0 || status >= 500 {
            return .transient("serverError", "Salesforce is unavailable (HTTP \(status)).", status: status)
        }
        if status == 429 { return .transient("rateLimited", "Salesforce is rate-limiting token requests (HTTP 429).", status: status) }
        guard let error = body?["error"]?.stringValue else {
            return .transient("badResponse", "Salesforce's token endpoint answered HTTP \(status) without an OAuth error.", status: status)
        }
        let description = body?["error_description"]?.stringValue.map { String($0.prefix(300)) }
        let message = description.map { "\(error): \($0)" } ?? error
        let lowered = description?.lowercased() ?? ""
        if lowered.hasSubstring("already being processed") {
            return .transient(
                "requestInProgress",
                "Salesforce is already processing a token request for this session (\(message)); try again.", status: status)
        }
        if error == "inactive_user" || lowered.hasPrefix("inactive user") {
            return .definitive("inactive_user", message, status: status)
        }
        if error == "inactive_org" || lowered.hasPrefix("inactive org") {
            return .definitive("inactive_org", message, status: status)
        }
        switch error {
        case "invalid_grant", "invalid_client", "invalid_client_id", "invalid_client_credentials", "unauthorized_client", "access_denied":
            return .definitive(error, message, status: status)
        case "rate_limit_exceeded":
            return .transient("rateLimited", message, status: status)
        default:
            return .transient(error, message, status: status)
        }
    }

    static func bearer(_ type: String?) -> String {
        guard let type, !type.isEmpty, type.lowercased() != "bearer" else { return "Bearer" }
        return type
    }

    // MARK: - Revocation

    /// `POST /services/oauth2/revoke` with `token=`: the refresh token, which
    /// revokes the grant and every access token obtained with it (or the
    /// access token alone when there is no refresh token).
    func revoke(_ input: JSON, _ call: PluginCall) throws(ProviderFailure) -> JSON? {
        let config = input["profile"]?["config"] ?? [:]
        guard let endpoint = config["revocationEndpoint"]?.stringValue else {
            return ["revoked": [], "failures": [["token": "all", "reason": "unsupported", "message": "The profile has no revocation endpoint."]]]
        }
        let tokens = input["tokens"] ?? [:]
        let (token, revokes): (String?, [JSON]) =
            if let refresh = tokens["refreshToken"]?.stringValue {
                (refresh, ["refresh_token", "access_token"])
            } else {
                (tokens["accessToken"]?.stringValue, ["access_token"])
            }
        guard let token else { return ["revoked": [], "failures": []] }
        let name = revokes.first?.stringValue ?? "access_token"
        do {
            let response = try Self.revokeRequest(token, endpoint: endpoint, call)
            if (200..<300).contains(response.status) { return ["revoked": .array(revokes), "failures": []] }
            let error = response.json?["error"]?.stringValue
            let description = response.json?["error_description"]?.stringValue.map { String($0.prefix(200)) }
            let detail = [error, description].compactMap { $0 }.joined(separator: ": ")
            return [
                "revoked": [],
                "failures": [
                    [
                        "token": .string(name), "reason": .string(error ?? "httpStatus"),
                        "message": .string(
                            "Salesforce's revoke endpoint answered HTTP \(response.status)" + (detail.isEmpty ? "." : " (\(detail)).")),
                    ]
                ],
            ]
        } catch {
            return ["revoked": [], "failures": [["token": .string(name), "reason": .string(error.reason), "message": .string(error.message)]]]
        }
    }

    static func revokeRequest(_ token: String, endpoint: String, _ call: PluginCall) throws(ProviderFailure) -> HTTPResponse {
        try call.http(["method": "POST", "url": .string(endpoint), "form": ["token": .string(token)], "timeoutMs": 10_000])
    }

    /// Revokes a grant that was just issued but cannot be used (the sign-in
    /// fails), so that no live grant is left behind at Salesforce. Best effort:
    /// the sign-in's own failure is what the user sees.
    static func discard(_ tokens: JSON?, config: JSON, _ call: PluginCall) {
        guard let endpoint = config["revocationEndpoint"]?.stringValue,
            let token = tokens?["refreshToken"]?.stringValue ?? tokens?["accessToken"]?.stringValue
        else { return }
        do {
            let response = try revokeRequest(token, endpoint: endpoint, call)
            if !(200..<300).contains(response.status) {
                call.log(
                    .warning,
                    "the unusable sign-in's grant could not be revoked (HTTP \(response.status)); revoke it under Connected Apps OAuth Usage")
            }
        } catch {
            call.log(.warning, "the unusable sign-in's grant could not be revoked (\(error.reason)); revoke it under Connected Apps OAuth Usage")
        }
    }

    // MARK: - Session check

    /// The identity URL with the access token: 200 = valid; 401, or 403
    /// `Bad_OAuth_Token` / `Missing_OAuth_Token` = the access token is dead
    /// → `expired` (the host then refreshes, and the refresh endpoint decides
    /// whether the grant still stands); 404 `Inactive` = `expired` as well (the
    /// refresh then reports the inactive user with Salesforce's words); any
    /// other answer = `unknown` (the host answers `offline`, tokens kept).
    func checkSession(_ input: JSON, _ call: PluginCall) throws(ProviderFailure) -> JSON? {
        let tokens = input["tokens"] ?? [:]
        guard let idURL = tokens["extras"]?["id"]?.stringValue, let access = tokens["accessToken"]?.stringValue else {
            return try call.standard(.checkSession, input)
        }
        let response = try call.http([
            "method": "GET", "url": .string(idURL), "timeoutMs": 15_000,
            "headers": ["Authorization": .string("Bearer \(access)")],
        ])
        let code = Self.identityErrorCode(response.body)
        switch response.status {
        case 200:
            return ["state": "valid"]
        case 401:
            return ["state": "expired"]
        case 403 where code == "Bad_OAuth_Token" || code == "Missing_OAuth_Token":
            return ["state": "expired"]
        case 404 where code == "Inactive":
            return ["state": "expired"]
        default:
            let what = code.map { " (\($0))" } ?? ""
            return [
                "state": "unknown",
                "message": .string("Salesforce's identity service answered HTTP \(response.status)\(what); the session could not be confirmed."),
            ]
        }
    }

    /// The identity service's error bodies are a bare code such as
    /// `Bad_OAuth_Token`; anything else is not repeated.
    static func identityErrorCode(_ body: String) -> String? {
        let text = body.trimmingSpaces
        guard !text.isEmpty, text.count <= 40, text.allSatisfy({ $0.isLetter || $0 == "_" }) else { return nil }
        return text
    }

    // MARK: - Requests

    /// Relative URLs are resolved against the session's `instance_url`;
    /// absolute ones must stay on the org's instance or its login/identity
    /// host, so the access token never reaches another server. No URL (a
    /// `getAccessToken` call) gets only the header.
    func authorizeRequest(_ input: JSON, _ call: PluginCall) throws(ProviderFailure) -> JSON? {
        let tokens = input["tokens"] ?? [:]
        guard let access = tokens["accessToken"]?.stringValue else {
            throw .definitive("noTokens", "The Salesforce session has no access token.")
        }
        var request = input["request"]?.objectValue ?? [:]
        let extras = tokens["extras"] ?? [:]
        // A session stored before instance_url was checked is checked here, before any use.
        var instance = extras["instance_url"]?.stringValue
        if let named = instance, let refusal = Self.untrustedInstance(named, config: input["profile"]?["config"] ?? [:]) {
            if let url = request["url"]?.stringValue, !ParsedURL.hasScheme(url) { throw refusal }
            instance = nil
        }
        if let url = request["url"]?.stringValue {
            if ParsedURL.hasScheme(url) {
                let allowed = [instance, input["profile"]?["config"]?["loginHost"]?.stringValue, extras["id"]?.stringValue]
                    .compactMap { $0.flatMap(ParsedURL.init)?.origin }
                guard let target = ParsedURL(url), allowed.contains(target.origin) else {
                    throw .configuration(
                        "foreignUrl",
                        "Salesforce tokens are only sent to the org's instance (\(instance ?? "unknown")) and its login host; use a path such as /services/data/v60.0/…."
                    )
                }
            } else {
                guard let instance else {
                    throw .configuration("relativeUrl", "The Salesforce session does not name its instance_url; give an absolute URL.")
                }
                request["url"] = .string(Self.join(instance, url))
            }
        }
        var headers = request["headers"]?.objectValue ?? [:]
        for name in headers.keys where name.lowercased() == "authorization" { headers[name] = nil }
        headers["Authorization"] = .string("\(Self.bearer(tokens["tokenType"]?.stringValue)) \(access)")
        request["headers"] = .object(headers)
        return ["request": .object(request), "cookies": []]
    }

    static func join(_ base: String, _ path: String) -> String {
        var base = base
        while base.hasSuffix("/") { base.removeLast() }
        return path.hasPrefix("/") ? base + path : base + "/" + path
    }

    /// 401 from the REST API (`INVALID_SESSION_ID`, "Session expired or
    /// invalid") and the identity service's 403 `Bad_OAuth_Token` mean the
    /// access token is dead: refresh and replay. Anything else is the answer.
    func classifyResponse(_ input: JSON, _ call: PluginCall) throws(ProviderFailure) -> JSON? {
        let status = input["response"]?["status"]?.intValue ?? 0
        let body = input["response"]?["body"]?.stringValue ?? ""
        if status == 401 { return ["outcome": "sessionExpired"] }
        if status == 403, Self.identityErrorCode(body) == "Bad_OAuth_Token" { return ["outcome": "sessionExpired"] }
        return ["outcome": "ok"]
    }
}
