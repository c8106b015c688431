import ArgumentParser
import AuthBridgeHost
import AuthBridgeJSON
import AuthBridgePluginHost

/// `authbridge plugins`: which plugins load, and why others were refused.
struct Plugins: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "List loaded and refused plugins with their reasons.")

    @OptionGroup var options: HostOptions

    @Flag(
        help: """
            Print JSON on stdout: an array of PluginStatus (bridge-spec; initialize's providers): id, status (loaded: \
            version, displayName, description, flows, capabilities, settings, path, isolation; refused: reason, \
            message, path).
            """)
    var json = false

    func run() async throws {
        let logger = bootstrapLogging(options.logLevel == "info" ? "error" : options.logLevel)
        let reports = options.pluginLoader(logger: logger).loadAll()
        defer { LoadedPlugin.shutDown(reports.compactMap(\.plugin)) }
        if json {
            print(Terminal.cleanJSON(JSON.array(reports.map(\.json)).prettyPrinted()))
            return
        }
        // Manifests and plugins are someone else's text: cleaned for the terminal.
        if reports.isEmpty { print(Terminal.clean("No plugins found in: \(options.folders.map(\.path).joined(separator: ", "))")) }
        for report in reports {
            switch report.status {
            case .loaded(let plugin):
                let isolated = plugin.isolation == .process ? "  (isolated)" : ""
                print(Terminal.clean("loaded   \(plugin.manifest.id) \(plugin.version)  \(plugin.libraryPath)\(isolated)"))
            case .refused(let error):
                print(
                    Terminal.clean(
                        "refused  \(report.id ?? "?")  \(error.reason.rawValue): \(error.message)" + (error.fix.map { " (fix: \($0))" } ?? "")))
            }
        }
    }
}
