#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// Reading files and folders with plain POSIX calls (no Foundation on the
/// start-up path): the one implementation behind the vault's private files
/// and the plugin host's manifests and configuration. Callers keep their own
/// policy (which errors throw, sorting, what opening checks).
public enum POSIXFiles {
    /// Names in a folder, without "." and "..", in the order the folder lists
    /// them; nil when it cannot be opened.
    public static func listFolder(_ path: String) -> [String]? {
        guard let dir = opendir(path) else { return nil }
        defer { closedir(dir) }
        var names: [String] = []
        while let entry = readdir(dir) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                String(decoding: raw.prefix(while: { $0 != 0 }), as: UTF8.self)
            }
            if name != "." && name != ".." { names.append(name) }
        }
        return names
    }

    /// Why `readAll(_:limit:)` returned no bytes.
    public enum ReadFailure: Error, Equatable {
        /// More than the limit: the bytes read so far (the limit plus up to one chunk).
        case tooLarge(Int)
        /// `read(2)` failed with this errno.
        case failed(Int32)
    }

    /// Reads `fd` to its end, at most `limit` bytes (a file that grows past it
    /// while being read is refused too). The caller opens and closes `fd`.
    public static func readAll(_ fd: Int32, limit: Int) -> Result<[UInt8], ReadFailure> {
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 16 << 10)
        while true {
            let count = chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if count < 0 {
                if errno == EINTR { continue }
                return .failure(.failed(errno))
            }
            if count == 0 { return .success(bytes) }
            bytes.append(contentsOf: chunk[0..<count])
            if bytes.count > limit { return .failure(.tooLarge(bytes.count)) }
        }
    }

    /// A whole file of at most `limit` bytes; nil when it cannot be opened or
    /// read, or is larger.
    public static func readFile(_ path: String, limit: Int) -> [UInt8]? {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        return try? readAll(fd, limit: limit).get()
    }
}
