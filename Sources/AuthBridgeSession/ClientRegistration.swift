import AuthBridgeJSON
import AuthBridgePluginHost
import AuthBridgeRedaction
import AuthBridgeURL

/// A client AuthBridge registered itself at an authorization server (RFC 7591 dynamic client
/// registration), kept in the vault per server and used by every profile of that server.
///
/// AuthBridge registers as a public native client (`token_endpoint_auth_method: none`, PKCE
/// only) with the exact loopback redirect URIs its browser flow will listen on: servers match
/// redirect URIs exactly (the MCP SDK's, idpyoidc's), not per RFC 8252 §7.3 on any port, so a
/// few ports are chosen at registration and the sign-in listens on the first that is free.
struct ClientRegistration: Sendable, Equatable {
    /// The authorization server (its issuer) the client is registered at.
    var issuer: String
    var clientId: String
    /// Only when the server insists on a confidential client (it answered a secret).
    var clientSecret: String?
    var tokenEndpointAuthMethod: String
    var redirectUris: [String]
    var scope: String?
    var clientName: String
    var registeredAt: Int64

    /// How many loopback ports a registration names: the browser flow needs one free.
    static let loopbackPortCount = 3

    init(
        issuer: String, clientId: String, clientSecret: String?, tokenEndpointAuthMethod: String, redirectUris: [String], scope: String?,
        clientName: String, registeredAt: Int64
    ) {
        self.issuer = issuer
        self.clientId = clientId
        self.clientSecret = clientSecret
        self.tokenEndpointAuthMethod = tokenEndpointAuthMethod
        self.redirectUris = redirectUris
        self.scope = scope
        self.clientName = clientName
        self.registeredAt = registeredAt
    }

    init?(json: JSON) {
        guard let issuer = json["issuer"]?.stringValue, let clientId = json["clientId"]?.stringValue,
            let redirectUris = json["redirectUris"]?.arrayValue?.compactMap(\.stringValue)
        else { return nil }
        self.init(
            issuer: issuer, clientId: clientId, clientSecret: json["clientSecret"]?.stringValue,
            tokenEndpointAuthMethod: json["tokenEndpointAuthMethod"]?.stringValue ?? "none", redirectUris: redirectUris,
            scope: json["scope"]?.stringValue, clientName: json["clientName"]?.stringValue ?? "AuthBridge",
            registeredAt: json["registeredAt"]?.intValue ?? 0)
    }

    var json: JSON {
        .compactObject([
            "issuer": .string(issuer), "clientId": .string(clientId), "clientSecret": clientSecret.map(JSON.string),
            "tokenEndpointAuthMethod": .string(tokenEndpointAuthMethod), "redirectUris": .array(redirectUris.map(JSON.string)),
            "scope": scope.map(JSON.string), "clientName": .string(clientName), "registeredAt": .int(registeredAt),
        ])
    }

    /// The vault key of the registration at `issuer` (a reserved profile: no profile can have it).
    static func vaultKey(_ issuer: String) -> String {
        VaultKey.make(profile: String(ResolvedProfile.reservedPrefix) + "registration", account: issuer)
    }

    /// The loopback redirect URIs of the registration (the browser flow's).
    var loopbackRedirectUris: [String] { redirectUris.filter { ParsedURL($0)?.isLoopbackIPLiteral == true && $0.hasPrefix("http://") } }

    /// `config` using this client: its id (and secret, when the server gave one), marked as registered dynamically.
    func applied(to config: JSON) -> JSON {
        var config = config
        config = config.setting("clientId", .string(clientId)).setting("dynamicClient", true)
        config = config.setting("registeredRedirectUris", .array(redirectUris.map(JSON.string)))
        if let clientSecret {
            KnownSecrets.shared.remember(clientSecret)
            config = config.setting("clientSecret", .string(clientSecret))
            if tokenEndpointAuthMethod != "none" { config = config.setting("clientAuthentication", .string(tokenEndpointAuthMethod)) }
        }
        return config
    }

    /// Whether a profile with `config` signs in with a client AuthBridge registers itself: no
    /// `clientId` set (or an https one — a Client ID Metadata Document URL — where the server does
    /// not say it reads those), and the server has a registration endpoint.
    static func isNeeded(_ config: JSON, settings: JSON) -> Bool {
        guard config["registrationEndpoint"]?.stringValue != nil, config["issuer"]?.stringValue != nil,
            config["clientCredentials"]?.boolValue != true
        else { return false }
        guard let configured = settings["clientId"]?.stringValue else { return true }
        return configured.hasPrefix("https://") && config["clientIdMetadataDocuments"]?.boolValue != true
    }

    /// The RFC 7591 §2 registration request of a public native client.
    static func request(endpoint: String, clientName: String, redirectUris: [String], scopes: [String]) -> JSON {
        let body: JSON = .compactObject([
            "client_name": .string(clientName), "redirect_uris": .array(redirectUris.map(JSON.string)),
            "grant_types": ["authorization_code", "refresh_token"], "response_types": ["code"],
            "token_endpoint_auth_method": "none", "application_type": "native",
            "scope": scopes.isEmpty ? nil : .string(scopes.joined(separator: " ")),
            "software_id": "authbridge", "software_version": .string(hostVersion),
        ])
        return [
            "method": "POST", "url": .string(endpoint), "headers": ["Content-Type": "application/json", "Accept": "application/json"],
            "body": .string(body.serializedString(sortKeys: true)), "timeoutMs": 15_000,
        ]
    }

    /// Reads an RFC 7591 §3.2 answer (201, or 200 as some servers send) into a registration.
    static func parse(
        _ response: JSON, issuer: String, clientName: String, redirectUris: [String], scopes: [String], now: Int64
    ) -> Result<ClientRegistration, ProviderFailure> {
        let status = Int(response["status"]?.intValue ?? 0)
        let body = (try? JSON.parse(response["body"]?.stringValue ?? "")) ?? .null
        guard (200..<300).contains(status) else {
            if status >= 500 || status == 429 || status == 0 {
                return .failure(
                    ProviderFailure(
                        .transient, reason: "serverError", message: "The client registration endpoint is unavailable (HTTP \(status)).",
                        status: status))
            }
            // RFC 7591 §3.2.2: invalid_redirect_uri, invalid_client_metadata, …
            let error = body["error"]?.stringValue.flatMap { ProviderFailure.isWord($0) ? $0 : nil }
            let description = body["error_description"]?.stringValue.map(StandardSteps.providerText).flatMap { $0.isEmpty ? nil : $0 }
            return .failure(
                ProviderFailure(
                    .definitive, reason: "registrationRefused",
                    message: "The authorization server refused to register AuthBridge as a client (HTTP \(status)"
                        + (error.map { ", \($0)" } ?? "") + (description.map { ": \($0)" } ?? "")
                        + "). Register a client there yourself and set \"clientId\".",
                    status: status, oauthError: error))
        }
        guard let clientId = body["client_id"]?.stringValue, !clientId.isEmpty else {
            return .failure(
                ProviderFailure(.transient, reason: "badResponse", message: "The client registration answer has no client_id.", status: status))
        }
        let secret = body["client_secret"]?.stringValue.flatMap { $0.isEmpty ? nil : $0 }
        let method = body["token_endpoint_auth_method"]?.stringValue ?? (secret == nil ? "none" : "client_secret_basic")
        // The server's own list of redirect URIs wins: it is what it will match.
        let registered = body["redirect_uris"]?.arrayValue?.compactMap(\.stringValue) ?? redirectUris
        return .success(
            ClientRegistration(
                issuer: issuer, clientId: clientId, clientSecret: secret, tokenEndpointAuthMethod: method,
                redirectUris: registered.isEmpty ? redirectUris : registered,
                scope: body["scope"]?.stringValue ?? (scopes.isEmpty ? nil : scopes.joined(separator: " ")),
                clientName: clientName, registeredAt: now))
    }
}
