import ArgumentParser
import AuthBridgeHost
import AuthBridgeJSON
import AuthBridgePluginHost
import AuthBridgeSession
import Logging

#if canImport(Glibc)
import Glibc
#endif

/// The profile and account a one-account command (`token`, `logout`) acts on.
struct AccountSelection: ParsableArguments {
    @Argument(help: "The profile.")
    var profile: String

    @Option(help: ArgumentHelp("Which signed-in account (Account.id); default: the latest sign-in.", valueName: "ID"))
    var account: String?
}

/// Options shared by every command that loads plugins.
struct HostOptions: ParsableArguments {
    @Option(name: .customLong("plugins"), help: ArgumentHelp("Also load plugins from DIR (repeatable).", valueName: "DIR"))
    var pluginFolders: [String] = []

    @Flag(help: "Load plugins only from --plugins folders, not from the install tree or the XDG data folder.")
    var noDefaultPlugins = false

    @Option(
        help: ArgumentHelp(
            "Where plugins run: process (each in its own runner process) or none (inside the host), for every plugin or, as ID=MODE, for one (repeatable). Default: install-tree plugins none, the user's folders' plugins process.",
            valueName: "[ID=]MODE"))
    var pluginIsolation: [String] = []

    @Option(help: ArgumentHelp("The memory limit of each isolated plugin's runner process, in MiB (default 1024, at least 256).", valueName: "MIB"))
    var pluginMemoryLimit: Int = 1024

    @Option(help: ArgumentHelp("Profiles file (default: ${XDG_CONFIG_HOME:-~/.config}/authbridge/config.json, if it exists).", valueName: "FILE"))
    var config: String?

    @Option(help: ArgumentHelp("Log level on stderr: trace, debug, info, notice, warning, error, critical.", valueName: "LEVEL"))
    var logLevel: String = "info"

    @Option(
        help: ArgumentHelp(
            "Where tokens are kept: encrypted-file (default), secret-service (the desktop keyring), postgresql (a database a fleet of hosts shares: --vault-url) or memory (forgotten at exit).",
            valueName: "BACKEND"))
    var vault: String = "encrypted-file"

    @Option(
        help: ArgumentHelp(
            "The PostgreSQL vault's database, a libpq connection string (postgresql://USER@HOST/DB or key=value pairs). AUTHBRIDGE_VAULT_URL is read when this is not given: put a password there or in ~/.pgpass, never here (process listings show arguments).",
            valueName: "URL"))
    var vaultUrl: String?

    @Option(help: ArgumentHelp("The encrypted vault's folder (default: $XDG_DATA_HOME/authbridge/vault).", valueName: "DIR"))
    var vaultDir: String?

    @Option(
        help: ArgumentHelp(
            "The vault key file (default: $XDG_DATA_HOME/authbridge/keys/vault.key; created on first use, except for --vault postgresql, whose hosts are all given the same one). AUTHBRIDGE_VAULT_KEY (a random 32-byte key: 64 hex digits or base64), when set, is used instead.",
            valueName: "FILE"))
    var vaultKeyFile: String?

    @Flag(
        help: "Fail closed instead of keeping the vault key in a file: the key must come from the keyring (Secret Service) or AUTHBRIDGE_VAULT_KEY.")
    var requireSecureStorage = false

    func validate() throws {
        guard ["encrypted-file", "secret-service", "postgresql", "memory"].contains(vault) else {
            throw ValidationError("--vault must be encrypted-file, secret-service, postgresql or memory")
        }
        if vault == "postgresql" && databaseURL == nil {
            throw ValidationError("--vault postgresql needs its database: --vault-url URL, or AUTHBRIDGE_VAULT_URL")
        }
        if vault != "postgresql" && vaultUrl != nil {
            throw ValidationError("--vault-url is for --vault postgresql")
        }
        guard Logger.Level(rawValue: logLevel) != nil else {
            throw ValidationError("--log-level must be one of trace, debug, info, notice, warning, error, critical")
        }
        do { _ = try IsolationPolicy(options: pluginIsolation) } catch { throw ValidationError(error.description) }
        guard pluginMemoryLimit >= IsolationPolicy.minimumMemoryLimitMB else {
            throw ValidationError(
                "--plugin-memory-limit must be at least \(IsolationPolicy.minimumMemoryLimitMB) (MiB): thread stacks count towards it")
        }
    }

    /// Plugin folders in search order: bundled, user's, then --plugins (a user's folder).
    var folders: [PluginFolder] {
        (noDefaultPlugins ? [] : Installation.defaultPluginFolders()) + pluginFolders.map { PluginFolder($0, origin: .user) }
    }

    /// Where each plugin runs (checked by `validate`).
    var isolationPolicy: IsolationPolicy {
        (try? IsolationPolicy(options: pluginIsolation, memoryLimitMB: pluginMemoryLimit)) ?? IsolationPolicy(memoryLimitMB: pluginMemoryLimit)
    }

    /// The loader for these options' folders and isolation.
    func pluginLoader(logger: Logger) -> PluginLoader {
        PluginLoader(folders: folders, policy: isolationPolicy, logger: logger)
    }

    /// The PostgreSQL vault's connection string: --vault-url, else AUTHBRIDGE_VAULT_URL.
    var databaseURL: String? { vaultUrl ?? ProcessHardening.vaultURL }

    /// The session store the options ask for. Nothing is opened here: the
    /// vault checks its folder and key on first use (off the start-up path).
    func sessionStore(warnings: inout [String]) -> SessionStore {
        if vault == "memory" { return .inMemory() }
        let data = Installation.userDataFolder
        if vault == "postgresql", let url = databaseURL {
            return SessionStore(vault: fleetVault(url: url, keyFile: vaultKeyFile ?? data.map({ $0 + "/keys/vault.key" }), warnings: &warnings))
        }
        guard let folder = vaultDir ?? data.map({ $0 + "/vault" }),
            let keyFile = vaultKeyFile ?? data.map({ $0 + "/keys/vault.key" })
        else {
            warnings.append("no home or XDG data folder for the vault: sessions are kept in memory only")
            return .inMemory()
        }
        let keyring = Keyring(libraryPaths: Installation.helperLibraryCandidates("libAuthBridgeKeyring.so"))
        if vault == "secret-service" {
            return SessionStore(vault: SecretServiceVault(keyring: keyring, lockFolder: folder + "/locks"))
        }
        let hasSessionBus = getenv("DBUS_SESSION_BUS_ADDRESS").map { $0.pointee != 0 } ?? false
        let keySource: VaultKeySource
        if let secret = ProcessHardening.vaultSecret {
            if let problem = VaultKeySource.secretProblem(secret) { warnings.append(problem) }
            keySource = .secret(secret)
        } else if hasSessionBus {
            // The desktop keyring holds the key; without it, a key file — unless secure storage is required.
            keySource = .keyring(keyring, fallback: requireSecureStorage ? nil : .keyFile(keyFile))
        } else if requireSecureStorage {
            keySource = .unavailable(
                "Secure storage is required (--require-secure-storage) but there is no session bus for a keyring and no AUTHBRIDGE_VAULT_KEY; refusing to keep the vault key in a file."
            )
        } else {
            keySource = .keyFile(keyFile)
        }
        return SessionStore(vault: EncryptedFileVault(folder: folder, keySource: keySource))
    }

    /// The PostgreSQL vault: its key from AUTHBRIDGE_VAULT_KEY or a key file every host is
    /// given (never made here: a key one host made alone would not open the others' records).
    private func fleetVault(url: String, keyFile: String?, warnings: inout [String]) -> PostgresVault {
        if vaultUrl.map(Self.holdsPassword) == true {
            warnings.append(
                "--vault-url holds a password, which process listings show: put the connection string in AUTHBRIDGE_VAULT_URL, or the password in ~/.pgpass"
            )
        }
        let keySource: VaultKeySource
        if let secret = ProcessHardening.vaultSecret {
            if let problem = VaultKeySource.secretProblem(secret) { warnings.append(problem) }
            keySource = .secret(secret)
        } else if let keyFile {
            keySource = .sharedKeyFile(keyFile)
        } else {
            keySource = .unavailable("The PostgreSQL vault needs its key: AUTHBRIDGE_VAULT_KEY, or --vault-key-file FILE.")
        }
        return PostgresVault(url: url, keySource: keySource, libraryPaths: Installation.helperLibraryCandidates("libAuthBridgePostgres.so"))
    }

    /// Whether a connection string carries a password (postgresql://user:secret@… or password=…).
    static func holdsPassword(_ url: String) -> Bool {
        if url.hasPrefix("postgresql://") || url.hasPrefix("postgres://") {
            let rest = url.drop(while: { $0 != "/" }).dropFirst(2)
            let authority = rest.prefix(while: { $0 != "/" && $0 != "?" })
            if let at = authority.lastIndex(of: "@"), authority[..<at].contains(":") { return true }
        }
        return url.contains("password=") || url.contains("password =")
    }

    /// The profiles file: --config, else $XDG_CONFIG_HOME/authbridge/config.json (nil: no home).
    var configPath: String? { config ?? Installation.userConfigFolder.map { $0 + "/config.json" } }

    /// The profiles, and warnings about keys nothing reads; a file that exists but cannot be
    /// read or parsed (or --config naming none) is a failure. Messages name the file.
    func loadConfiguration() -> Result<LoadedConfiguration, ConfigurationError> {
        guard let path = configPath else { return .success(LoadedConfiguration()) }
        return ConfigurationLoader.load(path, required: config != nil)
    }

    /// For `serve`: problems become warnings (logged, and in `initialize`'s `warnings`), so the
    /// host still serves and the frontend can configure profiles itself.
    func hostConfiguration(testClock: Bool = false, browser: BrowserLauncher? = nil) -> HostConfiguration {
        var warnings: [String] = []
        var profiles: [Profile] = []
        switch loadConfiguration() {
        case .success(let loaded):
            profiles = loaded.profiles
            warnings = loaded.warnings.map { "configuration file \($0)" }
        case .failure(let error):
            warnings.append("configuration file \(error.message); none of its profiles are loaded")
        }
        return HostConfiguration(
            pluginFolders: folders, isolation: isolationPolicy, profiles: profiles, warnings: warnings, testClock: testClock,
            browser: browser)
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
            let err = Terminal.standardError
            err.error("configuration file \(error.message)")
            err.line("Fix the file (or name another with --config FILE); nothing was changed.")
            throw ExitCode(CommandExit.configuration)
        }
    }
}
