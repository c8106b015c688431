import AuthBridgeJSON
@testable import AuthBridgePluginHost
import TestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// A class: Swift Testing makes one instance per test (case), so each gets its own plugin
/// folder, removed when the test ends.
@Suite("Plugin loader")
final class PluginLoaderTests: Sendable {
    let folder: TemporaryFolder
    init() throws { folder = try TemporaryFolder() }
    deinit { folder.remove() }

    @Test func anEmptyOrMissingFolderLoadsNothing() throws {
        #expect(loadAll(folder.path).isEmpty)
        #expect(loadAll(folder.path + "/absent").isEmpty)
    }

    @Test func filesOtherThanManifestsAreIgnored() throws {
        writeFile(folder.path + "/README.md", "# notes")
        writeFile(folder.path + "/libthing.so", "not loaded without a manifest")
        #expect(loadAll(folder.path).isEmpty)
    }

    @Test func invalidJSONIsAnInvalidManifestNamedAfterItsFile() throws {
        writeFile(folder.path + "/broken.json", #"{"id": "broken","#)
        let reports = loadAll(folder.path)
        try #require(reports.count == 1)
        #expect(reports[0].refusal?.reason == .invalidManifest)
        #expect(reports[0].id == "broken")
        #expect(reports[0].json["status"] == "refused" && reports[0].json["reason"] == "invalidManifest")
    }

    @Test(arguments: ["2.0", "0.9", "1.99"])
    func aManifestABIThisHostDoesNotSpeakIsAbiMismatch(_ abi: String) throws {
        writeFile(folder.path + "/future.json", manifestText(id: "future", abi: abi, library: "libfuture.so"))
        let reports = loadAll(folder.path)
        #expect(reports.map(\.refusal?.reason) == [.abiMismatch])
        #expect(reports.first?.id == "future")
    }

    @Test(arguments: [0o664, 0o646] as [mode_t])
    func aWritableManifestIsInsecure(_ mode: mode_t) throws {
        writeFile(folder.path + "/open.json", manifestText(id: "open", library: "libopen.so"), mode: mode)
        #expect(loadAll(folder.path).map(\.refusal?.reason) == [.insecurePermissions])
    }

    @Test func aGroupWritableFolderRefusesEverythingInIt() throws {
        let plugins = folder.subfolder("plugins")
        writeFile(plugins + "/a.json", manifestText(id: "a", library: "liba.so"))
        writeFile(plugins + "/b.json", "not even JSON")
        chmod(plugins, 0o775)
        #expect(loadAll(plugins).map(\.refusal?.reason) == [.insecurePermissions, .insecurePermissions])
    }

    @Test func aLibrarySymlinkLeavingTheFolderIsRefused() throws {
        let plugins = folder.subfolder("plugins")
        let outside = folder.subfolder("outside")
        writeFile(outside + "/libescape.so", "whatever")
        symlink(outside + "/libescape.so", plugins + "/libescape.so")
        writeFile(plugins + "/escape.json", manifestText(id: "escape", library: "libescape.so"))
        #expect(loadAll(plugins).map(\.refusal?.reason) == [.symlinkEscapes])
    }

    @Test func aManifestSymlinkLeavingTheFolderIsRefused() throws {
        let plugins = folder.subfolder("plugins")
        let outside = folder.subfolder("outside")
        writeFile(outside + "/real.json", manifestText(id: "real", library: "libreal.so"))
        symlink(outside + "/real.json", plugins + "/real.json")
        #expect(loadAll(plugins).map(\.refusal?.reason) == [.symlinkEscapes])
    }

    @Test func aMissingLibraryIsLoadFailed() throws {
        writeFile(folder.path + "/ghost.json", manifestText(id: "ghost", library: "libghost.so"))
        let report = try #require(loadAll(folder.path).first)
        #expect(report.refusal?.reason == .loadFailed)
        #expect(report.refusal?.message.contains("does not exist") == true)
    }

    @Test func aTruncatedLibraryIsLoadFailedBeforeDlopen() throws {
        let image = try #require(FileSecurity.readFile("/proc/self/exe", limit: 512 << 20))
        writeFile(folder.path + "/libcut.so", Array(image.prefix(image.count / 3)))
        writeFile(folder.path + "/cut.json", manifestText(id: "cut", library: "libcut.so"))
        let report = try #require(loadAll(folder.path).first)
        #expect(report.refusal?.reason == .loadFailed)
        #expect(report.refusal?.message.contains("truncated") == true)
    }

    @Test func theSameIdInALaterFolderIsDuplicateId() throws {
        let first = folder.subfolder("first"), second = folder.subfolder("second")
        try installSwiftTestPlugin(into: first)
        // The duplicate is refused before its library is even looked at.
        writeFile(second + "/swifttest.json", manifestText(id: "swifttest", library: "libmissing.so"))
        let reports = loadAll(first, second)
        try #require(reports.count == 2)
        #expect(reports[0].plugin?.manifest.id == "swifttest")
        #expect(reports[1].refusal?.reason == .duplicateID)
        #expect(reports[1].refusal?.message.contains(first) == true)
        #expect(reports[1].json["reason"] == "duplicateId")
    }

    /// `only` (a command that needs one profile's plugin): the others are neither vetted nor
    /// opened — a broken one is not even refused — and an id is still looked for in folder order.
    @Test func onlyTheNamedPluginsAreOpened() throws {
        let first = folder.subfolder("first"), second = folder.subfolder("second")
        try installSwiftTestPlugin(into: second)
        writeFile(first + "/ghost.json", manifestText(id: "ghost", library: "libghost.so"))
        writeFile(first + "/swifttest.json", manifestText(id: "swifttest", library: "libmissing.so"))
        var loader = PluginLoader(folders: [first, second], logger: quietLogger)
        loader.only = ["swifttest"]
        let reports = loader.loadAll()
        #expect(reports.map(\.id) == ["swifttest", "swifttest"], "ghost's missing library was not looked at")
        #expect(reports.first?.refusal?.reason == .loadFailed, "the first folder's copy was tried first")
        let plugin = try #require(reports.last?.plugin)
        plugin.shutdown()
        loader.only = ["ghost"]
        #expect(loader.loadAll().map { $0.refusal?.reason } == [.loadFailed], "swifttest was not opened")
    }

    @Test func aFolderListedTwiceIsLoadedOnce() throws {
        writeFile(folder.path + "/ghost.json", manifestText(id: "ghost", library: "libghost.so"))
        #expect(loadAll(folder.path, folder.path + "/.").count == 1)
    }

    /// A library that is a symlink to a file inside the plugin folder
    /// (libfoo.so → libfoo.so.1) stays in the folder and should load; but
    /// `lstat` reports every Linux symlink as mode 0777, so the link check
    /// always finds it "writable by group or others".
    @Test func aLibrarySymlinkInsideTheFolderLoads() throws {
        try installSwiftTestPlugin(into: folder.path)
        let library = folder.path + "/libauthbridge-testplugin-swift.so"
        rename(library, library + ".1")
        symlink("libauthbridge-testplugin-swift.so.1", library)
        let report = try #require(loadAll(folder.path).first)
        #expect(report.plugin != nil, "\(String(describing: report.refusal))")
    }
}

/// What is vetted is what runs: the library is checked and opened through one descriptor.
@Suite("Plugin loader: vetting by descriptor")
final class VettingByDescriptorTests: Sendable {
    let folder: TemporaryFolder
    init() throws { folder = try TemporaryFolder() }
    deinit { folder.remove() }

    private func load(swapping swap: @escaping @Sendable (String) -> Void) throws -> PluginReport {
        try installSwiftTestPlugin(into: folder.path)
        var loader = PluginLoader(folders: [folder.path], logger: quietLogger)
        loader.beforeOpen = { swap($0.path) }
        let report = try #require(loader.loadAll().first)
        report.plugin?.shutdown()
        return report
    }

    /// A file renamed over the library between vetting and loading never reaches dlopen (the old
    /// loader opened the path again and died of SIGBUS on the truncated replacement, or ran it).
    @Test func aLibraryReplacedAfterVettingIsRefusedAsChanged() throws {
        let report = try load { path in
            let image = FileSecurity.readFile(path, limit: 512 << 20) ?? []
            writeFile(path + ".new", Array(image.prefix(200)))
            rename(path + ".new", path)
        }
        #expect(report.refusal?.reason == .libraryChanged, "\(String(describing: report.refusal))")
        #expect(report.refusal?.message.contains("replaced") == true)
    }

    /// The check is the file's identity, not its name: the same file back under its name loads.
    @Test func theSameFileBackUnderItsNameLoads() throws {
        let report = try load { path in
            link(path, path + ".keep")
            writeFile(path + ".new", "not a library")
            rename(path + ".new", path)
            rename(path + ".keep", path)
        }
        #expect(report.plugin != nil, "\(String(describing: report.refusal))")
    }

    /// A folder above the plugin folder that others may write to lets them swap the plugin
    /// folder itself: refused, as sshd's StrictModes refuses it (the old loader checked only the
    /// plugin folder).
    @Test func aParentFolderOthersCanWriteRefusesItsPlugins() throws {
        let (open, report) = try loadBelow(parentMode: 0o777)
        #expect(report.refusal?.reason == .insecurePermissions)
        #expect(report.refusal?.message.contains(open) == true)
        #expect(report.refusal?.fix == "chmod go-w " + FileSecurity.shellQuoted(open))
    }

    /// A sticky folder (like /tmp) is writable by others, but they cannot rename what they do not own.
    @Test func aStickyParentFolderIsAccepted() throws {
        let (_, report) = try loadBelow(parentMode: 0o1777)
        #expect(report.plugin != nil, "\(String(describing: report.refusal))")
        report.plugin?.shutdown()
    }

    /// The Swift test plugin in `PARENT/plugins`, PARENT with `parentMode`: the parent and the report.
    private func loadBelow(parentMode: mode_t) throws -> (parent: String, report: PluginReport) {
        let parent = folder.subfolder("parent")
        chmod(parent, parentMode)
        let plugins = parent + "/plugins"
        mkdir(plugins, 0o755)
        try installSwiftTestPlugin(into: plugins)
        return (parent, try #require(loadAll(plugins).first))
    }

    /// The plugin folder itself gets no sticky exception: others could add libraries to it.
    @Test func aStickyPluginFolderIsStillRefused() throws {
        let plugins = folder.subfolder("plugins")
        try installSwiftTestPlugin(into: plugins)
        chmod(plugins, 0o1777)
        let report = try #require(loadAll(plugins).first)
        #expect(report.refusal?.reason == .insecurePermissions)
    }
}
