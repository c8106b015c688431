import AuthBridgeJSON
@testable import AuthBridgePluginHost
import Logging
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// A fresh folder under /tmp (mode 0700), one per test, removed by `remove()`.
struct TemporaryFolder {
    let path: String

    init() throws {
        var template = Array("/tmp/authbridge-test-XXXXXX".utf8CString)
        let made = template.withUnsafeMutableBufferPointer { mkdtemp($0.baseAddress!) }
        path = try #require(made.map { String(cString: $0) }, "mkdtemp failed")
    }

    /// A new folder inside this one (mode 0755).
    func subfolder(_ name: String) -> String {
        let sub = path + "/" + name
        mkdir(sub, 0o755)
        chmod(sub, 0o755)
        return sub
    }

    func remove() { removeTree(path) }
}

/// Deletes a tree without following symlinks.
func removeTree(_ path: String) {
    var info = stat()
    guard lstat(path, &info) == 0 else { return }
    if info.st_mode & S_IFMT == S_IFDIR, let names = FileSecurity.listFolder(path) {
        for name in names { removeTree(path + "/" + name) }
        rmdir(path)
    } else {
        unlink(path)
    }
}

/// Writes `bytes` to `path` and sets `mode` exactly (umask does not apply to chmod).
@discardableResult
func writeFile(_ path: String, _ bytes: [UInt8], mode: mode_t = 0o644) -> Bool {
    let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
    guard fd >= 0 else { return false }
    defer { close(fd) }
    var offset = 0
    while offset < bytes.count {
        let written = bytes.withUnsafeBytes { write(fd, $0.baseAddress! + offset, $0.count - offset) }
        if written <= 0 { return false }
        offset += written
    }
    return chmod(path, mode) == 0
}

@discardableResult
func writeFile(_ path: String, _ text: String, mode: mode_t = 0o644) -> Bool {
    writeFile(path, Array(text.utf8), mode: mode)
}

func manifestText(id: String, abi: String = "1.0", library: String) -> String {
    #"{"id":"\#(id)","version":"1.0.0","abi":"\#(abi)","library":"\#(library)"}"#
}

/// The repository root, from this file's path (Tests/AuthBridgePluginHostTests/…).
func repositoryRoot(_ file: String = #filePath) -> String {
    var path = file
    for _ in 0..<3 { path = Installation.parent(of: path) }
    return path
}

/// The Swift test plugin built by SwiftPM: next to the test binary, or in .build/debug.
func swiftTestPluginLibrary() -> String? {
    let name = "libauthbridge-testplugin-swift.so"
    return [Installation.executableFolder + "/" + name, repositoryRoot() + "/.build/debug/" + name]
        .first { access($0, R_OK) == 0 }
}

/// Copies the Swift test plugin (library and manifest, mode 0644) into `folder`.
func installSwiftTestPlugin(into folder: String) throws {
    let library = try #require(swiftTestPluginLibrary(),
                               "libauthbridge-testplugin-swift.so is not built: run `make build` (or `swift build`) first")
    let bytes = try #require(FileSecurity.readFile(library, limit: 64 << 20))
    #expect(writeFile(folder + "/libauthbridge-testplugin-swift.so", bytes))
    let manifest = try #require(FileSecurity.readFile(repositoryRoot() + "/Tests/Plugins/SwiftTestPlugin/swifttest.json"))
    #expect(writeFile(folder + "/swifttest.json", manifest))
}

let quietLogger = Logger(label: "authbridge.tests", factory: { _ in SwiftLogNoOpLogHandler() })

func loadAll(_ folders: String...) -> [PluginReport] {
    PluginLoader(folders: folders, logger: quietLogger).loadAll()
}

extension PluginReport {
    var refusal: PluginLoadError? {
        if case .refused(let error) = status { return error }
        return nil
    }
}

/// Host services for hooks run directly from tests: no network, and the
/// standard step answers what `standard` returns.
struct StubEnvironment: HookEnvironment {
    var standard: @Sendable (PluginHook, JSON) -> Result<JSON, ProviderFailure> = { _, _ in
        .failure(ProviderFailure(.internal, reason: "unavailable", message: "no standard steps in tests"))
    }

    func emit(_ event: JSON, from call: HookCall) {}
    func http(_ request: JSON, call: HookCall) -> Result<JSON, ProviderFailure> {
        .failure(ProviderFailure(.transient, reason: "offline", message: "no network in tests"))
    }
    func standard(_ hook: PluginHook, input: JSON, call: HookCall) -> Result<JSON, ProviderFailure> {
        standard(hook, input)
    }
}
