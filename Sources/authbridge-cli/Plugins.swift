import ArgumentParser
import AuthBridgeHost
import AuthBridgeJSON
import AuthBridgeProtocol
import AuthBridgeLaunch
import AuthBridgePluginHost
import AuthBridgeSession

/// `authbridge plugins`: which plugins load, and why others were refused.
struct Plugins: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "plugins",
        abstract: "List loaded and refused plugins with their reasons.",
        discussion: "With an agent running, the agent's plugins (what its apps get); --no-agent: what this command would load.")

    @OptionGroup(title: "Host options") var options: HostOptions

    @OptionGroup(title: "Host options") var agent: AgentChoice

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
        let out = Terminal.standardOutput
        if entries.isEmpty {
            out.line(Terminal.clean("No plugins found in: \(source)"))
            return
        }
        let header = ["STATE", "PLUGIN", "VERSION", "PATH OR REASON"]
        let rows: [[String]] = entries.map { entry in
            switch entry.plugin {
            case .loaded(let plugin):
                let isolated = plugin.isolation == .process ? "  (isolated)" : ""
                return ["loaded", plugin.id, plugin.version, plugin.path + isolated].map(Terminal.clean)
            case .refused(let plugin):
                let fix = entry.fix.map { " (fix: \($0))" } ?? ""
                return ["refused", plugin.id ?? "?", "-", "\(plugin.reason.rawValue): \(plugin.message)" + fix].map(Terminal.clean)
            case nil:
                return ["?", entry.status["id"]?.stringValue ?? "?", "-", "not a plugin status this command can read"].map(Terminal.clean)
            }
        }
        let table = TextTable([header] + rows)
        out.line(table.line(header, on: out) { _ in .bold })
        for (entry, row) in zip(entries, rows) {
            out.line(table.line(row, on: out))
            // What its runner's sandbox lacks on this kernel, under its path.
            let indent = String(repeating: " ", count: table.widths.dropLast().reduce(0) { $0 + $1 + 2 })
            guard case .loaded(let plugin) = entry.plugin else { continue }
            for warning in plugin.confinement?.warnings ?? [] {
                out.line(indent + Terminal.clean("less confined: \(warning)"))
            }
        }
    }
}
