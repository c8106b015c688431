import AuthBridgePluginABI
import CAuthBridgePlugin

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

// Interim: what the runner needs from work package B (design §3, §4, §10.0), written as small
// as it can be so that the runner builds and is tested before B lands. At the merge each member
// here gives way to B's: `pluginCrashed`/`pluginTimeout` → `ProviderFailure.pluginCrashed(…)`
// /`.pluginTimeout(…)` (PluginHealth.swift); `openEntry` → `PluginEntry.open` (PluginEntry.swift,
// the same body, moved from PluginLoader.open); `hookFunction` → InProcessBackend's lookup
// (LoadedPlugin.function(for:) today); `setClockOffset`/`clockOffset` → `HostClock.setOffset`;
// the durations → `HookDeadlines`.

enum RunnerFaults {
    /// `HookDeadlines.load`: spawn, `dlopen` and `init`.
    static let loadDeadline: Duration = .seconds(10)
    /// `HookDeadlines.killGrace`: how long a call past its deadline may still end before its runner is killed.
    static let killGrace: Duration = .seconds(2)

    static let crashedReason = PluginLoadError.Reason(rawValue: "pluginCrashed")
    static let timeoutReason = PluginLoadError.Reason(rawValue: "pluginTimeout")

    /// The runner stopped under a call: `detail` is how ("killed by signal 11 (SIGSEGV)").
    static func pluginCrashed(plugin: String, hook: PluginHook, detail: String) -> ProviderFailure {
        ProviderFailure(
            .internal, reason: "pluginCrashed",
            message: "The \(plugin) plugin stopped (\(detail)) in \(hook); it will be restarted; your sessions are kept.")
    }

    /// A call ran past its deadline.
    static func pluginTimeout(plugin: String, hook: PluginHook, after: Duration) -> ProviderFailure {
        let seconds = Double(after.components.seconds) + Double(after.components.attoseconds) / 1e18
        return ProviderFailure(
            .internal, reason: "pluginTimeout",
            message: "The \(plugin) plugin did not answer \(hook) within \(seconds) s; your sessions are kept.")
    }

    /// The host's current test-clock offset (`--test-clock`), which runners copy.
    static var clockOffset: Int64 { HostClock.shift(by: 0) }

    /// Sets the host clock's offset (a runner copies its host's with every call).
    static func setClockOffset(_ milliseconds: Int64) {
        HostClock.shift(by: milliseconds - HostClock.shift(by: 0))
    }

    /// The plugin's function for `hook`, nil when its table has none (append-only: an entry past
    /// the plugin's `size` is absent).
    static func hookFunction(_ vtable: UnsafePointer<ab_plugin_vtable>, _ hook: PluginHook) -> ab_hook_fn? {
        let table = vtable.pointee
        let keyPath: KeyPath<ab_plugin_vtable, ab_hook_fn?>
        switch hook {
        case .describe: keyPath = \.describe
        case .configure: keyPath = \.configure
        case .beginSignIn: keyPath = \.begin_sign_in
        case .completeSignIn: keyPath = \.complete_sign_in
        case .refresh: keyPath = \.refresh
        case .revoke: keyPath = \.revoke
        case .checkSession: keyPath = \.check_session
        case .authorizeRequest: keyPath = \.authorize_request
        case .classifyResponse: keyPath = \.classify_response
        }
        guard let offset = MemoryLayout<ab_plugin_vtable>.offset(of: keyPath),
            offset + MemoryLayout<ab_hook_fn?>.size <= Int(table.size)
        else { return nil }
        return table[keyPath: keyPath]
    }

    /// Opens a plugin library, checks its entry point against its manifest and runs its `init`
    /// (PluginLoader.open's body, from `dlopen` on).
    static func openEntry(
        dlopenPath: String, manifest: PluginManifest, host: UnsafePointer<ab_host_api>
    ) throws(PluginLoadError) -> (
        vtable: UnsafePointer<ab_plugin_vtable>, state: OpaquePointer?
    ) {
        _ = dlerror()
        // Never dlclosed: Swift plugins crash the process after dlclose.
        guard let handle = dlopen(dlopenPath, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE) else {
            let message = dlerror().map { String(cString: $0) } ?? "unknown error"
            throw PluginLoadError(.loadFailed, "dlopen failed: \(message)")
        }
        guard let symbol = dlsym(handle, AB_ENTRY_SYMBOL) else {
            throw PluginLoadError(.missingSymbol, "\(manifest.library) does not export \(AB_ENTRY_SYMBOL)")
        }
        let entry = unsafeBitCast(symbol, to: ab_entry_fn.self)
        guard let info = entry() else { throw PluginLoadError(.badEntry, "\(AB_ENTRY_SYMBOL) returned NULL") }
        guard info.pointee.magic == AB_PLUGIN_MAGIC else {
            throw PluginLoadError(.badEntry, "\(AB_ENTRY_SYMBOL) returned data without the AuthBridge magic")
        }
        let major = Int(info.pointee.abi_major), minor = Int(info.pointee.abi_minor)
        guard major == Int(AB_ABI_MAJOR), minor <= Int(AB_ABI_MINOR) else {
            throw PluginLoadError(
                .abiMismatch, "library built for ABI \(major).\(minor); this host supports \(AB_ABI_MAJOR).0 to \(AB_ABI_MAJOR).\(AB_ABI_MINOR)")
        }
        guard major == manifest.abiMajor, minor == manifest.abiMinor else {
            throw PluginLoadError(
                .abiMismatch, "library reports ABI \(major).\(minor) but its manifest says \(manifest.abiMajor).\(manifest.abiMinor)")
        }
        let reportedID = info.pointee.id.map { String(cString: $0) } ?? ""
        guard reportedID == manifest.id else {
            throw PluginLoadError(.badEntry, "library reports id \"\(reportedID)\" but its manifest says \"\(manifest.id)\"")
        }
        if let stated = info.pointee.version.map({ String(cString: $0) }), stated != manifest.version {
            throw PluginLoadError(
                .metadataMismatch,
                "library reports version \"\(stated)\" but its manifest says \"\(manifest.version)\"; the manifest is where a plugin's version is stated"
            )
        }
        guard let vtable = info.pointee.vtable,
            Int(vtable.pointee.size) >= MemoryLayout<ab_plugin_vtable>.offset(of: \.describe)!
        else {
            throw PluginLoadError(.badEntry, "the plugin's function table is missing or too small")
        }
        var state: OpaquePointer?
        if let initialise = vtable.pointee.`init` {
            var reason: UnsafePointer<CChar>?
            let status = initialise(host, &state, &reason)
            guard status == AB_OK else {
                let text = reason.map { String(cString: $0) } ?? "no reason given"
                throw PluginLoadError(.initFailed, "init failed: \(Redaction.redact(text))")
            }
        }
        return (vtable, state)
    }
}
