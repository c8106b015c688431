import AuthBridgePluginSDK

/// MarketSharp (named licences). Scaffold: every hook is the host's standard step until the
/// provider's quirks are implemented.
struct MarketSharpPlugin: ProviderPlugin {
    static let id = "marketsharp"
    static let version = "0.1.0"
    static let implementedHooks: Set<Hook>? = []

    init(host: PluginHost) throws {}

    func describe() -> JSON {
        ["id": .string(Self.id), "version": .string(Self.version), "displayName": "MarketSharp",
         "description": "MarketSharp (named licences)", "flows": ["external"], "capabilities": []]
    }
}

@_cdecl("authbridge_plugin_v1")
public func authbridgePluginEntry() -> UnsafeRawPointer { PluginExport.entry(for: MarketSharpPlugin.self) }
