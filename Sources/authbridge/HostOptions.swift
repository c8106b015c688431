import ArgumentParser
import AuthBridgeHost
import AuthBridgeJSON
import AuthBridgePluginHost
import AuthBridgeSession
import Logging

/// Options shared by every command that loads plugins.
struct HostOptions: ParsableArguments {
    @Option(name: .customLong("plugins"), help: ArgumentHelp("Also load plugins from DIR (repeatable).", valueName: "DIR"))
    var pluginFolders: [String] = []

    @Flag(help: "Load plugins only from --plugins folders, not from the install tree or the XDG data folder.")
    var noDefaultPlugins = false

    @Option(help: ArgumentHelp("Profiles file (default: $XDG_CONFIG_HOME/authbridge/config.json if it exists).", valueName: "FILE"))
    var config: String?

    @Option(help: ArgumentHelp("Log level on stderr: trace, debug, info, notice, warning, error, critical.", valueName: "LEVEL"))
    var logLevel: String = "info"

    func validate() throws {
        guard Logger.Level(rawValue: logLevel) != nil else {
            throw ValidationError("--log-level must be one of trace, debug, info, notice, warning, error, critical")
        }
    }

    /// Plugin folders in search order: bundled, user's, then --plugins.
    var folders: [String] {
        (noDefaultPlugins ? [] : Installation.defaultPluginFolders()) + pluginFolders
    }

    /// Reads the profiles; problems become warnings so the host still serves.
    func hostConfiguration(testClock: Bool) -> HostConfiguration {
        var warnings: [String] = []
        var profiles: [Profile] = []
        let path = config ?? Installation.userConfigFolder.map { $0 + "/config.json" }
        if let path {
            switch ConfigurationLoader.load(path, required: config != nil) {
            case .success(let loaded): profiles = loaded
            case .failure(let error): warnings.append("configuration \(path): \(error.message)")
            }
        }
        return HostConfiguration(pluginFolders: folders, profiles: profiles, warnings: warnings, testClock: testClock)
    }
}
