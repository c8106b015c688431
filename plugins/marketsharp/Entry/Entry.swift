import MarketSharpPlugin

/// The library's one `authbridge_plugin_v1` (plugin.h), apart from the provider's logic so that
/// tests can link several plugins into one binary.
@_cdecl("authbridge_plugin_v1")
public func authbridgePluginEntry() -> UnsafeRawPointer { pluginEntry() }
