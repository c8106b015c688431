import AuthBridgeSystem

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// sshd-style StrictModes checks for what the host is about to execute.
public enum FileSecurity {
    /// Refuses a path that another user could change: owned by someone other
    /// than us or root, or writable by group or others. Checks the path itself
    /// without following a final symlink (`lstat`).
    static func checkNotTamperable(_ path: String, what: String) throws(PluginLoadError) {
        var info = stat()
        guard lstat(path, &info) == 0 else {
            throw PluginLoadError(.loadFailed, "cannot read \(what) \(path): \(String(cString: strerror(errno)))")
        }
        try checkOwnerAndMode(info, path: path, what: what)
    }

    /// The StrictModes rule on a file's `stat`: owned by this user or root, not
    /// writable by group or others.
    private static func checkOwnerAndMode(_ info: stat, path: String, what: String) throws(PluginLoadError) {
        guard info.st_uid == geteuid() || info.st_uid == 0 else {
            throw PluginLoadError(
                .insecurePermissions, "\(what) \(path) is owned by uid \(info.st_uid), not by this user or root", fix: ownerFix(path))
        }
        if info.st_mode & (S_IWGRP | S_IWOTH) != 0 {
            let mode = String(info.st_mode & 0o777, radix: 8)
            throw PluginLoadError(
                .insecurePermissions, "\(what) \(path) is writable by group or others (mode \(mode))", fix: "chmod go-w \(shellQuoted(path))")
        }
    }

    /// Refuses a folder when a path through it could be swapped by another
    /// user: every folder from `realFolder` up to `/` must be owned by this
    /// user or root and not writable by group or others, as sshd's
    /// StrictModes checks (openssh-portable misc.c, `safe_path`). A sticky
    /// folder such as `/tmp` passes although others may write to it: they
    /// cannot rename or remove entries they do not own, and the folder below
    /// it is checked in its turn. `realFolder` is canonical (no symlinks).
    static func checkAncestors(_ realFolder: String) throws(PluginLoadError) {
        var folder = realFolder
        while true {
            var info = stat()
            guard lstat(folder, &info) == 0 else {
                throw PluginLoadError(.loadFailed, "cannot read folder \(folder): \(String(cString: strerror(errno)))")
            }
            guard info.st_uid == geteuid() || info.st_uid == 0 else {
                throw PluginLoadError(
                    .insecurePermissions,
                    "folder \(folder), above the plugin folder \(realFolder), is owned by uid \(info.st_uid), not by this user or root",
                    fix: ownerFix(folder))
            }
            let sticky = info.st_mode & S_ISVTX != 0
            if info.st_mode & (S_IWGRP | S_IWOTH) != 0, !sticky || folder == realFolder {
                let mode = String(info.st_mode & 0o7777, radix: 8)
                let place = folder == realFolder ? "plugin folder \(folder)" : "folder \(folder), above the plugin folder \(realFolder),"
                throw PluginLoadError(
                    .insecurePermissions,
                    "\(place) is writable by group or others (mode \(mode)): they could swap the plugins in it",
                    fix: "chmod go-w \(shellQuoted(folder))")
            }
            if folder == "/" { return }
            folder = HelperLibraryLocation.parent(of: folder)
        }
    }

    /// Opens a file to check and then use through the descriptor, so that what
    /// is checked is what is used: never through a final symlink
    /// (`O_NOFOLLOW`), a regular file, owned by this user or root, not
    /// writable by group or others. The caller owns the descriptor.
    static func openVetted(_ path: String, what: String) throws(PluginLoadError) -> (fd: Int32, info: stat) {
        let fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK)
        guard fd >= 0 else {
            let reason = errno == ELOOP ? "it became a symlink" : String(cString: strerror(errno))
            throw PluginLoadError(.loadFailed, "cannot open \(what) \(path): \(reason)")
        }
        var info = stat()
        guard fstat(fd, &info) == 0 else {
            close(fd)
            throw PluginLoadError(.loadFailed, "cannot stat \(what) \(path): \(String(cString: strerror(errno)))")
        }
        do throws(PluginLoadError) {
            guard info.st_mode & S_IFMT == S_IFREG else { throw PluginLoadError(.loadFailed, "\(what) \(path) is not a regular file") }
            try checkOwnerAndMode(info, path: path, what: what)
        } catch {
            close(fd)
            throw error
        }
        return (fd, info)
    }

    /// True when `path` still names the file open as `info` (same device and inode).
    static func stillNames(_ path: String, _ info: stat) -> Bool {
        var now = stat()
        return stat(path, &now) == 0 && now.st_dev == info.st_dev && now.st_ino == info.st_ino
    }

    /// Refuses a path (not followed if a symlink) owned by someone other than us or root.
    static func checkOwner(_ path: String, what: String) throws(PluginLoadError) {
        var info = stat()
        guard lstat(path, &info) == 0 else {
            throw PluginLoadError(.loadFailed, "cannot read \(what) \(path): \(String(cString: strerror(errno)))")
        }
        guard info.st_uid == geteuid() || info.st_uid == 0 else {
            throw PluginLoadError(
                .insecurePermissions, "\(what) \(path) is owned by uid \(info.st_uid), not by this user or root",
                fix: ownerFix(path))
        }
    }

    /// The command that makes `path` this user's (a copy of their own, not someone else's file).
    private static func ownerFix(_ path: String) -> String {
        let user = getpwuid(geteuid()).flatMap { $0.pointee.pw_name.map { String(cString: $0) } } ?? String(geteuid())
        return "sudo chown \(shellQuoted(user)) \(shellQuoted(path)) (or install your own copy)"
    }

    /// `text` as one word for a POSIX shell.
    static func shellQuoted(_ text: String) -> String {
        let plain =
            !text.isEmpty
            && text.unicodeScalars.allSatisfy {
                $0.isASCII && ($0.properties.isAlphabetic || ("0"..."9").contains($0) || "/._-+:=@,%".unicodeScalars.contains($0))
            }
        return plain ? text : "'" + text.split(separator: "'", omittingEmptySubsequences: false).joined(separator: "'\\''") + "'"
    }

    /// The canonical path, or nil when it does not exist.
    static func realPath(_ path: String) -> String? {
        guard let resolved = realpath(path, nil) else { return nil }
        defer { free(resolved) }
        return String(cString: resolved)
    }

    static func isSymlink(_ path: String) -> Bool {
        var info = stat()
        return lstat(path, &info) == 0 && (info.st_mode & S_IFMT) == S_IFLNK
    }

    static func isDirectory(_ path: String) -> Bool {
        var info = stat()
        return stat(path, &info) == 0 && (info.st_mode & S_IFMT) == S_IFDIR
    }

    /// A whole file of at most `limit` bytes (manifests, configuration); nil when
    /// it cannot be read or is larger.
    public static func readFile(_ path: String, limit: Int = 1 << 20) -> [UInt8]? {
        POSIXFiles.readFile(path, limit: limit)
    }

    /// Names in a folder, sorted, without "." and ".."; nil when it cannot be opened.
    static func listFolder(_ path: String) -> [String]? {
        POSIXFiles.listFolder(path)?.sorted()
    }
}
