import AuthBridgePluginABI

/// Refuses a Swift plugin built for another Swift runtime than the host's, from what the file
/// says (`ELFCheck`), before `dlopen`: opening it would already run its Swift metadata
/// registration against the host's runtime, and Swift on Linux has no stable ABI.
///
/// A library that needs `libswiftCore.so` is a Swift plugin. It must carry the Swift runtime note
/// (`SwiftRuntimeNote`, written by AuthBridgePluginSDK), naming exactly the Swift that built the
/// host: the host bundles that toolchain's runtime. C plugins are not checked.
enum SwiftRuntimeCheck {
    static func check(
        _ library: ELFCheck.Library, path: String,
        host: SwiftRuntimeVersion = SwiftRuntimeNote.compiled
    ) throws(PluginLoadError) {
        guard library.needsSwiftRuntime else { return }
        let rebuild =
            host.isNewerThanNamed
            ? "extend scripts/swift-runtime-ladder.py, then rebuild the host and the plugin"
            : "rebuild it with Swift \(host) and the SDK of this host"
        let notes = library.notes.filter { $0.owner == SwiftRuntimeNote.owner && $0.type == SwiftRuntimeNote.type }
        guard !notes.isEmpty else {
            throw PluginLoadError(
                .swiftRuntimeMismatch,
                "\(path) was built without AuthBridge's Swift runtime marker (an SDK older than this host, or not built with AuthBridgePluginSDK); \(rebuild)"
            )
        }
        for note in notes {
            guard let plugin = SwiftRuntimeNote.version(descriptor: note.descriptor) else {
                throw PluginLoadError(
                    .swiftRuntimeMismatch,
                    "\(path) has a malformed Swift runtime marker (a \(note.descriptor.count)-byte descriptor, not \(SwiftRuntimeNote.descriptorSize)); \(rebuild)"
                )
            }
            guard plugin.matches(host) else {
                let built = plugin.isNewerThanNamed ? "the runtime of a Swift \(plugin)" : "the Swift \(plugin) runtime"
                let bundled =
                    host.isNewerThanNamed
                    ? "a Swift \(host), which its version ladder cannot name, so it can vouch for no Swift plugin"
                    : "Swift \(host)"
                let remedy = host.isNewerThanNamed ? rebuild : "rebuild the plugin with Swift \(host)"
                throw PluginLoadError(.swiftRuntimeMismatch, "\(path) was built for \(built); this host bundles \(bundled): \(remedy)")
            }
        }
    }
}
