import AuthBridgePluginSDK

/// The generic OAuth 2.0 / OpenID Connect provider: a compliant server is
/// pure configuration, so every step is the host's standard one. This
/// plugin only describes its settings and checks them.
struct OIDCPlugin: ProviderPlugin {
    static let id = "oidc"
    static let version = "0.1.0"
    /// Everything else is the host's standard OAuth 2.0 step.
    static let implementedHooks: Set<Hook>? = [.configure]

    init(host: PluginHost) throws {}

    func describe() -> JSON {
        let url: JSON = ["type": "string", "format": "uri"]
        return [
            "id": .string(Self.id), "version": .string(Self.version),
            "displayName": "OpenID Connect / OAuth 2.0",
            "description": "Any standards-compliant OAuth 2.0 or OpenID Connect authorization server",
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
                    "deviceAuthorizationEndpoint": ["type": "string", "format": "uri",
                                                    "description": "RFC 8628 endpoint, when discovery does not list it"],
                    "userinfoEndpoint": url,
                    "jwksUri": ["type": "string", "format": "uri", "description": "Keys that sign ID tokens (discovered with the issuer)"],
                    "clockSkewSeconds": ["type": "integer", "description": "Tolerance for ID-token exp and iat (default 60)"],
                    "extraAuthorizationParams": ["type": "object", "description": "Added to the authorization URL (e.g. prompt, audience)"],
                    "redirectUri": ["type": "string", "description": "Where the server sends the browser back (external flow)"],
                    "scopes": ["type": "array", "items": ["type": "string"]],
                    "apiBaseUrl": ["type": "string", "description": "Base for relative URLs given to fetch"],
                ],
            ],
        ]
    }

    func configure(_ input: JSON, _ call: PluginCall) throws(PluginFailure) -> JSON? {
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

@_cdecl("authbridge_plugin_v1")
public func authbridgePluginEntry() -> UnsafeRawPointer { PluginExport.entry(for: OIDCPlugin.self) }
