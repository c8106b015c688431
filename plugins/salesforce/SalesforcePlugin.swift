import AuthBridgePluginSDK

/// Salesforce (production, sandbox, My Domain). Scaffold: every hook is the host's standard step until the
/// provider's quirks are implemented.
struct SalesforcePlugin: ProviderPlugin {
    static let id = "salesforce"
    static let version = "0.1.0"
    static let implementedHooks: Set<Hook>? = []

    init(host: PluginHost) throws {}

    func describe() -> JSON {
        ["id": .string(Self.id), "version": .string(Self.version), "displayName": "Salesforce",
         "description": "Salesforce (production, sandbox, My Domain)", "flows": ["external"], "capabilities": []]
    }
}

@_cdecl("authbridge_plugin_v1")
public func authbridgePluginEntry() -> UnsafeRawPointer { PluginExport.entry(for: SalesforcePlugin.self) }
