import ArgumentParser
import AuthBridgeHost
import AuthBridgeJSON
import AuthBridgeLaunch
import AuthBridgePluginHost
import AuthBridgeProtocol
import AuthBridgeSession
import AuthBridgeURL
import Logging
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// The session engine in this process, for the human commands (`login`,
/// `status`, `token`, `logout`) when no agent is used (`SessionAccess`): the
/// same plugins, profiles and vault as `serve`, so a session made here is the
/// one every frontend sees (when it next reads the vault).
struct LocalEngine: Sessions {
    let engine: SessionEngine
    let reports: [PluginReport]
    let profiles: [Profile]
    let profileSource: String

    /// Loads plugins and opens the store; `events` receives the engine's notifications,
    /// `openBrowser` the browser flow's sign-in pages.
    init(options: HostOptions, openBrowser: SessionEngine.BrowserOpener? = nil, events: @escaping SessionEngine.EventSink) throws {
        let logger = bootstrapLogging(options.logLevel == "info" ? "warning" : options.logLevel)
        var configuration = try options.commandConfiguration()
        let store = options.sessionStore(warnings: &configuration.warnings)
        for warning in configuration.warnings { Terminal.standardError.warn(warning) }
        // A refused plugin is explained where a command needs it (`report`), not as a log line
        // (unless a --log-level asks for the loader's log).
        var loaderLogger = logger
        if options.logLevel == "info" { loaderLogger.logLevel = .error }
        reports = PluginLoader(folders: configuration.pluginFolders, policy: configuration.isolation, logger: loaderLogger).loadAll()
        profiles = configuration.profiles
        let file = options.settings.configPath
        profileSource = CommandText.configurationFile(file) + (file.map { access($0, F_OK) == 0 } == false ? " (there is no such file)" : "")
        engine = SessionEngine(
            plugins: reports.compactMap(\.plugin), profiles: configuration.profiles, store: store,
            logger: logger, openBrowser: openBrowser, pluginFolders: configuration.pluginFolders.map(\.path), emit: events)
        let engine = engine
        Self.opened.withLock { $0.append(engine) }
    }

    /// `error` as a person needs it: a profile whose plugin was refused at load says why and
    /// what fixes it (e.g. `chmod go-w …`), where the engine can only say "not loaded".
    func explained(_ error: SessionError) -> SessionError {
        guard error.reason == "pluginNotLoaded", let name = error.provider,
            let plugin = profiles.first(where: { $0.name == name })?.plugin,
            let refusal = reports.lazy.compactMap({ report -> PluginLoadError? in
                guard report.id == plugin, case .refused(let refusal) = report.status else { return nil }
                return refusal
            }).first
        else { return explainedForCommandLine(error) }
        var explained = error
        explained.message =
            "Profile \"\(name)\" uses plugin \"\(plugin)\", which was refused (\(refusal.reason.rawValue)): \(refusal.message). "
            + (refusal.fix.map { "To fix it: \($0)" } ?? "Run `authbridge plugins` to see every plugin's state.")
        return explained
    }

    var profileNames: [String] { profiles.map(\.name) }
    var loadedPlugins: [String] { reports.compactMap(\.plugin).map(\.manifest.id) }
    var keyFromEnvironment: Bool { ProcessHardening.vaultSecret != nil }

    /// The sign-in flows the plugin of profile `name` declares (none when it is not loaded).
    func flows(ofProfile name: String) -> [String] {
        guard let plugin = profiles.first(where: { $0.name == name })?.plugin,
            let loaded = reports.lazy.compactMap(\.plugin).first(where: { $0.manifest.id == plugin })
        else { return [] }
        return loaded.descriptor["flows"]?.arrayValue?.compactMap(\.stringValue) ?? []
    }

    // MARK: - Sessions

    func profiles() async -> [ProfileInfo] { await engine.profileList() }

    func configureProfile(_ params: ConfigureProfileParams) async throws(SessionError) -> ProfileInfo {
        try await engine.configureProfile(params)
    }

    func signIn(_ params: RequestOAuthTokensParams) async throws(SessionError) -> SignInStatus {
        try await engine.requestOAuthTokens(params, requestID: "cli", clientName: "authbridge-cli")
    }

    func status(_ params: CheckSignInStatusParams) async throws(SessionError) -> SignInStatus {
        try await engine.checkSignInStatus(params)
    }

    func accounts(_ params: ListAccountsParams) async throws(SessionError) -> [SignInStatus] {
        try await engine.listAccounts(params).accounts
    }

    func accessToken(_ params: GetAccessTokenParams) async throws(SessionError) -> AccessTokenResult {
        try await engine.getAccessToken(params)
    }

    func exchangeToken(_ params: ExchangeTokenParams) async throws(SessionError) -> AccessTokenResult {
        try await engine.exchangeToken(params)
    }

    func signOut(_ params: SignOutParams) async throws(SessionError) -> SignOutResult {
        try await engine.signOut(params, requestID: nil)
    }

    func plugins() -> [PluginEntry] { Self.entries(reports) }

    /// Loader reports as `authbridge plugins` shows them.
    static func entries(_ reports: [PluginReport]) -> [PluginEntry] {
        reports.map { report in
            var fix: String?
            if case .refused(let refusal) = report.status { fix = refusal.fix }
            return PluginEntry(status: report.json, fix: fix)
        }
    }

    var storage: StorageInfo { engine.storageInfo }

    /// Engines opened by this command, shut down when it ends.
    private static let opened = Mutex<[SessionEngine]>([])

    /// Shuts down every engine the command opened, after the hooks still in
    /// flight (a background refresh, a check that ran out of time) return or
    /// their bound passes.
    static func closeAll() async {
        for engine in opened.withLock({ engines in
            defer { engines.removeAll() }
            return engines
        }) {
            await engine.shutDownPlugins()
        }
    }
}

/// A command for people: runs `execute` and ends the process itself with
/// its exit code. (Returning to the async `main` after FoundationNetworking
/// has loaded — the HTTP transport — never resumes on Linux: the main queue
/// is no longer drained. `serve` ends the same way.)
protocol HumanCommand: AsyncParsableCommand {
    func execute() async throws
}

extension HumanCommand {
    func run() async throws {
        do {
            try await execute()
        } catch {
            await SessionAccess.closeAll()
            Self.exit(withError: error)
        }
        await SessionAccess.closeAll()
        Self.exit()
    }
}

/// Exit codes of the human commands (also in `authbridge --help`).
enum CommandExit {
    static let failure: Int32 = 1
    static let notSignedIn: Int32 = 2
    static let unavailable: Int32 = 3
    static let cancelled: Int32 = 4
    /// EX_CONFIG (sysexits.h): the configuration file cannot be read or is not valid.
    static let configuration: Int32 = 78

    /// The exit code and a one-line message for a session failure.
    static func report(_ error: SessionError) -> ExitCode {
        Terminal.standardError.error(error.message)
        switch error.kind {
        case .notSignedIn: return ExitCode(notSignedIn)
        case .providerUnavailable, .timeout: return ExitCode(unavailable)
        case .userCancelled: return ExitCode(cancelled)
        case .invalidParams: return .validationFailure
        default: return ExitCode(failure)
        }
    }
}

/// Text for people: colours only on a terminal, never when NO_COLOR is set.
struct Terminal: Sendable {
    let fd: Int32
    let colours: Bool

    static let standardOutput = Terminal(fd: 1)
    static let standardError = Terminal(fd: 2)

    init(fd: Int32) {
        self.fd = fd
        let noColour = getenv("NO_COLOR").map { $0.pointee != 0 } ?? false
        let dumb = getenv("TERM").map { String(cString: $0) == "dumb" } ?? false
        colours = isatty(fd) == 1 && !noColour && !dumb
    }

    enum Style: String { case bold = "1", dim = "2", red = "31", green = "32", yellow = "33", cyan = "36" }

    /// `text` (cleaned) in a style: the only escape sequences a line holds are these.
    func styled(_ text: String, _ style: Style) -> String {
        colours ? "\u{1B}[\(style.rawValue)m\(Terminal.clean(text))\u{1B}[0m" : Terminal.clean(text)
    }

    /// Text from a provider or plugin (or anywhere outside this program) made safe to print,
    /// one line without escape sequences or control characters (`PlainText.oneLine`).
    static func clean(_ text: String) -> String { PlainText.oneLine(text) }

    /// JSON for a terminal: the serializer escapes C0 characters but writes DEL and C1 as they
    /// are; escaped as `\u…` they stay the same JSON strings.
    static func cleanJSON(_ text: String) -> String {
        var output = ""
        for scalar in text.unicodeScalars {
            if (0x7F...0x9F).contains(scalar.value) {
                output += "\\u00" + String(scalar.value, radix: 16)
            } else {
                output.unicodeScalars.append(scalar)
            }
        }
        return output
    }

    func line(_ text: String) {
        let bytes = Array((text + "\n").utf8)
        var offset = 0
        while offset < bytes.count {
            let written = bytes[offset...].withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
            if written <= 0 { if errno == EINTR { continue } else { return } }
            offset += written
        }
    }

    func error(_ text: String) { line(styled("error:", .red) + " " + Terminal.clean(text)) }
    func warn(_ text: String) { line(styled("warning:", .yellow) + " " + Terminal.clean(text)) }
}

/// "in 59 min", "2 h ago": expiry for people.
func relativeTime(_ milliseconds: Int64?, now: Int64 = HostClock.nowMilliseconds()) -> String {
    guard let milliseconds else { return "unknown" }
    let seconds = (milliseconds - now) / 1000
    let magnitude = abs(seconds)
    let text: String
    switch magnitude {
    case ..<60: text = "\(magnitude) s"
    case ..<3_600: text = "\(magnitude / 60) min"
    case ..<172_800: text = "\(magnitude / 3_600) h"
    default: text = "\(magnitude / 86_400) days"
    }
    return seconds >= 0 ? "in \(text)" : "\(text) ago"
}

/// The account as people name it (the provider's words, cleaned for the terminal).
func accountLabel(_ account: Account?) -> String { Terminal.clean(rawAccountLabel(account)) }

private func rawAccountLabel(_ account: Account?) -> String {
    guard let account else { return "-" }
    let name = account.email ?? account.name
    switch (name, account.id) {
    case let (name?, id?) where name != id: return "\(name) (\(id))"
    case let (name?, _): return name
    case let (nil, id?): return id
    default: return "-"
    }
}
