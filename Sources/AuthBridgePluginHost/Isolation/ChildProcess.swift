import AuthBridgeSystem
import AuthBridgeURL
import CAuthBridgeProcess
import Synchronization

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// What every child the host starts shares: the environment it may see and its exit status in
/// words. The browser (`BrowserLauncher`) and plugin runners use it.
public enum ChildProcess {
    /// The entries (`NAME=value`) of `environment` a child may have: not the host's own
    /// variables (`AUTHBRIDGE_*`), none whose name says it holds a secret (`…TOKEN…`,
    /// `…SECRET…`, `…PASSWORD…`, `…_KEY`…), and, unless `keepSessionBus`, not the D-Bus session
    /// bus (the keyring there holds the vault key; a plugin runner has no use for it, a browser may).
    public static func environment(_ environment: [String], keepSessionBus: Bool) -> [String] {
        environment.filter { entry in
            let name = entry.split(separator: "=", maxSplits: 1).first.map { $0.uppercased() } ?? ""
            if name.hasPrefix("AUTHBRIDGE") { return false }
            if !keepSessionBus && name == "DBUS_SESSION_BUS_ADDRESS" { return false }
            let secretWords = ["TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "PRIVATE"]
            return !secretWords.contains(where: { name.hasSubstring($0) }) && !name.hasSuffix("_KEY") && !name.hasSuffix("APIKEY")
        }
    }

    /// This process's environment.
    public static func currentEnvironment() -> [String] {
        var entries: [String] = []
        var cursor = environ
        while let entry = cursor.pointee {
            entries.append(String(cString: entry))
            cursor += 1
        }
        return entries
    }

    /// "exited with status 3", "killed by signal 11 (SIGSEGV)", or nil for success.
    public static func failure(waitStatus: Int32) -> String? {
        let signal = waitStatus & 0x7f
        if signal == 0 {
            let code = (waitStatus >> 8) & 0xff
            return code == 0 ? nil : "exited with status \(code)"
        }
        return "killed by signal \(signal)" + (signalName(signal).map { " (\($0))" } ?? "")
    }

    /// The usual name of a signal that ends processes.
    static func signalName(_ signal: Int32) -> String? {
        let names: [Int32: String] = [
            SIGHUP: "SIGHUP", SIGINT: "SIGINT", SIGQUIT: "SIGQUIT", SIGILL: "SIGILL", SIGTRAP: "SIGTRAP", SIGABRT: "SIGABRT",
            SIGBUS: "SIGBUS", SIGFPE: "SIGFPE", SIGKILL: "SIGKILL", SIGSEGV: "SIGSEGV", SIGPIPE: "SIGPIPE", SIGALRM: "SIGALRM",
            SIGTERM: "SIGTERM", SIGXCPU: "SIGXCPU", SIGXFSZ: "SIGXFSZ", SIGSYS: "SIGSYS", SIGUSR1: "SIGUSR1", SIGUSR2: "SIGUSR2",
        ]
        return names[signal]
    }
}

/// A runner process: killed with its process group, reaped once. With a PID namespace it is the
/// process outside it, which ends as the runner proper ended and reaps it first (sandbox.c).
///
/// The pid is never signalled after it was reaped (it could name another process by then):
/// `waitForEnd` waits without reaping (`WNOWAIT`), kills the group while the zombie still holds
/// the pid and group id, then reaps, all under the lock `kill` takes.
final class RunnerProcess: Sendable {
    let pid: pid_t
    private let reaped = Mutex(false)

    init(pid: pid_t) { self.pid = pid }

    /// Kills the runner and everything in its process group (what the plugin forked).
    func kill() {
        reaped.withLock { reaped in
            if !reaped { _ = Glibc.kill(-pid, SIGKILL) }
        }
    }

    /// Blocks until the runner has ended, ends its group, reaps it and says how it ended.
    func waitForEnd() -> String {
        var info = siginfo_t()
        while waitid(P_PID, id_t(pid), &info, WEXITED | WNOWAIT) != 0 && errno == EINTR {}
        return reaped.withLock { reaped in
            _ = Glibc.kill(-pid, SIGKILL)
            var status: Int32 = 0
            var result: pid_t
            repeat { result = waitpid(pid, &status, 0) } while result < 0 && errno == EINTR
            reaped = true
            guard result == pid else { return "ended (its status is unknown)" }
            return ChildProcess.failure(waitStatus: status) ?? "exited with status 0"
        }
    }
}

/// Starts plugin runners, always from one thread that never ends: a runner's
/// `PR_SET_PDEATHSIG` fires when the *thread* that spawned it ends (prctl(2)), and pool threads
/// may end.
final class RunnerSpawner: @unchecked Sendable {
    static let shared = RunnerSpawner()

    private let lock = ConditionLock()
    // Guarded by `lock`.
    private var jobs: [@Sendable () -> Void] = []
    private var threadStarted = false

    private init() {}

    /// Runs `job` on the spawner thread and waits for it (on this thread when the system has
    /// no thread to give: the runner then lacks only the parent-death signal).
    private func run<T: Sendable>(_ job: @escaping @Sendable () -> T) -> T {
        let answer = Handoff<T>()
        let queued = lock.withLock {
            if !threadStarted { threadStarted = startThread { [self] in loop() } }
            guard threadStarted else { return false }
            jobs.append { answer.put(job()) }
            lock.signal()
            return true
        }
        return queued ? answer.take() : job()
    }

    private func loop() {
        while true {
            let job = lock.withLock {
                while jobs.isEmpty { lock.wait() }
                return jobs.removeFirst()
            }
            job()
        }
    }

    /// The executable runners run: the host's own binary, even if an upgrade renamed a new file over it.
    static let executable = "/proc/self/exe"

    /// Spawns `authbridge plugin-runner` for `library`: the channel's runner end as fd 3, the
    /// library as fd 4, the filtered environment; then reads the runner's first line, how it
    /// confined itself (`RunnerConfinement`), within the load deadline. `executable`: another
    /// authbridge binary (tests, whose own binary is the test runner).
    func spawn(_ library: VettedLibrary, memoryLimitMB: Int, executable: String = RunnerSpawner.executable) throws(PluginLoadError) -> RunnerHandle {
        let arguments = [
            "authbridge", "plugin-runner", "--parent", String(getpid()), "--plugin", library.manifest.id,
            "--memory-limit-mb", String(memoryLimitMB),
        ]
        // No Swift backtracer in a runner: on a crash it prints registers and memory (which may
        // hold a user's tokens) to the host's stderr and takes a second; and a signal sent from
        // outside (SIGSEGV by kill) is survived with it on.
        let environment =
            ChildProcess.environment(ChildProcess.currentEnvironment(), keepSessionBus: false).filter { !$0.hasPrefix("SWIFT_BACKTRACE=") }
            + ["SWIFT_BACKTRACE=enable=no"]
        let libraryFD = library.fd
        let result: Result<(Int32, pid_t), SpawnError> = run {
            var pair: [Int32] = [-1, -1]
            guard socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &pair) == 0 else {
                return .failure(SpawnError(step: "socketpair", errno: errno))
            }
            // Above 4, so that placing them at 3 and 4 in the child cannot overwrite each other.
            let channel = fcntl(pair[1], F_DUPFD_CLOEXEC, 5)
            let libraryCopy = fcntl(libraryFD, F_DUPFD_CLOEXEC, 5)
            close(pair[1])
            defer {
                if channel >= 0 { close(channel) }
                if libraryCopy >= 0 { close(libraryCopy) }
            }
            guard channel >= 0, libraryCopy >= 0 else {
                close(pair[0])
                return .failure(SpawnError(step: "fcntl", errno: errno))
            }
            var argv: [UnsafeMutablePointer<CChar>?] = arguments.map { strdup($0) } + [nil]
            var envp: [UnsafeMutablePointer<CChar>?] = environment.map { strdup($0) } + [nil]
            defer {
                argv.forEach { free($0) }
                envp.forEach { free($0) }
            }
            var pid = pid_t()
            let status = ab_spawn_runner(executable, &argv, &envp, channel, libraryCopy, &pid)
            guard status == 0 else {
                close(pair[0])
                return .failure(SpawnError(step: "posix_spawn", errno: status))
            }
            return .success((pair[0], pid))
        }
        switch result {
        case .success(let (channelFD, pid)):
            let process = RunnerProcess(pid: pid)
            // The runner's first line, written before it loads any plugin code: how it is confined.
            guard let confinement = RunnerConfinement.read(from: channelFD, within: HookDeadlines().load) else {
                process.kill()
                let ending = process.waitForEnd()
                close(channelFD)
                throw PluginLoadError(.loadFailed, "the plugin runner did not start: it did not say how it is confined (\(ending))")
            }
            return RunnerHandle(channelFD: channelFD, waitForEnd: { process.waitForEnd() }, kill: { process.kill() }, confinement: confinement)
        case .failure(let error):
            throw PluginLoadError(.loadFailed, "the plugin runner could not be started (\(error.step): \(String(cString: strerror(error.errno))))")
        }
    }

    private struct SpawnError: Error {
        let step: String
        let errno: Int32
    }
}

extension RunnerBackend {
    /// The default `launch`: spawns `authbridge plugin-runner` (limit: `--plugin-memory-limit`, MiB).
    static func spawnLaunch(memoryLimitMB: Int = 1024, executable: String = RunnerSpawner.executable) -> Launch {
        { library throws(PluginLoadError) in try RunnerSpawner.shared.spawn(library, memoryLimitMB: memoryLimitMB, executable: executable) }
    }
}
