import AuthBridgePluginHost
import AuthBridgeProtocol
import AuthBridgeSession
import AuthBridgeSystem
import CAuthBridgeProcess

#if canImport(Glibc)
import Glibc
#endif

/// `authbridge token PROFILE` without an agent, in the plain spellings `TokenCommandLine` reads:
/// the token of a session that serves as stored, printed by a process that loads only the
/// profile's plugin and has no ArgumentParser to start (bench/README, "Next to oidc-agent": the
/// CLI spends most of its 14 ms loading every plugin and its own libraries).
///
/// Every other case — not signed in, a refresh due, a discovery to run, a warning to give (the
/// configuration's, a short-lived or DPoP-bound token), an error to explain, an agent that
/// answers — is handed, before anything is done, to authbridge-cli (Token.swift), the
/// reference, which then does it all.
public enum TokenPrinting {
    /// The exit code once the token is printed; nil when the CLI must answer (nothing printed,
    /// nothing changed, and the environment as the process found it).
    public static func answer(_ command: TokenCommandLine) async -> Int32? {
        if !command.noAgent, agentAnswers() { return nil }
        let settings = HostSettings()
        guard case .success(let loaded) = settings.loadConfiguration(), loaded.warnings.isEmpty,
            let profile = loaded.profiles.first(where: { $0.name == command.profile })
        else { return nil }
        // A token passes through this process: no core file, no ptrace by the user's other processes.
        _ = ab_process_harden()
        // stdout carries the token alone: whatever a plugin prints goes to stderr.
        let output = fcntl(1, F_DUPFD_CLOEXEC, 3)
        guard output >= 0, dup2(2, 1) >= 0 else { return nil }
        let answer = await storedToken(command, profile: profile, settings: settings, loaded: loaded)
        guard let line = answer.flatMap({ printable($0, asked: command.minValiditySeconds) }) else {
            // The CLI opens the vault with the same key: it goes back where it was found.
            if let secret = ProcessHardening.vaultSecret { setenv("AUTHBRIDGE_VAULT_KEY", secret, 1) }
            dup2(output, 1)
            close(output)
            return nil
        }
        return write(line, to: output) ? 0 : 1
    }

    /// Whether the command must go through an agent: one of this user answers at its socket,
    /// or something there needs explaining (the CLI's `SessionAccess.agent`).
    static func agentAnswers() -> Bool {
        guard let path = AgentSocket.path() else { return false }
        do {
            close(try UnixSocket.connect(path: path))
            return true
        } catch {
            return ![ENOENT, ECONNREFUSED].contains(error.errno)
        }
    }

    /// The profile's token as stored, through an engine with its plugin alone; nil for every
    /// other case (a refused plugin, a vault with something to say, a refresh due…).
    private static func storedToken(
        _ command: TokenCommandLine, profile: Profile, settings: HostSettings, loaded: LoadedConfiguration
    ) async -> AccessTokenResult? {
        let logger = bootstrapLogging("warning")
        var loader = settings.pluginLoader(logger: logger)
        loader.logger.logLevel = .error
        loader.only = [profile.plugin]
        let plugins = loader.loadAll().compactMap(\.plugin)
        var warnings: [String] = []
        let store = settings.sessionStore(warnings: &warnings)
        guard warnings.isEmpty, !plugins.isEmpty else { return nil }
        let engine = SessionEngine(
            plugins: plugins, profiles: loaded.profiles, store: store, logger: logger, pluginFolders: settings.folders.map(\.path),
            emit: { _, _ in })
        let answer = await engine.accessTokenAsStored(
            profile: command.profile, account: command.account, minimumValidity: command.minValiditySeconds.map { $0 * 1000 })
        await engine.shutDownPlugins()
        return answer
    }

    /// The line `token` prints for `answer`; nil when the CLI would add a warning (a token valid
    /// for less than asked, one not Bearer) or clean it (bytes outside visible ASCII).
    static func printable(_ answer: AccessTokenResult, asked seconds: Int64?, now: Int64 = HostClock.nowMilliseconds()) -> String? {
        if let seconds, answer.secondsLeft(lessThan: seconds, now: now) != nil { return nil }
        guard answer.tokenType.lowercased() == "bearer", !answer.accessToken.isEmpty,
            answer.accessToken.utf8.allSatisfy({ (0x21...0x7E).contains($0) })
        else { return nil }
        return answer.accessToken + "\n"
    }

    private static func write(_ text: String, to fd: Int32) -> Bool {
        var bytes = Array(text.utf8)
        defer { for index in bytes.indices { bytes[index] = 0 } }
        var offset = 0
        while offset < bytes.count {
            let written = bytes[offset...].withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) }
            if written < 0 && errno == EINTR { continue }
            guard written > 0 else { return false }
            offset += written
        }
        return true
    }
}

extension AccessTokenResult {
    /// The seconds this token has left when that is less than `asked`; nil otherwise, or when
    /// no expiry is known: what `token --min-validity` warns of (the CLI) or hands on (`TokenPrinting`).
    public func secondsLeft(lessThan asked: Int64, now: Int64) -> Int64? {
        guard let expiresAt else { return nil }
        let left = max(0, (expiresAt - now) / 1000)
        return left < asked ? left : nil
    }
}
