@_exported import AuthBridgeJSON
@_exported import AuthBridgePluginABI
@_exported import AuthBridgeURL

/// A provider plugin written in Swift: one type with the provider's logic.
///
/// Implement only the hooks where the provider differs from standard OAuth
/// 2.0; every hook defaults to `nil`, which tells the host to use its
/// standard behaviour. Inside a hook, `call.standard(...)` runs that standard
/// behaviour so a quirky provider can adjust its result instead of
/// rewriting it. Hook inputs and outputs are the JSON shapes in
/// bridge-spec/README.md ("Plugin ABI").
///
/// Threading: hooks may run concurrently on several host threads, so the
/// type must be `Sendable`; keep mutable state behind a lock.
///
/// Export it with one line in the plugin's module:
///
///     @_cdecl("authbridge_plugin_v1")
///     public func authbridgePluginEntry() -> UnsafeRawPointer { PluginExport.entry(for: MyPlugin.self) }
///
/// The plugin's id, version and description are stated once, in its manifest (`NAME.json`); the
/// host fills `describe()`'s answer from it. `id` is repeated here as the library's identity (the
/// loader refuses a library whose id is not its manifest's); `version` may stay nil (the manifest's).
public protocol ProviderPlugin: Sendable {
    /// Must equal the manifest's "id".
    static var id: String { get }
    /// nil (the default): the manifest's version. Given, it must equal the manifest's.
    static var version: String? { get }

    /// The hooks this type implements, when it wants the host to skip the
    /// others entirely (their table entries are left NULL: no call, no
    /// thread hand-off). `nil` (the default) exports every hook, and a hook
    /// that returns `nil` still means "standard".
    static var implementedHooks: Set<PluginHook>? { get }

    /// Called once after the host has checked the ABI. Throw to refuse loading.
    init(host: PluginHost) throws

    /// Called once when the host exits.
    func shutdown()

    /// {displayName, flows, capabilities, settings, …}; the host adds id, version and description
    /// from the manifest (given here, they must equal the manifest's).
    func describe() -> JSON

    func configure(_ input: JSON, _ call: PluginCall) throws(ProviderFailure) -> JSON?
    func beginSignIn(_ input: JSON, _ call: PluginCall) throws(ProviderFailure) -> JSON?
    func completeSignIn(_ input: JSON, _ call: PluginCall) throws(ProviderFailure) -> JSON?
    func refresh(_ input: JSON, _ call: PluginCall) throws(ProviderFailure) -> JSON?
    func revoke(_ input: JSON, _ call: PluginCall) throws(ProviderFailure) -> JSON?
    func checkSession(_ input: JSON, _ call: PluginCall) throws(ProviderFailure) -> JSON?
    func authorizeRequest(_ input: JSON, _ call: PluginCall) throws(ProviderFailure) -> JSON?
    func classifyResponse(_ input: JSON, _ call: PluginCall) throws(ProviderFailure) -> JSON?
    /// RFC 8693 token exchange (ABI 1.2); nil: the host's standard exchange at the token endpoint.
    func exchangeToken(_ input: JSON, _ call: PluginCall) throws(ProviderFailure) -> JSON?
}

extension ProviderPlugin {
    public static var version: String? { nil }
    public static var implementedHooks: Set<PluginHook>? { nil }
    public func shutdown() {}
    public func configure(_ input: JSON, _ call: PluginCall) throws(ProviderFailure) -> JSON? { nil }
    public func beginSignIn(_ input: JSON, _ call: PluginCall) throws(ProviderFailure) -> JSON? { nil }
    public func completeSignIn(_ input: JSON, _ call: PluginCall) throws(ProviderFailure) -> JSON? { nil }
    public func refresh(_ input: JSON, _ call: PluginCall) throws(ProviderFailure) -> JSON? { nil }
    public func revoke(_ input: JSON, _ call: PluginCall) throws(ProviderFailure) -> JSON? { nil }
    public func checkSession(_ input: JSON, _ call: PluginCall) throws(ProviderFailure) -> JSON? { nil }
    public func authorizeRequest(_ input: JSON, _ call: PluginCall) throws(ProviderFailure) -> JSON? { nil }
    public func classifyResponse(_ input: JSON, _ call: PluginCall) throws(ProviderFailure) -> JSON? { nil }
    public func exchangeToken(_ input: JSON, _ call: PluginCall) throws(ProviderFailure) -> JSON? { nil }
}

/// An HTTP answer from the host's HTTP service.
public struct HTTPResponse: Sendable {
    public var status: Int
    /// Lower-case header names.
    public var headers: [String: String]
    public var body: String

    /// The body parsed as JSON, or nil.
    public var json: JSON? { try? JSON.parse(body) }
}
