import AuthBridgePluginSDK

/// Tableau Server connected client. Scaffold: every hook is the host's standard step until the
/// provider's quirks are implemented.
struct TableauPlugin: ProviderPlugin {
    static let id = "tableau"
    static let version = "0.1.0"
    static let implementedHooks: Set<Hook>? = []

    init(host: PluginHost) throws {}

    func describe() -> JSON {
        ["id": .string(Self.id), "version": .string(Self.version), "displayName": "Tableau",
         "description": "Tableau Server connected client", "flows": ["external"], "capabilities": []]
    }
}

@_cdecl("authbridge_plugin_v1")
public func authbridgePluginEntry() -> UnsafeRawPointer { PluginExport.entry(for: TableauPlugin.self) }
