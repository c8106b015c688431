import AuthBridgePluginHost
import CAuthBridgeProcess

#if canImport(Glibc)
import Glibc
#endif

/// `plugin-runner`: one isolated plugin's process, started by the host (never by people). It
/// loads the library the host vetted (fd 4) and serves the host over the channel (fd 3) until the
/// host goes away; its stdout is the host's stderr.
///
/// Before any plugin code runs: it dies with the host (PR_SET_PDEATHSIG, and at once if the host
/// is already gone), its data segment is bounded (RLIMIT_DATA: a plugin that allocates without
/// end fails its allocations instead of growing the machine's memory), the kernel's OOM killer
/// picks it first, and a broken pipe is an error, not a signal. Then, still with one thread, it
/// confines itself (`RunnerConfinement`: the plugin gets no files, sockets, programs or other
/// processes of the user, and what it starts ends with the runner) and tells the host how, in
/// its channel's first line.
public enum PluginRunning {
    public static func run(parent: Int32, plugin: String, memoryLimitMB: Int) -> Never {
        let status = ab_process_die_with_parent(parent)
        if status != 0 { StandardError.write("warning: plugin runner \(plugin): cannot follow the host (\(String(cString: strerror(status))))") }
        let bytes = rlim_t(max(256, memoryLimitMB)) << 20
        var limit = rlimit(rlim_cur: bytes, rlim_max: bytes)
        if setrlimit(__rlimit_resource_t(RLIMIT_DATA.rawValue), &limit) != 0 {
            StandardError.write("warning: plugin runner \(plugin): cannot limit its memory (\(String(cString: strerror(errno))))")
        }
        // Best effort: the OOM killer ends the runner before the host.
        let adjust = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC)
        if adjust >= 0 {
            _ = write(adjust, "1000", 4)
            close(adjust)
        }
        signal(SIGPIPE, SIG_IGN)
        guard RunnerConfinement.apply(libraryFD: 4).announce(on: 3) else { exit(70) }
        PluginRunnerServer(channelFD: 3, libraryFD: 4).run()
        exit(0)
    }
}
