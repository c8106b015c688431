#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Unix stream sockets, with plain POSIX calls: what `authbridge agent` listens on and what the
/// command line connects to. Listening, accepting (close-on-exec: a browser the host starts must
/// never hold a frontend's connection open), connecting, the peer's credentials
/// (`SO_PEERCRED`, which the kernel fills in at `connect`: no frame needs to be read to know
/// who is calling), and the sockets a service manager hands over (`sd_listen_fds(3)`'s rules,
/// without libsystemd).
public enum UnixSocket {
    /// A system call that failed, and its errno.
    public struct Failure: Error, Sendable, Equatable, CustomStringConvertible {
        public let operation: String
        public let errno: Int32

        public init(_ operation: String, errno: Int32) {
            self.operation = operation
            self.errno = errno
        }

        public var description: String { "\(operation): \(String(cString: strerror(errno)))" }
    }

    /// Who is at the other end of a connection, as the kernel recorded it when it connected.
    public struct PeerCredentials: Sendable, Equatable {
        public let pid: Int32
        public let uid: UInt32
        public let gid: UInt32
    }

    /// The longest path a `sockaddr_un` holds (its 108 bytes, less the terminating NUL).
    public static let maximumPathBytes = MemoryLayout.size(ofValue: sockaddr_un().sun_path) - 1

    /// A new socket listening on `path`, which must not exist: made with mode 0600 (no other
    /// user may connect; the folder's mode guards the moment before the `chmod`). Non-blocking,
    /// so that `accept` never waits for a connection that vanished after `poll` saw it.
    public static func listen(path: String, backlog: Int32 = 128) throws(Failure) -> Int32 {
        let fd = try stream()
        do throws(Failure) {
            try withAddress(path) { address, length throws(Failure) in
                guard bind(fd, address, length) == 0 else { throw Failure("bind \(path)", errno: errno) }
            }
            guard chmod(path, 0o600) == 0 else { throw Failure("chmod \(path)", errno: errno) }
            guard Glibc.listen(fd, backlog) == 0 else { throw Failure("listen \(path)", errno: errno) }
            _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
        } catch {
            close(fd)
            throw error
        }
        return fd
    }

    /// A connection to the socket at `path` (blocking, close-on-exec). ENOENT: no socket there;
    /// ECONNREFUSED: a socket file nothing listens on (its process died).
    public static func connect(path: String) throws(Failure) -> Int32 {
        let fd = try stream()
        do throws(Failure) {
            try withAddress(path) { address, length throws(Failure) in
                while Glibc.connect(fd, address, length) != 0 {
                    if errno == EINTR { continue }
                    throw Failure("connect \(path)", errno: errno)
                }
            }
        } catch {
            close(fd)
            throw error
        }
        return fd
    }

    /// The next connection on a listening socket, close-on-exec and blocking (Linux does not
    /// pass the listener's O_NONBLOCK on). Failures are accept(2)'s: EAGAIN when there is none.
    public static func accept(_ listener: Int32) -> Result<Int32, Failure> {
        let fd = acceptCloseOnExec(listener)
        return fd >= 0 ? .success(fd) : .failure(Failure("accept", errno: errno))
    }

    /// The peer of a connected socket (nil when the kernel cannot say: not a Unix socket).
    public static func peerCredentials(_ fd: Int32) -> PeerCredentials? {
        // struct ucred { pid_t pid; uid_t uid; gid_t gid; } (Glibc's module does not export the name).
        var credentials: (Int32, UInt32, UInt32) = (0, 0, 0)
        var length = socklen_t(MemoryLayout.size(ofValue: credentials))
        guard getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &credentials, &length) == 0,
            length == socklen_t(MemoryLayout.size(ofValue: credentials))
        else { return nil }
        return PeerCredentials(pid: credentials.0, uid: credentials.1, gid: credentials.2)
    }

    /// The first descriptor a service manager passes (`sd_listen_fds(3)`): fd 3.
    public static let firstPassedDescriptor: Int32 = 3

    /// The sockets a service manager passed to this process (systemd's socket activation):
    /// `LISTEN_FDS` descriptors from fd 3 when `LISTEN_PID` is this process, else none. As
    /// `sd_listen_fds(1)` does, the variables are removed (no child inherits them) and each
    /// descriptor is made close-on-exec.
    public static func passedDescriptors() -> [Int32] {
        defer {
            for name in ["LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"] { unsetenv(name) }
        }
        guard let pidText = getenv("LISTEN_PID").map({ String(cString: $0) }), let pid = Int32(pidText), pid == getpid(),
            let countText = getenv("LISTEN_FDS").map({ String(cString: $0) }), let count = Int32(countText), count > 0
        else { return [] }
        let descriptors = Array(firstPassedDescriptor..<firstPassedDescriptor + count)
        for fd in descriptors { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
        return descriptors
    }

    /// True when `fd` is a listening Unix stream socket (what a `.socket` unit must pass).
    public static func isListeningStream(_ fd: Int32) -> Bool {
        var type: Int32 = 0, listening: Int32 = 0
        var length = socklen_t(MemoryLayout<Int32>.size)
        guard getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &length) == 0, type == Int32(SOCK_STREAM.rawValue) else { return false }
        length = socklen_t(MemoryLayout<Int32>.size)
        guard getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &length) == 0, listening == 1 else { return false }
        var address = sockaddr_un()
        var addressLength = socklen_t(MemoryLayout<sockaddr_un>.size)
        let named = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &addressLength) }
        }
        return named == 0 && address.sun_family == sa_family_t(AF_UNIX)
    }

    /// The path a listening socket is bound to ("" for an unnamed or abstract one).
    public static func boundPath(_ fd: Int32) -> String {
        var address = sockaddr_un()
        var length = socklen_t(MemoryLayout<sockaddr_un>.size)
        let named = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        guard named == 0 else { return "" }
        return withUnsafeBytes(of: address.sun_path) { raw in
            String(decoding: raw.prefix(while: { $0 != 0 }), as: UTF8.self)
        }
    }

    // MARK: - Helpers

    private static func stream() throws(Failure) -> Int32 {
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw Failure("socket", errno: errno) }
        return fd
    }

    private static func withAddress(
        _ path: String, _ body: (UnsafePointer<sockaddr>, socklen_t) throws(Failure) -> Void
    ) throws(Failure) {
        let bytes = Array(path.utf8)
        guard !bytes.isEmpty, bytes.count <= maximumPathBytes, !bytes.contains(0) else {
            throw Failure("socket path \(path) (at most \(maximumPathBytes) bytes)", errno: ENAMETOOLONG)
        }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            raw.copyBytes(from: bytes)
            raw[bytes.count] = 0
        }
        let length = socklen_t(MemoryLayout<sa_family_t>.size + bytes.count + 1)
        var failure: Failure?
        withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { pointer in
                do throws(Failure) { try body(pointer, length) } catch { failure = error }
            }
        }
        if let failure { throw failure }
    }

    /// accept4(2) with SOCK_CLOEXEC: Glibc's module leaves out what `_GNU_SOURCE` declares, so
    /// the function is looked up once; a plain `accept` and `FD_CLOEXEC` where it is missing.
    private static func acceptCloseOnExec(_ listener: Int32) -> Int32 {
        if let accept4 = accept4Function { return accept4(listener, nil, nil, Int32(SOCK_CLOEXEC.rawValue)) }
        let fd = Glibc.accept(listener, nil, nil)
        if fd >= 0 { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
        return fd
    }

    private typealias Accept4 = @convention(c) (Int32, UnsafeMutablePointer<sockaddr>?, UnsafeMutablePointer<socklen_t>?, Int32) -> Int32

    private static let accept4Function: Accept4? = dlsym(nil, "accept4").map { unsafeBitCast($0, to: Accept4.self) }
}
