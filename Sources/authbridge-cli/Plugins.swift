import ArgumentParser
import AuthBridgeHost
import AuthBridgeJSON
import AuthBridgeLaunch
import AuthBridgePluginHost
import AuthBridgeSession

/// `authbridge plugins`: which plugins load, and why others were refused.
struct Plugins: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "plugins",
        abstract: "List loaded and refused plugins with their reasons.",
        discussion: "With an agent running, the agent's plugins (what its apps get); --no-agent: what this command would load.")

    @OptionGroup var options: HostOptions

    @OptionGroup var agent: AgentChoice

    @Flag(
        help: """
            Print JSON on stdout: an array of PluginStatus (bridge-spec; initialize's providers): id, status (loaded: \
            version, displayName, description, flows, capabilities, settings, path, isolation, confinement; refused: \
            reason, message, path).
            """)
    var json = false

    func run() async throws {
        let logger = bootstrapLogging(options.logLevel == "info" ? "error" : options.logLevel)
        let entries: [PluginEntry]
        let source: String
        if let agent = try await SessionAccess.agent(options, agent) {
            defer { AgentSessions.closeAll() }
            do throws(SessionError) { entries = try await agent.plugins() } catch { throw agent.report(error) }
            source = "the agent on \(agent.path)"
        } else {
            let reports = options.pluginLoader(logger: logger).loadAll()
            defer { LoadedPlugin.shutDown(reports.compactMap(\.plugin)) }
            entries = LocalEngine.entries(reports)
            source = options.folders.map(\.path).joined(separator: ", ")
        }
        if json {
            print(Terminal.cleanJSON(JSON.array(entries.map(\.status)).prettyPrinted()))
            return
        }
        // Manifests and plugins are someone else's text: cleaned for the terminal.
        if entries.isEmpty { print(Terminal.clean("No plugins found in: \(source)")) }
        for entry in entries {
            let status = entry.status
            let id = status["id"]?.stringValue ?? "?"
            if status["status"]?.stringValue == "loaded" {
                let isolated = status["isolation"]?.stringValue == "process" ? "  (isolated)" : ""
                let version = status["version"]?.stringValue ?? "?"
                print(Terminal.clean("loaded   \(id) \(version)  \(status["path"]?.stringValue ?? "")\(isolated)"))
                // What its runner's sandbox lacks on this kernel.
                for warning in status["confinement"]?["warnings"]?.arrayValue?.compactMap(\.stringValue) ?? [] {
                    print(Terminal.clean("         less confined: \(warning)"))
                }
            } else {
                let reason = status["reason"]?.stringValue ?? "?"
                print(
                    Terminal.clean(
                        "refused  \(id)  \(reason): \(status["message"]?.stringValue ?? "")" + (entry.fix.map { " (fix: \($0))" } ?? "")))
            }
        }
    }
}
