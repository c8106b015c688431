import AuthBridgeJSON
import AuthBridgePluginABI
import AuthBridgeSystem
import AuthBridgeURL
import CAuthBridgePlugin
import Logging
import Synchronization

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
    /// Where the plugin ran or was to run, when that was decided (loaded, or refused after that).
    public var isolation: PluginIsolation?

    public init(id: String?, manifestPath: String, status: Status, isolation: PluginIsolation? = nil) {
        self.id = id
        self.manifestPath = manifestPath
        self.status = status
        self.isolation = isolation ?? plugin?.isolation
    }

    public var plugin: LoadedPlugin? {
        if case .loaded(let plugin) = status { return plugin }
        return nil
    }

    /// The entry in `initialize`'s provider list without the settings schema, as `initialize` answers
    /// unless asked for them (`settingsSchemas`): the schemas are most of its size, read by few.
    public var jsonWithoutSettings: JSON {
        guard case .object(var members) = json else { return json }
        members["settings"] = nil
        return .object(members)
    }

    /// The entry in `listProviders`' provider list (bridge-spec: PluginStatus).
    public var json: JSON {
        switch status {
        case .loaded(let plugin):
            // Refused after it loaded (repeated faults): as refused as at load.
            if let refusal = plugin.refusal {
                return PluginReport(id: plugin.manifest.id, manifestPath: manifestPath, status: .refused(refusal), isolation: plugin.isolation).json
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
                "isolation": .string(plugin.isolation.rawValue),
                "confinement": plugin.confinement?.json,
                "warnings": plugin.loadWarnings.isEmpty ? nil : .array(plugin.loadWarnings.map(JSON.string)),
            ])
        case .refused(let error):
            return .compactObject([
                "id": id.map(JSON.string),
                "status": "refused",
                "reason": .string(error.reason.rawValue),
                "message": .string(error.message),
                "path": .string(manifestPath),
                "isolation": isolation.map { .string($0.rawValue) },
            ])
        }
    }
}

/// Finds, vets and loads provider plugins.
///
/// A plugin is a manifest (`NAME.json`) and a shared library side by side in
/// a plugin folder. Everything that can be checked without running plugin
/// code is checked first, through open descriptors so that what is checked is
/// what runs: the folder and every folder above it (ownership and permissions
/// like sshd's StrictModes), symlinks, duplicate ids, the manifest's ABI, a
/// complete ELF file, a Swift plugin's Swift runtime. Then the library is
/// opened — in this process through `/proc/self/fd/N` with `RTLD_NOW |
/// RTLD_LOCAL | RTLD_NODELETE`, or in the plugin's own runner process
/// (`IsolationPolicy` decides) — its entry point's ABI information is
/// checked, and only then `init` runs. A refused plugin is reported with a
/// reason and never stops the others.
public struct PluginLoader: Sendable {
    public var folders: [PluginFolder]
    public var policy: IsolationPolicy
    public var logger: Logger
    /// Starts an isolated plugin's runner (tests run it on a thread).
    var launch: @Sendable (Int) -> RunnerBackend.Launch = { RunnerBackend.spawnLaunch(memoryLimitMB: $0) }
    /// Runs between vetting and opening (tests swap the library there).
    var beforeOpen: (@Sendable (VettedLibrary) -> Void)?
    /// The plugin ids to load; nil for all. The others' manifests are still read (an id
    /// still goes to its first folder), but their libraries are neither vetted nor opened and
    /// they get no report: a command that needs one profile's plugin loads that one alone.
    public var only: Set<String>?

    /// Loads from install-tree folders: every plugin in-process unless `policy` says otherwise.
    public init(folders: [String], policy: IsolationPolicy = IsolationPolicy(), logger: Logger) {
        self.init(folders: folders.map { PluginFolder($0, origin: .installTree) }, policy: policy, logger: logger)
    }

    public init(folders: [PluginFolder], policy: IsolationPolicy = IsolationPolicy(), logger: Logger) {
        self.folders = folders
        self.policy = policy
        self.logger = logger
    }

    /// A plugin vetted and ready to open, or its refusal.
    private enum Candidate {
        case vetted(VettedLibrary, origin: PluginFolder.Origin)
        case refused(PluginLoadError)
    }

    /// Loads every plugin in `folders`; earlier folders win on duplicate ids.
    /// Plugins are vetted one after the other, then opened (runners start in
    /// parallel, on threads of their own): a plugin that passed vetting holds its id,
    /// one refused while vetted (a Swift plugin built for another runtime,
    /// say) leaves it to a copy in a later folder.
    public func loadAll() -> [PluginReport] {
        var candidates: [(id: String?, manifestPath: String, candidate: Candidate)] = []
        var seen: [String: String] = [:] // id → manifest path
        var seenFolders: Set<String> = []
        for folder in folders {
            guard let realFolder = FileSecurity.realPath(folder.path), FileSecurity.isDirectory(realFolder) else {
                logger.debug("plugin folder not found", metadata: ["folder": "\(folder.path)"])
                continue
            }
            guard seenFolders.insert(realFolder).inserted else { continue }
            guard let names = FileSecurity.listFolder(realFolder) else {
                logger.warning("cannot list plugin folder", metadata: ["folder": "\(folder.path)"])
                continue
            }
            var folderProblem: PluginLoadError?
            do { try FileSecurity.checkAncestors(realFolder) } catch { folderProblem = error }
            for name in names where name.hasSuffix(".json") {
                let manifestPath = realFolder + "/" + name
                var id: String?
                let candidate: Candidate
                do throws(PluginLoadError) {
                    if let folderProblem { throw folderProblem }
                    let manifest = try readManifest(manifestPath, folder: realFolder)
                    id = manifest.id
                    if let other = seen[manifest.id] {
                        throw PluginLoadError(.duplicateID, "plugin id \"\(manifest.id)\" is already provided by \(other)")
                    }
                    if let only, !only.contains(manifest.id) { continue }
                    candidate = .vetted(try vet(manifest, folder: realFolder), origin: folder.origin)
                    seen[manifest.id] = manifestPath
                } catch {
                    candidate = .refused(error)
                }
                candidates.append((id ?? String(name.dropLast(5)), manifestPath, candidate))
            }
        }
        let reports = Mutex<[Int: PluginReport]>([:])
        let finished = Handoff<Bool>()
        let remaining = Atomic<Int>(candidates.count)
        var inline: [@Sendable () -> Void] = []
        for (index, entry) in candidates.enumerated() {
            let work: @Sendable () -> Void = { [self] in
                let status: PluginReport.Status
                var isolation: PluginIsolation?
                switch entry.candidate {
                case .refused(let error): status = .refused(error)
                case .vetted(let library, let origin): (status, isolation) = open(library, origin: origin)
                }
                let report = PluginReport(id: entry.id, manifestPath: entry.manifestPath, status: status, isolation: isolation)
                reports.withLock { $0[index] = report }
                if remaining.subtract(1, ordering: .acquiringAndReleasing).newValue == 0 { finished.put(true) }
            }
            // Runners start in parallel; in-process plugins load here, one after the other
            // (`dlopen` holds the dynamic loader's lock anyway: threads would only add their cost).
            if case .vetted(let library, let origin) = entry.candidate, policy.isolation(for: library.manifest, origin: origin).0 == .process {
                detachThread(work)
            } else {
                inline.append(work)
            }
        }
        for work in inline { work() }
        if !candidates.isEmpty { _ = finished.take() }
        return reports.withLock { reports in
            candidates.indices.map { index in
                let report = reports[index]!
                if case .refused(let error) = report.status {
                    logger.warning(
                        "refused plugin",
                        metadata: ["manifest": "\(report.manifestPath)", "reason": "\(error.reason.rawValue)", "detail": "\(error.message)"])
                } else {
                    logger.debug("loaded plugin", metadata: ["id": "\(report.id ?? "?")", "manifest": "\(report.manifestPath)"])
                }
                return report
            }
        }
    }

    private func readManifest(_ path: String, folder: String) throws(PluginLoadError) -> PluginManifest {
        let real = try resolveInside(path, folder: folder, what: "manifest")
        let (fd, _) = try FileSecurity.openVetted(real, what: "manifest")
        defer { close(fd) }
        guard case .success(let bytes) = POSIXFiles.readAll(fd, limit: 1 << 20) else {
            throw PluginLoadError(.invalidManifest, "cannot read manifest \(path)")
        }
        let json: JSON
        do { json = try JSON.parse(bytes) } catch {
            throw PluginLoadError(.invalidManifest, "manifest is not valid JSON: \(error)")
        }
        return try PluginManifest(json: json)
    }

    /// `path`'s canonical path; a symlink must stay inside the folder and be
    /// owned by this user or root (a link's own mode is always 0777 on Linux).
    private func resolveInside(_ path: String, folder: String, what: String) throws(PluginLoadError) -> String {
        guard let real = FileSecurity.realPath(path) else {
            throw PluginLoadError(.loadFailed, "\(what) \(path) does not exist")
        }
        guard real.hasPrefix(folder + "/") else {
            throw PluginLoadError(.symlinkEscapes, "\(what) \(path) is a symlink that leaves the plugin folder (it resolves to \(real))")
        }
        if FileSecurity.isSymlink(path) { try FileSecurity.checkOwner(path, what: "\(what) link") }
        return real
    }

    /// Checks the manifest's ABI and the library through one open descriptor,
    /// which stays open for the life of the process (`VettedLibrary`).
    private func vet(_ manifest: PluginManifest, folder: String) throws(PluginLoadError) -> VettedLibrary {
        guard manifest.abiMajor == Int(AB_ABI_MAJOR), manifest.abiMinor <= Int(AB_ABI_MINOR) else {
            throw PluginLoadError(
                .abiMismatch,
                "manifest declares ABI \(manifest.abiMajor).\(manifest.abiMinor); this host supports \(AB_ABI_MAJOR).0 to \(AB_ABI_MAJOR).\(AB_ABI_MINOR)"
            )
        }
        let real = try resolveInside(folder + "/" + manifest.library, folder: folder, what: "library")
        // A library in a subfolder: the folders between are checked too.
        let libraryFolder = HelperLibraryLocation.parent(of: real)
        if libraryFolder != folder { try FileSecurity.checkAncestors(libraryFolder) }
        let (fd, info) = try FileSecurity.openVetted(real, what: "library")
        do throws(PluginLoadError) {
            let elf = try ELFCheck.validate(fd: fd, path: real)
            // Before dlopen: opening a Swift library already runs Swift code against the host's runtime.
            try SwiftRuntimeCheck.check(elf, path: real)
            return VettedLibrary(fd: fd, path: real, manifest: manifest, elf: elf, info: info)
        } catch {
            close(fd)
            throw error
        }
    }

    /// Opens a vetted library where the policy says, and asks it to describe itself.
    private func open(_ library: VettedLibrary, origin: PluginFolder.Origin) -> (PluginReport.Status, PluginIsolation) {
        beforeOpen?(library)
        let manifest = library.manifest
        let (isolation, warning) = policy.isolation(for: manifest, origin: origin)
        if let warning { logger.warning("\(warning)") }
        let deadlines = HookDeadlines(overrides: manifest.deadlines)
        let health = PluginHealth(pluginID: manifest.id)
        let backend: any PluginBackend
        switch isolation {
        case .none:
            backend = InProcessBackend(
                dlopenPath: "/proc/self/fd/\(library.fd)", manifest: manifest, loadDeadline: deadlines.load, logger: logger)
        case .process:
            let runner = WeakRunner()
            let logger = self.logger
            let isolated = RunnerBackend(library: library, logger: logger, launch: launch(policy.memoryLimitMB)) { ending in
                let fault: PluginFault
                switch ending {
                case .shutDown: return
                case .crashed(let detail): fault = .crashed(detail: detail)
                case .killedAfterTimeout(let hook): fault = .timedOut(hook: hook, after: deadlines[hook])
                }
                switch health.record(fault) {
                case .restart(let backOff):
                    runner.backend?.holdRestarts(until: .now + backOff)
                case .refuse:
                    logger.error("plugin refused after repeated failures", metadata: ["plugin": "\(manifest.id)"])
                    runner.backend?.refuse(health.refusalFailure)
                }
            }
            runner.backend = isolated
            backend = isolated
        }
        do throws(PluginLoadError) {
            // The path may name another file by now; the descriptor is what was vetted.
            guard FileSecurity.stillNames(library.path, library.info) else {
                throw PluginLoadError(
                    .libraryChanged,
                    "library \(library.path) was replaced while it was being loaded; nothing of the replacement ran; restart the host to load the new file"
                )
            }
            try backend.load()
            for warning in backend.confinement?.warnings ?? [] {
                logger.warning("plugin \(manifest.id) runs with less confinement: \(warning)")
            }
            let plugin = LoadedPlugin(
                manifest: manifest, libraryPath: library.path, backend: backend, health: health, deadlines: deadlines, logger: logger)
            plugin.descriptor = try describe(plugin)
            return (.loaded(plugin), isolation)
        } catch {
            backend.shutdown(within: .zero)
            return (.refused(Self.explained(error, library: library)), isolation)
        }
    }

    /// A library loaded through `/proc/self/fd/N` finds nothing through `$ORIGIN`: say so when a
    /// private library beside the plugin is what could not be found.
    static func explained(_ error: PluginLoadError, library: VettedLibrary) -> PluginLoadError {
        guard error.reason == .loadFailed, error.message.hasSubstring("cannot open shared object file"),
            library.elf.searchPaths.contains(where: { $0.hasSubstring("$ORIGIN") || $0.hasSubstring("${ORIGIN}") })
        else { return error }
        var explained = error
        explained.message +=
            " (the plugin looks for its own libraries through $ORIGIN, which does not name its folder when the host loads it from the descriptor it vetted: link them statically, or install them where the system finds libraries)"
        return explained
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
            // id and version are the manifest's: filled in, and refused when stated otherwise (they
            // name what runs). The description is only words: the manifest's wins, with a warning.
            for (key, stated) in [("id", plugin.manifest.id), ("version", plugin.manifest.version)] {
                guard let given = members[key], given != .string(stated) else { continue }
                plugin.shutdown()
                throw PluginLoadError(
                    .metadataMismatch,
                    "describe reports \(key) \(given.serializedString()) but the manifest says \(JSON.string(stated).serializedString()); the manifest is where a plugin's \(key) is stated"
                )
            }
            if let given = members["description"], given != .string(plugin.manifest.description) {
                let warning =
                    "plugin \(plugin.manifest.id): describe gives the description \(given.serializedString()) but the manifest says \(JSON.string(plugin.manifest.description).serializedString()); the manifest's is shown"
                logger.warning("\(warning)")
                plugin.loadWarnings.append(warning)
                members["description"] = .string(plugin.manifest.description)
            }
            for (key, value) in fallback.objectValue! where members[key] == nil { members[key] = value }
            return .object(members)
        }
    }
}

/// The backend a runner's health decisions act on, set once it exists.
private final class WeakRunner: @unchecked Sendable {
    weak var backend: RunnerBackend?
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
