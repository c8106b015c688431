import AuthBridgeJSON
import AuthBridgePluginHost
import AuthBridgeURL
import Crypto
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

    /// How close to expiry a token may be before `getAccessToken` refreshes it.
    public static let defaultMinimumValidityMilliseconds: Int64 = 60_000

    private let plugins: [String: LoadedPlugin]
    private let store: SessionStore
    private let http: HTTPClient
    private let verifier: IDTokenVerifier = .shared
    private let logger: Logger
    private let emit: EventSink
    private let installation: @Sendable () -> JSON
    /// Opens a browser-flow URL itself (`--open-browser`, `login`), calling
    /// back with a short reason when the browser could not be opened.
    public typealias BrowserOpener = @Sendable (_ url: String, _ failed: @escaping @Sendable (String) -> Void) -> Void

    private let openBrowser: BrowserOpener?
    /// Where plugins were looked for (named when a profile's plugin is missing).
    private let pluginFolders: [String]

    private var profiles: [String: Profile] = [:]
    private var configs: [String: JSON] = [:]
    private var refreshes: [SessionKey: SharedWork<Result<StoredSession, ProviderFailure>>] = [:]
    private var pendingSignIns: [String: PendingSignIn] = [:]
    /// Per profile, the arrival order of the newest external/browser sign-in that got as far as waiting.
    private var newestSignIn: [String: UInt64] = [:]
    private var licenceSignOuts: Set<SessionKey> = []
    /// Resolutions of profiles' configurations under way (single-flight).
    private var resolving: [String: (profile: Profile, work: SharedWork<Result<JSON, SessionError>>)] = [:]
    /// Kept configurations in use because the provider could not be reached,
    /// with when to try the provider again.
    private var fallbackConfigs: [String: (profile: Profile, config: JSON, retryAt: Int64)] = [:]
    /// Hooks running now, by plugin id, and who waits for none to run (shutdown).
    private var hooksInFlight: [String: Int] = [:]
    private var hookWaiters: [CheckedContinuation<Void, Never>] = []
    /// The last change of each profile under way (see `changingProfile`).
    private var profileChanges: [String: Task<Void, Never>] = [:]
    /// Each profile's `installation` hook input (with its `profileId`), made once.
    private var installations: [String: JSON] = [:]

    /// How long a user sees a revoked-licence message before being signed out.
    public static let defaultLicenseGracePeriodMilliseconds: Int64 = 5_000

    /// `installation` gives hooks their `installation` input; by default the
    /// stable identity in the user's data folder (tests pass their own).
    public init(plugins: [LoadedPlugin], profiles: [Profile], store: SessionStore,
                http: HTTPClient = .shared, logger: Logger,
                installation: @escaping @Sendable () -> JSON = { InstallationIdentity.current },
                openBrowser: BrowserOpener? = nil,
                pluginFolders: [String] = [],
                emit: @escaping EventSink) {
        self.installation = installation
        self.pluginFolders = pluginFolders
        self.openBrowser = openBrowser
        self.plugins = Dictionary(plugins.map { ($0.manifest.id, $0) }, uniquingKeysWith: { first, _ in first })
        self.profiles = Dictionary(profiles.map { ($0.name, $0) }, uniquingKeysWith: { _, last in last })
        self.store = store
        self.http = http
        self.logger = logger
        // Whatever a provider echoed, no known secret reaches the frontend in an event's message.
        self.emit = { method, params in
            guard let message = params["message"]?.stringValue else { return emit(method, params) }
            emit(method, params.setting("message", .string(KnownSecrets.shared.scrub(message))))
        }
    }

    /// The plugins the engine runs (one per id).
    public nonisolated var loadedPlugins: [LoadedPlugin] { Array(plugins.values) }

    public nonisolated var storageInfo: JSON {
        ["backend": .string(store.backend), "protection": .string(store.protection)]
    }

    // MARK: - Profiles

    /// Every profile with its readiness (bridge-spec: ProfileInfo).
    public func profileList() -> [JSON] {
        profiles.values.sorted(by: { $0.name < $1.name }).map(profileInfo)
    }

    private func profileInfo(_ profile: Profile) -> JSON {
        let plugin = plugins[profile.plugin]
        var problem: String?
        if plugin == nil { problem = "plugin \"\(profile.plugin)\" is not loaded" }
        else if let issue = SettingsValidator.problem(in: profile.settings, schema: plugin?.descriptor["settings"]) {
            problem = "\(issue.field) \(issue.message)"
        }
        return .compactObject([
            "name": .string(profile.name), "plugin": .string(profile.plugin),
            "status": .string(problem == nil ? "ready" : "error"), "message": problem.map(JSON.string),
            "flows": plugin?.descriptor["flows"] ?? [], "source": .string(profile.source.rawValue),
        ])
    }

    /// Adds or replaces a profile at run time; configuration runs at once so
    /// that mistakes are reported to the caller.
    public func configureProfile(name: String, plugin pluginID: String, settings: JSON) async throws(SessionError) -> JSON {
        if let problem = Profile.problem(withName: name) {
            throw SessionError(.invalidParams, "The profile name \(problem).", provider: nil, reason: "invalidName", field: "name")
        }
        guard plugins[pluginID] != nil else {
            throw .unknownPlugin(profile: name, plugin: pluginID, folders: pluginFolders)
        }
        return try await changingProfile(name) { engine async throws(SessionError) in
            try await engine.replaceProfile(Profile(name: name, plugin: pluginID, settings: settings, source: .runtime))
        }
    }

    private func replaceProfile(_ profile: Profile) async throws(SessionError) -> JSON {
        let name = profile.name
        let previous = profiles[name]
        let previousConfig = configs[name]
        let previousContext = resolvedContext(name)
        profiles[name] = profile
        configs[name] = nil
        do {
            _ = try await context(for: name)
        } catch {
            profiles[name] = previous
            configs[name] = previousConfig
            throw error
        }
        // Tokens belong to the provider they came from: a profile that now
        // points elsewhere must not send them there.
        if let previous, previous.plugin != profile.plugin || previous.settings != profile.settings {
            try await dropSession(name, context: previousContext)
        }
        return profileInfo(profile)
    }

    /// Removes a profile and the session stored for it (nothing is revoked:
    /// call signOut first to revoke).
    public func removeProfile(_ name: String) async throws(SessionError) -> Bool {
        try await changingProfile(name) { engine async throws(SessionError) in
            let context = engine.resolvedContext(name)
            engine.configs[name] = nil
            engine.fallbackConfigs[name] = nil
            guard engine.profiles.removeValue(forKey: name) != nil else { return false }
            try await engine.dropSession(name, context: context)
            try? await engine.store.deleteResolvedProfile(name)
            return true
        }
    }

    /// Runs one change of a profile (configure, remove) after the changes of
    /// that name already under way, so that no change sees the profile move
    /// under it while it awaits (actor reentrancy): `configureProfile`
    /// followed at once by `removeProfile` configures, then removes.
    private func changingProfile<T: Sendable>(_ name: String,
                                              _ change: @escaping @Sendable (isolated SessionEngine) async throws(SessionError) -> T) async throws(SessionError) -> T {
        let before = profileChanges[name]
        let task = Task<Result<T, SessionError>, Never> {
            await before?.value
            do throws(SessionError) { return .success(try await change(self)) } catch { return .failure(error) }
        }
        let done = Task<Void, Never> { _ = await task.value }
        profileChanges[name] = done
        // A cancelled request cancels its change (a configuration cut short changes nothing).
        let result = await withTaskCancellationHandler { await task.value } onCancel: { task.cancel() }
        if profileChanges[name] == done { profileChanges[name] = nil }
        return try result.get()
    }

    /// Forgets a changed or removed profile's sessions. With the profile's
    /// old context the frontend is also told which web-view cookies to drop.
    private func dropSession(_ name: String, context: Context?) async throws(SessionError) {
        pendingSignIns.removeValue(forKey: name)?.fail(SessionError(.userCancelled, "The profile was changed.", provider: name, reason: "profileChanged"))
        // A record that cannot be read is set aside as it is found (corruptRecord): drop the rest all the same.
        let keys: [SessionKey]
        do { keys = try await storedKeys(of: name) } catch where error.reason == "corruptRecord" { keys = try await storedKeys(of: name) }
        for key in keys {
            let ended: StoredSession?
            do { ended = try await loadSession(key) } catch where error.reason == "corruptRecord" { continue }
            try await endSession(key, reason: "profileChanged", message: "The profile was changed or removed; its session was discarded.",
                                 ended: ended, context: context)
        }
    }

    /// The profile, its plugin and its resolved configuration.
    struct Context: Sendable {
        var profile: Profile
        var plugin: LoadedPlugin
        var config: JSON
        var profileJSON: JSON { ["name": .string(profile.name), "settings": profile.settings, "config": config] }
    }

    /// The profile's context if its configuration is already resolved (no I/O).
    private func resolvedContext(_ name: String) -> Context? {
        guard let profile = profiles[name], let plugin = plugins[profile.plugin], let config = configs[name] else { return nil }
        return Context(profile: profile, plugin: plugin, config: config)
    }

    /// How long a kept configuration is used without asking the provider
    /// again. Discovery documents change rarely, and an answer that suggests
    /// a change (see `configurationMayHaveChanged`) drops it at once.
    public static let resolvedConfigurationLifetimeMilliseconds: Int64 = 24 * 3_600_000
    /// After the provider could not be reached to resolve a profile, how long
    /// the kept configuration is used before trying again.
    static let resolveRetryMilliseconds: Int64 = 30_000

    private func context(for name: String) async throws(SessionError) -> Context {
        guard let profile = profiles[name] else { throw unknownProfile(name) }
        guard let plugin = plugins[profile.plugin] else {
            throw .pluginNotLoaded(profile: name, plugin: profile.plugin, folders: pluginFolders)
        }
        if let config = configs[name] { return Context(profile: profile, plugin: plugin, config: config) }
        if let fallback = fallbackConfigs[name], fallback.profile == profile, fallback.retryAt > HostClock.nowMilliseconds() {
            return Context(profile: profile, plugin: plugin, config: fallback.config)
        }
        if let issue = SettingsValidator.problem(in: profile.settings, schema: plugin.descriptor["settings"]) {
            throw SessionError(.configurationError, "Profile \"\(name)\": \(issue.field) \(issue.message).", provider: name, reason: "invalidSettings", field: issue.field)
        }
        // One resolution per profile at a time, however many calls need it; a caller that is
        // cancelled stops waiting, and the discovery stops when nobody waits for it.
        let work: SharedWork<Result<JSON, SessionError>>
        if let running = resolving[name], running.profile == profile, !running.work.isFinished {
            work = running.work
        } else {
            work = SharedWork(cancelsWhenAbandoned: true) { await self.resolve(profile, plugin: plugin) }
            resolving[name] = (profile, work)
        }
        let result = await work.value()
        if resolving[name]?.work === work, work.isFinished { resolving[name] = nil }
        guard let result else {
            throw SessionError(.userCancelled, "The request was cancelled.", provider: name, reason: "cancelled")
        }
        return Context(profile: profile, plugin: plugin, config: try result.get())
    }

    /// Resolves a profile's configuration: the kept one while it is fresh,
    /// else the plugin's `configure` (discovery), else — when the provider
    /// cannot be reached — the kept one again, so that the tokens the host
    /// holds stay usable (issue: a dead issuer must not make a valid access
    /// token unusable).
    private func resolve(_ profile: Profile, plugin: LoadedPlugin) async -> Result<JSON, SessionError> {
        let name = profile.name
        let fingerprint = Self.fingerprint(profile, plugin: plugin)
        let kept = await keptConfiguration(name, fingerprint: fingerprint)
        for (key, value) in profile.settings.objectValue ?? [:] where Redaction.isSecretName(key.lowercased()) || key.lowercased().hasSuffix("secret") {
            KnownSecrets.shared.remember(value.stringValue)
        }
        let now = HostClock.nowMilliseconds()
        if let kept, now - kept.resolvedAt < Self.resolvedConfigurationLifetimeMilliseconds, kept.resolvedAt <= now {
            adopt(kept.config, for: profile, keys: kept.signingKeys)
            return .success(kept.config)
        }
        let input: JSON = ["profile": .string(name), "settings": profile.settings]
        switch await run(.configure, input: input, plugin: plugin, provider: name, requestID: nil) {
        case .success(let config):
            guard case .object = config else {
                return .failure(SessionError(.pluginError, "The \(plugin.manifest.id) plugin's configure answer is not an object.", provider: name, reason: "pluginError"))
            }
            adopt(config, for: profile, keys: nil)
            let signingKeys = kept?.config["jwksUri"] == config["jwksUri"] ? kept?.signingKeys : nil
            await keep(ResolvedProfile(fingerprint: fingerprint, config: config, signingKeys: signingKeys, resolvedAt: now), for: profile)
            return .success(config)
        case .failure(let failure) where failure.kind == .transient && kept != nil:
            let kept = kept!
            logger.notice("the provider could not be reached to resolve the profile; using the configuration kept from an earlier run",
                          metadata: ["provider": "\(name)", "reason": "\(failure.reason)"])
            if profiles[name] == profile {
                fallbackConfigs[name] = (profile, kept.config, HostClock.nowMilliseconds() + Self.resolveRetryMilliseconds)
            }
            if let uri = kept.config["jwksUri"]?.stringValue, let keys = kept.signingKeys { verifier.remember(keys, for: uri) }
            return .success(kept.config)
        case .failure(let failure):
            return .failure(SessionError(failure, provider: name))
        }
    }

    /// Makes `config` the profile's configuration in this process — unless
    /// the profile was changed or removed while it was being resolved: that
    /// configuration then belongs to the profile the call began with only.
    private func adopt(_ config: JSON, for profile: Profile, keys: JSON?) {
        if let uri = config["jwksUri"]?.stringValue, let keys { verifier.remember(keys, for: uri) }
        guard profiles[profile.name] == profile else { return }
        configs[profile.name] = config
        fallbackConfigs[profile.name] = nil
    }

    /// The kept configuration when it was made for this plugin, version and settings.
    private func keptConfiguration(_ name: String, fingerprint: String) async -> ResolvedProfile? {
        do {
            guard let kept = try await store.resolvedProfile(name), kept.fingerprint == fingerprint else { return nil }
            return kept
        } catch {
            logger.notice("the kept configuration of a profile could not be read", metadata: ["provider": "\(name)", "error": "\(error)"])
            return nil
        }
    }

    /// Keeps a resolved configuration with the profile's data (best effort:
    /// a vault that cannot store it only costs a discovery next time).
    private func keep(_ resolved: ResolvedProfile, for profile: Profile) async {
        guard profiles[profile.name] == profile else { return }
        do { try await store.save(resolved, for: profile.name) } catch {
            logger.notice("the resolved configuration could not be kept", metadata: ["provider": "\(profile.name)", "error": "\(error)"])
        }
    }

    /// Keeps the provider's signing keys the verifier now holds with the
    /// profile's configuration, when they changed.
    private func keepSigningKeys(_ context: Context) async {
        guard let uri = context.config["jwksUri"]?.stringValue, let keys = verifier.keys(for: uri) else { return }
        let fingerprint = Self.fingerprint(context.profile, plugin: context.plugin)
        guard var kept = await keptConfiguration(context.profile.name, fingerprint: fingerprint), kept.config == context.config,
              kept.signingKeys != keys else { return }
        kept.signingKeys = keys
        await keep(kept, for: context.profile)
    }

    /// A provider answer suggests its configuration changed (an endpoint that
    /// is no longer there, a signing key nobody knows): resolve it again on
    /// the next call, keeping the old copy for when the provider is down.
    private func configurationMayHaveChanged(_ name: String, failure: ProviderFailure) async {
        guard failure.status == 404 || failure.status == 410 || failure.reason == "unknownKey",
              let profile = profiles[name], configs[name] != nil, let plugin = plugins[profile.plugin] else { return }
        logger.notice("a provider answer suggests its configuration changed; it will be resolved again",
                      metadata: ["provider": "\(name)", "reason": "\(failure.reason)"])
        configs[name] = nil
        if var kept = await keptConfiguration(name, fingerprint: Self.fingerprint(profile, plugin: plugin)) {
            kept.resolvedAt = 0
            await keep(kept, for: profile)
        }
    }

    /// Which plugin, plugin version and settings a configuration was resolved for.
    static func fingerprint(_ profile: Profile, plugin: LoadedPlugin) -> String {
        let text = JSON.array([.string(plugin.manifest.id), .string(plugin.manifest.version), profile.settings]).serializedString(sortKeys: true)
        return SHA256.hash(data: Array(text.utf8)).map { ($0 < 16 ? "0" : "") + String($0, radix: 16) }.joined()
    }

    // MARK: - checkSignInStatus

    /// The seed flowchart: not expired → signed in; expired without tokens →
    /// not signed in; expired with a refresh token → refresh → signed in, or
    /// not signed in on a definitive refusal. Transient failures answer
    /// `offline` and keep the tokens.
    public func checkSignInStatus(_ provider: String, account: String? = nil, requestID: JSON? = nil) async throws(SessionError) -> JSON {
        let context = try await context(for: provider)
        guard let (key, session) = try await selectSession(provider, account: account) else {
            return status(provider, state: "notSignedIn", session: nil, reason: "noTokens")
        }
        if session.licenseRevoked {
            guard let pending = try await enforceLicenceSignOut(key, session: session, context: context) else {
                return status(provider, state: "notSignedIn", session: nil, reason: "licenseRevoked", message: session.licenseMessage)
            }
            return status(provider, state: "licenseRevoked", session: pending, reason: "licenseRevoked", message: pending.licenseMessage)
        }
        var expired: Bool
        if context.plugin.implements(.checkSession) {
            let input: JSON = ["profile": context.profileJSON, "tokens": session.tokens.json]
            switch await run(.checkSession, input: input, plugin: context.plugin, provider: provider, requestID: requestID) {
            case .success(let answer):
                switch answer["state"]?.stringValue {
                case "valid": return status(provider, state: "signedIn", session: session, reason: "valid")
                case "expired": expired = true
                case "revoked", "licenseRevoked":
                    let reason = answer["state"]!.stringValue!
                    let message = answer["message"]?.stringValue
                    if reason == "licenseRevoked" {
                        return try await markLicenseRevoked(key, session: session, context: context, message: message)
                    }
                    try await endSession(key, reason: "revoked", message: message, ended: session, context: context)
                    return try await statusAfterEnding(key, reason: "revoked", message: message)
                default:
                    return status(provider, state: "offline", session: session, reason: "transient",
                                  message: answer["message"]?.stringValue ?? "The provider could not confirm the session.")
                }
            case .failure(let failure) where failure.kind == .definitive:
                try await endSession(key, reason: signedOutReason(failure.reason), message: failure.message, ended: session, context: context)
                return try await statusAfterEnding(key, reason: endReason(failure.reason), message: failure.message)
            case .failure(let failure):
                return status(provider, state: "offline", session: session, reason: "transient", message: failure.message)
            }
        } else {
            let now = HostClock.nowMilliseconds()
            expired = session.tokens.expiresAt.map { $0 <= now } ?? false
        }
        guard expired else { return status(provider, state: "signedIn", session: session, reason: "valid") }
        guard session.tokens.refreshToken != nil else {
            try await endSession(key, reason: "expired", message: nil, ended: session, context: context)
            return try await statusAfterEnding(key, reason: "expired", message: nil)
        }
        switch await refreshed(key, context: context, stale: session) {
        case .success(let fresh):
            return status(provider, state: "signedIn", session: fresh, reason: "refreshed")
        case .failure(let failure) where failure.kind == .definitive && endReason(failure.reason) == "licenseRevoked":
            var marked = session
            marked.licenseRevoked = true
            return status(provider, state: "licenseRevoked", session: marked, reason: "licenseRevoked", message: failure.message)
        case .failure(let failure) where failure.kind == .definitive:
            return status(provider, state: "notSignedIn", session: nil, reason: endReason(failure.reason), message: failure.message)
        case .failure(let failure):
            return status(provider, state: "offline", session: session, reason: "transient", message: failure.message)
        }
    }

    /// Stored sessions as seen locally, without contacting any provider.
    public func listAccounts(_ provider: String?) async throws(SessionError) -> [JSON] {
        if let provider, profiles[provider] == nil { throw unknownProfile(provider) }
        let keys: [SessionKey]
        do { keys = try await store.keys() } catch { throw storageError(error, provider: provider) }
        var found: [(SessionKey, StoredSession)] = []
        for key in keys where provider == nil || key.profile == provider {
            if let session = try await loadSession(key) { found.append((key, session)) }
        }
        // By profile, then the current (latest signed-in) account first.
        found.sort { ($0.0.profile, -($0.1.signedInAt ?? 0)) < ($1.0.profile, -($1.1.signedInAt ?? 0)) }
        // A licence sign-out left pending by a host that stopped meanwhile is timed again.
        for (key, session) in found where session.licenseRevoked {
            if let context = try? await context(for: key.profile) {
                scheduleLicenceSignOut(key, context: context, at: session.licenseSignOutAt ?? 0)
            }
        }
        var current: Set<String> = []
        return found.map { key, session in
            // Local knowledge only: an expired access token with a refresh
            // token is still a signed-in account (`expiresAt` tells the age).
            let licenseRevoked = session.licenseRevoked
            var entry = status(key.profile, state: licenseRevoked ? "licenseRevoked" : "signedIn", session: session,
                               reason: licenseRevoked ? "licenseRevoked" : "valid", message: licenseRevoked ? session.licenseMessage : nil)
            entry = entry.setting("current", .bool(current.insert(key.profile).inserted))
            return entry
        }
    }

    // MARK: - requestOAuthTokens

    /// Interactive sign-in. `params` are the bridge params (flow, sessionId,
    /// scopes, loginHint, redirectUri, timeoutMs). `order` is the request's
    /// arrival order (0: unknown), which decides which of two sign-ins is newer.
    public func requestOAuthTokens(_ provider: String, params: JSON, requestID: JSON?, order: UInt64 = 0) async throws(SessionError) -> JSON {
        let context = try await context(for: provider)
        let flows = context.plugin.descriptor["flows"]?.arrayValue?.compactMap(\.stringValue) ?? []
        let flow = params["flow"]?.stringValue ?? flows.first ?? "browser"
        guard flows.contains(flow) else {
            let supported = flows.isEmpty
                ? "; it declares no sign-in flow at all (its describe lists no \"flows\"), so it cannot sign anyone in"
                : " (it supports: \(flows.joined(separator: ", ")))"
            throw SessionError(.unsupported, "The \(context.plugin.manifest.id) plugin does not support the \"\(flow)\" flow\(supported).",
                               provider: provider, reason: "unsupportedFlow", field: "flow")
        }
        let tokens: JSON
        // OIDC: binds the ID token to this attempt (checked when the authorization URL carried it).
        var nonce: String? = PKCE.randomToken()
        switch flow {
        case "session":
            nonce = nil
            guard let sessionID = params["sessionId"]?.stringValue, !sessionID.isEmpty else {
                throw SessionError(.invalidParams, "The session flow needs \"sessionId\" (e.g. Tableau's workgroup_session_id).", provider: provider, field: "sessionId")
            }
            KnownSecrets.shared.remember(sessionID)
            progress(provider, requestID: requestID, ["stage": "exchanging"])
            let input: JSON = ["profile": context.profileJSON, "flow": "session", "sessionId": .string(sessionID)]
            tokens = try await complete(input, context: context, provider: provider, requestID: requestID)
        case "external":
            tokens = try await externalSignIn(provider, context: context, params: params, requestID: requestID, listener: nil, nonce: &nonce, order: order)
        case "browser":
            // RFC 8252: the redirect comes back to a one-shot listener on 127.0.0.1,
            // which holds the browser's request until the outcome is known.
            let settings = context.profile.settings
            let port = settings["loopbackPort"]?.intValue ?? 0
            let path = settings["loopbackPath"]?.stringValue ?? "/callback"
            guard (0...65_535).contains(port), path.hasPrefix("/"), !path.contains("?"), !path.contains("#") else {
                throw SessionError(.configurationError, "loopbackPort must be 0…65535 and loopbackPath a path starting with /.",
                                   provider: provider, reason: "invalidSettings", field: "settings.loopbackPort")
            }
            let listener = try LoopbackListener(port: UInt16(port), path: path)
            defer { listener.close() }
            do {
                tokens = try await externalSignIn(provider, context: context, params: params, requestID: requestID, listener: listener, nonce: &nonce, order: order)
                let result = try await storeSignIn(tokens, context: context, nonce: nonce, provider: provider)
                listener.answerBrowser(signedIn: true, message: nil)
                return result
            } catch {
                listener.answerBrowser(signedIn: false, message: error.message)
                throw error
            }
        case "device":
            nonce = nil
            tokens = try await deviceSignIn(provider, context: context, params: params, requestID: requestID)
        default:
            throw SessionError(.unsupported, "The \"\(flow)\" flow is not available in this build of AuthBridge yet.", provider: provider, reason: "unsupportedFlow", field: "flow")
        }
        return try await storeSignIn(tokens, context: context, nonce: nonce, provider: provider)
    }

    /// Verifies what a sign-in returned, stores it and announces it.
    private func storeSignIn(_ tokens: JSON, context: Context, nonce: String?, provider: String) async throws(SessionError) -> JSON {
        if let problem = TokenSet.sizeProblem(tokens["tokens"], account: tokens["account"]) {
            throw SessionError(.providerRefused, "The provider's sign-in answer was refused: \(problem). Nothing was stored.",
                               provider: provider, reason: "badResponse")
        }
        guard let received = TokenSet(json: tokens["tokens"] ?? .null) else {
            throw SessionError(.pluginError, "The \(context.plugin.manifest.id) plugin finished sign-in without an access token.", provider: provider, reason: "pluginError")
        }
        // Nothing is stored before the ID token has passed every check.
        var (tokenSet, account) = try await identify(received, account: Self.account(tokens["account"]), context: context,
                                                     nonce: nonce, provider: provider)
        if tokenSet.idToken != nil { await keepSigningKeys(context) }
        tokenSet.obtainedAt = HostClock.nowMilliseconds()
        var session = StoredSession(tokens: tokenSet, account: account)
        session.signedInAt = tokenSet.obtainedAt
        // Another account of the profile stays signed in; the same account is replaced — under
        // its lock, so that a refresh of the old session in flight (here or in another process)
        // cannot write its tokens over the new ones.
        let key = SessionKey(profile: provider, account: session.accountKey)
        do {
            try await store.withExclusiveAccess(to: key) { try await self.store.save(session, for: key) }
        } catch {
            throw storageError(error, provider: provider)
        }
        emit("session/changed", .compactObject(["provider": .string(provider), "state": "signedIn", "reason": "signedIn",
                                                "account": session.account]))
        return status(provider, state: "signedIn", session: session, reason: "signedIn")
    }

    /// The external flow: the frontend opens the URL (its own web view or
    /// browser), catches the redirect, and hands the URL back with
    /// `completeSignIn`. With a `listener` (the browser flow) the redirect
    /// comes back to the host itself on 127.0.0.1; `completeSignIn` still works.
    /// `nonce` goes into the authorization request; it is cleared when the
    /// plugin's URL does not carry it (the ID token cannot then be bound to it).
    private func externalSignIn(_ provider: String, context: Context, params: JSON, requestID: JSON?,
                                listener: LoopbackListener?, nonce: inout String?, order: UInt64 = 0) async throws(SessionError) -> JSON {
        let pkce = PKCE()
        let state = PKCE.randomToken()
        let redirectURI = listener?.redirectURI ?? params["redirectUri"]?.stringValue ?? context.config["redirectUri"]?.stringValue
        let begin: JSON = .compactObject([
            "profile": context.profileJSON, "flow": "external", "state": .string(state),
            "redirectUri": redirectURI.map(JSON.string), "codeChallenge": .string(pkce.challenge),
            "codeChallengeMethod": "S256", "nonce": nonce.map(JSON.string), "scopes": params["scopes"], "loginHint": params["loginHint"],
        ])
        let started: JSON
        switch await run(.beginSignIn, input: begin, plugin: context.plugin, provider: provider, requestID: requestID) {
        case .success(let value): started = value
        case .failure(let failure): throw SessionError(failure, provider: provider)
        }
        guard let url = started["url"]?.stringValue, let parsed = ParsedURL(url), parsed.isSecureTransport else {
            throw SessionError(.pluginError, "The sign-in URL is missing or not https.", provider: provider, reason: "insecureUrl")
        }
        if let sent = nonce, parsed.queryValue("nonce") != sent { nonce = nil }
        // Supersede an earlier sign-in for this profile rather than losing its answer. Earlier means
        // arrived earlier: two sign-ins may get here in either order (each awaited begin_sign_in).
        let superseded = SessionError(.userCancelled, "A newer sign-in for this profile replaced this one.", provider: provider, reason: "superseded")
        if order > 0 {
            if order < newestSignIn[provider] ?? 0 { throw superseded }
            newestSignIn[provider] = order
        }
        pendingSignIns.removeValue(forKey: provider)?.fail(superseded)
        let callbackPrefix = started["callbackPrefix"]?.stringValue ?? redirectURI
        let pending = PendingSignIn(callbackPrefix: callbackPrefix)
        pendingSignIns[provider] = pending
        var openURL: [String: JSON] = ["stage": "openUrl", "url": .string(url)]
        if let callbackPrefix { openURL["callbackPrefix"] = .string(callbackPrefix) }
        progress(provider, requestID: requestID, openURL)
        if let listener {
            openBrowser?(url) { [emit] reason in
                // The frontend (or person) waiting for a browser that never appeared is told.
                emit("signIn/progress", ["provider": .string(provider), "requestId": requestID ?? .null, "stage": "waiting",
                                         "message": .string("The browser could not be opened (\(reason)); open the sign-in URL yourself.")])
            }
            // Whatever reaches the listener with the right state completes the sign-in.
            Task { if let url = await listener.awaitCallback(state: state) { pending.deliver(url) } }
            progress(provider, requestID: requestID, ["stage": "waiting", "message": .string("Waiting for the browser to come back to \(listener.redirectURI).")])
        }

        let timeout = max(1_000, min(params["timeoutMs"]?.intValue ?? 300_000, 3_600_000))
        let callbackURL: String
        do {
            callbackURL = try await pending.wait(timeoutMilliseconds: timeout, provider: provider)
        } catch {
            if pendingSignIns[provider] === pending { pendingSignIns[provider] = nil }
            throw error
        }
        if pendingSignIns[provider] === pending { pendingSignIns[provider] = nil }
        let callback = CallbackURL(callbackURL)
        KnownSecrets.shared.remember(callback?.queryValue("code"))
        let expectedIssuer = context.config["issuerInCallback"]?.boolValue == true ? context.config["issuer"]?.stringValue : nil
        // The host checks whose answer this is before any plugin acts on it, unless the plugin
        // declares that its provider's callback carries no state (Duke's login page takes none).
        if context.plugin.descriptor["callbackState"]?.boolValue != false {
            guard let callback else {
                throw SessionError(.providerRefused, "The callback URL could not be read.", provider: provider, reason: "invalidCallback")
            }
            if let mismatch = StandardSteps.callbackMismatch(callback, state: state, issuer: expectedIssuer) {
                throw SessionError(mismatch, provider: provider)
            }
        }
        progress(provider, requestID: requestID, ["stage": "exchanging"])
        let input: JSON = .compactObject([
            "profile": context.profileJSON, "flow": "external", "callbackUrl": .string(callbackURL),
            "state": .string(state), "codeVerifier": .string(pkce.verifier), "redirectUri": redirectURI.map(JSON.string),
            "nonce": nonce.map(JSON.string), "expectedIssuer": expectedIssuer.map(JSON.string),
        ])
        return try await complete(input, context: context, provider: provider, requestID: requestID)
    }

    /// RFC 8628: the user types a code on another device while the host polls
    /// the token endpoint, honouring `interval` and `slow_down`.
    private func deviceSignIn(_ provider: String, context: Context, params: JSON, requestID: JSON?) async throws(SessionError) -> JSON {
        let begin: JSON = .compactObject([
            "profile": context.profileJSON, "flow": "device", "state": .string(PKCE.randomToken()), "scopes": params["scopes"],
        ])
        let started: JSON
        switch await run(.beginSignIn, input: begin, plugin: context.plugin, provider: provider, requestID: requestID) {
        case .success(let value): started = value
        case .failure(let failure): throw SessionError(failure, provider: provider)
        }
        guard let deviceCode = started["deviceCode"]?.stringValue, let userCode = started["userCode"]?.stringValue,
              let verification = started["verificationUri"]?.stringValue else {
            throw SessionError(.pluginError, "The \(context.plugin.manifest.id) plugin started a device sign-in without a device code, user code or verification URI.",
                               provider: provider, reason: "pluginError")
        }
        KnownSecrets.shared.remember(deviceCode)
        let timeout = max(1_000, min(params["timeoutMs"]?.intValue ?? 900_000, 3_600_000))
        let deadline = min(started["expiresAt"]?.intValue ?? Int64.max, HostClock.nowMilliseconds() + timeout)
        var shown: [String: JSON] = [
            "stage": "deviceCode", "userCode": .string(userCode), "verificationUri": .string(verification),
            "expiresAt": .int(deadline), "message": .string("Open \(verification) and enter the code \(userCode)."),
        ]
        shown["verificationUriComplete"] = started["verificationUriComplete"]
        progress(provider, requestID: requestID, shown)
        let poll: DevicePolling.Poll = { [self] in
            let input: JSON = ["profile": context.profileJSON, "flow": "device", "code": .string(deviceCode)]
            return await self.run(.completeSignIn, input: input, plugin: context.plugin, provider: provider, requestID: requestID)
        }
        let polling = DevicePolling(intervalMilliseconds: started["intervalMs"]?.intValue ?? 5_000, deadline: deadline)
        let answer = try await polling.run(provider: provider, poll: poll)
        progress(provider, requestID: requestID, ["stage": "exchanging"])
        return answer
    }

    /// Verifies the ID token (when the provider sent one) and finds the
    /// account: the plugin's word, else the verified ID token's claims, else
    /// the userinfo endpoint. An ID token that cannot be verified (no JWKS
    /// known) is not kept: nothing unverified is trusted or stored.
    private func identify(_ received: TokenSet, account: JSON?, context: Context, nonce: String?,
                          provider: String) async throws(SessionError) -> (TokenSet, JSON?) {
        var tokens = received
        var account = account
        if let idToken = tokens.idToken {
            if let expectation = idTokenExpectation(context, nonce: nonce) {
                switch await verifier.verify(idToken, expecting: expectation, http: http) {
                case .success(let claims): if account == nil { account = Self.account(claims: claims) }
                case .failure(let failure):
                    await configurationMayHaveChanged(provider, failure: failure)
                    throw SessionError(failure, provider: provider)
                }
            } else {
                logger.notice("the provider sent an ID token but no jwksUri is known to verify it; it is not kept",
                              metadata: ["provider": "\(provider)"])
                tokens.idToken = nil
            }
        }
        if account == nil, let endpoint = context.config["userinfoEndpoint"]?.stringValue {
            account = await userinfoAccount(endpoint, tokens: tokens)
        }
        return (tokens, account)
    }

    private func idTokenExpectation(_ context: Context, nonce: String?) -> IDTokenVerifier.Expectation? {
        guard let issuer = context.config["issuer"]?.stringValue, let clientID = context.config["clientId"]?.stringValue,
              let jwksURI = context.config["jwksUri"]?.stringValue else { return nil }
        let skew = context.config["clockSkewSeconds"]?.intValue ?? IDTokenVerifier.defaultClockSkewSeconds
        return IDTokenVerifier.Expectation(issuer: issuer, clientID: clientID, jwksURI: jwksURI, nonce: nonce,
                                           clockSkewSeconds: min(max(skew, 0), 600))
    }

    /// OIDC Core §5.3: who the access token belongs to. Failure leaves the account unknown.
    private func userinfoAccount(_ endpoint: String, tokens: TokenSet) async -> JSON? {
        let request: JSON = ["method": "GET", "url": .string(endpoint), "timeoutMs": 15_000,
                             "headers": ["Authorization": .string("\(StandardSteps.normalisedTokenType(tokens.tokenType)) \(tokens.accessToken)")]]
        guard case .success(let response) = await http.perform(request), response["status"]?.intValue == 200,
              let claims = try? JSON.parse(response["body"]?.stringValue ?? "") else {
            logger.notice("the userinfo endpoint did not name the account")
            return nil
        }
        return Self.account(claims: claims)
    }

    /// The account named by OIDC standard claims.
    static func account(claims: JSON) -> JSON? {
        account(.compactObject([
            "id": claims["sub"], "email": claims["email"],
            "name": claims["name"] ?? claims["preferred_username"],
        ]))
    }

    private func complete(_ input: JSON, context: Context, provider: String, requestID: JSON?) async throws(SessionError) -> JSON {
        switch await run(.completeSignIn, input: input, plugin: context.plugin, provider: provider, requestID: requestID) {
        case .success(let value): return value
        case .failure(let failure): throw SessionError(failure, provider: provider)
        }
    }

    /// Hands the callback URL of an external sign-in to the waiting request.
    public func completeSignIn(_ provider: String, callbackURL: String) throws(SessionError) -> JSON {
        guard profiles[provider] != nil else { throw unknownProfile(provider) }
        guard let pending = pendingSignIns[provider] else {
            throw SessionError(.noPendingSignIn, "No sign-in is waiting for a callback on profile \"\(provider)\".", provider: provider, reason: "noPendingSignIn")
        }
        if let prefix = pending.callbackPrefix, !callbackURL.hasPrefix(prefix) {
            throw SessionError(.invalidParams, "The callback URL does not belong to this sign-in.", provider: provider, field: "callbackUrl")
        }
        pendingSignIns[provider] = nil
        pending.deliver(callbackURL)
        return ["accepted": true]
    }

    // MARK: - signOut

    /// Revokes at the provider (best effort, bounded), then wipes the session
    /// locally whatever the provider said, then notifies. A profile whose
    /// configuration cannot be resolved (provider unreachable with nothing
    /// kept, plugin missing) is still signed out locally; the revocation is
    /// listed among the failures.
    public func signOut(_ provider: String, account: String? = nil, requestID: JSON?) async throws(SessionError) -> JSON {
        guard profiles[provider] != nil else { throw unknownProfile(provider) }
        let context: Context?
        var unresolved: SessionError?
        do { context = try await self.context(for: provider) } catch {
            if Task.isCancelled { throw error }   // a cancelled sign-out signs nothing out
            context = nil
            unresolved = error
        }
        pendingSignIns.removeValue(forKey: provider)?.fail(SessionError(.userCancelled, "The profile was signed out.", provider: provider, reason: "signedOut"))
        guard let (key, _) = try await selectSession(provider, account: account),
              let (ended, outcome) = try await revokeAndEnd(key, context: context, unresolved: unresolved, reason: "userSignedOut",
                                                            requestID: requestID) else {
            return ["provider": .string(provider), "signedOut": true, "revoked": [], "failures": []]
        }
        return .compactObject(["provider": .string(provider), "signedOut": true, "account": ended.account,
                               "revoked": outcome.revoked, "failures": outcome.failures,
                               "clearCookies": outcome.clearCookies.isEmpty ? nil : .array(outcome.clearCookies)])
    }

    struct Revocation {
        var revoked: JSON
        var failures: JSON
        var clearCookies: [JSON]
    }

    /// Revokes the stored tokens and wipes them as one step under the
    /// session's lock (shared with other processes): a refresh in flight
    /// finishes first and the tokens it stored are the ones revoked, and no
    /// refresh can store tokens after them. `when` may decline the stored
    /// session (e.g. it is no longer licence-revoked). Nil when nothing was
    /// stored (signed out meanwhile) or `when` declined.
    private func revokeAndEnd(_ key: SessionKey, context: Context?, unresolved: SessionError? = nil, reason: String,
                              message: (StoredSession) -> String? = { _ in nil },
                              when: @escaping (StoredSession) -> Bool = { _ in true },
                              requestID: JSON?) async throws(SessionError) -> (StoredSession, Revocation)? {
        let ended: (StoredSession, Revocation)?
        do {
            ended = try await store.withExclusiveAccess(to: key) { () async throws -> (StoredSession, Revocation)? in
                guard let current = try await self.store.load(key), when(current) else { return nil }
                let outcome: Revocation
                if let context {
                    outcome = await self.revokeAtProvider(current, context: context, requestID: requestID)
                } else {
                    let why = unresolved?.message ?? "The profile's configuration could not be resolved."
                    outcome = Revocation(revoked: [], failures: [["token": "all", "reason": .string(unresolved?.reason ?? "unresolved"),
                                                                  "message": .string("Not revoked at the provider: \(why)")]],
                                         clearCookies: [])
                }
                try await self.store.delete(key)
                return (current, outcome)
            }
        } catch let error as SessionError {
            throw error
        } catch {
            throw storageError(error, provider: key.profile)
        }
        guard let (session, revocation) = ended else { return nil }
        var outcome = revocation
        if let context {
            // The cookies the revoke hook names, else those the plugin attached for these tokens.
            let named = outcome.clearCookies.isEmpty ? await attachedCookies(session, context: context) : outcome.clearCookies
            outcome.clearCookies = await cookiesToClear(named, ended: session, key: key, context: context)
        }
        announceEnd(key, reason: reason, message: message(session), ended: session, clearCookies: outcome.clearCookies)
        return (session, outcome)
    }

    /// The `revoke` hook, best effort: what was revoked, what failed, and the
    /// cookies a frontend's web view should drop (only this provider's).
    private func revokeAtProvider(_ session: StoredSession, context: Context, requestID: JSON?) async -> Revocation {
        let input: JSON = ["profile": context.profileJSON, "tokens": session.tokens.json]
        switch await run(.revoke, input: input, plugin: context.plugin, provider: context.profile.name, requestID: requestID) {
        case .success(let answer):
            return Revocation(revoked: answer["revoked"] ?? [], failures: answer["failures"] ?? [],
                              clearCookies: Self.cookieRefs(answer["clearCookies"]))
        case .failure(let failure):
            return Revocation(revoked: [], failures: [["token": "all", "reason": .string(failure.reason), "message": .string(failure.message)]],
                              clearCookies: [])
        }
    }

    /// A licence revoked while signed in: after the profile's grace period
    /// (`licenseGracePeriodMs`, default 5 s: time for the user to read the
    /// provider's message) the account is signed out — revoked at the
    /// provider, wiped, `signedOut` `licenseRevoked`. The deadline is stored
    /// with the session, so a host stopped meanwhile signs out when it next
    /// sees the session (or at start); one timer per account.
    private func markLicenseRevoked(_ key: SessionKey, session: StoredSession, context: Context, message: String?,
                                    holdingLock: Bool = false) async throws(SessionError) -> JSON {
        let provider = key.profile
        let grace = min(max(context.profile.settings["licenseGracePeriodMs"]?.intValue ?? Self.defaultLicenseGracePeriodMilliseconds, 0), 86_400_000)
        // Under the account's lock, on the record as it is now: another process may have
        // rotated the tokens since `session` was read, and those must not be overwritten.
        let mark: () async throws -> (StoredSession, Bool)? = {
            guard var current = try await self.store.load(key) else { return nil }
            guard !current.licenseRevoked else { return (current, false) }
            current.licenseRevoked = true
            current.licenseMessage = message
            current.licenseSignOutAt = HostClock.nowMilliseconds() + grace
            try await self.store.save(current, for: key)
            return (current, true)
        }
        let outcome: (StoredSession, Bool)?
        do {
            outcome = holdingLock ? try await mark() : try await store.withExclusiveAccess(to: key) { try await mark() }
        } catch {
            throw storageError(error, provider: provider)
        }
        guard let (updated, marked) = outcome else {
            // Signed out meanwhile: nothing is left to hold back.
            return status(provider, state: "notSignedIn", session: nil, reason: "licenseRevoked", message: message)
        }
        if marked {
            emit("session/changed", .compactObject(["provider": .string(provider), "state": "licenseRevoked", "reason": "licenseRevoked",
                                                    "message": message.map(JSON.string), "account": updated.account]))
        }
        scheduleLicenceSignOut(key, context: context, at: updated.licenseSignOutAt ?? HostClock.nowMilliseconds())
        return status(provider, state: "licenseRevoked", session: updated, reason: "licenseRevoked", message: updated.licenseMessage)
    }

    /// A licence-revoked session whose grace period is over is signed out now
    /// (nil); one still in its grace period is returned, its timer running.
    private func enforceLicenceSignOut(_ key: SessionKey, session: StoredSession, context: Context) async throws(SessionError) -> StoredSession? {
        let due = session.licenseSignOutAt ?? 0
        guard due <= HostClock.nowMilliseconds() else {
            scheduleLicenceSignOut(key, context: context, at: due)
            return session
        }
        await signOutAfterLicenceLoss(key, context: context)
        return try await loadSession(key).flatMap { $0.licenseRevoked ? $0 : nil }
    }

    private func scheduleLicenceSignOut(_ key: SessionKey, context: Context, at due: Int64) {
        guard !licenceSignOuts.contains(key) else { return }
        licenceSignOuts.insert(key)
        let wait = max(0, due - HostClock.nowMilliseconds())
        Task {
            try? await Task.sleep(for: .milliseconds(wait))
            await self.signOutAfterLicenceLoss(key, context: context)
        }
    }

    private func signOutAfterLicenceLoss(_ key: SessionKey, context: Context) async {
        licenceSignOuts.remove(key)
        // Signed out, or signed in again, meanwhile: nothing to do.
        _ = try? await revokeAndEnd(key, context: context, reason: "licenseRevoked", message: { $0.licenseMessage },
                                    when: { $0.licenseRevoked }, requestID: nil)
    }

    // MARK: - getAccessToken and fetch

    /// A valid access token and what to attach to a request, refreshing first
    /// when the token expires within `minimumValidity`.
    /// `forceRefresh`: the caller saw the provider reject the token (a 401
    /// where no expiry is known, e.g. Salesforce): renew it now.
    public func getAccessToken(_ provider: String, account: String? = nil, minimumValidity: Int64 = defaultMinimumValidityMilliseconds,
                               forceRefresh: Bool = false, requestID: JSON? = nil) async throws(SessionError) -> JSON {
        let context = try await context(for: provider)
        guard case (let key, var session)? = try await selectSession(provider, account: account) else {
            throw notSignedIn(provider, account: account)
        }
        try await refuseIfLicenseRevoked(key, session: session, context: context)
        let now = HostClock.nowMilliseconds()
        if forceRefresh {
            guard session.tokens.refreshToken != nil else {
                throw SessionError(.notSignedIn, "The session cannot be renewed (no refresh token); sign in again.", provider: provider, reason: "noRefreshToken")
            }
            session = try await refreshOrThrow(key, context: context, stale: session)
        } else if let expiresAt = session.tokens.expiresAt, expiresAt - now < session.tokens.effectiveMinimumValidity(minimumValidity) {
            session = try await refreshOrThrow(key, context: context, stale: session)
        } else if let ahead = session.tokens.refreshAheadAt, now >= ahead, session.tokens.refreshToken != nil, refreshes[key] == nil {
            // Refresh ahead: the caller gets the still-valid token at once and
            // the next one is fetched in the background (single-flight as ever).
            let stale = session
            Task { _ = await self.refreshed(key, context: context, stale: stale) }
        }
        var request: JSON = ["method": "GET", "headers": [:]]
        if let base = context.config["apiBaseUrl"]?.stringValue { request = request.setting("url", .string(base)) }
        let input: JSON = ["profile": context.profileJSON, "tokens": session.tokens.json, "request": request]
        let authorized: JSON
        switch await run(.authorizeRequest, input: input, plugin: context.plugin, provider: provider, requestID: requestID) {
        case .success(let value): authorized = value
        case .failure(let failure): throw SessionError(failure, provider: provider)
        }
        return .compactObject([
            "provider": .string(provider),
            "account": session.account,
            "accessToken": .string(session.tokens.accessToken),
            "tokenType": .string(session.tokens.tokenType),
            "expiresAt": session.tokens.expiresAt.map(JSON.int) ?? .null,
            "headers": authorized["request"]?["headers"] ?? [:],
            "cookies": authorized["cookies"] ?? [],
            "details": session.tokens.details.isEmpty ? nil : .object(session.tokens.details),
        ])
    }

    /// An authorized request through the provider plugin. A "session expired"
    /// answer (as the plugin classifies it) refreshes and replays once; a
    /// revocation signs the profile out.
    public func fetch(_ provider: String, account: String? = nil, request: JSON, requestID: JSON?) async throws(SessionError) -> JSON {
        let context = try await context(for: provider)
        guard case (let key, var session)? = try await selectSession(provider, account: account) else {
            throw notSignedIn(provider, account: account)
        }
        try await refuseIfLicenseRevoked(key, session: session, context: context)
        // A token known to be expired is renewed first rather than spending a 401.
        if let expiresAt = session.tokens.expiresAt, expiresAt <= HostClock.nowMilliseconds(), session.tokens.refreshToken != nil {
            session = try await refreshOrThrow(key, context: context, stale: session)
        }
        var replayed = false
        while true {
            let input: JSON = ["profile": context.profileJSON, "tokens": session.tokens.json, "request": request]
            let authorized: JSON
            switch await run(.authorizeRequest, input: input, plugin: context.plugin, provider: provider, requestID: requestID) {
            case .success(let value): authorized = value
            case .failure(let failure): throw SessionError(failure, provider: provider)
            }
            var outgoing = authorized["request"] ?? request
            if let cookies = authorized["cookies"]?.arrayValue, !cookies.isEmpty {
                let header = cookies.compactMap { cookie -> String? in
                    guard let name = cookie["name"]?.stringValue, let value = cookie["value"]?.stringValue else { return nil }
                    return "\(name)=\(value)"
                }.joined(separator: "; ")
                var headers = outgoing["headers"]?.objectValue ?? [:]
                headers["Cookie"] = .string(header)
                outgoing = outgoing.setting("headers", .object(headers))
            }
            let response: JSON
            switch await http.perform(outgoing) {
            case .success(let value): response = value
            case .failure(let failure):
                if Task.isCancelled { throw SessionError(.userCancelled, "The request was cancelled.", provider: provider, reason: "cancelled") }
                throw SessionError(failure, provider: provider)
            }
            let classifyInput: JSON = ["profile": context.profileJSON, "request": outgoing, "response": response]
            let outcome: JSON
            switch await run(.classifyResponse, input: classifyInput, plugin: context.plugin, provider: provider, requestID: requestID) {
            case .success(let value): outcome = value
            case .failure: outcome = ["outcome": "ok"]
            }
            switch outcome["outcome"]?.stringValue {
            case "sessionExpired" where !replayed:
                replayed = true
                session = try await refreshOrThrow(key, context: context, stale: session)
                continue
            case "revoked":
                let message = outcome["message"]?.stringValue
                try await endSession(key, reason: "revoked", message: message, ended: session, context: context)
                throw SessionError(.notSignedIn, message ?? "The provider revoked this session.", provider: provider, reason: "revoked")
            case "licenseRevoked":
                _ = try await markLicenseRevoked(key, session: session, context: context, message: outcome["message"]?.stringValue)
            default:
                break
            }
            return .compactObject(["status": response["status"] ?? 0, "headers": response["headers"] ?? [:], "body": response["body"] ?? ""])
        }
    }

    // MARK: - Refresh (single-flight)

    private func refreshOrThrow(_ key: SessionKey, context: Context, stale: StoredSession) async throws(SessionError) -> StoredSession {
        let provider = key.profile
        switch await refreshed(key, context: context, stale: stale) {
        case .success(let session): return session
        case .failure(let failure) where failure.kind == .definitive:
            throw SessionError(.notSignedIn, failure.message, provider: provider, reason: endReason(failure.reason))
        case .failure(let failure):
            throw SessionError(failure, provider: provider)
        }
    }

    /// Refreshes once for any number of concurrent callers. If the stored
    /// session already differs from `stale`, someone else refreshed: use it.
    private func refreshed(_ key: SessionKey, context: Context, stale: StoredSession) async -> Result<StoredSession, ProviderFailure> {
        // A caller that is cancelled stops waiting; the refresh itself always runs to its end
        // (the provider may already have rotated the refresh token: the new one must be stored).
        let work: SharedWork<Result<StoredSession, ProviderFailure>>
        if let running = refreshes[key], !running.isFinished {
            work = running
        } else {
            work = SharedWork(cancelsWhenAbandoned: false) { await self.performRefresh(key, context: context, stale: stale) }
            refreshes[key] = work
        }
        let result = await work.value()
        if refreshes[key] === work, work.isFinished { refreshes[key] = nil }
        return result ?? .failure(ProviderFailure(.cancelled, reason: "cancelled", message: "The request was cancelled."))
    }

    /// One refresh, under the profile's cross-process lock: the session is
    /// re-read inside it, and if another process already rotated the tokens
    /// they are used instead of replaying a spent refresh token.
    private func performRefresh(_ key: SessionKey, context: Context, stale: StoredSession) async -> Result<StoredSession, ProviderFailure> {
        do {
            return try await store.withExclusiveAccess(to: key) {
                await self.refreshLocked(key, context: context, stale: stale)
            }
        } catch {
            return .failure(ProviderFailure(.transient, reason: "storageError", message: "The session store could not be locked: \(error)"))
        }
    }

    private func refreshLocked(_ key: SessionKey, context: Context, stale: StoredSession) async -> Result<StoredSession, ProviderFailure> {
        let provider = key.profile
        let current: StoredSession?
        do { current = try await store.load(key) } catch {
            return .failure(ProviderFailure(.transient, reason: "storageError", message: "The stored session could not be read: \(error)"))
        }
        guard let current else {
            return .failure(ProviderFailure(.definitive, reason: "noTokens", message: "The session was signed out meanwhile."))
        }
        if current.tokens != stale.tokens { return .success(current) }
        let input: JSON = ["profile": context.profileJSON, "tokens": stale.tokens.json]
        switch await run(.refresh, input: input, plugin: context.plugin, provider: provider, requestID: nil) {
        case .success(let answer):
            if let problem = TokenSet.sizeProblem(answer["tokens"], account: answer["account"]) {
                // Too big to keep: the grant cannot go on (a rotated refresh token is spent).
                let failure = ProviderFailure(.definitive, reason: "badResponse", message: "The provider's refresh answer was refused: \(problem).")
                _ = try? await endSession(key, reason: signedOutReason(failure.reason), message: failure.message, ended: stale, context: context,
                                          holdingLock: true)
                return .failure(failure)
            }
            guard var fresh = TokenSet(json: answer["tokens"] ?? .null) else {
                return .failure(ProviderFailure(.transient, reason: "badResponse", message: "The refresh answer had no access token."))
            }
            fresh.obtainedAt = HostClock.nowMilliseconds()
            if let idToken = fresh.idToken, idToken != stale.tokens.idToken {
                fresh.idToken = await refreshedIDToken(idToken, context: context, session: stale, provider: provider)
            }
            var session = stale
            session.tokens = stale.tokens.updated(with: fresh)
            // The account is the record's key: a refresh does not move the session to another.
            if let account = Self.account(answer["account"]), account["id"]?.stringValue ?? "" == key.account { session.account = account }
            // Durable before anyone sees the new access token (rotation safety).
            do { try await store.save(session, for: key) } catch {
                return .failure(ProviderFailure(.transient, reason: "storageError", message: "The refreshed session could not be stored."))
            }
            emit("session/changed", .compactObject(["provider": .string(provider), "state": "refreshed", "reason": "refreshed", "account": session.account]))
            return .success(session)
        case .failure(let failure) where failure.kind == .definitive && endReason(failure.reason) == "licenseRevoked":
            // Like a licence lost on an API call: announced, then signed out after the grace period.
            _ = try? await markLicenseRevoked(key, session: stale, context: context, message: failure.message, holdingLock: true)
            return .failure(failure)
        case .failure(let failure) where failure.kind == .definitive:
            _ = try? await endSession(key, reason: signedOutReason(failure.reason), message: failure.message, ended: stale, context: context,
                                      holdingLock: true)
            return .failure(failure)
        case .failure(let failure):
            logger.notice("refresh failed transiently; the session is kept", metadata: ["provider": "\(provider)", "reason": "\(failure.reason)"])
            return .failure(failure)
        }
    }

    /// OIDC §12.2: an ID token from a refresh is verified like the first
    /// (without a nonce) and must name the same subject. One that fails is
    /// dropped — the rotated refresh token it came with must still be kept.
    private func refreshedIDToken(_ idToken: String, context: Context, session: StoredSession, provider: String) async -> String? {
        guard let expectation = idTokenExpectation(context, nonce: nil) else { return nil }
        switch await verifier.verify(idToken, expecting: expectation, http: http) {
        case .success(let claims):
            if let known = session.account?["id"]?.stringValue, let subject = claims["sub"]?.stringValue, known != subject {
                logger.warning("a refreshed ID token names another subject; it is not kept", metadata: ["provider": "\(provider)"])
                return nil
            }
            return idToken
        case .failure(let failure):
            logger.warning("a refreshed ID token failed verification; it is not kept",
                           metadata: ["provider": "\(provider)", "reason": "\(failure.reason)"])
            return nil
        }
    }

    // MARK: - Helpers

    /// Only the Account fields of the spec, as strings: plugins must not
    /// smuggle other data (or tokens) into notifications.
    static func account(_ value: JSON?) -> JSON? {
        guard let members = value?.objectValue else { return nil }
        var account: [String: JSON] = [:]
        for key in ["id", "name", "email"] {
            if let text = members[key]?.stringValue, !text.isEmpty { account[key] = .string(Redaction.redact(text)) }
        }
        return account.isEmpty ? nil : .object(account)
    }

    /// A revoked licence keeps the tokens (for signOut's revocation) but hands
    /// none out; the user keeps seeing the provider's words.
    private func refuseIfLicenseRevoked(_ key: SessionKey, session: StoredSession, context: Context) async throws(SessionError) {
        guard session.licenseRevoked else { return }
        _ = try await enforceLicenceSignOut(key, session: session, context: context)
        throw SessionError(.notSignedIn, session.licenseMessage ?? "The user's licence was revoked; sign out and contact the administrator.",
                           provider: key.profile, reason: "licenseRevoked")
    }

    /// Wipes one account's session and tells the frontend why — unless the
    /// stored session is no longer the one the evidence was about (it was
    /// refreshed or signed in again meanwhile) or is already gone. Runs under
    /// the session's lock unless the caller holds it. `clearCookies` defaults
    /// to the cookies the plugin attaches for the ended tokens
    /// (`authorize_request`, no I/O), so a web view drops them however the
    /// session ended.
    @discardableResult
    private func endSession(_ key: SessionKey, reason: String, message: String?, ended: StoredSession? = nil,
                            context: Context? = nil, holdingLock: Bool = false) async throws(SessionError) -> Bool {
        let wiped: StoredSession?
        do {
            wiped = holdingLock ? try await wipe(key, ifStill: ended)
                                : try await store.withExclusiveAccess(to: key) { try await self.wipe(key, ifStill: ended) }
        } catch {
            throw storageError(error, provider: key.profile)
        }
        guard let wiped else { return false }
        var cookies: [JSON] = []
        if let context { cookies = await cookiesToClear(attachedCookies(wiped, context: context), ended: wiped, key: key, context: context) }
        announceEnd(key, reason: reason, message: message, ended: wiped, clearCookies: cookies)
        return true
    }

    /// Deletes the stored session if it is still `expected` (any, when nil).
    private func wipe(_ key: SessionKey, ifStill expected: StoredSession?) async throws -> StoredSession? {
        guard let current = try await store.load(key) else { return nil }
        if let expected, current.tokens != expected.tokens { return nil }
        try await store.delete(key)
        return current
    }

    private func announceEnd(_ key: SessionKey, reason: String, message: String?, ended: StoredSession, clearCookies: [JSON]) {
        emit("session/changed", .compactObject(["provider": .string(key.profile), "state": "signedOut", "reason": .string(reason),
                                                "message": message.map(JSON.string), "account": ended.account,
                                                "clearCookies": clearCookies.isEmpty ? nil : .array(clearCookies)]))
    }

    /// After evidence ended a session: not signed in — unless a newer session
    /// (refreshed or signed in meanwhile) took its place, which stands.
    private func statusAfterEnding(_ key: SessionKey, reason: String, message: String?) async throws(SessionError) -> JSON {
        if let newer = try await loadSession(key), !newer.licenseRevoked {
            return status(key.profile, state: "signedIn", session: newer, reason: "valid")
        }
        return status(key.profile, state: "notSignedIn", session: nil, reason: reason, message: message)
    }

    /// The cookies to drop for an ended account. The web view holds the
    /// profile's current account's cookies: when the ended account was not
    /// the current one, cookies the current one also uses (same name, domain
    /// and path — Tableau's, for two users of one server) are left alone.
    private func cookiesToClear(_ cookies: [JSON], ended: StoredSession, key: SessionKey, context: Context) async -> [JSON] {
        guard !cookies.isEmpty, let (currentKey, current) = try? await selectSession(key.profile, account: nil),
              currentKey != key, (current.signedInAt ?? 0) > (ended.signedInAt ?? 0) else { return cookies }
        let live = Set(await attachedCookies(current, context: context))
        return cookies.filter { !live.contains($0) }
    }

    /// The name, domain and path of each cookie the plugin attaches for these tokens.
    private func attachedCookies(_ session: StoredSession, context: Context) async -> [JSON] {
        let input: JSON = ["profile": context.profileJSON, "tokens": session.tokens.json, "request": ["method": "GET", "headers": [:]]]
        guard case .success(let answer) = await run(.authorizeRequest, input: input, plugin: context.plugin,
                                                    provider: context.profile.name, requestID: nil) else { return [] }
        return Self.cookieRefs(answer["cookies"])
    }

    /// Cookie references (bridge-spec CookieRef) from a plugin's cookie list.
    static func cookieRefs(_ cookies: JSON?) -> [JSON] {
        (cookies?.arrayValue ?? []).compactMap { cookie in
            guard let name = cookie["name"]?.stringValue, let domain = cookie["domain"]?.stringValue else { return nil }
            return ["name": .string(name), "domain": .string(domain), "path": .string(cookie["path"]?.stringValue ?? "/")]
        }
    }

    /// The session a call means: the named account, or the profile's
    /// current one (the latest sign-in) when the call names none.
    private func selectSession(_ provider: String, account: String?) async throws(SessionError) -> (SessionKey, StoredSession)? {
        if let account {
            let key = SessionKey(profile: provider, account: account)
            return try await loadSession(key).map { (key, $0) }
        }
        var best: (SessionKey, StoredSession)?
        for key in try await storedKeys(of: provider) {
            guard let session = try await loadSession(key) else { continue }
            if (session.signedInAt ?? 0) > best.map({ $0.1.signedInAt ?? 0 }) ?? Int64.min { best = (key, session) }
        }
        return best
    }

    private func storedKeys(of provider: String) async throws(SessionError) -> [SessionKey] {
        do { return try await store.keys(of: provider) } catch { throw storageError(error, provider: provider) }
    }

    private func loadSession(_ key: SessionKey) async throws(SessionError) -> StoredSession? {
        do { return try await store.load(key) } catch { throw storageError(error, provider: key.profile) }
    }

    private func notSignedIn(_ provider: String, account: String?) -> SessionError {
        let who = account.map { "Account \"\($0)\" of profile \"\(provider)\"" } ?? "Profile \"\(provider)\""
        return SessionError(.notSignedIn, "\(who) is not signed in.", provider: provider, reason: "noTokens")
    }

    private func unknownProfile(_ name: String) -> SessionError {
        SessionError(.providerUnknown, "No profile is named \"\(name)\". Configure it with configureProfile or in the configuration file.",
                     provider: name, reason: "unknownProfile", field: "provider")
    }

    private func storageError(_ error: any Error, provider: String?) -> SessionError {
        if let vaultError = error as? VaultError {
            return SessionError(.storageError, vaultError.message, provider: provider, reason: vaultError.reason.rawValue)
        }
        return SessionError(.storageError, "The session store failed: \(error)", provider: provider, reason: "storage")
    }

    private func status(_ provider: String, state: String, session: StoredSession?, reason: String, message: String? = nil) -> JSON {
        let details = state == "notSignedIn" ? [:] : session?.tokens.details ?? [:]
        return .compactObject([
            "provider": .string(provider), "state": .string(state),
            "account": session?.account ?? .null,
            "expiresAt": session?.tokens.expiresAt.map(JSON.int) ?? .null,
            "details": details.isEmpty ? nil : .object(details),
            "reason": .string(reason), "message": message.map { .string(KnownSecrets.shared.scrub($0)) },
            "storage": storageInfo,
        ])
    }

    private func progress(_ provider: String, requestID: JSON?, _ fields: [String: JSON]) {
        var params = fields
        params["provider"] = .string(provider)
        params["requestId"] = requestID ?? .null
        emit("signIn/progress", .object(params))
    }

    /// The closed set of `session/changed` `signedOut` reasons (bridge-spec).
    private func signedOutReason(_ reason: String) -> String {
        switch endReason(reason) {
        case "revoked": "revoked"
        case "licenseRevoked": "licenseRevoked"
        case "expired", "noRefreshToken": "expired"
        default: "invalidGrant"
        }
    }

    /// Why a definitive refusal ended the session, as the status and error
    /// `reason`. RFC 6749 §5.2: `invalid_grant` on a refresh means the grant
    /// is no longer valid (revoked by the user, an administrator or the
    /// provider's policy): `revoked`. Other words are camelCased as they come.
    private func endReason(_ reason: String) -> String {
        reason == "invalid_grant" ? "revoked" : camelCased(reason)
    }

    /// "invalid_grant" → "invalidGrant": reasons on the wire are camelCase words.
    private func camelCased(_ reason: String) -> String {
        let parts = reason.split(separator: "_")
        guard parts.count > 1 else { return reason }
        return String(parts[0]) + parts.dropFirst().map { $0.prefix(1).uppercased() + $0.dropFirst() }.joined()
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
            await deadline.value   // nothing of ours may still run when the process exits
        }
        let busy = Set(hooksInFlight.keys)
        if !busy.isEmpty {
            logger.warning("plugins still inside a hook at exit are not shut down", metadata: ["plugins": "\(busy.sorted())"])
        }
        for plugin in plugins.values where !busy.contains(plugin.manifest.id) { plugin.shutdown() }
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
    func run(_ hook: PluginHook, input: JSON, plugin: LoadedPlugin, provider: String, requestID: JSON?) async -> Result<JSON, ProviderFailure> {
        hookStarted(plugin.manifest.id)
        defer { hookEnded(plugin.manifest.id) }
        let scoped = installations[provider] ?? InstallationIdentity.scoped(installation(), profile: provider)
        installations[provider] = scoped
        let input = input.setting("installation", scoped)
        let environment = EngineEnvironment(provider: provider, requestID: requestID, http: http, emit: emit)
        let result: Result<JSON, ProviderFailure>
        switch await plugin.invoke(hook, input: input, environment: environment) {
        case .result(let value): result = .success(value)
        case .failure(let failure): result = .failure(failure)
        case .useDefault:
            if hook == .checkSession { return .success(StandardSteps.checkSession(input)) }
            let http = self.http
            result = await plugin.runHostStep(hook, environment: environment) { call in
                StandardSteps.run(hook, input: input, call: call, http: http)
            }
        }
        if case .failure(let failure) = result, hook != .configure {
            await configurationMayHaveChanged(provider, failure: failure)
        }
        return result
    }
}

/// What hooks may use while serving one bridge request.
struct EngineEnvironment: HookEnvironment {
    let provider: String
    let requestID: JSON?
    let http: HTTPClient
    let emit: SessionEngine.EventSink

    static let stages: Set<String> = ["openUrl", "deviceCode", "waiting", "exchanging", "plugin"]

    /// Forwards a plugin's progress event with only the spec's fields, and
    /// only while it serves a request (the event names the request).
    func emit(_ event: JSON, from call: HookCall) {
        guard let requestID else {
            call.logger.debug("dropped a plugin event outside a request", metadata: ["plugin": "\(call.pluginID)"])
            return
        }
        var params: [String: JSON] = ["provider": .string(provider), "requestId": requestID]
        let stage = event["stage"]?.stringValue ?? "plugin"
        params["stage"] = .string(Self.stages.contains(stage) ? stage : "plugin")
        for key in ["url", "callbackPrefix", "userCode", "verificationUri", "verificationUriComplete", "message"] {
            if let text = event[key]?.stringValue, !text.isEmpty { params[key] = .string(key == "message" ? Redaction.redact(text) : text) }
        }
        if let expiresAt = event["expiresAt"]?.intValue { params["expiresAt"] = .int(expiresAt) }
        emit("signIn/progress", .object(params))
    }

    func http(_ request: JSON, call: HookCall) -> Result<JSON, ProviderFailure> {
        http.perform(request, call: call)
    }

    func standard(_ hook: PluginHook, input: JSON, call: HookCall) -> Result<JSON, ProviderFailure> {
        StandardSteps.run(hook, input: input, call: call, http: http)
    }
}
