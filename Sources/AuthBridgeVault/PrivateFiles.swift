#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

// File primitives of the vault: private (0700 folders, 0600 files, ours),
// atomic (temporary file, fsync, rename, fsync of the folder) and strict
// (a folder or file another user could read or change is refused).

/// Creates `path` (and missing parents) as 0700, then checks it is private.
func makePrivateFolder(_ path: String) throws(VaultError) {
    var partial = ""
    for component in path.split(separator: "/") {
        partial += "/" + component
        if mkdir(partial, 0o700) != 0 && errno != EEXIST {
            throw VaultError(.io, "Cannot create \(partial): \(String(cString: strerror(errno))).")
        }
    }
    var info = stat()
    guard lstat(path, &info) == 0, (info.st_mode & S_IFMT) == S_IFDIR else {
        throw VaultError(.io, "The vault folder \(path) is not a folder.")
    }
    try checkPrivate(info, path: path, what: "vault folder", allowedMode: 0o700)
}

/// Refuses what another user owns or may read/write, with the fix in the message.
func checkPrivate(_ info: stat, path: String, what: String, allowedMode: mode_t) throws(VaultError) {
    guard info.st_uid == geteuid() else {
        throw VaultError(.insecurePermissions, "The \(what) \(path) belongs to uid \(info.st_uid), not to this user; refusing to use it.")
    }
    if info.st_mode & 0o077 != 0 {
        let mode = String(info.st_mode & 0o777, radix: 8)
        throw VaultError(.insecurePermissions,
                         "The \(what) \(path) is accessible to other users (mode \(mode)); refusing to use it. Fix with: chmod \(String(allowedMode, radix: 8)) \(path)")
    }
}

/// Reads a private file; nil when it does not exist.
func readPrivateFile(_ path: String) throws(VaultError) -> [UInt8]? {
    let fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)
    if fd < 0 {
        if errno == ENOENT { return nil }
        throw VaultError(.io, "Cannot open \(path): \(String(cString: strerror(errno))).")
    }
    defer { close(fd) }
    var info = stat()
    guard fstat(fd, &info) == 0 else { throw VaultError(.io, "Cannot stat \(path).") }
    try checkPrivate(info, path: path, what: "vault file", allowedMode: 0o600)
    var bytes: [UInt8] = []
    var chunk = [UInt8](repeating: 0, count: 16 << 10)
    while true {
        let count = chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
        if count < 0 { if errno == EINTR { continue }; throw VaultError(.io, "Cannot read \(path).") }
        if count == 0 { return bytes }
        bytes.append(contentsOf: chunk[0..<count])
        if bytes.count > 16 << 20 { throw VaultError(.corruptRecord, "\(path) is larger than any vault record") }
    }
}

/// Replaces `path` with `bytes` atomically and durably: readers see the old
/// or the new content, never a torn one, and a crash after return loses nothing.
func writeAtomically(_ bytes: [UInt8], to path: String) throws(VaultError) {
    let folder = String(path[..<(path.lastIndex(of: "/") ?? path.endIndex)])
    var stamp = timespec()
    clock_gettime(CLOCK_MONOTONIC, &stamp)
    let temporary = "\(path).\(getpid()).\(stamp.tv_nsec).tmp"
    let fd = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0o600)
    guard fd >= 0 else { throw VaultError(.io, "Cannot create \(temporary): \(String(cString: strerror(errno))).") }
    var ok = bytes.withUnsafeBytes { buffer -> Bool in
        var offset = 0
        while offset < buffer.count {
            let written = write(fd, buffer.baseAddress! + offset, buffer.count - offset)
            if written < 0 { if errno == EINTR { continue }; return false }
            offset += written
        }
        return true
    }
    ok = ok && fsync(fd) == 0
    close(fd)
    guard ok, rename(temporary, path) == 0 else {
        let reason = String(cString: strerror(errno))
        unlink(temporary)
        throw VaultError(.io, "Cannot write \(path): \(reason).")
    }
    syncFolder(folder)
}

/// Makes a rename or unlink in `folder` durable.
func syncFolder(_ folder: String) {
    let fd = open(folder, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
    guard fd >= 0 else { return }
    fsync(fd)
    close(fd)
}

func listFolder(_ path: String) -> [String] {
    guard let dir = opendir(path) else { return [] }
    defer { closedir(dir) }
    var names: [String] = []
    while let entry = readdir(dir) {
        let name = withUnsafeBytes(of: entry.pointee.d_name) { String(decoding: $0.prefix(while: { $0 != 0 }), as: UTF8.self) }
        if name != "." && name != ".." { names.append(name) }
    }
    return names
}
