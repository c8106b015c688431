/// The command lines the `authbridge` executable starts without ArgumentParser: `serve` (also
/// as the default, options first or no arguments at all when stdin is not a terminal) and `agent`
/// with their options, and `plugin-runner` as the host spawns it. Those are what frontends, the
/// service manager and the host start, many times a day or for a whole session;
/// ArgumentParser's reflection over option groups and the FoundationEssentials it links cost
/// each of those starts milliseconds and megabytes (bench/README, "Start-up").
///
/// It reads only the plain spellings (`--name value`, `--name=value`, each flag and single-value
/// option once) and declines everything else — help, other commands, an unknown or repeated
/// option, a value that looks like an option, settings with a problem — which then goes to
/// authbridge-cli, whose ArgumentParser declarations are the reference: help, errors and usage
/// come from there alone. Tests/AuthBridgeCLITests holds the two to the same settings.
public enum FastCommandLine {
    /// What the `authbridge` executable runs itself.
    public enum Command: Sendable, Equatable {
        case serve(ServeSettings)
        case agent(AgentSettings)
        case pluginRunner(PluginRunnerCommandLine)
        /// `token` when no agent serves it (`TokenPrinting`).
        case token(TokenCommandLine)
    }

    /// The name under which the program is git's credential helper (`git credential-authbridge`):
    /// always the CLI's, whatever the arguments (`git-credential-authbridge get` is no `serve`).
    public static let gitCredentialHelperName = "git-credential-authbridge"

    /// Whether the program was started as `git-credential-authbridge` (`program`: argv[0]).
    public static func isGitCredentialHelper(_ program: String) -> Bool {
        program.split(separator: "/").last.map(String.init) == gitCredentialHelperName
    }

    /// The command of a whole command line (`program`: argv[0]); nil to leave it to the CLI.
    public static func command(program: String, _ arguments: [String], standardInputIsTerminal: Bool) -> Command? {
        isGitCredentialHelper(program) ? nil : command(arguments, standardInputIsTerminal: standardInputIsTerminal)
    }

    /// The command `arguments` (without the program name) ask for; nil to leave them to the CLI.
    public static func command(_ arguments: [String], standardInputIsTerminal: Bool) -> Command? {
        if let runner = PluginRunnerCommandLine(arguments) { return .pluginRunner(runner) }
        if let token = TokenCommandLine(arguments) { return .token(token) }
        var words = arguments[...]
        var agent = false
        if words.first == "serve" || words.first == "agent" {
            agent = words.first == "agent"
            words = words.dropFirst()
        } else if words.isEmpty {
            // A person typing `authbridge` alone gets help; a frontend's pipe gets the bridge.
            if standardInputIsTerminal { return nil }
        } else if words.first?.hasPrefix("--") != true {
            return nil
        }
        guard let values = options(words), values.host.problem == nil else { return nil }
        if agent {
            var settings = AgentSettings()
            (settings.host, settings.socket, settings.allowRoot) = (values.host, values.socket, values.allowRoot)
            (settings.openBrowser, settings.testClock) = (values.openBrowser, values.testClock)
            return .agent(settings)
        }
        guard values.socket == nil, !values.allowRoot else { return nil } // the agent's options
        var settings = ServeSettings()
        (settings.host, settings.openBrowser, settings.testClock) = (values.host, values.openBrowser, values.testClock)
        return .serve(settings)
    }

    /// Every option `serve` or `agent` takes, as read.
    private struct Values {
        var host = HostSettings()
        var openBrowser = false
        var testClock = false
        var socket: String?
        var allowRoot = false
    }

    private static func options(_ arguments: ArraySlice<String>) -> Values? {
        var words = arguments
        var values = Values()
        var seen: Set<String> = []
        while let word = words.popFirst() {
            guard word.hasPrefix("--"), word.count > 2 else { return nil }
            var name = String(word.dropFirst(2))
            var inlineValue: String?
            if let equals = name.firstIndex(of: "=") {
                inlineValue = String(name[name.index(after: equals)...])
                name = String(name[..<equals])
            }
            if let flag = Flag(rawValue: name) {
                guard inlineValue == nil, seen.insert(name).inserted else { return nil }
                flag.set(in: &values)
                continue
            }
            guard let option = Option(rawValue: name) else { return nil }
            let value: String
            if let inlineValue {
                value = inlineValue
            } else {
                guard let next = words.popFirst(), !next.hasPrefix("-") else { return nil }
                value = next
            }
            guard !value.isEmpty, option.repeatable || seen.insert(name).inserted, option.set(value, in: &values) else { return nil }
        }
        return values
    }

    /// The flags, by their long names.
    private enum Flag: String {
        case noDefaultPlugins = "no-default-plugins", requireSecureStorage = "require-secure-storage"
        case openBrowser = "open-browser", testClock = "test-clock", allowRoot = "allow-root"

        func set(in values: inout Values) {
            switch self {
            case .noDefaultPlugins: values.host.noDefaultPlugins = true
            case .requireSecureStorage: values.host.requireSecureStorage = true
            case .openBrowser: values.openBrowser = true
            case .testClock: values.testClock = true
            case .allowRoot: values.allowRoot = true
            }
        }
    }

    /// The options that take a value, by their long names.
    private enum Option: String {
        case plugins, pluginIsolation = "plugin-isolation", pluginMemoryLimit = "plugin-memory-limit", config
        case logLevel = "log-level", vault, vaultURL = "vault-url", vaultDir = "vault-dir", vaultKeyFile = "vault-key-file"
        case socket

        var repeatable: Bool { self == .plugins || self == .pluginIsolation }

        /// Sets the value; false when it is not one the option takes.
        func set(_ value: String, in values: inout Values) -> Bool {
            switch self {
            case .plugins: values.host.pluginFolders.append(value)
            case .pluginIsolation: values.host.pluginIsolation.append(value)
            case .pluginMemoryLimit:
                guard let limit = Int(value) else { return false }
                values.host.pluginMemoryLimit = limit
            case .config: values.host.config = value
            case .logLevel: values.host.logLevel = value
            case .vault: values.host.vault = value
            case .vaultURL: values.host.vaultUrl = value
            case .vaultDir: values.host.vaultDir = value
            case .vaultKeyFile: values.host.vaultKeyFile = value
            case .socket: values.socket = value
            }
            return true
        }
    }
}

/// `plugin-runner` exactly as the host spawns it (ChildProcess): `--parent PID --plugin ID
/// --memory-limit-mb MIB`; anything else goes to the CLI.
public struct PluginRunnerCommandLine: Sendable, Equatable {
    public var parent: Int32
    public var plugin: String
    public var memoryLimitMB: Int

    public init?(_ arguments: [String]) {
        guard arguments.count == 7, arguments[0] == "plugin-runner", arguments[1] == "--parent", let parent = Int32(arguments[2]),
            arguments[3] == "--plugin", !arguments[4].hasPrefix("-"), arguments[5] == "--memory-limit-mb", let limit = Int(arguments[6])
        else { return nil }
        self.parent = parent
        plugin = arguments[4]
        memoryLimitMB = limit
    }
}

/// `token PROFILE [--account ID] [--min-validity SECONDS] [--no-agent]`, each option once, as
/// `--name value` or `--name=value`; anything else (`--json`, `--header`, `--scope`, host
/// options, `--agent`, a value out of range) goes to the CLI, which explains.
public struct TokenCommandLine: Sendable, Equatable {
    public var profile: String
    public var account: String?
    /// Seconds, 0…86400 (the CLI's `--min-validity`); nil for the bridge's default.
    public var minValiditySeconds: Int64?
    /// `--no-agent`: this process opens the vault even when an agent runs.
    public var noAgent = false

    public init?(_ arguments: [String]) {
        guard arguments.first == "token" else { return nil }
        var words = arguments.dropFirst()
        var profile: String?
        var values: [String: String] = [:]
        while let word = words.popFirst() {
            guard word.hasPrefix("--") else {
                guard profile == nil, !word.isEmpty, !word.hasPrefix("-") else { return nil }
                profile = word
                continue
            }
            if word == "--no-agent" {
                guard !noAgent else { return nil }
                noAgent = true
                continue
            }
            var name = String(word.dropFirst(2))
            var value: String?
            if let equals = name.firstIndex(of: "=") {
                value = String(name[name.index(after: equals)...])
                name = String(name[..<equals])
            } else if let next = words.first, !next.hasPrefix("-") {
                value = words.popFirst()
            }
            guard name == "account" || name == "min-validity", let value, !value.isEmpty, values.updateValue(value, forKey: name) == nil
            else { return nil }
        }
        guard let profile else { return nil }
        self.profile = profile
        account = values["account"]
        if let text = values["min-validity"] {
            guard let seconds = Int64(text), text.first != "+", (0...86_400).contains(seconds) else { return nil }
            minValiditySeconds = seconds
        }
    }
}
