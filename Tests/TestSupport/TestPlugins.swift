#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// The repository root, from this file's path (Tests/TestSupport/…).
public func repositoryRoot(_ file: String = #filePath) -> String {
    var path = file
    for _ in 0..<3 { path = String(path[..<(path.lastIndex(of: "/") ?? path.startIndex)]) }
    return path
}

/// The folder of the running test binary (SwiftPM puts the products it built beside it).
private func executableFolder() -> String {
    var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
    let count = readlink("/proc/self/exe", &buffer, buffer.count - 1)
    guard count > 0 else { return "." }
    let path = String(decoding: buffer[0..<count].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    return String(path[..<(path.lastIndex(of: "/") ?? path.endIndex)])
}

/// The Swift test plugin built by SwiftPM: next to the test binary, or in .build/debug.
public func swiftTestPluginLibrary() -> String? {
    let name = "libauthbridge-testplugin-swift.so"
    return [executableFolder() + "/" + name, repositoryRoot() + "/.build/debug/" + name].first { access($0, R_OK) == 0 }
}

/// Copies the Swift test plugin (library and manifest, mode 0644, as the loader wants a plugin's
/// files) into `folder`.
public func installSwiftTestPlugin(into folder: String) throws {
    guard let library = swiftTestPluginLibrary() else {
        throw TestSupportError("libauthbridge-testplugin-swift.so is not built: run `make build` (or `swift build`) first")
    }
    let manifest = repositoryRoot() + "/Tests/Plugins/SwiftTestPlugin/swifttest.json"
    for (source, target) in [(library, "libauthbridge-testplugin-swift.so"), (manifest, "swifttest.json")] {
        guard let bytes = readFileBytes(source), writeFile(folder + "/" + target, bytes) else {
            throw TestSupportError("cannot copy \(source) into \(folder)")
        }
    }
}
