import ArgumentParser
import AuthBridgeLaunch

#if canImport(Glibc)
import Glibc
#endif

/// `authbridge plugin-runner`: one isolated plugin's process (PluginRunning), for a host
/// running inside this tool (`login`, `status`…); the `authbridge` executable starts it without
/// this parser.
struct PluginRunner: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "plugin-runner",
        abstract: "Run one plugin in its own process for the host (started by authbridge itself).",
        shouldDisplay: false)

    @Option(help: "The host's pid: the runner ends when the host does.")
    var parent: Int32

    @Option(help: "The plugin's id (for ps and logs).")
    var plugin: String

    @Option(name: .customLong("memory-limit-mb"), help: "The runner's data limit in MiB (at least 256: thread stacks count).")
    var memoryLimitMB: Int = 1024

    func run() throws {
        PluginRunning.run(parent: parent, plugin: plugin, memoryLimitMB: memoryLimitMB)
    }
}
