import AuthBridgeJSON
import AuthBridgeSystem
import CAuthBridgeProcess

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// What confines an isolated plugin's runner (bridge-spec PluginStatus `confinement`, README
/// "Isolation"): the runner confines itself before it loads the plugin (`ab_runner_confine`:
/// namespaces, no new privileges, Landlock, seccomp), and says how in the first line it writes
/// on its channel, before any plugin code ran, so that a plugin cannot claim a sandbox it lacks.
///
/// A part the kernel lacks is left out with a warning; the others hold all the same.
public struct RunnerConfinement: Sendable, Equatable {
    /// No new privileges (`PR_SET_NO_NEW_PRIVS`) and no capabilities.
    public var noNewPrivileges: Bool
    /// The seccomp filter: no socket, ptrace, exec, setsid, namespace, keyring, io_uring.
    public var seccomp: Bool
    /// The Landlock ABI in force (0: none): from 1 the files, from 4 TCP, from 6 signals and
    /// abstract Unix sockets.
    public var landlock: Int
    /// A PID namespace: what the plugin starts ends with the runner.
    public var pidNamespace: Bool
    /// What the runner lacks and what that leaves open, in words.
    public var warnings: [String]

    public init(noNewPrivileges: Bool, seccomp: Bool, landlock: Int, pidNamespace: Bool, warnings: [String]) {
        self.noNewPrivileges = noNewPrivileges
        self.seccomp = seccomp
        self.landlock = landlock
        self.pidNamespace = pidNamespace
        self.warnings = warnings
    }

    /// Confines this process (a runner, with one thread, before it loads the plugin from
    /// `libraryFD`) and says how.
    public static func apply(libraryFD: Int32) -> RunnerConfinement {
        var parts = ab_confinement()
        ab_runner_confine(libraryFD, &parts)
        return RunnerConfinement(parts)
    }

    init(_ parts: ab_confinement) {
        func words(_ error: Int32) -> String { String(cString: strerror(error)) }
        var warnings: [String] = []
        let landlock = parts.landlock == 0 ? Int(parts.landlock_abi) : 0
        if parts.namespaces != 0 {
            warnings.append(
                "no PID namespace (\(words(parts.namespaces))): what the plugin starts ends with the runner's process group, not whenever the runner ends"
            )
        }
        if parts.no_new_privs != 0 {
            warnings.append("no no_new_privs (\(words(parts.no_new_privs))): the plugin keeps this user's capabilities")
        }
        if parts.landlock != 0 {
            let why =
                parts.landlock == ENOSYS || parts.landlock == EOPNOTSUPP ? "this kernel has none enabled: Linux 5.13 or later" : words(parts.landlock)
            warnings.append("no Landlock (\(why)): the plugin can read and write this user's files")
        } else if landlock < 6 {
            warnings.append("Landlock ABI \(landlock) (Linux 6.12 or later has 6): the plugin can signal this user's other processes")
        }
        if parts.seccomp != 0 {
            let tcp = landlock >= 4 ? "no TCP (Landlock), but other sockets" : "sockets"
            warnings.append("no seccomp filter (\(words(parts.seccomp))): the plugin can open \(tcp), trace this user's processes and run programs")
        }
        self.init(
            noNewPrivileges: parts.no_new_privs == 0, seccomp: parts.seccomp == 0, landlock: landlock, pidNamespace: parts.namespaces == 0,
            warnings: warnings)
    }

    /// As PluginStatus `confinement` shows it.
    public var json: JSON {
        .compactObject([
            "noNewPrivileges": .bool(noNewPrivileges), "seccomp": .bool(seccomp), "landlock": .int(Int64(landlock)),
            "pidNamespace": .bool(pidNamespace), "warnings": warnings.isEmpty ? nil : .array(warnings.map(JSON.string)),
        ])
    }

    /// Reads `json`; nil when it is not a confinement.
    init?(json: JSON) {
        guard let noNewPrivileges = json["noNewPrivileges"]?.boolValue, let seccomp = json["seccomp"]?.boolValue,
            let landlock = json["landlock"]?.intValue, (0...Int64(Int32.max)).contains(landlock), let pidNamespace = json["pidNamespace"]?.boolValue
        else { return nil }
        var warnings: [String] = []
        if let listed = json["warnings"] {
            guard let items = listed.arrayValue?.compactMap(\.stringValue), items.count == listed.arrayValue?.count else { return nil }
            warnings = items
        }
        self.init(noNewPrivileges: noNewPrivileges, seccomp: seccomp, landlock: Int(landlock), pidNamespace: pidNamespace, warnings: warnings)
    }

    /// This process's pid as the host knows it: in its PID namespace the runner is pid 2, but
    /// /proc is the host's, and its `self` names the pid there.
    static func hostProcessID() -> Int32 {
        var name = [CChar](repeating: 0, count: 32)
        let count = readlink("/proc/self", &name, name.count - 1)
        guard count > 0, let pid = Int32(String(decoding: name[..<count].map { UInt8(bitPattern: $0) }, as: UTF8.self)) else { return getpid() }
        return pid
    }

    // MARK: The runner's first line

    /// The method of the runner's first frame: a notification whose params are the confinement.
    static let method = "confined"

    /// Writes the first frame on the runner's channel `fd`, whole, before the plugin is loaded.
    public func announce(on fd: Int32) -> Bool {
        var frame = JSON.object(["jsonrpc": "2.0", "method": .string(Self.method), "params": json]).serialized()
        frame.append(UInt8(ascii: "\n"))
        return frame.withUnsafeBytes { bytes in
            var written = 0
            while written < bytes.count {
                let count = write(fd, bytes.baseAddress! + written, bytes.count - written)
                if count < 0 && errno == EINTR { continue }
                guard count > 0 else { return false }
                written += count
            }
            return true
        }
    }

    /// Reads the runner's first frame from the host's end of its channel, `fd`, waiting up to
    /// `deadline`. The runner writes nothing else before it is asked, so the line is all there
    /// is to read; nil when the runner ended, sent something else, or did not write in time.
    static func read(from fd: Int32, within deadline: Duration) -> RunnerConfinement? {
        let giveUpAt = ContinuousClock.now + deadline
        var line: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 1024)
        while line.last != UInt8(ascii: "\n") && line.count < 64 << 10 {
            let left = giveUpAt - .now
            guard left > .zero else { return nil }
            var ready = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            let milliseconds = Int32(clamping: left.components.seconds * 1000 + left.components.attoseconds / 1_000_000_000_000_000 + 1)
            let polled = poll(&ready, 1, milliseconds)
            if polled < 0 && errno == EINTR { continue }
            guard polled > 0 else { return nil }
            let count = buffer.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress!, $0.count) }
            if count < 0 && errno == EINTR { continue }
            guard count > 0 else { return nil }
            line += buffer[..<count]
        }
        guard line.last == UInt8(ascii: "\n"), let frame = try? JSON.parse(Array(line.dropLast())), frame["method"]?.stringValue == Self.method,
            let params = frame["params"]
        else { return nil }
        return RunnerConfinement(json: params)
    }
}
