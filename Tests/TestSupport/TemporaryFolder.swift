// The Swift test kit: what several test targets need, written once. Plain POSIX (no AuthBridge
// module), so any test target can depend on it without an arrow into the code it tests.

import FoundationEssentials

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Why a test-support step failed; the test that called it fails with this text.
public struct TestSupportError: Error, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}

/// A fresh private folder under /tmp (mode 0700), one per test; `remove()` deletes it.
public struct TemporaryFolder: Sendable {
    public let path: String

    public init(prefix: String = "authbridge-test") throws {
        var template = Array("/tmp/\(prefix)-XXXXXX".utf8CString)
        let made = template.withUnsafeMutableBufferPointer { mkdtemp($0.baseAddress!) }
        guard let made else { throw TestSupportError("mkdtemp failed (errno \(errno))") }
        path = String(cString: made)
    }

    /// A new folder inside this one (mode 0755, as a plugin folder must be at most).
    @discardableResult
    public func subfolder(_ name: String) -> String {
        let sub = path + "/" + name
        mkdir(sub, 0o755)
        chmod(sub, 0o755)
        return sub
    }

    /// Deletes the folder and everything in it, never following a symlink.
    public func remove() { removeTree(path) }
}

/// Deletes a tree without following symlinks (FileManager removes a link, never its target).
public func removeTree(_ path: String) {
    try? FileManager.default.removeItem(atPath: path)
}

/// Writes `bytes` to `path` and sets `mode` exactly (umask does not apply to chmod).
@discardableResult
public func writeFile(_ path: String, _ bytes: [UInt8], mode: mode_t = 0o644) -> Bool {
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
public func writeFile(_ path: String, _ text: String, mode: mode_t = 0o644) -> Bool {
    writeFile(path, Array(text.utf8), mode: mode)
}

/// A whole file's bytes, or nil when it cannot be read.
public func readFileBytes(_ path: String) -> [UInt8]? {
    FileManager.default.contents(atPath: path).map { [UInt8]($0) }
}
