import AuthBridgeSystem

#if canImport(Glibc)
import Glibc
#endif

/// Where the agent's socket is, and how `authbridge agent` makes it safely:
/// the one place the command line, the agent and (in their own words) the
/// clients agree on.
///
/// The path: `--socket`, else `AUTHBRIDGE_AGENT_SOCKET`, else
/// `$XDG_RUNTIME_DIR/authbridge/agent.sock` (the per-login-session folder
/// systemd's `%t` names). Its folder is made 0700; the socket is 0600; a lock
/// file beside it (`agent.sock.lock`, holding the agent's pid) decides which
/// of two agents starting at once gets the path, and a socket left by an
/// agent that died is removed only after nothing answered on it. An agent
/// that stops cleanly removes both; one that is killed leaves them, and the
/// next agent takes them over.
public enum AgentSocket {
    public static let environmentVariable = "AUTHBRIDGE_AGENT_SOCKET"

    /// The path to use; nil when there is none (no `XDG_RUNTIME_DIR`).
    public static func path(_ explicit: String? = nil) -> String? {
        if let explicit { return explicit }
        if let set = environment(environmentVariable) { return set }
        return defaultFolder.map { $0 + "/agent.sock" }
    }

    /// `$XDG_RUNTIME_DIR/authbridge`, which must be private (0700, the user's).
    public static var defaultFolder: String? {
        environment("XDG_RUNTIME_DIR").flatMap { $0.hasPrefix("/") ? $0 + "/authbridge" : nil }
    }

    /// What stopped the agent from taking its socket; the message says what to do.
    public struct Problem: Error {
        public let message: String
    }

    /// A socket the agent bound, and what tells it is still the agent's when it ends.
    public struct Bound: Sendable {
        public let fd: Int32
        public let path: String
        /// The socket file's identity: removed at the end only if it is still this one.
        let device: UInt64
        let inode: UInt64
        /// Held (flock) as long as the agent runs.
        let lockFD: Int32

        /// The lock file's identity, as for the socket.
        let lockDevice: UInt64
        let lockInode: UInt64

        /// Removes the socket if it is still the one this agent made, then the lock file if it is
        /// still this agent's — while holding its lock, so no agent can take it in between; an agent
        /// that opened the file before it was unlinked and locks it after sees that the path no
        /// longer names it and tries again (`lock`) — then gives the lock up.
        public func remove() {
            var info = stat()
            if lstat(path, &info) == 0, UInt64(info.st_dev) == device, UInt64(info.st_ino) == inode { unlink(path) }
            let lockPath = path + ".lock"
            if lstat(lockPath, &info) == 0, UInt64(info.st_dev) == lockDevice, UInt64(info.st_ino) == lockInode { unlink(lockPath) }
            close(lockFD)
        }
    }

    /// Binds the agent's socket at `path`: the folder checked (or made), the lock taken,
    /// a stale socket removed, a live agent left alone.
    public static func bind(_ path: String) throws(Problem) -> Bound {
        guard path.hasPrefix("/") else { throw Problem(message: "the socket path \(path) must be absolute") }
        guard path.utf8.count <= UnixSocket.maximumPathBytes else {
            throw Problem(message: "the socket path \(path) is longer than \(UnixSocket.maximumPathBytes) bytes; choose a shorter --socket")
        }
        let folder = parent(of: path)
        try prepareFolder(folder, isDefault: folder == defaultFolder)
        let (lockFD, lockIdentity) = try lock(path + ".lock", socket: path)
        do throws(Problem) {
            try removeIfStale(path)
            let fd: Int32
            do { fd = try UnixSocket.listen(path: path) } catch { throw Problem(message: "cannot listen on \(path): \(error)") }
            var info = stat()
            guard lstat(path, &info) == 0 else {
                close(fd)
                throw Problem(message: "the socket \(path) vanished as it was made")
            }
            return Bound(
                fd: fd, path: path, device: UInt64(info.st_dev), inode: UInt64(info.st_ino), lockFD: lockFD, lockDevice: lockIdentity.device,
                lockInode: lockIdentity.inode)
        } catch {
            close(lockFD)
            throw error
        }
    }

    /// The default folder is made 0700 and must stay the user's alone; a folder named with
    /// `--socket` must be the user's or root's and not writable by others, sticky or not: in /tmp
    /// anyone could take the path first (or after the agent ends), and be taken for the agent.
    private static func prepareFolder(_ folder: String, isDefault: Bool) throws(Problem) {
        if mkdir(folder, 0o700) == 0 { return }
        guard errno == EEXIST else {
            throw Problem(message: "cannot make the socket's folder \(folder): \(String(cString: strerror(errno)))")
        }
        var info = stat()
        guard lstat(folder, &info) == 0, info.st_mode & S_IFMT == S_IFDIR else {
            throw Problem(message: "\(folder) is not a folder (a symbolic link is not followed)")
        }
        let mode = info.st_mode & 0o7777
        if isDefault {
            guard info.st_uid == getuid() else { throw Problem(message: "the folder \(folder) belongs to uid \(info.st_uid), not to you") }
            guard mode & 0o077 == 0 else {
                throw Problem(
                    message: "the folder \(folder) is open to other users (mode \(String(mode, radix: 8))); fix it with: chmod 700 \(folder)")
            }
            return
        }
        guard info.st_uid == getuid() || info.st_uid == 0 else {
            throw Problem(message: "the folder \(folder) belongs to uid \(info.st_uid), neither you nor root")
        }
        guard mode & 0o022 == 0 else {
            let fix = mode & S_ISVTX != 0 ? "choose a --socket in a folder only you can write to" : "fix it with: chmod go-w \(folder)"
            throw Problem(
                message: "others can write to the folder \(folder) (mode \(String(mode, radix: 8))), and could put their own socket there; \(fix)")
        }
    }

    /// Takes the agent's lock for `socket`, or says which agent holds it. The lock is the file
    /// the path names when it is locked: an agent that stops removes its lock file (`remove`), so
    /// a file locked after another agent unlinked it is left, and the path tried again.
    private static func lock(_ lockPath: String, socket: String) throws(Problem) -> (Int32, (device: UInt64, inode: UInt64)) {
        for _ in 0..<8 {
            let fd = open(lockPath, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0o600)
            guard fd >= 0 else { throw Problem(message: "cannot open the lock file \(lockPath): \(String(cString: strerror(errno)))") }
            var result: Int32
            repeat { result = flock(fd, LOCK_EX | LOCK_NB) } while result != 0 && errno == EINTR
            guard result == 0 else {
                let pid = holderPID(fd)
                close(fd)
                throw Problem(message: "another authbridge agent\(pid.map { " (pid \($0))" } ?? "") is already running on \(socket)")
            }
            var held = stat()
            var named = stat()
            guard fstat(fd, &held) == 0, lstat(lockPath, &named) == 0, held.st_dev == named.st_dev, held.st_ino == named.st_ino else {
                close(fd) // unlinked by the agent that held it: no longer the lock
                continue
            }
            let text = Array("\(getpid())\n".utf8)
            _ = ftruncate(fd, 0)
            _ = pwrite(fd, text, text.count, 0)
            return (fd, (UInt64(held.st_dev), UInt64(held.st_ino)))
        }
        throw Problem(message: "the lock file \(lockPath) keeps being replaced; is another agent starting and stopping on \(socket)?")
    }

    /// The pid the lock's holder wrote in it. An agent that has just taken the lock writes its
    /// pid a moment later: an empty file is read again for up to a second before giving up.
    private static func holderPID(_ fd: Int32) -> Int32? {
        for attempt in 0..<100 {
            var bytes = [UInt8](repeating: 0, count: 32)
            let count = pread(fd, &bytes, bytes.count, 0)
            let digits = count > 0 ? bytes[..<count].prefix { $0 >= 0x30 && $0 <= 0x39 } : []
            if !digits.isEmpty, count > digits.count, bytes[digits.count] == 0x0A { return Int32(String(decoding: digits, as: UTF8.self)) }
            if attempt < 99 { usleep(10_000) }
        }
        return nil
    }

    /// Removes a socket nothing answers on (its agent died); anything else at the path stays.
    private static func removeIfStale(_ path: String) throws(Problem) {
        var info = stat()
        guard lstat(path, &info) == 0 else { return }
        guard info.st_mode & S_IFMT == S_IFSOCK else {
            throw Problem(message: "\(path) exists and is not a socket; remove it or choose another --socket")
        }
        do {
            let fd = try UnixSocket.connect(path: path)
            let pid = UnixSocket.peerCredentials(fd)?.pid
            close(fd)
            throw Problem(message: "an authbridge agent\(pid.map { " (pid \($0))" } ?? "") already answers on \(path)")
        } catch let failure as UnixSocket.Failure where failure.errno == ECONNREFUSED {
            // A socket file without a listener: its agent is gone.
            unlink(path)
        } catch let problem as Problem {
            throw problem
        } catch {
            throw Problem(message: "cannot tell whether an agent answers on \(path): \(error)")
        }
    }

    private static func parent(of path: String) -> String {
        guard let slash = path.lastIndex(of: "/"), slash != path.startIndex else { return "/" }
        return String(path[..<slash])
    }

    private static func environment(_ name: String) -> String? {
        guard let value = getenv(name).map({ String(cString: $0) }), !value.isEmpty else { return nil }
        return value
    }
}
