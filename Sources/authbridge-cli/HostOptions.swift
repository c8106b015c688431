import ArgumentParser
import AuthBridgeHost
import AuthBridgeJSON
import AuthBridgeLaunch
import AuthBridgePluginHost
import AuthBridgeSession
import Logging

#if canImport(Glibc)
import Glibc
#endif

/// The profile and account a one-account command (`token`, `logout`) acts on.
struct AccountSelection: ParsableArguments {
    @Argument(help: ArgumentHelp("The profile.", valueName: "PROFILE"))
    var profile: String

    @Option(help: ArgumentHelp("Which signed-in account (Account.id); default: the latest sign-in.", valueName: "ID"))
    var account: String?
}

/// The host options of the commands for people (login, status, token…): the everyday ones in
/// their help, the rest behind `--help-hidden` (a host of their own is the exception there).
typealias HostOptions = HostOptionSet<EverydayHostOptionsShown>

/// The host options of `serve` and `agent`, all in their help: they are the host.
typealias ServerHostOptions = HostOptionSet<AllHostOptionsShown>

/// Which host options a command's `--help` shows (the others: `--help-hidden`).
protocol HostOptionsShown {
    /// The visibility of the options a command for people rarely needs.
    static var rare: ArgumentVisibility { get }
}

enum EverydayHostOptionsShown: HostOptionsShown {
    static var rare: ArgumentVisibility { .hidden }
}

enum AllHostOptionsShown: HostOptionsShown {
    static var rare: ArgumentVisibility { .default }
}

/// Options shared by every command that loads plugins, shown under "Host options" (declared
/// once, for both kinds of command: `Shown` picks what `--help` lists).
struct HostOptionSet<Shown: HostOptionsShown>: ParsableArguments {
    @Option(name: .customLong("plugins"), help: ArgumentHelp("Also load plugins from DIR (repeatable).", valueName: "DIR"))
    var pluginFolders: [String] = []

    @Flag(
        help: ArgumentHelp(
            "Load plugins only from --plugins folders, not from the install tree or the XDG data folder.", visibility: Shown.rare))
    var noDefaultPlugins = false

    @Option(
        help: ArgumentHelp(
            "Where plugins run: process (each in its own runner process) or none (inside the host), for every plugin or, as ID=MODE, for one (repeatable). Default: install-tree plugins none, the user's folders' plugins process.",
            valueName: "[ID=]MODE", visibility: Shown.rare))
    var pluginIsolation: [String] = []

    @Option(
        help: ArgumentHelp(
            "The memory limit of each isolated plugin's runner process, in MiB (at least 256).", valueName: "MIB", visibility: Shown.rare))
    var pluginMemoryLimit: Int = 1024

    @Option(help: ArgumentHelp("Profiles file (default: ${XDG_CONFIG_HOME:-~/.config}/authbridge/config.json, if it exists).", valueName: "FILE"))
    var config: String?

    @Option(help: ArgumentHelp("Log level on stderr: trace, debug, info, notice, warning, error, critical.", valueName: "LEVEL"))
    var logLevel: String = "info"

    @Option(
        help: ArgumentHelp(
            "Where tokens are kept: encrypted-file, secret-service (the desktop keyring), postgresql (a database a fleet of hosts shares: --vault-url) or memory (forgotten at exit).",
            valueName: "BACKEND"))
    var vault: String = "encrypted-file"

    @Option(
        help: ArgumentHelp(
            "The PostgreSQL vault's database, a libpq connection string (postgresql://USER@HOST/DB or key=value pairs). AUTHBRIDGE_VAULT_URL is read when this is not given: put a password there or in ~/.pgpass, never here (process listings show arguments).",
            valueName: "URL", visibility: Shown.rare))
    var vaultUrl: String?

    @Option(
        help: ArgumentHelp(
            "The encrypted vault's folder (default: $XDG_DATA_HOME/authbridge/vault).", valueName: "DIR", visibility: Shown.rare))
    var vaultDir: String?

    @Option(
        help: ArgumentHelp(
            "The vault key file (default: $XDG_DATA_HOME/authbridge/keys/vault.key; created on first use, except for --vault postgresql, whose hosts are all given the same one). AUTHBRIDGE_VAULT_KEY (a random 32-byte key: 64 hex digits or base64), when set, is used instead.",
            valueName: "FILE", visibility: Shown.rare))
    var vaultKeyFile: String?

    @Flag(
        help: ArgumentHelp(
            "Fail closed instead of keeping the vault key in a file: the key must come from the keyring (Secret Service) or AUTHBRIDGE_VAULT_KEY.",
            visibility: Shown.rare))
    var requireSecureStorage = false

    /// The same options as plain values (AuthBridgeLaunch does the work).
    var settings: HostSettings {
        var settings = HostSettings()
        settings.pluginFolders = pluginFolders
        settings.noDefaultPlugins = noDefaultPlugins
        settings.pluginIsolation = pluginIsolation
        settings.pluginMemoryLimit = pluginMemoryLimit
        settings.config = config
        settings.logLevel = logLevel
        settings.vault = vault
        settings.vaultUrl = vaultUrl
        settings.vaultDir = vaultDir
        settings.vaultKeyFile = vaultKeyFile
        settings.requireSecureStorage = requireSecureStorage
        return settings
    }

    func validate() throws {
        if let problem = settings.problem { throw ValidationError(problem) }
    }

    var folders: [PluginFolder] { settings.folders }
    var isolationPolicy: IsolationPolicy { settings.isolationPolicy }
    func pluginLoader(logger: Logger) -> PluginLoader { settings.pluginLoader(logger: logger) }
    func sessionStore(warnings: inout [String]) -> SessionStore { settings.sessionStore(warnings: &warnings) }
    func loadConfiguration() -> Result<LoadedConfiguration, ConfigurationError> { settings.loadConfiguration() }
    func hostConfiguration(testClock: Bool = false, browser: BrowserLauncher? = nil) -> HostConfiguration {
        settings.hostConfiguration(testClock: testClock, browser: browser)
    }

    /// For the human commands: a configuration file that cannot be used ends the command with
    /// exit 78 (EX_CONFIG), naming the file and the problem; unknown keys are warnings.
    func commandConfiguration() throws -> HostConfiguration {
        switch loadConfiguration() {
        case .success(let loaded):
            return HostConfiguration(
                pluginFolders: folders, isolation: isolationPolicy, profiles: loaded.profiles,
                warnings: loaded.warnings.map { "configuration file \($0)" })
        case .failure(let error):
            throw Self.unusableConfiguration(error.message)
        }
    }

    /// Says that the configuration file cannot be used (`problem` names the file) and gives the
    /// exit for it: this process read the file, or the agent did (its `configurationProblem`).
    static func unusableConfiguration(_ problem: String) -> ExitCode {
        let err = Terminal.standardError
        err.error("configuration file \(problem)")
        err.line("Fix the file (or name another with --config FILE); nothing was changed.")
        return ExitCode(CommandExit.configuration)
    }
}
