// The session engine itself: the actor, its state, how it runs a plugin's
// hooks, and shutdown. What it does for each bridge method lives in its
// extensions: SessionEngine+Profiles, +Status, +SignIn, +SignOut, +Tokens,
// and the license policy in LicensePolicy.swift.

import AuthBridgeJSON
import AuthBridgeNetwork
import AuthBridgePluginHost
import AuthBridgeProtocol
import AuthBridgeRedaction
import AuthBridgeURL
import Logging

/// The host's session state machine, shared by every provider plugin: the
/// seed flowchart (checkSignInStatus), interactive sign-in, single-flight
/// refresh, revocation on sign-out, and the authorized request proxy.
///
/// Plugins only translate; the engine owns state, storage, coordination and
/// events. Threading: an actor. Hooks run on plugin worker threads and are
/// awaited, so calls for different profiles proceed concurrently; refreshes of
/// one profile are single-flight, and a second sign-in for a profile
/// supersedes the first.
public actor SessionEngine {
    /// A host → frontend notification: (method, params).
    public typealias EventSink = @Sendable (String, JSON) -> Void
    /// Opens a browser-flow URL itself (`--open-browser`, `login`), calling
    /// back with a short reason when the browser could not be opened.
    public typealias BrowserOpener = @Sendable (_ url: String, _ failed: @escaping @Sendable (String) -> Void) -> Void

    /// How close to expiry a token may be before `getAccessToken` refreshes it.
    public static let defaultMinimumValidityMilliseconds: Int64 = 60_000

    let plugins: [String: LoadedPlugin]
    let store: SessionStore
    let http: HTTPClient
    let verifier: IDTokenVerifier = .shared
    let logger: Logger
    let emit: EventSink
    private let installation: @Sendable () -> JSON
    let openBrowser: BrowserOpener?
    /// Where plugins were looked for (named when a profile's plugin is missing).
    let pluginFolders: [String]

    // A change of a profile or of its resolved configuration invalidates the answers kept in `store.answers`.
    var profiles: [String: Profile] = [:] { didSet { store.answers.invalidate() } }
    var configs: [String: JSON] = [:] { didSet { store.answers.invalidate() } }
    var refreshes: [SessionKey: SharedWork<Result<StoredSession, ProviderFailure>>] = [:]
    /// Grants for tokens beyond a session's own (`TokenPurpose`), single-flight per purpose.
    var derivedWork: [DerivedKey: SharedWork<Result<TokenSet, SessionError>>] = [:]
    /// Session reads under way, shared by the calls that arrive meanwhile (see `readSession`).
    var sessionReads:
        [AnswerCache.Lookup: (observation: AnswerCache.Observation, work: SharedWork<Result<(SessionKey, StoredSession)?, SessionError>>)] =
            [:]
    /// Each profile's last `authorize_request` (a pure hook): its input and its
    /// answer, shared by the calls that ask for the same input (see `authorize`).
    var authorizations: [String: (input: JSON, work: SharedWork<Result<JSON, SessionError>>)] = [:]
    var pendingSignIns: [String: PendingSignIn] = [:]
    /// External end-sessions waiting for `completeSignOut`, by profile.
    var pendingSignOuts: [String: PendingSignIn] = [:]
    /// Per profile, the arrival order of the newest external/browser sign-in that got as far as waiting.
    var newestSignIn: [String: UInt64] = [:]
    /// The license sign-outs timed in this process.
    var license = LicensePolicy()
    /// Resolutions of profiles' configurations under way (single-flight).
    var resolving: [String: (profile: Profile, work: SharedWork<Result<JSON, SessionError>>)] = [:]
    /// Kept configurations in use because the provider could not be reached,
    /// with when to try the provider again.
    var fallbackConfigs: [String: (profile: Profile, config: JSON, retryAt: Int64)] = [:] { didSet { store.answers.invalidate() } }
    /// Hooks running now, by plugin id, and who waits for none to run (shutdown).
    private var hooksInFlight: [String: Int] = [:]
    private var hookWaiters: [CheckedContinuation<Void, Never>] = []
    /// The last change of each profile under way (see `changingProfile`).
    var profileChanges: [String: Task<Void, Never>] = [:]
    /// Each profile's `installation` hook input (with its `profileId`), made once.
    private var installations: [String: JSON] = [:]
    /// The configuration file's profiles as last read (what a reload is compared with).
    var fileProfiles: [String: Profile]
    /// The last reload of the configuration file under way (see `reloadConfiguration`).
    var reloading: Task<Void, Never>?

    /// `installation` gives hooks their `installation` input; by default the
    /// stable identity in the user's data folder (tests pass their own).
    public init(
        plugins: [LoadedPlugin], profiles: [Profile], store: SessionStore,
        http: HTTPClient = .shared, logger: Logger,
        installation: @escaping @Sendable () -> JSON = { InstallationIdentity.current },
        openBrowser: BrowserOpener? = nil,
        pluginFolders: [String] = [],
        emit: @escaping EventSink
    ) {
        self.installation = installation
        self.pluginFolders = pluginFolders
        self.openBrowser = openBrowser
        self.plugins = Dictionary(plugins.map { ($0.manifest.id, $0) }, uniquingKeysWith: { first, _ in first })
        self.profiles = Dictionary(profiles.map { ($0.name, $0) }, uniquingKeysWith: { _, last in last })
        self.fileProfiles = Dictionary(profiles.filter { $0.source == .config }.map { ($0.name, $0) }, uniquingKeysWith: { _, last in last })
        self.store = store
        self.http = http
        self.logger = logger
        for profile in profiles.sorted(by: { $0.name < $1.name }) where profile.source == .config {
            let plugin = plugins.first { $0.manifest.id == profile.plugin }
            for warning in SettingsValidator.unknownSettings(
                in: profile.settings, schema: plugin?.descriptor["settings"], profile: profile.name, plugin: profile.plugin)
            {
                logger.warning("configuration file \(warning)")
            }
        }
        // Whatever a provider echoed, no known secret reaches the frontend in an event's message.
        self.emit = { method, params in
            guard let message = params["message"]?.stringValue else { return emit(method, params) }
            emit(method, params.setting("message", .string(KnownSecrets.shared.scrub(message))))
        }
    }

    /// The plugins the engine runs (one per id).
    nonisolated var loadedPlugins: [LoadedPlugin] { Array(plugins.values) }

    /// Moves with every change of a profile, of its resolved configuration and of what the vault
    /// holds (the answer cache's generation): what keeps a copy of the profile list compares.
    public nonisolated var answerGeneration: UInt64 { store.answers.currentGeneration }

    /// How many of the engine's plugins were refused after they loaded (repeated faults).
    public nonisolated var refusedPluginCount: Int { plugins.values.reduce(0) { $0 + ($1.refusal == nil ? 0 : 1) } }

    /// Where this engine keeps tokens, as `initialize` and every status say. The vaults' own
    /// words are bridge-spec's (`Vault.backend`, `protection`).
    public nonisolated var storageInfo: StorageInfo {
        StorageInfo(backend: .init(rawValue: store.backend) ?? .memory, protection: .init(rawValue: store.protection) ?? .unprotected)
    }

    // MARK: - Stored sessions

    /// The session a call means: the named account, or the profile's
    /// current one (the latest sign-in) when the call names none.
    func selectSession(_ profile: String, account: String?) async throws(SessionError) -> (SessionKey, StoredSession)? {
        if let account {
            let key = SessionKey(profile: profile, account: account)
            return try await loadSession(key).map { (key, $0) }
        }
        var best: (SessionKey, StoredSession)?
        for key in try await storedKeys(of: profile) {
            guard let session = try await loadSession(key) else { continue }
            if (session.signedInAt ?? 0) > best.map({ $0.1.signedInAt ?? 0 }) ?? Int64.min { best = (key, session) }
        }
        return best
    }

    /// `selectSession` for calls that only read (getAccessToken, checkSignInStatus,
    /// fetch): a caller that arrives while a read of the same session is under
    /// way shares it — a burst of calls on a cold host reads and decrypts the
    /// record once, not once per call — provided nothing changed since that
    /// read began (the same `AnswerCache` generation and vault stamp). Without
    /// an observation (a vault that cannot vouch) every caller reads.
    func readSession(_ lookup: AnswerCache.Lookup, observation: AnswerCache.Observation?) async throws(SessionError) -> (SessionKey, StoredSession)? {
        guard let observation else { return try await selectSession(lookup.profile, account: lookup.account) }
        let work: SharedWork<Result<(SessionKey, StoredSession)?, SessionError>>
        if let running = sessionReads[lookup], !running.work.isFinished, running.observation.generation == observation.generation,
            running.observation.stamp == observation.stamp
        {
            work = running.work
        } else {
            work = SharedWork(cancelsWhenAbandoned: true) {
                do throws(SessionError) { return .success(try await self.selectSession(lookup.profile, account: lookup.account)) } catch {
                    return .failure(error)
                }
            }
            sessionReads[lookup] = (observation, work)
        }
        let result = await work.value()
        if sessionReads[lookup]?.work === work, work.isFinished { sessionReads[lookup] = nil }
        guard let result else { throw SessionError.cancelled(provider: lookup.profile) }
        return try result.get()
    }

    /// A session belongs to the client it was issued to: one whose record names another client
    /// (`clientId`) or issuer than the profile's configuration now is ended (`profileChanged`,
    /// as when `configureProfile` changes a profile), in whichever process reads it first — its
    /// tokens are never sent as the new client's. Returns why, for the caller's answer; nil
    /// when the session is the profile's (or its record predates `SessionClient`).
    func endIfIssuedToAnotherClient(_ key: SessionKey, session: StoredSession, context: Context) async throws(SessionError) -> String? {
        guard let change = session.client?.change(to: SessionClient(config: context.config)) else { return nil }
        let message = "The session of profile \"\(key.profile)\" was discarded: \(change). Sign in again."
        logger.notice("a session issued to another client was discarded", metadata: ["provider": "\(key.profile)"])
        try await endSession(key, reason: .profileChanged, message: message, ended: session, context: context)
        return message
    }

    func storedKeys(of profile: String) async throws(SessionError) -> [SessionKey] {
        do { return try await store.keys(of: profile) } catch { throw storageError(error, profile: profile) }
    }

    func loadSession(_ key: SessionKey) async throws(SessionError) -> StoredSession? {
        do { return try await store.load(key) } catch { throw storageError(error, profile: key.profile) }
    }

    // MARK: - Errors and notifications

    func notSignedIn(_ profile: String, account: String?) -> SessionError {
        let who = account.map { "Account \"\($0)\" of profile \"\(profile)\"" } ?? "Profile \"\(profile)\""
        return SessionError(.notSignedIn, "\(who) is not signed in.", provider: profile, reason: StatusReason.noTokens.rawValue)
    }

    func unknownProfile(_ name: String) -> SessionError {
        SessionError(
            .providerUnknown, "No profile is named \"\(name)\". Configure it with configureProfile or in the configuration file.",
            provider: name, reason: "unknownProfile", field: "provider")
    }

    func storageError(_ error: any Error, profile: String?) -> SessionError {
        if let vaultError = error as? VaultError, vaultError.reason == .lockTimeout {
            return Self.accountBusy(profile: profile)
        }
        if error is CancellationError {
            return SessionError.cancelled(provider: profile)
        }
        if let vaultError = error as? VaultError, vaultError.reason == .vaultUnavailable {
            // The shared vault's database is down or restarting: retryable, and nothing ends.
            return SessionError(.providerUnavailable, vaultError.message, provider: profile, reason: vaultError.reason.rawValue)
        }
        if let vaultError = error as? VaultError {
            return SessionError(.storageError, vaultError.message, provider: profile, reason: vaultError.reason.rawValue)
        }
        return SessionError(.storageError, "The session store failed: \(error)", provider: profile, reason: "storage")
    }

    /// Another process held the account's lock past `maximumWait` (a hung
    /// plugin in an older host, say): retryable, nothing was changed.
    static func accountBusy(profile: String?) -> SessionError {
        SessionError(
            .timeout, "Another authbridge process has been using this account for over 2 minutes; try again.", provider: profile,
            reason: accountBusyReason)
    }

    static let accountBusyReason = "accountBusy"

    /// A sign-in's `signIn/progress` notification.
    /// Sends a notification to this host's frontends.
    nonisolated func send<Notification: BridgeNotification>(_ notification: Notification) {
        emit(Notification.method, notification.wire)
    }

    /// A `session/changed` notification, to this host's frontend and (through a
    /// shared vault) to every other host's. Only `signedOut` has a reason of its
    /// own (why the session ended); the others' reason is their state's word.
    func announce(
        _ change: SessionChange, profile: String, endedBecause reason: EndReason? = nil, message: String? = nil,
        account: Account?, clearCookies: [CookieRef] = []
    ) {
        var params = SessionChangedParams(
            provider: profile, state: change, reason: reason?.rawValue ?? change.rawValue, message: message, account: account,
            clearCookies: clearCookies.isEmpty ? nil : clearCookies)
        send(params)
        params.message = message.map { KnownSecrets.shared.scrub($0) }
        store.vault.publish(params.wire)
    }

    // MARK: - Shutdown

    /// Waits (at most `limit`) for the hooks in flight — a request's, or a
    /// background refresh's — to return, then shuts the plugins down. A
    /// plugin still inside a hook when the time is up is not shut down (its
    /// code would be torn down under the running hook); the process is
    /// ending anyway.
    public func shutDownPlugins(drainingFor limit: Duration = .seconds(2)) async {
        if !hooksInFlight.isEmpty {
            let deadline = Task { [weak self] in
                // A bound on the wait, not synchronisation: past it, the busy plugins are left alone.
                guard (try? await Task.sleep(for: limit)) != nil else { return }
                await self?.releaseHookWaiters()
            }
            await withCheckedContinuation { hookWaiters.append($0) }
            deadline.cancel()
            await deadline.value // nothing of ours may still run when the process exits
        }
        let busy = Set(hooksInFlight.keys)
        if !busy.isEmpty {
            logger.warning("plugins still inside a hook at exit are not shut down", metadata: ["plugins": "\(busy.sorted())"])
        }
        // A busy isolated plugin is stopped all the same: its runner, and what it started, must not outlive the host.
        LoadedPlugin.shutDown(plugins.values.filter { !busy.contains($0.manifest.id) || $0.isolation == .process })
    }

    private func releaseHookWaiters() {
        let waiters = hookWaiters
        hookWaiters.removeAll()
        for waiter in waiters { waiter.resume() }
    }

    private func hookStarted(_ plugin: String) { hooksInFlight[plugin, default: 0] += 1 }

    private func hookEnded(_ plugin: String) {
        hooksInFlight[plugin, default: 1] -= 1
        if hooksInFlight[plugin] == 0 { hooksInFlight[plugin] = nil }
        if hooksInFlight.isEmpty { releaseHookWaiters() }
    }

    /// Runs a hook, or the host's standard step when the plugin leaves it to the host.
    /// `dpop`: the session's DPoP key, which signs the proofs of the hook's requests that ask for one.
    func run(
        _ hook: PluginHook, input: JSON, plugin: LoadedPlugin, profile: String, requestID: JSON?, dpop: DPoPKey? = nil
    ) async -> Result<JSON, ProviderFailure> {
        hookStarted(plugin.manifest.id)
        defer { hookEnded(plugin.manifest.id) }
        let input = hookInput(input, profile: profile)
        let http = HookHTTP(self.http, dpop: dpop.map { DPoPBinding(key: $0) })
        let environment = EngineEnvironment(profile: profile, requestID: requestID, http: http, emit: emit)
        let result: Result<JSON, ProviderFailure>
        switch await plugin.invoke(hook, input: input, environment: environment) {
        case .result(let value): result = .success(value)
        case .failure(let failure): result = .failure(failure)
        case .useDefault:
            if hook == .checkSession { return .success(StandardSteps.checkSession(input)) }
            result = await plugin.runHostStep(hook, environment: environment) { call in
                StandardSteps.run(hook, input: input, call: call, http: http)
            }
        }
        if case .failure(let failure) = result, hook != .configure {
            await configurationMayHaveChanged(profile, failure: failure)
        }
        return result
    }

    /// A hook's input as plugins get it: with the profile's `installation`.
    func hookInput(_ input: JSON, profile: String) -> JSON {
        let scoped = installations[profile] ?? InstallationIdentity.scoped(installation(), profile: profile)
        installations[profile] = scoped
        return input.setting("installation", scoped)
    }

    /// A hook of the profile's plugin whose failure fails the call.
    func runOrThrow(
        _ hook: PluginHook, input: JSON, context: Context, requestID: JSON?, dpop: DPoPKey? = nil
    ) async throws(SessionError) -> JSON {
        switch await run(hook, input: input, plugin: context.plugin, profile: context.profile.name, requestID: requestID, dpop: dpop) {
        case .success(let value): return value
        case .failure(let failure): throw SessionError(failure, provider: context.profile.name)
        }
    }
}

/// What hooks may use while serving one bridge request.
struct EngineEnvironment: HookEnvironment {
    let profile: String
    let requestID: JSON?
    /// The host's HTTP for this call, with the session's DPoP key where it has one.
    let http: HookHTTP
    let emit: SessionEngine.EventSink

    /// Forwards a plugin's progress event (the ABI's `emit`) with only the spec's fields, and
    /// only while it serves a request (the event names the request).
    func emit(_ event: JSON, from call: HookCall) {
        guard let requestID else {
            call.logger.debug("dropped a plugin event outside a request", metadata: ["plugin": "\(call.pluginID)"])
            return
        }
        let text = { (key: String) -> String? in event[key]?.stringValue.flatMap { $0.isEmpty ? nil : $0 } }
        let progress = SignInProgressParams(
            provider: profile, requestId: requestID, stage: event["stage"]?.stringValue.flatMap(SignInStage.init(rawValue:)) ?? .plugin,
            url: text("url"), callbackPrefix: text("callbackPrefix"), userCode: text("userCode"), verificationUri: text("verificationUri"),
            verificationUriComplete: text("verificationUriComplete"), expiresAt: event["expiresAt"]?.intValue,
            message: text("message").map(Redaction.redact))
        emit(SignInProgressParams.method, progress.wire)
    }

    func http(_ request: JSON, call: HookCall) -> Result<JSON, ProviderFailure> {
        http.perform(request, call: call)
    }

    func standard(_ hook: PluginHook, input: JSON, call: HookCall) -> Result<JSON, ProviderFailure> {
        StandardSteps.run(hook, input: input, call: call, http: http)
    }
}
