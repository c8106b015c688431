import AuthBridgeVault
import Logging

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Opens a sign-in URL in the user's browser with `xdg-open` (`--open-browser`,
/// for people running the host by hand; frontends open the URL themselves
/// from the `openUrl` progress event).
///
/// The child gets /dev/null for stdin, stdout and stderr: nothing it prints
/// may reach the protocol stream (fd 1 already points at stderr, but a
/// browser's chatter does not belong in the host's log either). It is reaped
/// on a detached thread so no zombie is left behind.
public struct BrowserLauncher: Sendable {
    public var command: String

    public init(command: String = "xdg-open") { self.command = command }

    /// Starts the browser; failure is logged, never fatal (the URL was also sent to the frontend).
    public func open(_ url: String, logger: Logger) {
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
            logger.warning("could not start the browser; open the sign-in URL from the openUrl event yourself",
                           metadata: ["command": "\(command)", "error": "\(String(cString: strerror(status)))"])
            return
        }
        let child = pid
        detachThread {
            var exitStatus: Int32 = 0
            while waitpid(child, &exitStatus, 0) < 0 && errno == EINTR {}
        }
    }
}
