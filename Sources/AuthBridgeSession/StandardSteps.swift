import AuthBridgeCrypto
import AuthBridgeJSON
import AuthBridgeNetwork
import AuthBridgePluginHost
import AuthBridgeRedaction
import AuthBridgeURL

/// The host's standard OAuth 2.0 behaviour for each hook: what runs when a
/// plugin leaves a hook out (or answers AB_DEFAULT), and what a plugin gets
/// from `host->standard` to adjust instead of rewriting a step.
///
/// Every step reads the hook's input JSON (bridge-spec, "Plugin ABI") and
/// blocks on HTTP, so it runs on a plugin worker thread.
public enum StandardSteps {
    public static func run(_ hook: PluginHook, input: JSON, call: HookCall, http: HookHTTP) -> Result<JSON, ProviderFailure> {
        let config = input["profile"]?["config"] ?? [:]
        switch hook {
        case .describe:
            return .failure(ProviderFailure(.internal, reason: "unsupported", message: "describe has no standard implementation."))
        case .configure:
            return configure(input["settings"] ?? [:], call: call, http: http)
        case .beginSignIn:
            if input["flow"]?.stringValue == "device" { return beginDeviceAuthorization(input, config: config, call: call, http: http) }
            return beginSignIn(input, config: config, call: call, http: http)
        case .completeSignIn:
            if input["flow"]?.stringValue == "clientCredentials" { return clientCredentials(input, config: config, call: call, http: http) }
            return completeSignIn(input, config: config, call: call, http: http)
        case .refresh:
            return refresh(input, config: config, call: call, http: http)
        case .revoke:
            return revoke(input, config: config, call: call, http: http)
        case .exchangeToken:
            return exchangeToken(input, config: config, call: call, http: http)
        case .checkSession:
            return .success(checkSession(input))
        case .authorizeRequest:
            return authorizeRequest(input, config: config)
        case .classifyResponse:
            return .success(classifyResponse(input))
        }
    }

    // MARK: - Configuration

    /// The settings as configuration; with an `issuer` and no endpoints, the
    /// endpoints come from the issuer's discovery document (OpenID Connect
    /// Discovery, falling back to RFC 8414), whose `issuer` must match exactly.
    /// Explicit settings win over discovered values.
    static func configure(_ settings: JSON, call: HookCall, http: HookHTTP) -> Result<JSON, ProviderFailure> {
        discover(settings, call: call, http: http).flatMap { config in
            if let problem = pushedAuthorizationProblem(config) ?? ClientAuthentication.problem(config) ?? resourcesProblem(config) {
                return .failure(problem)
            }
            return .success(config)
        }
    }

    static func discover(_ settings: JSON, call: HookCall, http: HookHTTP) -> Result<JSON, ProviderFailure> {
        guard case .object(var config) = settings else { return .success(settings) }
        let explicitEndpoints = config["authorizationEndpoint"] != nil && config["tokenEndpoint"] != nil
        // A protected resource's URL alone (RFC 9728): it names its authorization server.
        let fromResource = config["issuer"] == nil && !explicitEndpoints && config["resource"] != nil
        if fromResource {
            switch discoverProtectedResource(config, call: call, http: http) {
            case .failure(let failure): return .failure(failure)
            case .success(let found): config = found
            }
        }
        config = withResourceSetting(config)
        guard let issuer = config["issuer"]?.stringValue, !explicitEndpoints else {
            return choosingDPoP(config, advertised: nil, discovered: false)
        }
        guard let issuerURL = ParsedURL(issuer), issuerURL.isSecureTransport else { return .failure(insecure("issuer")) }
        let trimmed = issuer.hasSuffix("/") ? String(issuer.dropLast()) : issuer
        let pathSuffix = issuerURL.path == "/" ? "" : issuerURL.path
        let openID = trimmed + "/.well-known/openid-configuration"
        let oauth = issuerURL.origin + "/.well-known/oauth-authorization-server" + pathSuffix
        // An issuer a resource named is read as MCP clients read theirs: RFC 8414 first, then
        // OpenID Connect Discovery with the path inserted, then appended; a configured issuer as
        // before (OpenID Connect first, RFC 8414 filling what it lacks).
        let candidates =
            fromResource
            ? [oauth] + (pathSuffix.isEmpty ? [] : [issuerURL.origin + "/.well-known/openid-configuration" + pathSuffix]) + [openID]
            : [openID, oauth]
        var codeChallengeMethods: [String]?
        var lastFailure = ProviderFailure(.transient, reason: "discovery", message: "The issuer's discovery document could not be read.")
        var found = false
        var dpopAlgorithms: [String]?
        // OpenID Connect Discovery first; RFC 8414 metadata fills what it lacks (e.g. revocation).
        documents: for url in candidates {
            let answer: JSON
            switch http.perform(["method": "GET", "url": .string(url), "timeoutMs": 15_000], call: call) {
            case .failure(let failure):
                lastFailure = failure
                // Both documents live on the issuer's origin: one it did not answer for, it will not answer for either.
                if SessionError.transportReasons.contains(failure.reason) || failure.kind == .cancelled { break documents }
                continue
            case .success(let value): answer = value
            }
            guard answer["status"]?.intValue == 200, let document = try? JSON.parse(answer["body"]?.stringValue ?? ""),
                case .object = document
            else { continue }
            guard document["issuer"]?.stringValue == issuer else {
                return .failure(
                    ProviderFailure(
                        .configuration, reason: "issuerMismatch",
                        message: "The discovery document at \(url) names another issuer than \"\(issuer)\"; refusing it."))
            }
            found = true
            let mapping = [
                ("authorizationEndpoint", "authorization_endpoint"), ("tokenEndpoint", "token_endpoint"),
                ("revocationEndpoint", "revocation_endpoint"), ("userinfoEndpoint", "userinfo_endpoint"),
                ("deviceAuthorizationEndpoint", "device_authorization_endpoint"), ("jwksUri", "jwks_uri"),
                ("pushedAuthorizationRequestEndpoint", "pushed_authorization_request_endpoint"), ("endSessionEndpoint", "end_session_endpoint"),
            ]
            for (key, member) in mapping where config[key] == nil {
                guard let value = document[member]?.stringValue else { continue }
                guard let endpoint = ParsedURL(value), endpoint.isSecureTransport else { return .failure(insecure(member)) }
                config[key] = .string(value)
            }
            if config["issuerInCallback"] == nil, document["authorization_response_iss_parameter_supported"]?.boolValue == true {
                config["issuerInCallback"] = true
            }
            if config["tokenEndpointAuthMethods"] == nil, let methods = document["token_endpoint_auth_methods_supported"]?.arrayValue {
                config["tokenEndpointAuthMethods"] = .array(methods.filter { $0.stringValue != nil })
            }
            if dpopAlgorithms == nil { dpopAlgorithms = document["dpop_signing_alg_values_supported"]?.arrayValue?.compactMap(\.stringValue) }
            if config["requirePushedAuthorizationRequests"] == nil, document["require_pushed_authorization_requests"]?.boolValue == true {
                config["requirePushedAuthorizationRequests"] = true
            }
            if config["registrationEndpoint"] == nil, let value = document["registration_endpoint"]?.stringValue {
                guard ParsedURL(value)?.isSecureTransport == true else { return .failure(insecure("registration_endpoint")) }
                config["registrationEndpoint"] = .string(value)
            }
            if document["client_id_metadata_document_supported"]?.boolValue == true { config["clientIdMetadataDocuments"] = true }
            if codeChallengeMethods == nil {
                codeChallengeMethods = document["code_challenge_methods_supported"]?.arrayValue?.compactMap(\.stringValue)
            }
            if config["scopesSupported"] == nil, let scopes = document["scopes_supported"]?.arrayValue, !scopes.isEmpty {
                config["scopesSupported"] = .array(scopes.filter { $0.stringValue != nil })
            }
            if fromResource || config["revocationEndpoint"] != nil { break }
        }
        guard found else { return .failure(lastFailure) }
        // PKCE with S256 or nothing (RFC 9700 §2.1.1): a server that lists its methods without S256
        // would take the verifier in the clear or not at all. The MCP authorization spec also
        // refuses a server that lists none, for the servers a resource names.
        if let methods = codeChallengeMethods ?? (fromResource ? [] : nil), !methods.contains("S256") {
            return .failure(
                ProviderFailure(
                    .configuration, reason: "pkceUnsupported",
                    message: "The authorization server \(issuer) "
                        + (methods.isEmpty
                            ? "does not say that it supports PKCE (no code_challenge_methods_supported)"
                            : "supports PKCE only with \(methods.map { providerText($0) }.joined(separator: ", "))")
                        + "; AuthBridge signs in only with S256 (RFC 7636, RFC 9700)."))
        }
        return choosingDPoP(config, advertised: dpopAlgorithms, discovered: true)
    }

    /// The profile setting `dpop` ("auto", the default: when the server advertises it; true:
    /// required; false) against what the server advertises (RFC 9449 §5.1,
    /// `dpop_signing_alg_values_supported`), as the configuration's `dpopAlgorithm`: the
    /// algorithm of the session keys, or absent (bearer tokens). Explicit endpoints without
    /// discovery say nothing of DPoP: only `true` turns it on there, with ES256.
    static func choosingDPoP(_ settings: [String: JSON], advertised: [String]?, discovered: Bool) -> Result<JSON, ProviderFailure> {
        var config = settings
        config["dpopAlgorithm"] = nil
        let setting = config["dpop"] ?? "auto"
        guard setting != false else { return .success(.object(config)) }
        guard setting == true || setting == "auto" else {
            return .failure(
                ProviderFailure(.configuration, reason: "invalidSettings", message: "The setting \"dpop\" must be \"auto\", true or false."))
        }
        let supported = SignatureAlgorithm.allCases.map(\.rawValue).joined(separator: ", ")
        if let advertised {
            if let algorithm = SignatureAlgorithm.preferred(among: advertised) {
                config["dpopAlgorithm"] = .string(algorithm.rawValue)
            } else if setting == true {
                return .failure(
                    ProviderFailure(
                        .configuration, reason: "dpopUnsupported",
                        message: "The profile requires DPoP (\"dpop\": true), but the server signs proofs only with "
                            + "\(advertised.map { "\"\(providerText($0))\"" }.joined(separator: ", ")), none of which AuthBridge makes (\(supported))."
                    ))
            }
        } else if setting == true {
            guard !discovered else {
                return .failure(
                    ProviderFailure(
                        .configuration, reason: "dpopUnsupported",
                        message: "The profile requires DPoP (\"dpop\": true), but the server's metadata does not advertise it "
                            + "(no dpop_signing_alg_values_supported)."))
            }
            config["dpopAlgorithm"] = .string(SignatureAlgorithm.es256.rawValue)
        }
        return .success(.object(config))
    }

    // MARK: - Sign-in

    /// The authorization request: a URL with every parameter, or (RFC 9126) the parameters pushed
    /// with `http` and a URL that names them. Without `http`, a pushed request cannot be made.
    static func beginSignIn(_ input: JSON, config: JSON, call: HookCall? = nil, http: HookHTTP? = nil) -> Result<JSON, ProviderFailure> {
        guard let endpoint = config["authorizationEndpoint"]?.stringValue, let url = ParsedURL(endpoint) else {
            return .failure(missingSetting("authorizationEndpoint"))
        }
        guard url.isSecureTransport else { return .failure(insecure("authorizationEndpoint")) }
        guard let clientID = config["clientId"]?.stringValue else { return .failure(missingSetting("clientId")) }
        var pairs: [(String, String)] = [("response_type", "code"), ("client_id", clientID)]
        if let redirect = input["redirectUri"]?.stringValue { pairs.append(("redirect_uri", redirect)) }
        let scopes = (input["scopes"] ?? config["scopes"])?.arrayValue?.compactMap(\.stringValue) ?? []
        if !scopes.isEmpty { pairs.append(("scope", scopes.joined(separator: " "))) }
        for key in ["state", "nonce"] {
            if let value = input[key]?.stringValue { pairs.append((key, value)) }
        }
        if let challenge = input["codeChallenge"]?.stringValue {
            pairs.append(("code_challenge", challenge))
            pairs.append(("code_challenge_method", input["codeChallengeMethod"]?.stringValue ?? "S256"))
        }
        if let hint = input["loginHint"]?.stringValue { pairs.append(("login_hint", hint)) }
        // RFC 8707 §2.1: one `resource` per protected resource the sign-in is for.
        for resource in resources(input, config: config) { pairs.append(("resource", resource)) }
        // RFC 9449 §10: binds the code to the session's DPoP key.
        if let thumbprint = input["dpopJkt"]?.stringValue { pairs.append(("dpop_jkt", thumbprint)) }
        for (key, value) in (config["extraAuthorizationParams"]?.objectValue ?? [:]).sorted(by: { $0.key < $1.key }) {
            // PKCE, state and the redirect are the host's: a setting must not weaken or replace them.
            guard !reservedAuthorizationParams.contains(key) else {
                return .failure(
                    ProviderFailure(
                        .configuration, reason: "invalidSettings",
                        message: "\"extraAuthorizationParams\" must not set \"\(key)\": AuthBridge sets it."))
            }
            if let value = value.stringValue { pairs.append((key, value)) }
        }
        // OpenID Connect Core §11: offline_access is granted only with prompt=consent (idpyoidc
        // refuses the whole request otherwise, and the user is left on an error page); a profile's
        // own prompt wins.
        if scopes.contains("offline_access"), scopes.contains("openid"), !pairs.contains(where: { $0.0 == "prompt" }) {
            pairs.append(("prompt", "consent"))
        }
        let separator = endpoint.contains("?") ? "&" : "?"
        switch pushedAuthorizationEndpoint(config) {
        case .failure(let failure): return .failure(failure)
        case .success(nil): return .success(["url": .string(endpoint + separator + FormEncoding.encode(pairs))])
        case .success(let pushEndpoint?):
            guard let http else {
                return .failure(ProviderFailure(.internal, reason: "unavailable", message: "A pushed authorization request needs HTTP."))
            }
            // RFC 9126 §2.1: the same parameters (and client authentication), by the back channel.
            var form = [String: JSON](pairs.map { ($0.0, JSON.string($0.1)) }, uniquingKeysWith: { first, _ in first })
            let resources = resources(input, config: config)
            if !resources.isEmpty { form["resource"] = .array(resources.map(JSON.string)) }
            let request: JSON = [
                "method": "POST", "url": .string(pushEndpoint), "form": .object(form), "timeoutMs": 15_000,
                "headers": ["Accept": "application/json"],
            ]
            return ClientAuthentication.authenticate(request, config: config).flatMap { http.perform($0, call: call) }.flatMap { response in
                parsePushedAuthorization(response).map { pushed in
                    // RFC 9126 §4: the browser carries only client_id and the request_uri.
                    let query = FormEncoding.encode([("client_id", clientID), ("request_uri", pushed.requestURI)])
                    return ["url": .string(endpoint + separator + query), "expiresAt": .int(pushed.expiresAt)]
                }
            }
        }
    }

    /// Where to push authorization requests (RFC 9126), nil for the classic URL: setting `par`
    /// `true` (required), `false`, or `"auto"` (the default: whenever the server has the endpoint).
    static func pushedAuthorizationEndpoint(_ config: JSON) -> Result<String?, ProviderFailure> {
        if let problem = pushedAuthorizationProblem(config) { return .failure(problem) }
        guard config["par"]?.boolValue != false, let endpoint = config["pushedAuthorizationRequestEndpoint"]?.stringValue else {
            return .success(nil)
        }
        guard ParsedURL(endpoint)?.isSecureTransport == true else { return .failure(insecure("pushedAuthorizationRequestEndpoint")) }
        return .success(endpoint)
    }

    /// A `par` setting that cannot be honoured, found at configure time rather than at the first sign-in.
    static func pushedAuthorizationProblem(_ config: JSON) -> ProviderFailure? {
        let par = config["par"]
        guard par == nil || par?.boolValue != nil || par?.stringValue == "auto" else {
            return ProviderFailure(.configuration, reason: "invalidSettings", message: "The setting \"par\" must be \"auto\", true or false.")
        }
        let endpoint = config["pushedAuthorizationRequestEndpoint"]?.stringValue
        if par?.boolValue == true, endpoint == nil {
            return ProviderFailure(
                .configuration, reason: "missingSetting",
                message: "\"par\" is true but the provider has no pushed authorization request endpoint (RFC 9126): its discovery "
                    + "document names none. Set \"pushedAuthorizationRequestEndpoint\", or \"par\" to \"auto\" or false.")
        }
        if par?.boolValue == false, config["requirePushedAuthorizationRequests"]?.boolValue == true {
            return ProviderFailure(
                .configuration, reason: "invalidSettings",
                message: "\"par\" is false but the provider requires pushed authorization requests "
                    + "(require_pushed_authorization_requests): remove the setting or set it to \"auto\".")
        }
        if let endpoint, ParsedURL(endpoint)?.isSecureTransport != true { return insecure("pushedAuthorizationRequestEndpoint") }
        return nil
    }

    /// Reads an RFC 9126 §2.2 answer (201 with `request_uri` and `expires_in`); a refusal is
    /// classified as the token endpoint's are (§2.3 uses the same error codes).
    static func parsePushedAuthorization(
        _ response: JSON, now: Int64 = HostClock.nowMilliseconds()
    ) -> Result<(requestURI: String, expiresAt: Int64), ProviderFailure> {
        let status = Int(response["status"]?.intValue ?? 0)
        let body = (try? JSON.parse(response["body"]?.stringValue ?? "")) ?? .null
        guard (200..<300).contains(status) else { return .failure(classifyTokenError(status: status, body: body)) }
        guard let requestURI = body["request_uri"]?.stringValue, !requestURI.isEmpty, let expiresIn = body["expires_in"]?.intValue, expiresIn > 0
        else {
            return .failure(
                ProviderFailure(
                    .transient, reason: "badResponse", message: "The pushed authorization answer lacks request_uri or expires_in.",
                    status: status))
        }
        // Clamped to a day: a broken server must not overflow the clock.
        return .success((requestURI, now + min(expiresIn, 86_400) * 1000))
    }

    /// Parameters the host itself puts in the authorization URL (RFC 6749
    /// §4.1.1, RFC 7636 §4.3, OpenID Connect Core §3.1.2.1).
    public static let reservedAuthorizationParams: Set<String> = [
        "response_type", "client_id", "redirect_uri", "scope", "state", "nonce", "code_challenge", "code_challenge_method", "login_hint",
        "dpop_jkt", "resource",
    ]

    /// RFC 8628 §3.1–3.2: asks for a device code and a user code.
    static func beginDeviceAuthorization(_ input: JSON, config: JSON, call: HookCall, http: HookHTTP) -> Result<JSON, ProviderFailure> {
        guard let endpoint = config["deviceAuthorizationEndpoint"]?.stringValue, let url = ParsedURL(endpoint) else {
            return .failure(
                ProviderFailure(
                    .configuration, reason: "unsupported",
                    message: "The provider has no device authorization endpoint (set \"deviceAuthorizationEndpoint\")."))
        }
        guard url.isSecureTransport else { return .failure(insecure("deviceAuthorizationEndpoint")) }
        guard let clientID = config["clientId"]?.stringValue else { return .failure(missingSetting("clientId")) }
        var form: [String: JSON] = ["client_id": .string(clientID)]
        let scopes = (input["scopes"] ?? config["scopes"])?.arrayValue?.compactMap(\.stringValue) ?? []
        if !scopes.isEmpty { form["scope"] = .string(scopes.joined(separator: " ")) }
        let resources = resources(input, config: config)
        if !resources.isEmpty { form["resource"] = .array(resources.map(JSON.string)) }
        let request: JSON = ["method": "POST", "url": .string(endpoint), "form": .object(form), "timeoutMs": 15_000]
        return ClientAuthentication.authenticate(request, config: config).flatMap { http.perform($0, call: call) }.flatMap {
            parseDeviceAuthorization($0)
        }
    }

    /// Reads an RFC 8628 §3.2 answer into the BeginSignInOutput of the device flow.
    static func parseDeviceAuthorization(_ response: JSON, now: Int64 = HostClock.nowMilliseconds()) -> Result<JSON, ProviderFailure> {
        let status = Int(response["status"]?.intValue ?? 0)
        let body = (try? JSON.parse(response["body"]?.stringValue ?? "")) ?? .null
        guard (200..<300).contains(status) else { return .failure(classifyTokenError(status: status, body: body)) }
        guard let deviceCode = body["device_code"]?.stringValue, !deviceCode.isEmpty,
            let userCode = body["user_code"]?.stringValue, !userCode.isEmpty,
            let verification = (body["verification_uri"] ?? body["verification_url"])?.stringValue,
            let verificationURL = ParsedURL(verification), verificationURL.isSecureTransport
        else {
            return .failure(
                ProviderFailure(
                    .transient, reason: "badResponse", message: "The device authorization answer lacks device_code, user_code or verification_uri.",
                    status: status))
        }
        // RFC 8628 §3.2: expires_in is required; interval defaults to 5 s. Both clamped.
        let expiresIn = min(max(body["expires_in"]?.intValue ?? 600, 10), 86_400)
        let interval = min(max(body["interval"]?.intValue ?? 5, 1), 300)
        // The page that carries the user code is held to the same rule as verification_uri: an
        // insecure one is left out (the user types the code at verification_uri instead).
        let complete = body["verification_uri_complete"]?.stringValue.flatMap { text in
            ParsedURL(text)?.isSecureTransport == true ? text : nil
        }
        return .success(
            .compactObject([
                "deviceCode": .string(deviceCode), "userCode": .string(userCode), "verificationUri": .string(verification),
                "verificationUriComplete": complete.map(JSON.string),
                "expiresAt": .int(now + expiresIn * 1000), "intervalMs": .int(interval * 1000),
            ]))
    }

    static func completeSignIn(_ input: JSON, config: JSON, call: HookCall, http: HookHTTP) -> Result<JSON, ProviderFailure> {
        if input["flow"]?.stringValue == "device" {
            guard let deviceCode = input["code"]?.stringValue else {
                return .failure(ProviderFailure(.internal, reason: "missingCode", message: "The device flow needs the device code."))
            }
            guard let clientID = config["clientId"]?.stringValue else { return .failure(missingSetting("clientId")) }
            let form: [String: JSON] = [
                "grant_type": "urn:ietf:params:oauth:grant-type:device_code",
                "device_code": .string(deviceCode), "client_id": .string(clientID),
            ]
            return tokenRequest(form: form, config: config, call: call, http: http)
        }
        var code = input["code"]?.stringValue
        if let callback = input["callbackUrl"]?.stringValue {
            guard let url = CallbackURL(callback) else {
                return .failure(ProviderFailure(.definitive, reason: "invalidCallback", message: "The callback URL could not be read."))
            }
            // Whose answer this is comes first (RFC 6749 §10.12, RFC 9207 §2.4): a callback from
            // another sign-in or another server is refused before anything it says is acted on.
            // `expectedIssuer` (ABI 1.0) is set only where the server advertises RFC 9207; `issuer` whenever it is known.
            let required = input["expectedIssuer"]?.stringValue
            if let failure = callbackMismatch(
                url, state: input["state"]?.stringValue, issuer: required ?? input["issuer"]?.stringValue, issuerRequired: required != nil)
            {
                return .failure(failure)
            }
            if let failure = callbackError(url) { return .failure(failure) }
            code = url.queryValue("code")
        }
        guard let code, !code.isEmpty else {
            if input["flow"]?.stringValue == "session" {
                return .failure(ProviderFailure(.configuration, reason: "unsupported", message: "This provider has no session grant."))
            }
            return .failure(ProviderFailure(.definitive, reason: "missingCode", message: "The callback carried no authorization code."))
        }
        guard let clientID = config["clientId"]?.stringValue else { return .failure(missingSetting("clientId")) }
        var form: [String: JSON] = ["grant_type": "authorization_code", "code": .string(code), "client_id": .string(clientID)]
        form["redirect_uri"] = input["redirectUri"]
        form["code_verifier"] = input["codeVerifier"]
        let resources = tokenResources(input, config: config)
        if !resources.isEmpty { form["resource"] = .array(resources.map(JSON.string)) }
        return tokenRequest(form: form, config: config, call: call, http: http)
    }

    /// A callback whose `state` (RFC 6749 §4.1.2) or `iss` (RFC 9207) is not
    /// this sign-in's, as a definitive failure; nil when it is ours. With no
    /// expected state or issuer, that check is not made.
    ///
    /// RFC 9207 §2.4: a callback that carries `iss` is compared with the issuer
    /// whether or not the server advertises the parameter (glewlwyd and idpyoidc
    /// send it unannounced; a mix-up attacker would not announce anything). A
    /// callback without `iss` is refused only where `issuerRequired` (the server's
    /// metadata says `authorization_response_iss_parameter_supported`).
    public static func callbackMismatch(
        _ url: CallbackURL, state expected: String?, issuer expectedIssuer: String?, issuerRequired: Bool = false
    ) -> ProviderFailure? {
        if let expected {
            guard let state = url.queryValue("state"), constantTimeEquals(state, expected) else {
                return ProviderFailure(
                    .definitive, reason: "stateMismatch", message: "The callback's state does not match this sign-in; it was ignored.")
            }
        }
        guard let expectedIssuer else { return nil }
        if let issuer = url.queryValue("iss") {
            // Simple string comparison (RFC 9207 §2.4), no normalisation: the issuer identifier is exact.
            guard issuer == expectedIssuer else {
                return ProviderFailure(.definitive, reason: "issuerMismatch", message: "The callback's issuer (iss) does not match the provider.")
            }
        } else if issuerRequired && url.queryValue("error") == nil {
            // An error response without `iss` (django-oauth-toolkit sends none on a denial) can still
            // end the sign-in: it carries nothing that could be redeemed.
            return ProviderFailure(
                .definitive, reason: "issuerMismatch",
                message: "The callback carries no issuer (iss), which this provider promises to send (RFC 9207).")
        }
        return nil
    }

    /// An error response on the redirect (RFC 6749 §4.1.2.1) as the failure that ends the sign-in:
    /// `access_denied` is the user saying no (`cancelled`), any other error a refusal (`definitive`,
    /// the reason the OAuth error). Its `error_description` is quoted as `providerText` leaves it;
    /// an `error` that is not a word is no OAuth error code and is not passed on as a reason.
    /// nil when the callback carries no `error`. Whose answer it is was checked before.
    public static func callbackError(_ url: CallbackURL) -> ProviderFailure? {
        guard let error = url.queryValue("error") else { return nil }
        let said = url.queryValue("error_description").map { providerText($0) } ?? ""
        let description = said.isEmpty ? "" : ": " + said
        let end = said.last.map { ".!?".contains($0) } == true ? "" : "."
        guard ProviderFailure.isWord(error), error.utf8.count <= 64 else {
            return ProviderFailure(
                .definitive, reason: "invalidCallback",
                message: "The provider refused the sign-in with an error that is no OAuth error code\(description)\(end)")
        }
        let kind: ProviderFailure.Kind = error == "access_denied" ? .cancelled : .definitive
        return ProviderFailure(kind, reason: error, message: "The provider refused the sign-in (\(error))\(description)\(end)", oauthError: error)
    }

    /// The longest provider text (an `error_description`) quoted in a message, in characters.
    static let providerTextLimit = 300

    /// A provider's own words (an `error_description`) as a message may quote them: secrets masked,
    /// escape sequences and control characters removed (`PlainText.oneLine`), and bidirectional and
    /// other invisible formatting characters too (they could reorder what is shown), white space
    /// folded, at most `providerTextLimit` characters.
    static func providerText(_ text: String) -> String {
        var folded = ""
        var space = false
        for scalar in PlainText.oneLine(Redaction.redact(text)).unicodeScalars {
            if scalar.properties.isWhitespace {
                space = !folded.isEmpty
            } else if scalar.properties.generalCategory != .format {
                if space { folded.append(" ") }
                space = false
                folded.unicodeScalars.append(scalar)
            }
        }
        guard folded.count > providerTextLimit else { return folded }
        return String(folded.prefix(providerTextLimit - 1)) + "…"
    }

    static func refresh(_ input: JSON, config: JSON, call: HookCall, http: HookHTTP) -> Result<JSON, ProviderFailure> {
        guard let refreshToken = input["tokens"]?["refreshToken"]?.stringValue else {
            return .failure(ProviderFailure(.definitive, reason: "noRefreshToken", message: "The session has no refresh token; sign in again."))
        }
        guard let clientID = config["clientId"]?.stringValue else { return .failure(missingSetting("clientId")) }
        var form: [String: JSON] = ["grant_type": "refresh_token", "refresh_token": .string(refreshToken), "client_id": .string(clientID)]
        // RFC 6749 §6 and RFC 8707 §2.2: a token for other (usually fewer) scopes, or for a resource.
        if let scopes = input["scopes"]?.arrayValue?.compactMap(\.stringValue), !scopes.isEmpty {
            form["scope"] = .string(scopes.joined(separator: " "))
        }
        let resources = tokenResources(input, config: config)
        if !resources.isEmpty { form["resource"] = .array(resources.map(JSON.string)) }
        return tokenRequest(form: form, config: config, call: call, http: http).mapError(\.asRefreshRefusal)
    }

    /// The protected resources a request is for (RFC 8707): the input's `resources` (a per-request
    /// token's, or the sign-in's), else the profile's setting `resources`.
    static func resources(_ input: JSON, config: JSON) -> [String] {
        (input["resources"] ?? config["resources"])?.arrayValue?.compactMap(\.stringValue) ?? []
    }

    /// The resources a token request names (RFC 8707 §2.2): the input's (what the host asks a token
    /// for), else the first of the profile's. The authorization request names them all, a token
    /// request one: servers that issue one audience per token refuse several at once, and refuse
    /// none after an authorization request that named several (glewlwyd: 403 invalid_target).
    /// The session's own token is for the first; one for each other comes with its own refresh.
    static func tokenResources(_ input: JSON, config: JSON) -> [String] {
        if let explicit = input["resources"]?.arrayValue { return explicit.compactMap(\.stringValue) }
        return Array((config["resources"]?.arrayValue?.compactMap(\.stringValue) ?? []).prefix(1))
    }

    /// A `resources` setting that is not a list of absolute URIs without fragments (RFC 8707 §2).
    static func resourcesProblem(_ config: JSON) -> ProviderFailure? {
        guard let setting = config["resources"] else { return nil }
        guard let list = setting.arrayValue, list.allSatisfy({ $0.stringValue.map(isResourceIndicator) == true }) else {
            return ProviderFailure(
                .configuration, reason: "invalidSettings",
                message: "\"resources\" must be a list of absolute URIs without a fragment (RFC 8707 resource indicators).")
        }
        return nil
    }

    /// An absolute URI without a fragment (RFC 8707 §2).
    public static func isResourceIndicator(_ text: String) -> Bool {
        guard let colon = text.firstIndex(of: ":"), colon != text.startIndex, !text.contains("#"),
            !text.contains(where: { $0.isWhitespace }), text[text.startIndex].isLetter,
            text[..<colon].allSatisfy({ $0.isLetter || $0.isNumber || "+.-".contains($0) }), text.index(after: colon) != text.endIndex
        else { return false }
        return true
    }

    /// The client credentials grant (RFC 6749 §4.4): the client signs in as itself, no user. Also
    /// the way such a session is renewed (it has no refresh token).
    static func clientCredentials(_ input: JSON, config: JSON, call: HookCall, http: HookHTTP) -> Result<JSON, ProviderFailure> {
        guard let clientID = config["clientId"]?.stringValue else { return .failure(missingSetting("clientId")) }
        var form: [String: JSON] = ["grant_type": "client_credentials", "client_id": .string(clientID)]
        let scopes = (input["scopes"] ?? config["scopes"])?.arrayValue?.compactMap(\.stringValue) ?? []
        if !scopes.isEmpty { form["scope"] = .string(scopes.joined(separator: " ")) }
        let resources = tokenResources(input, config: config)
        if !resources.isEmpty { form["resource"] = .array(resources.map(JSON.string)) }
        let request = tokenRequest(form: form, config: config, call: call, http: http).mapError { failure in
            // No session can be lost here: a 401 or 403 is the server refusing the client (glewlwyd
            // answers a bad client assertion 403 without a body), not a passing trouble.
            guard failure.oauthError == nil, let status = failure.status, status == 401 || status == 403 else { return failure }
            return ProviderFailure(
                .definitive, reason: "clientRefused",
                message: "The server refused the client's credentials (HTTP \(status)): check clientSecret or the private key and its registration.",
                status: status)
        }
        return request.map { answer in
            // The client is the account (RFC 6749 §4.4.3: no refresh token is expected; one sent is not kept).
            var tokens = answer["tokens"]?.objectValue ?? [:]
            tokens["refreshToken"] = nil
            tokens["idToken"] = nil
            return ["tokens": .object(tokens), "account": ["id": .string(clientID), "name": .string(clientID)]]
        }
    }

    /// Token types of RFC 8693 §3 by their short names on the bridge.
    static let tokenTypes = [
        "accessToken": "urn:ietf:params:oauth:token-type:access_token", "idToken": "urn:ietf:params:oauth:token-type:id_token",
        "jwt": "urn:ietf:params:oauth:token-type:jwt", "refreshToken": "urn:ietf:params:oauth:token-type:refresh_token",
    ]

    /// Token exchange (RFC 8693 §2.1): the session's access token (or ID token) for a token for
    /// another audience, resource or scopes, authenticated as the profile's client. A refresh token
    /// in the answer is not kept (it would be a second grant to look after).
    static func exchangeToken(_ input: JSON, config: JSON, call: HookCall, http: HookHTTP) -> Result<JSON, ProviderFailure> {
        let subjectType = input["subjectTokenType"]?.stringValue ?? "accessToken"
        let key = subjectType == "idToken" ? "idToken" : "accessToken"
        guard let subject = input["tokens"]?[key]?.stringValue else {
            return .failure(
                ProviderFailure(
                    .definitive, reason: StatusReason.noTokens.rawValue,
                    message: "The session has no \(key == "idToken" ? "ID token" : "access token") to exchange."))
        }
        guard let clientID = config["clientId"]?.stringValue else { return .failure(missingSetting("clientId")) }
        var form: [String: JSON] = [
            "grant_type": "urn:ietf:params:oauth:grant-type:token-exchange", "client_id": .string(clientID),
            "subject_token": .string(subject), "subject_token_type": .string(tokenTypes[key]!),
        ]
        form["audience"] = input["audience"]
        if let scopes = input["scopes"]?.arrayValue?.compactMap(\.stringValue), !scopes.isEmpty {
            form["scope"] = .string(scopes.joined(separator: " "))
        }
        if let resources = input["resources"]?.arrayValue?.compactMap(\.stringValue), !resources.isEmpty {
            form["resource"] = .array(resources.map(JSON.string))
        }
        if let requested = input["requestedTokenType"]?.stringValue { form["requested_token_type"] = .string(tokenTypes[requested] ?? requested) }
        let answer = tokenRequest(form: form, config: config, call: call, http: http).mapError { failure in
            // RFC 8693 §2.2.2: the server's 400 with an OAuth error is its answer to this exchange
            // (invalid_target, invalid_request…); nothing else depends on it, so it is final.
            guard failure.kind == .transient, let error = failure.oauthError, let status = failure.status, (400..<500).contains(status),
                status != 429
            else { return failure }
            return ProviderFailure(.definitive, reason: error, message: failure.message, status: status, oauthError: error)
        }
        return answer.map { answer in
            var tokens = answer["tokens"]?.objectValue ?? [:]
            tokens["refreshToken"] = nil
            // RFC 8693 §2.2.1: issued_token_type says what the access_token member holds.
            var extras = tokens["extras"]?.objectValue ?? [:]
            if let issued = extras.removeValue(forKey: "issued_token_type")?.stringValue {
                var details = tokens["details"]?.objectValue ?? [:]
                details["issuedTokenType"] = .string(tokenTypes.first { $0.value == issued }?.key ?? issued)
                tokens["details"] = .object(details)
            }
            extras["refresh_token"] = nil
            tokens["extras"] = extras.isEmpty ? nil : .object(extras)
            return ["tokens": .object(tokens)]
        }
    }

    static func tokenRequest(form: [String: JSON], config: JSON, call: HookCall, http: HookHTTP) -> Result<JSON, ProviderFailure> {
        guard let endpoint = config["tokenEndpoint"]?.stringValue else { return .failure(missingSetting("tokenEndpoint")) }
        // With a DPoP key (RFC 9449 §5), the host's HTTP adds the proof and answers a nonce request.
        let request: JSON = [
            "method": "POST", "url": .string(endpoint), "form": .object(form),
            "headers": ["Accept": "application/json"], "dpop": true,
        ]
        return ClientAuthentication.authenticate(request, config: config).flatMap { http.perform($0, call: call) }.flatMap {
            parseTokenResponse($0)
        }
    }

    /// Reads an RFC 6749 §5 token response and classifies failures: only the
    /// provider's definitive refusals are `.definitive`; 5xx, 429 and garbage
    /// are `.transient` (the session is kept).
    public static func parseTokenResponse(_ response: JSON, now: Int64 = HostClock.nowMilliseconds()) -> Result<JSON, ProviderFailure> {
        let status = Int(response["status"]?.intValue ?? 0)
        let body = (try? JSON.parse(response["body"]?.stringValue ?? "")) ?? .null
        if (200..<300).contains(status) {
            guard case .object(var members) = body, let access = members["access_token"]?.stringValue, !access.isEmpty else {
                return .failure(
                    ProviderFailure(
                        .transient, reason: "badResponse", message: "The token endpoint answered without an access token.", status: status))
            }
            var tokens: [String: JSON] = [
                "accessToken": .string(access),
                "tokenType": .string(normalisedTokenType(members["token_type"]?.stringValue)),
            ]
            if let refresh = members["refresh_token"]?.stringValue, !refresh.isEmpty { tokens["refreshToken"] = .string(refresh) }
            if let idToken = members["id_token"]?.stringValue { tokens["idToken"] = .string(idToken) }
            if let scope = members["scope"]?.stringValue { tokens["scope"] = .string(scope) }
            let expiresIn = members["expires_in"]?.intValue ?? members["expires_in"]?.stringValue.flatMap { Int64($0) }
            // Clamped to ten years: a hostile or broken server must not overflow the clock.
            if let expiresIn { tokens["expiresAt"] = .int(now + min(max(expiresIn, 0), 315_360_000) * 1000) }
            for key in ["access_token", "refresh_token", "id_token", "token_type", "scope", "expires_in"] { members[key] = nil }
            if !members.isEmpty { tokens["extras"] = .object(members) }
            return .success(["tokens": .object(tokens)])
        }
        return .failure(classifyTokenError(status: status, body: body))
    }

    static func classifyTokenError(status: Int, body: JSON) -> ProviderFailure {
        let error = body["error"]?.stringValue
        let description = body["error_description"]?.stringValue.map(providerText).flatMap { $0.isEmpty ? nil : $0 }
        if status >= 500 || status == 429 || status == 0 {
            return ProviderFailure(
                .transient, reason: status == 429 ? "rateLimited" : "serverError",
                message: "The provider is unavailable (HTTP \(status)).", status: status)
        }
        // An `error` that is not a word (RFC 6749 §5.2 allows none other) is no OAuth error: it never reaches the frontend.
        guard let error, ProviderFailure.isWord(error) else {
            return ProviderFailure(
                .transient, reason: "badResponse", message: "The token endpoint answered HTTP \(status) without an OAuth error.", status: status)
        }
        let message = description.map { "\(error): \($0)" } ?? error
        switch error {
        case "invalid_grant", "unauthorized_client", "invalid_client", "access_denied":
            return ProviderFailure(.definitive, reason: error, message: message, status: status, oauthError: error)
        default:
            return ProviderFailure(.transient, reason: error, message: message, status: status, oauthError: error)
        }
    }

    // MARK: - Revocation, session checks, requests

    static func revoke(_ input: JSON, config: JSON, call: HookCall, http: HookHTTP) -> Result<JSON, ProviderFailure> {
        guard let endpoint = config["revocationEndpoint"]?.stringValue else {
            return .success([
                "revoked": [],
                "failures": [
                    [
                        "token": "all", "reason": "unsupported",
                        "message": "The provider has no revocation endpoint.",
                    ]
                ],
            ])
        }
        var revoked: [JSON] = []
        var failures: [JSON] = []
        // The refresh token first: revoking it usually ends the whole grant (RFC 7009 §2.1).
        for (key, hint) in [("refreshToken", "refresh_token"), ("accessToken", "access_token")] {
            guard let token = input["tokens"]?[key]?.stringValue else { continue }
            let form: [String: JSON] = ["token": .string(token), "token_type_hint": .string(hint)]
            var request: JSON = ["method": "POST", "url": .string(endpoint), "form": .object(form), "timeoutMs": 10_000]
            // RFC 7009 §2.1: a confidential client authenticates as at the token endpoint.
            if config["clientId"] != nil {
                switch ClientAuthentication.authenticate(request, config: config) {
                case .success(let authenticated): request = authenticated
                case .failure(let failure):
                    failures.append(["token": .string(hint), "reason": .string(failure.reason), "message": .string(failure.message)])
                    continue
                }
            }
            switch http.perform(request, call: call) {
            case .success(let response) where (200..<300).contains(Int(response["status"]?.intValue ?? 0)):
                revoked.append(.string(hint))
            case .success(let response):
                failures.append([
                    "token": .string(hint), "reason": "httpStatus",
                    "message": .string("The revocation endpoint answered HTTP \(response["status"]?.intValue ?? 0)."),
                ])
            case .failure(let failure):
                failures.append(["token": .string(hint), "reason": .string(failure.reason), "message": .string(failure.message)])
            }
        }
        return .success(["revoked": .array(revoked), "failures": .array(failures)])
    }

    static func checkSession(_ input: JSON, now: Int64 = HostClock.nowMilliseconds()) -> JSON {
        let valid: JSON = .string(SessionCheck.valid.rawValue)
        guard let expiresAt = input["tokens"]?["expiresAt"]?.intValue else { return ["state": valid] }
        return ["state": expiresAt > now ? valid : .string(SessionCheck.expired.rawValue)]
    }

    static func authorizeRequest(_ input: JSON, config: JSON) -> Result<JSON, ProviderFailure> {
        guard let access = input["tokens"]?["accessToken"]?.stringValue else {
            return .failure(ProviderFailure(.definitive, reason: StatusReason.noTokens.rawValue, message: "The session has no access token."))
        }
        var request = input["request"]?.objectValue ?? [:]
        if let url = request["url"]?.stringValue, ParsedURL(url) == nil {
            guard let base = config["apiBaseUrl"]?.stringValue else {
                return .failure(
                    ProviderFailure(.configuration, reason: "relativeUrl", message: "A relative URL needs the profile setting \"apiBaseUrl\"."))
            }
            request["url"] = .string(joinURL(base, url))
        }
        var headers = request["headers"]?.objectValue ?? [:]
        let type = normalisedTokenType(input["tokens"]?["tokenType"]?.stringValue)
        headers["Authorization"] = .string("\(type) \(access)")
        request["headers"] = .object(headers)
        return .success(["request": .object(request), "cookies": []])
    }

    static func classifyResponse(_ input: JSON) -> JSON {
        let status = input["response"]?["status"]?.intValue ?? 0
        if status == 401 { return ["outcome": "sessionExpired"] }
        return ["outcome": "ok"]
    }

    // MARK: - Helpers

    public static func joinURL(_ base: String, _ path: String) -> String {
        if base.hasSuffix("/") && path.hasPrefix("/") { return base + path.dropFirst() }
        if !base.hasSuffix("/") && !path.hasPrefix("/") { return base + "/" + path }
        return base + path
    }

    /// The token type as the Authorization scheme is written: token types are case-insensitive
    /// (RFC 6749 §5.1), and servers send "bearer", "dpop".
    static func normalisedTokenType(_ type: String?) -> String {
        guard let type, !type.isEmpty else { return "Bearer" }
        switch type.lowercased() {
        case "bearer": return "Bearer"
        case "dpop": return "DPoP"
        default: return type
        }
    }

    static func missingSetting(_ name: String) -> ProviderFailure {
        ProviderFailure(.configuration, reason: "missingSetting", message: "The profile needs the setting \"\(name)\".")
    }

    static func insecure(_ name: String) -> ProviderFailure {
        ProviderFailure(
            .configuration, reason: "insecureUrl", message: "The setting \"\(name)\" must be an https URL (http only on a loopback IP address).")
    }
}
