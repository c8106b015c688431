@_exported import AuthBridgeJSON

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
public protocol ProviderPlugin: Sendable {
    /// Must equal the manifest's "id".
    static var id: String { get }
    static var version: String { get }

    /// The hooks this type implements, when it wants the host to skip the
    /// others entirely (their table entries are left NULL: no call, no
    /// thread hand-off). `nil` (the default) exports every hook, and a hook
    /// that returns `nil` still means "standard".
    static var implementedHooks: Set<Hook>? { get }

    /// Called once after the host has checked the ABI. Throw to refuse loading.
    init(host: PluginHost) throws

    /// Called once when the host exits.
    func shutdown()

    /// {id, version, displayName, description, flows, capabilities, settings}.
    func describe() -> JSON

    func configure(_ input: JSON, _ call: PluginCall) throws(PluginFailure) -> JSON?
    func beginSignIn(_ input: JSON, _ call: PluginCall) throws(PluginFailure) -> JSON?
    func completeSignIn(_ input: JSON, _ call: PluginCall) throws(PluginFailure) -> JSON?
    func refresh(_ input: JSON, _ call: PluginCall) throws(PluginFailure) -> JSON?
    func revoke(_ input: JSON, _ call: PluginCall) throws(PluginFailure) -> JSON?
    func checkSession(_ input: JSON, _ call: PluginCall) throws(PluginFailure) -> JSON?
    func authorizeRequest(_ input: JSON, _ call: PluginCall) throws(PluginFailure) -> JSON?
    func classifyResponse(_ input: JSON, _ call: PluginCall) throws(PluginFailure) -> JSON?
}

extension ProviderPlugin {
    public static var implementedHooks: Set<Hook>? { nil }
    public func shutdown() {}
    public func configure(_ input: JSON, _ call: PluginCall) throws(PluginFailure) -> JSON? { nil }
    public func beginSignIn(_ input: JSON, _ call: PluginCall) throws(PluginFailure) -> JSON? { nil }
    public func completeSignIn(_ input: JSON, _ call: PluginCall) throws(PluginFailure) -> JSON? { nil }
    public func refresh(_ input: JSON, _ call: PluginCall) throws(PluginFailure) -> JSON? { nil }
    public func revoke(_ input: JSON, _ call: PluginCall) throws(PluginFailure) -> JSON? { nil }
    public func checkSession(_ input: JSON, _ call: PluginCall) throws(PluginFailure) -> JSON? { nil }
    public func authorizeRequest(_ input: JSON, _ call: PluginCall) throws(PluginFailure) -> JSON? { nil }
    public func classifyResponse(_ input: JSON, _ call: PluginCall) throws(PluginFailure) -> JSON? { nil }
}

/// A classified failure a hook reports (the ABI's error JSON).
public struct PluginFailure: Error, Sendable, Equatable {
    public enum Kind: String, Sendable {
        case definitive, transient, configuration, `internal`, cancelled
    }

    public var kind: Kind
    public var reason: String
    /// User-facing; never include a token.
    public var message: String
    public var status: Int?

    public init(_ kind: Kind, reason: String, message: String, status: Int? = nil) {
        self.kind = kind
        self.reason = reason
        self.message = message
        self.status = status
    }

    /// The provider said no for good: the session ends.
    public static func definitive(_ reason: String, _ message: String, status: Int? = nil) -> PluginFailure {
        PluginFailure(.definitive, reason: reason, message: message, status: status)
    }

    /// Might work later: the session is kept.
    public static func transient(_ reason: String, _ message: String, status: Int? = nil) -> PluginFailure {
        PluginFailure(.transient, reason: reason, message: message, status: status)
    }

    public static func configuration(_ reason: String, _ message: String) -> PluginFailure {
        PluginFailure(.configuration, reason: reason, message: message)
    }

    init(json: JSON) {
        self.init(Kind(rawValue: json["kind"]?.stringValue ?? "") ?? .internal,
                  reason: json["reason"]?.stringValue ?? "unspecified",
                  message: json["message"]?.stringValue ?? "failed",
                  status: json["status"]?.intValue.map { Int($0) })
    }

    var json: JSON {
        .compactObject(["kind": .string(kind.rawValue), "reason": .string(reason), "message": .string(message),
                        "status": status.map { .int(Int64($0)) }])
    }
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
