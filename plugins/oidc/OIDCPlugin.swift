import AuthBridgePluginSDK

/// The generic OAuth 2.0 / OpenID Connect provider: a compliant server is
/// pure configuration, so every step is the host's standard one. This
/// plugin only describes its settings and checks them.
struct OIDCPlugin: ProviderPlugin {
    static let id = "oidc"
    /// Everything else is the host's standard OAuth 2.0 step.
    static let implementedHooks: Set<PluginHook>? = [.configure]

    init(host: PluginHost) throws {}

    func describe() -> JSON {
        let url: JSON = ["type": "string", "format": "uri"]
        return [
            "displayName": "OpenID Connect / OAuth 2.0",
            "flows": ["browser", "external", "device", "clientCredentials"],
            "capabilities": ["revoke", "fetch", "scopedTokens"],
            "settings": [
                "type": "object",
                "properties": [
                    "resource": [
                        "type": "string", "format": "uri",
                        "description": .string(
                            "A protected resource's URL (an MCP server, an API): alone, it is the whole profile — its authorization server is "
                                + "found by RFC 9728 metadata and the client registers itself (RFC 7591); the resource goes on every request (RFC 8707)"
                        ),
                    ],
                    "authorizationServer": [
                        "type": "string", "format": "uri",
                        "description": "Which of the resource's authorization_servers to use (default: the first it lists)",
                    ],
                    "clientId": [
                        "type": "string",
                        "description": .string(
                            "The client (application) id registered at the server. Without it, AuthBridge registers itself where the server "
                                + "allows dynamic registration (RFC 7591) and keeps the registration in the vault"),
                    ],
                    "clientName": [
                        "type": "string", "description": "The client_name of a dynamic registration (default: the app's clientInfo name)",
                    ],
                    "clientSecret": ["type": "string", "description": "Only for confidential clients; public clients use PKCE alone"],
                    "clientAuthentication": [
                        "enum": ["client_secret_basic", "client_secret_post", "client_secret_jwt", "private_key_jwt", "none"],
                        "description":
                            "How the client authenticates (RFC 6749 §2.3, RFC 7523). Default: private_key_jwt with privateKeyFile, else with clientSecret client_secret_basic where the server lists it, else client_secret_post; none without either",
                    ],
                    "privateKeyFile": [
                        "type": "string",
                        "description": "A PEM private key (P-256, Ed25519 or RSA 2048–4096) of mode 0600 that signs private_key_jwt assertions",
                    ],
                    "privateKeyId": ["type": "string", "description": "The kid of that key as registered at the server"],
                    "clientAssertionAudience": [
                        "type": "string",
                        "description": "The aud of client assertions: \"tokenEndpoint\" (default, OpenID Connect Core §9), \"issuer\", or a URI",
                    ],
                    "clientCredentials": [
                        "type": "boolean",
                        "description":
                            "The client signs in as itself (client credentials grant, no user): getAccessToken works with no sign-in",
                    ],
                    "resources": [
                        "type": "array", "items": ["type": "string", "format": "uri"],
                        "description": "Protected resources (RFC 8707) sent on the authorization request and every code and refresh grant",
                    ],
                    "issuer": url,
                    "authorizationEndpoint": url,
                    "tokenEndpoint": url,
                    "revocationEndpoint": url,
                    "deviceAuthorizationEndpoint": [
                        "type": "string", "format": "uri",
                        "description": "RFC 8628 endpoint, when discovery does not list it",
                    ],
                    "userinfoEndpoint": url,
                    "pushedAuthorizationRequestEndpoint": [
                        "type": "string", "format": "uri", "description": "RFC 9126 endpoint, when discovery does not list it",
                    ],
                    "par": [
                        "enum": ["auto", true, false],
                        "description":
                            "Pushed authorization requests (RFC 9126): \"auto\" (default) when the server has the endpoint, true to require them",
                    ],
                    "endSessionEndpoint": [
                        "type": "string", "format": "uri",
                        "description":
                            "Where signOut's endSession ends the provider's session (RP-Initiated Logout), when discovery does not list it",
                    ],
                    "jwksUri": ["type": "string", "format": "uri", "description": "Keys that sign ID tokens (discovered with the issuer)"],
                    "clockSkewSeconds": ["type": "integer", "description": "Tolerance for ID-token exp and iat (default 60)"],
                    "extraAuthorizationParams": ["type": "object", "description": "Added to the authorization URL (e.g. prompt, audience)"],
                    "redirectUri": ["type": "string", "description": "Where the server sends the browser back (external flow)"],
                    "scopes": ["type": "array", "items": ["type": "string"]],
                    "apiBaseUrl": ["type": "string", "description": "Base for relative URLs given to fetch"],
                    "dpop": [
                        "enum": ["auto", true, false], "default": "auto",
                        "description":
                            "Sender-constrained tokens (RFC 9449 DPoP): \"auto\" when the server advertises it, true to require it, false for bearer tokens",
                    ],
                ],
            ],
        ]
    }

    func configure(_ input: JSON, _ call: PluginCall) throws(ProviderFailure) -> JSON? {
        let settings = input["settings"] ?? [:]
        if settings["issuer"]?.stringValue == nil, settings["resource"]?.stringValue == nil, settings["tokenEndpoint"]?.stringValue == nil {
            throw .configuration(
                "missingSetting", "The profile needs \"resource\" (a protected resource's URL), \"issuer\" (for discovery) or \"tokenEndpoint\".")
        }
        // The host's standard configure reads the resource's and the issuer's metadata.
        let config = try call.standard(.configure, input)
        // Without a client id, the client registers itself at sign-in (RFC 7591): the server must allow it.
        if config["clientId"]?.stringValue == nil, config["registrationEndpoint"]?.stringValue == nil {
            let server =
                config["issuer"]?.stringValue.map { "\($0) offers no dynamic client registration" } ?? "no dynamic client registration is possible"
            throw .configuration("missingSetting", "The profile needs \"clientId\": \(server) (RFC 7591). Register a client there and set it.")
        }
        if config["clientId"]?.stringValue == nil, settings["clientCredentials"]?.boolValue == true {
            throw .configuration("missingSetting", "\"clientCredentials\" needs \"clientId\" and its credentials.")
        }
        return config
    }
}

/// What the library's entry point returns (`Entry/`): `OIDCPlugin`'s ABI tables.
public func pluginEntry() -> UnsafeRawPointer { PluginExport.entry(for: OIDCPlugin.self) }
