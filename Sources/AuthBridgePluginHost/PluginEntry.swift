import AuthBridgePluginABI
import AuthBridgeRedaction
import CAuthBridgePlugin

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// Opens a vetted plugin library and runs its entry point and `init`: the
/// same steps in the host (in-process plugins) and in a plugin's runner.
enum PluginEntry {
    /// `dlopen`s `dlopenPath` (a vetted path, or `/proc/self/fd/N` of a vetted
    /// descriptor), checks what `authbridge_plugin_v1` returns against the host
    /// and the manifest before any other plugin code runs, then calls `init`
    /// with `host`. The library is never closed: Swift plugins crash the
    /// process after `dlclose`.
    static func open(
        dlopenPath: String, manifest: PluginManifest, host: UnsafePointer<ab_host_api>
    )
        throws(PluginLoadError) -> (vtable: UnsafePointer<ab_plugin_vtable>, state: OpaquePointer?)
    {
        _ = dlerror()
        guard let handle = dlopen(dlopenPath, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE) else {
            let message = dlerror().map { String(cString: $0) } ?? "unknown error"
            throw PluginLoadError(.loadFailed, "dlopen failed: \(message)")
        }
        guard let symbol = dlsym(handle, AB_ENTRY_SYMBOL) else {
            throw PluginLoadError(.missingSymbol, "\(manifest.library) does not export \(AB_ENTRY_SYMBOL)")
        }
        let entry = unsafeBitCast(symbol, to: ab_entry_fn.self)
        guard let info = entry() else { throw PluginLoadError(.badEntry, "\(AB_ENTRY_SYMBOL) returned NULL") }
        // Everything below is checked before any plugin code other than the entry runs.
        guard info.pointee.magic == AB_PLUGIN_MAGIC else {
            throw PluginLoadError(.badEntry, "\(AB_ENTRY_SYMBOL) returned data without the AuthBridge magic")
        }
        let major = Int(info.pointee.abi_major), minor = Int(info.pointee.abi_minor)
        guard major == Int(AB_ABI_MAJOR), minor <= Int(AB_ABI_MINOR) else {
            throw PluginLoadError(
                .abiMismatch, "library built for ABI \(major).\(minor); this host supports \(AB_ABI_MAJOR).0 to \(AB_ABI_MAJOR).\(AB_ABI_MINOR)")
        }
        // The manifest's ABI is the least the plugin needs (checked against the host before
        // loading); a library rebuilt with a newer plugin.h of the same major reports a higher minor,
        // which the host serves as long as it is not above its own (as GStreamer's plugin versions).
        guard major == manifest.abiMajor else {
            throw PluginLoadError(
                .abiMismatch, "library reports ABI \(major).\(minor) but its manifest says \(manifest.abiMajor).\(manifest.abiMinor)")
        }
        let reportedID = info.pointee.id.map { String(cString: $0) } ?? ""
        guard reportedID == manifest.id else {
            throw PluginLoadError(.badEntry, "library reports id \"\(reportedID)\" but its manifest says \"\(manifest.id)\"")
        }
        // The version is the manifest's; a library that states one must agree (NULL: it does not).
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

    /// The hook's function in `vtable`, nil when the plugin has none (an
    /// entry past the table's `size` is absent: the table is append-only).
    static func function(for hook: PluginHook, in vtable: UnsafePointer<ab_plugin_vtable>) -> ab_hook_fn? {
        let table = vtable.pointee
        guard let offset = MemoryLayout<ab_plugin_vtable>.offset(of: hook.slot),
            offset + MemoryLayout<ab_hook_fn?>.size <= Int(table.size)
        else { return nil }
        return table[keyPath: hook.slot]
    }
}
