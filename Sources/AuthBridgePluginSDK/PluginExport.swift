import AuthBridgePluginABI
import CAuthBridgePlugin

/// Builds the C entry point's data for a `ProviderPlugin` type: the
/// `ab_plugin_info` and a function table whose C functions forward to the
/// plugin instance. Allocated once, never freed (the library is never unloaded).
///
/// Every plugin built with the SDK also carries the Swift runtime note (`SwiftRuntimeNote`,
/// AuthBridgePluginABI): the host reads it before `dlopen` and refuses a plugin built with
/// another Swift than its own.
public enum PluginExport {
    /// The ABI minor the SDK's plugins declare: the newest `ab_host_api` entry it reads is ABI 1.0's,
    /// so its plugins load in every 1.x host (their manifests say "1.0").
    public static let abiMinor: UInt16 = 0

    nonisolated(unsafe) private static var info: UnsafeMutablePointer<ab_plugin_info>?
    nonisolated(unsafe) fileprivate static var pluginType: (any ProviderPlugin.Type)?

    /// The value to return from `authbridge_plugin_v1`. Touches only static data.
    public static func entry<P: ProviderPlugin>(for type: P.Type) -> UnsafeRawPointer {
        if let info { return UnsafeRawPointer(info) }
        _ = SwiftRuntimeNote.keepLinked() // the note must be in every plugin
        pluginType = type
        let vtable = UnsafeMutablePointer<ab_plugin_vtable>.allocate(capacity: 1)
        vtable.initialize(
            to: ab_plugin_vtable(
                size: UInt32(MemoryLayout<ab_plugin_vtable>.size),
                init: { host, state, reason in
                    guard let host, let state, let type = PluginExport.pluginType else { return AB_ERROR }
                    do {
                        let instance = try type.init(host: PluginHost(api: host))
                        state.pointee = OpaquePointer(Unmanaged.passRetained(Instance(instance, host: PluginHost(api: host))).toOpaque())
                        return AB_OK
                    } catch {
                        reason?.pointee = PluginExport.staticString("plugin init failed: \(error)")
                        return AB_ERROR
                    }
                },
                shutdown: { state in
                    guard let state else { return }
                    let instance = Unmanaged<Instance>.fromOpaque(UnsafeRawPointer(state)).takeRetainedValue()
                    instance.plugin.shutdown()
                },
                describe: { state, call, _ in
                    PluginExport.run(state, call, JSON.null) { plugin, _, _ in plugin.describe() }
                },
                configure: { state, call, input in
                    PluginExport.run(state, call, input) { (plugin, input, call) throws(ProviderFailure) in try plugin.configure(input, call) }
                },
                begin_sign_in: { state, call, input in
                    PluginExport.run(state, call, input) { (plugin, input, call) throws(ProviderFailure) in try plugin.beginSignIn(input, call) }
                },
                complete_sign_in: { state, call, input in
                    PluginExport.run(state, call, input) { (plugin, input, call) throws(ProviderFailure) in try plugin.completeSignIn(input, call) }
                },
                refresh: { state, call, input in
                    PluginExport.run(state, call, input) { (plugin, input, call) throws(ProviderFailure) in try plugin.refresh(input, call) }
                },
                revoke: { state, call, input in
                    PluginExport.run(state, call, input) { (plugin, input, call) throws(ProviderFailure) in try plugin.revoke(input, call) }
                },
                check_session: { state, call, input in
                    PluginExport.run(state, call, input) { (plugin, input, call) throws(ProviderFailure) in try plugin.checkSession(input, call) }
                },
                authorize_request: { state, call, input in
                    PluginExport.run(state, call, input) { (plugin, input, call) throws(ProviderFailure) in try plugin.authorizeRequest(input, call) }
                },
                classify_response: { state, call, input in
                    PluginExport.run(state, call, input) { (plugin, input, call) throws(ProviderFailure) in try plugin.classifyResponse(input, call) }
                },
                exchange_token: { state, call, input in
                    PluginExport.run(state, call, input) { (plugin, input, call) throws(ProviderFailure) in try plugin.exchangeToken(input, call) }
                }
            ))
        if let hooks = type.implementedHooks {
            // Hooks the type does not implement stay NULL: the host uses its standard step directly.
            for hook in PluginHook.allCases where hook != .describe && !hooks.contains(hook) { vtable.pointee[keyPath: hook.slot] = nil }
        }
        let created = UnsafeMutablePointer<ab_plugin_info>.allocate(capacity: 1)
        created.initialize(
            to: ab_plugin_info(
                magic: AB_PLUGIN_MAGIC, abi_major: UInt16(AB_ABI_MAJOR), abi_minor: abiMinor,
                id: staticString(type.id), version: type.version.map(staticString), vtable: UnsafePointer(vtable)))
        info = created
        return UnsafeRawPointer(created)
    }

    /// Parses the input, runs the hook, and answers through the host.
    private static func run(
        _ state: OpaquePointer?, _ call: OpaquePointer?, _ input: ab_json,
        _ body: (any ProviderPlugin, JSON, PluginCall) throws(ProviderFailure) -> JSON?
    ) -> ab_status {
        guard let data = input.data, let value = try? JSON.parse(UnsafeRawBufferPointer(start: data, count: input.length)) else {
            return run(state, call, JSON.null, body)
        }
        return run(state, call, value, body)
    }

    private static func run(
        _ state: OpaquePointer?, _ call: OpaquePointer?, _ input: JSON,
        _ body: (any ProviderPlugin, JSON, PluginCall) throws(ProviderFailure) -> JSON?
    ) -> ab_status {
        guard let state, let call else { return AB_INVALID }
        let instance = Unmanaged<Instance>.fromOpaque(UnsafeRawPointer(state)).takeUnretainedValue()
        let pluginCall = PluginCall(host: instance.host, call: call)
        let api = instance.host.api.pointee
        do {
            guard let result = try body(instance.plugin, input, pluginCall) else { return AB_DEFAULT }
            let bytes = result.serialized()
            return bytes.withUnsafeBytes { buffer in
                _ = api.set_result?(call, ab_json(data: buffer.baseAddress?.assumingMemoryBound(to: CChar.self), length: buffer.count))
                return AB_OK
            }
        } catch {
            if error.kind == .cancelled && pluginCall.isCancelled { return AB_CANCELLED }
            let bytes = error.json.serialized()
            return bytes.withUnsafeBytes { buffer in
                _ = api.set_error?(call, ab_json(data: buffer.baseAddress?.assumingMemoryBound(to: CChar.self), length: buffer.count))
                return AB_ERROR
            }
        }
    }

    static func staticString(_ text: String) -> UnsafePointer<CChar> {
        let bytes = Array(text.utf8CString)
        let buffer = UnsafeMutablePointer<CChar>.allocate(capacity: bytes.count)
        buffer.initialize(from: bytes, count: bytes.count)
        return UnsafePointer(buffer)
    }
}

/// The plugin instance with its host, behind the C `ab_plugin *`.
private final class Instance {
    let plugin: any ProviderPlugin
    let host: PluginHost
    init(_ plugin: any ProviderPlugin, host: PluginHost) {
        self.plugin = plugin
        self.host = host
    }
}
