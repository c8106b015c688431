import AuthBridgePluginHost
import AuthBridgeSystem

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Opens a sign-in URL in the user's browser with `xdg-open` (`serve --open-browser`
/// and `login`, for people; frontends open the URL themselves from the `openUrl`
/// progress event).
///
/// The child gets /dev/null for stdin, stdout and stderr: nothing it prints
/// may reach the protocol stream (fd 1 already points at stderr, but a
/// browser's chatter does not belong in the host's log either). It is reaped
/// on a detached thread, which also reads its exit status: on a machine
/// without a desktop xdg-open starts fine and then fails (status 3 or 4), and
/// a user waiting for a browser that never appears must be told.
///
/// Its environment is the host's without what it has no use for
/// (`ChildProcess.environment`: the host's own variables and any whose name says
/// it holds a secret). A browser outlives the sign-in and runs whatever pages it opens.
public struct BrowserLauncher: Sendable {
    public var command: String

    public init(command: String = "xdg-open") { self.command = command }

    /// Starts the browser. When it cannot be started or exits with a failure,
    /// `onFailure` gets a short reason (e.g. "xdg-open exited with status 3"),
    /// on another thread; never the URL.
    public func open(_ url: String, onFailure: @escaping @Sendable (String) -> Void) {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        for fd: Int32 in [0, 1, 2] {
            posix_spawn_file_actions_addopen(&actions, fd, "/dev/null", fd == 0 ? O_RDONLY : O_WRONLY, 0)
        }
        var pid = pid_t()
        let arguments = [command, url]
        var argv: [UnsafeMutablePointer<CChar>?] = arguments.map { strdup($0) } + [nil]
        defer { argv.forEach { free($0) } }
        var environment: [UnsafeMutablePointer<CChar>?] =
            ChildProcess.environment(ChildProcess.currentEnvironment(), keepSessionBus: true).map { strdup($0) } + [nil]
        defer { environment.forEach { free($0) } }
        let status = posix_spawnp(&pid, command, &actions, nil, &argv, &environment)
        guard status == 0 else {
            onFailure("\(command) could not be started (\(String(cString: strerror(status))))")
            return
        }
        let child = pid
        let command = command
        detachThread {
            var exitStatus: Int32 = 0
            var reaped: pid_t
            repeat { reaped = waitpid(child, &exitStatus, 0) } while reaped < 0 && errno == EINTR
            guard reaped == child else { return }
            if let failure = ChildProcess.failure(waitStatus: exitStatus) { onFailure("\(command) \(failure)") }
        }
    }
}
