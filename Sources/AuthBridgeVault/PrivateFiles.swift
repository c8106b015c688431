import AuthBridgeSystem

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
        throw VaultError(
            .insecurePermissions,
            "The \(what) \(path) is accessible to other users (mode \(mode)); refusing to use it. Fix with: chmod \(String(allowedMode, radix: 8)) \(path)"
        )
    }
}

/// Reads a private file; nil when it does not exist. A file that cannot be a
/// vault file (larger than `limit`, a symbolic link, not a regular file)
/// throws `corruptRecord`: the caller keeps it aside. A file another user could
/// read or change throws `insecurePermissions` and is left alone.
func readPrivateFile(_ path: String, limit: Int = VaultRecord.maximumSize) throws(VaultError) -> [UInt8]? {
    // O_NONBLOCK: a FIFO put in the folder must not block the open.
    let fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK)
    if fd < 0 {
        if errno == ENOENT { return nil }
        if errno == ELOOP { throw VaultError(.corruptRecord, "a symbolic link, not a vault file") }
        throw VaultError(.io, "Cannot open \(path): \(String(cString: strerror(errno))).")
    }
    defer { close(fd) }
    var info = stat()
    guard fstat(fd, &info) == 0 else { throw VaultError(.io, "Cannot stat \(path).") }
    try checkPrivate(info, path: path, what: "vault file", allowedMode: 0o600)
    guard (info.st_mode & S_IFMT) == S_IFREG else { throw VaultError(.corruptRecord, "not a regular file") }
    guard info.st_size <= limit else { throw tooLarge(Int(info.st_size), limit: limit) }
    switch POSIXFiles.readAll(fd, limit: limit) {
    case .success(let bytes): return bytes
    case .failure(.tooLarge(let count)): throw tooLarge(count, limit: limit) // it grew while being read
    case .failure(.failed): throw VaultError(.io, "Cannot read \(path).")
    }
}

private func tooLarge(_ size: Int, limit: Int) -> VaultError {
    VaultError(.corruptRecord, "\(size) bytes, larger than any vault record (at most \(limit))")
}

/// Creates `path` with `bytes` unless it already exists, atomically and
/// durably: a complete temporary file is linked into place, so a reader never
/// sees a partial file and an existing one is never replaced (two processes
/// creating a key at once: one wins, the other reads the winner's).
/// Returns false when `path` already existed (nothing was written).
func createExclusively(_ bytes: [UInt8], at path: String) throws(VaultError) -> Bool {
    let folder = String(path[..<(path.lastIndex(of: "/") ?? path.endIndex)])
    let temporary = try writeTemporary(bytes, for: path)
    defer { unlink(temporary) }
    switch moveWithoutReplacing(temporary, to: path) {
    case 0:
        syncFolder(folder)
        return true
    case EEXIST: return false
    case let error: throw VaultError(.io, "Cannot create \(path): \(String(cString: strerror(error))).")
    }
}

/// Replaces `path` with `bytes` atomically and durably: readers see the old
/// or the new content, never a torn one, and a crash after return loses nothing.
func writeAtomically(_ bytes: [UInt8], to path: String) throws(VaultError) {
    let folder = String(path[..<(path.lastIndex(of: "/") ?? path.endIndex)])
    let temporary = try writeTemporary(bytes, for: path)
    guard rename(temporary, path) == 0 else {
        let reason = String(cString: strerror(errno))
        unlink(temporary)
        throw VaultError(.io, "Cannot write \(path): \(reason).")
    }
    syncFolder(folder)
}

/// `<path>.<pid>.<ns>.tmp`, written and fsync'ed (a crashed writer's are
/// removed when the vault opens).
private func writeTemporary(_ bytes: [UInt8], for path: String) throws(VaultError) -> String {
    var stamp = timespec()
    clock_gettime(CLOCK_MONOTONIC, &stamp)
    let temporary = "\(path).\(getpid()).\(stamp.tv_nsec).tmp"
    let fd = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0o600)
    guard fd >= 0 else { throw VaultError(.io, "Cannot create \(temporary): \(String(cString: strerror(errno))).") }
    var ok = bytes.withUnsafeBytes { buffer -> Bool in
        var offset = 0
        while offset < buffer.count {
            let written = write(fd, buffer.baseAddress! + offset, buffer.count - offset)
            if written < 0 {
                if errno == EINTR { continue }
                return false
            }
            offset += written
        }
        return true
    }
    ok = ok && fsync(fd) == 0
    let reason = String(cString: strerror(errno))
    close(fd)
    guard ok else {
        unlink(temporary)
        throw VaultError(.io, "Cannot write \(temporary): \(reason).")
    }
    return temporary
}

/// Renames `source` to `target` unless `target` exists; 0 or the errno
/// (EEXIST when it exists). renameat2(RENAME_NOREPLACE) where the kernel and
/// file system have it, else link + unlink (POSIX; `source` briefly has two names).
func moveWithoutReplacing(_ source: String, to target: String) -> Int32 {
    if let renameNoReplace {
        if renameNoReplace(AT_FDCWD, source, AT_FDCWD, target, 1 /* RENAME_NOREPLACE */) == 0 { return 0 }
        guard errno == EINVAL || errno == ENOSYS else { return errno } // only "unsupported here" falls through
    }
    guard link(source, target) == 0 else { return errno }
    unlink(source)
    return 0
}

/// glibc's renameat2 (2.28+), looked up at run time: Swift's Glibc module does not declare it.
private let renameNoReplace: (@convention(c) (Int32, UnsafePointer<CChar>, Int32, UnsafePointer<CChar>, UInt32) -> Int32)? =
    dlsym(nil, "renameat2").map {
        unsafeBitCast($0, to: (@convention(c) (Int32, UnsafePointer<CChar>, Int32, UnsafePointer<CChar>, UInt32) -> Int32).self)
    }

/// Makes a rename or unlink in `folder` durable.
func syncFolder(_ folder: String) {
    let fd = open(folder, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
    guard fd >= 0 else { return }
    fsync(fd)
    close(fd)
}

/// Names in a folder (unsorted, without "." and ".."); none when it cannot be opened.
func listFolder(_ path: String) -> [String] {
    POSIXFiles.listFolder(path) ?? []
}
