import AuthBridgePluginABI
import AuthBridgeJSON
import CAuthBridgePlugin
import Logging

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// What happened to one manifest found in a plugin folder.
public struct PluginReport: Sendable {
    public enum Status: Sendable {
        case loaded(LoadedPlugin)
        case refused(PluginLoadError)
    }

    /// The manifest's id, when the manifest could be read.
    public var id: String?
    public var manifestPath: String
    public var status: Status

    public var plugin: LoadedPlugin? {
        if case .loaded(let plugin) = status { return plugin }
        return nil
    }

    /// The entry in `initialize`'s provider list (bridge-spec: PluginStatus).
    public var json: JSON {
        switch status {
        case .loaded(let plugin):
            // Refused after it loaded (repeated faults): as refused as at load.
            if let refusal = plugin.refusal {
                return PluginReport(id: plugin.manifest.id, manifestPath: manifestPath, status: .refused(refusal)).json
            }
            let descriptor = plugin.descriptor
            return .compactObject([
                "id": .string(plugin.manifest.id),
                "status": "loaded",
                "version": .string(plugin.version),
                "displayName": descriptor["displayName"] ?? .string(plugin.manifest.id),
                "description": descriptor["description"] ?? .string(plugin.manifest.description),
                "flows": descriptor["flows"] ?? [],
                "capabilities": descriptor["capabilities"] ?? [],
                "settings": descriptor["settings"],
                "path": .string(plugin.libraryPath),
            ])
        case .refused(let error):
            return .compactObject([
                "id": id.map(JSON.string),
                "status": "refused",
                "reason": .string(error.reason.rawValue),
                "message": .string(error.message),
                "path": .string(manifestPath),
            ])
        }
    }
}

/// Finds, vets and loads provider plugins.
///
/// A plugin is a manifest (`NAME.json`) and a shared library side by side in
/// a plugin folder. Everything that can be checked without running plugin
/// code is checked first (ownership and permissions like sshd's StrictModes,
/// symlinks, duplicate ids, the manifest's ABI, a complete ELF file, a Swift
/// plugin's Swift runtime); then the library is opened
/// with `RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE`, its entry point's ABI
/// information is checked, and only then `init` runs. A refused plugin is
/// reported with a reason and never stops the others.
public struct PluginLoader: Sendable {
    public var folders: [String]
    public var logger: Logger

    public init(folders: [String], logger: Logger) {
        self.folders = folders
        self.logger = logger
    }

    /// Loads every plugin in `folders`; earlier folders win on duplicate ids.
    public func loadAll() -> [PluginReport] {
        var reports: [PluginReport] = []
        var seen: [String: String] = [:] // id → manifest path
        var seenFolders: Set<String> = []
        for folder in folders {
            guard let realFolder = FileSecurity.realPath(folder), FileSecurity.isDirectory(realFolder) else {
                logger.debug("plugin folder not found", metadata: ["folder": "\(folder)"])
                continue
            }
            guard seenFolders.insert(realFolder).inserted else { continue }
            guard let names = FileSecurity.listFolder(realFolder) else {
                logger.warning("cannot list plugin folder", metadata: ["folder": "\(folder)"])
                continue
            }
            var folderProblem: PluginLoadError?
            do { try FileSecurity.checkNotTamperable(realFolder, what: "plugin folder") } catch { folderProblem = error }
            for name in names where name.hasSuffix(".json") {
                let manifestPath = realFolder + "/" + name
                var report = load(manifestPath: manifestPath, folder: realFolder, folderProblem: folderProblem, seen: seen)
                if let plugin = report.plugin { seen[plugin.manifest.id] = manifestPath }
                if case .refused(let error) = report.status {
                    logger.warning(
                        "refused plugin",
                        metadata: ["manifest": "\(manifestPath)", "reason": "\(error.reason.rawValue)", "detail": "\(error.message)"])
                } else {
                    logger.debug("loaded plugin", metadata: ["id": "\(report.id ?? "?")", "manifest": "\(manifestPath)"])
                }
                if report.id == nil { report.id = String(name.dropLast(5)) }
                reports.append(report)
            }
        }
        return reports
    }

    private func load(manifestPath: String, folder: String, folderProblem: PluginLoadError?, seen: [String: String]) -> PluginReport {
        var id: String?
        do throws(PluginLoadError) {
            if let folderProblem { throw folderProblem }
            let manifest = try readManifest(manifestPath, folder: folder)
            id = manifest.id
            if let other = seen[manifest.id] {
                throw PluginLoadError(.duplicateID, "plugin id \"\(manifest.id)\" is already provided by \(other)")
            }
            guard manifest.abiMajor == Int(AB_ABI_MAJOR), manifest.abiMinor <= Int(AB_ABI_MINOR) else {
                throw PluginLoadError(
                    .abiMismatch,
                    "manifest declares ABI \(manifest.abiMajor).\(manifest.abiMinor); this host supports \(AB_ABI_MAJOR).0 to \(AB_ABI_MAJOR).\(AB_ABI_MINOR)"
                )
            }
            let libraryPath = try vetLibrary(folder + "/" + manifest.library, folder: folder)
            let plugin = try open(libraryPath, manifest: manifest)
            return PluginReport(id: id, manifestPath: manifestPath, status: .loaded(plugin))
        } catch {
            return PluginReport(id: id, manifestPath: manifestPath, status: .refused(error))
        }
    }

    private func readManifest(_ path: String, folder: String) throws(PluginLoadError) -> PluginManifest {
        if FileSecurity.isSymlink(path) {
            guard let target = FileSecurity.realPath(path), target.hasPrefix(folder + "/") else {
                throw PluginLoadError(.symlinkEscapes, "manifest \(path) is a symlink that leaves the plugin folder")
            }
        }
        try FileSecurity.checkNotTamperable(FileSecurity.realPath(path) ?? path, what: "manifest")
        guard let bytes = FileSecurity.readFile(path) else {
            throw PluginLoadError(.invalidManifest, "cannot read manifest \(path)")
        }
        let json: JSON
        do { json = try JSON.parse(bytes) } catch {
            throw PluginLoadError(.invalidManifest, "manifest is not valid JSON: \(error)")
        }
        return try PluginManifest(json: json)
    }

    /// Resolves the library path and refuses one outside the folder or tamperable.
    private func vetLibrary(_ path: String, folder: String) throws(PluginLoadError) -> String {
        guard let real = FileSecurity.realPath(path) else {
            throw PluginLoadError(.loadFailed, "library \(path) does not exist")
        }
        guard real.hasPrefix(folder + "/") else {
            throw PluginLoadError(.symlinkEscapes, "library \(path) resolves to \(real), outside the plugin folder")
        }
        // A link's own mode is always 0777 on Linux; only its owner matters.
        if FileSecurity.isSymlink(path) { try FileSecurity.checkOwner(path, what: "library link") }
        try FileSecurity.checkNotTamperable(real, what: "library")
        return real
    }

    private func open(_ path: String, manifest: PluginManifest) throws(PluginLoadError) -> LoadedPlugin {
        let library = try ELFCheck.validate(path)
        // Before dlopen: opening a Swift library already runs Swift code against the host's runtime.
        try SwiftRuntimeCheck.check(library, path: path)
        let (vtable, state) = try PluginEntry.open(dlopenPath: path, manifest: manifest, host: HostAPI.table)
        let plugin = LoadedPlugin(
            manifest: manifest, libraryPath: path, version: manifest.version, vtable: vtable,
            state: state, logger: logger)
        plugin.descriptor = try describe(plugin)
        return plugin
    }

    private func describe(_ plugin: LoadedPlugin) throws(PluginLoadError) -> JSON {
        let fallback: JSON = [
            "id": .string(plugin.manifest.id), "version": .string(plugin.version),
            "displayName": .string(plugin.manifest.id), "description": .string(plugin.manifest.description),
            "flows": [], "capabilities": [], "settings": ["type": "object"],
        ]
        switch plugin.invokeBlocking(.describe, input: [:], environment: LoadTimeEnvironment()) {
        case .useDefault:
            return fallback
        case .failure(let failure):
            plugin.shutdown()
            throw PluginLoadError(.describeFailed, "describe failed: \(failure.message)")
        case .result(let value):
            guard case .object(var members) = value else {
                plugin.shutdown()
                throw PluginLoadError(.describeFailed, "describe must answer a JSON object")
            }
            // id, version and description are the manifest's: filled in, and refused when stated otherwise.
            for (key, stated) in [("id", plugin.manifest.id), ("version", plugin.manifest.version), ("description", plugin.manifest.description)] {
                guard let given = members[key], given != .string(stated) else { continue }
                plugin.shutdown()
                throw PluginLoadError(
                    .metadataMismatch,
                    "describe reports \(key) \(given.serializedString()) but the manifest says \(JSON.string(stated).serializedString()); the manifest is where a plugin's \(key) is stated"
                )
            }
            for (key, value) in fallback.objectValue! where members[key] == nil { members[key] = value }
            return .object(members)
        }
    }
}

/// `describe` runs before any session exists: no network, no events.
struct LoadTimeEnvironment: HookEnvironment {
    func emit(_ event: JSON, from call: HookCall) {}
    func http(_ request: JSON, call: HookCall) -> Result<JSON, ProviderFailure> {
        .failure(ProviderFailure(.internal, reason: "unavailable", message: "HTTP is not available while a plugin describes itself."))
    }
    func standard(_ hook: PluginHook, input: JSON, call: HookCall) -> Result<JSON, ProviderFailure> {
        .failure(ProviderFailure(.internal, reason: "unavailable", message: "Standard steps are not available while a plugin describes itself."))
    }
}
