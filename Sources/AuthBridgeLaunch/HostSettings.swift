import AuthBridgeHost
import AuthBridgeJSON
import AuthBridgePluginHost
import AuthBridgeSession
import AuthBridgeSystem
import AuthBridgeURL
import AuthBridgeVault
import Logging

#if canImport(Glibc)
import Glibc
#endif

/// What the options shared by every command that loads plugins ask for: the plugin folders and
/// where plugins run, the profiles file, the log level and the vault. The CLI's `HostOptions`
/// declares them for ArgumentParser (help, completions, errors); `FastCommandLine` reads the
/// same spellings for `serve`'s fast start. Defaults are the options' defaults.
public struct HostSettings: Sendable, Equatable {
    public var pluginFolders: [String] = []
    public var noDefaultPlugins = false
    public var pluginIsolation: [String] = []
    public var pluginMemoryLimit = 1024
    public var config: String?
    public var logLevel = "info"
    public var vault = "encrypted-file"
    public var vaultUrl: String?
    public var vaultDir: String?
    public var vaultKeyFile: String?
    public var requireSecureStorage = false

    public init() {}

    /// Why these settings cannot be used, as the option's error message; nil when they can.
    public var problem: String? {
        guard ["encrypted-file", "secret-service", "postgresql", "memory"].contains(vault) else {
            return "--vault must be encrypted-file, secret-service, postgresql or memory"
        }
        if vault == "postgresql" && databaseURL == nil {
            return "--vault postgresql needs its database: --vault-url URL, or AUTHBRIDGE_VAULT_URL"
        }
        if vault != "postgresql" && vaultUrl != nil {
            return "--vault-url is for --vault postgresql"
        }
        guard Logger.Level(rawValue: logLevel) != nil else {
            return "--log-level must be one of trace, debug, info, notice, warning, error, critical"
        }
        do { _ = try IsolationPolicy(options: pluginIsolation) } catch { return error.description }
        guard pluginMemoryLimit >= IsolationPolicy.minimumMemoryLimitMB else {
            return "--plugin-memory-limit must be at least \(IsolationPolicy.minimumMemoryLimitMB) (MiB): thread stacks count towards it"
        }
        return nil
    }

    /// Plugin folders in search order: bundled, user's, then --plugins (a user's folder).
    public var folders: [PluginFolder] {
        (noDefaultPlugins ? [] : Installation.defaultPluginFolders()) + pluginFolders.map { PluginFolder($0, origin: .user) }
    }

    /// Where each plugin runs (checked by `validate`).
    public var isolationPolicy: IsolationPolicy {
        (try? IsolationPolicy(options: pluginIsolation, memoryLimitMB: pluginMemoryLimit)) ?? IsolationPolicy(memoryLimitMB: pluginMemoryLimit)
    }

    /// The loader for these options' folders and isolation.
    public func pluginLoader(logger: Logger) -> PluginLoader {
        PluginLoader(folders: folders, policy: isolationPolicy, logger: logger)
    }

    /// The PostgreSQL vault's connection string: --vault-url, else AUTHBRIDGE_VAULT_URL.
    public var databaseURL: String? { vaultUrl ?? ProcessHardening.vaultURLForChecks }

    /// The session store the options ask for. Nothing is opened here: the
    /// vault checks its folder and key on first use (off the start-up path).
    public func sessionStore(warnings: inout [String]) -> SessionStore {
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
        let keyring = Keyring(libraryPaths: HelperLibraryLocation.candidates("libAuthBridgeKeyring.so"))
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
        return PostgresVault(url: url, keySource: keySource, libraryPaths: HelperLibraryLocation.candidates("libAuthBridgePostgres.so"))
    }

    /// Whether a connection string carries a password (postgresql://user:secret@… or password=…).
    public static func holdsPassword(_ url: String) -> Bool {
        if url.hasPrefix("postgresql://") || url.hasPrefix("postgres://") {
            let rest = url.drop(while: { $0 != "/" }).dropFirst(2)
            let authority = rest.prefix(while: { $0 != "/" && $0 != "?" })
            if let at = authority.lastIndex(of: "@"), authority[..<at].contains(":" as Character) { return true }
        }
        return url.hasSubstring("password=") || url.hasSubstring("password =")
    }

    /// The profiles file: --config, else $XDG_CONFIG_HOME/authbridge/config.json (nil: no home).
    public var configPath: String? { config ?? Installation.userConfigFolder.map { $0 + "/config.json" } }

    /// The profiles, and warnings about keys nothing reads; a file that exists but cannot be
    /// read or parsed (or --config naming none) is a failure. Messages name the file.
    public func loadConfiguration() -> Result<LoadedConfiguration, ConfigurationError> {
        guard let path = configPath else { return .success(LoadedConfiguration()) }
        return ConfigurationLoader.load(path, required: config != nil)
    }

    /// The configuration file read again (the agent's `ConfigurationWatcher`): nil when there is
    /// no file (any more) where a missing one is no error.
    public func reloadConfiguration() -> Result<LoadedConfiguration, ConfigurationError>? {
        guard let path = configPath else { return nil }
        var info = stat()
        if stat(path, &info) != 0 && errno == ENOENT { return nil }
        return ConfigurationLoader.load(path, required: config != nil)
    }

    /// For `serve`: problems become warnings (logged, and in `initialize`'s `warnings`), so the
    /// host still serves and the frontend can configure profiles itself.
    public func hostConfiguration(testClock: Bool = false, browser: BrowserLauncher? = nil) -> HostConfiguration {
        var warnings: [String] = []
        var profiles: [Profile] = []
        var problem: String?
        switch loadConfiguration() {
        case .success(let loaded):
            profiles = loaded.profiles
            warnings = loaded.warnings.map { "configuration file \($0)" }
        case .failure(let error):
            warnings.append("configuration file \(error.message); none of its profiles are loaded")
            problem = error.message
        }
        return HostConfiguration(
            pluginFolders: folders, isolation: isolationPolicy, profiles: profiles, warnings: warnings, testClock: testClock,
            browser: browser, configurationProblem: problem)
    }
}
