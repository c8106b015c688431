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
            "flows": ["browser", "external", "device"],
            "capabilities": ["revoke", "fetch"],
            "settings": [
                "type": "object",
                "required": ["clientId"],
                "properties": [
                    "clientId": ["type": "string", "description": "The client (application) id registered at the server"],
                    "clientSecret": ["type": "string", "description": "Only for confidential clients; public clients use PKCE alone"],
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
        if settings["issuer"]?.stringValue == nil {
            for key in ["tokenEndpoint"] where settings[key]?.stringValue == nil {
                throw .configuration("missingSetting", "The profile needs \"issuer\" (for discovery) or \"\(key)\".")
            }
        }
        // The host's standard configure reads the issuer's discovery document.
        return try call.standard(.configure, input)
    }
}

/// What the library's entry point returns (`Entry/`): `OIDCPlugin`'s ABI tables.
public func pluginEntry() -> UnsafeRawPointer { PluginExport.entry(for: OIDCPlugin.self) }
