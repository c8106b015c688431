import AuthBridgeVault
import Logging

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
        let status = posix_spawnp(&pid, command, &actions, nil, &argv, environ)
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
            if let failure = Self.failure(waitStatus: exitStatus) { onFailure("\(command) \(failure)") }
        }
    }

    /// `open`, with a failure logged as a warning (the host's log is stderr).
    public func open(_ url: String, logger: Logger) {
        open(url) { reason in
            logger.warning("could not open the browser: \(reason); the sign-in URL is in the openUrl progress event")
        }
    }

    /// "exited with status 3", "was killed by signal 9", or nil for success.
    static func failure(waitStatus: Int32) -> String? {
        let signal = waitStatus & 0x7f
        if signal == 0 {
            let code = (waitStatus >> 8) & 0xff
            return code == 0 ? nil : "exited with status \(code)"
        }
        return "was killed by signal \(signal)"
    }
}
