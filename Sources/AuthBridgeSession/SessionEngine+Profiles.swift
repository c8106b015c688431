// Profiles: listing, configuring and removing them, and resolving each
// profile's configuration (discovery, kept copies, the provider down).

import AuthBridgeCrypto
import AuthBridgeJSON
import AuthBridgePluginHost
import AuthBridgeProtocol
import AuthBridgeRedaction
import AuthBridgeURL

extension SessionEngine {
    /// Every profile with its readiness (bridge-spec: ProfileInfo).
    public func profileList() -> [ProfileInfo] {
        profiles.values.sorted(by: { $0.name < $1.name }).map(profileInfo)
    }

    func profileInfo(_ profile: Profile) -> ProfileInfo {
        let plugin = plugins[profile.plugin]
        var problem: String?
        if plugin == nil {
            problem = "plugin \"\(profile.plugin)\" is not loaded"
        } else if let refusal = plugin?.refusal {
            problem = refusal.message
        } else if let issue = SettingsValidator.problem(in: profile.settings, schema: plugin?.descriptor["settings"]) {
            problem = "\(issue.field) \(issue.message)"
        }
        let warnings = settingsWarnings(profile)
        return ProfileInfo(
            name: profile.name, plugin: profile.plugin, status: problem == nil ? .ready : .error, message: problem,
            flows: plugin?.descriptor["flows"]?.arrayValue?.compactMap { $0.stringValue.flatMap(Flow.init(rawValue:)) } ?? [],
            source: profile.source, warnings: warnings.isEmpty ? nil : warnings, issuer: resolvedConfig(profile.name)?["issuer"]?.stringValue,
            dynamicClient: resolvedConfig(profile.name)?["dynamicClient"]?.boolValue, resource: profile.settings["resource"]?.stringValue)
    }

    /// Settings of `profile` that neither its plugin nor the host reads (see `SettingsValidator`).
    nonisolated func settingsWarnings(_ profile: Profile) -> [String] {
        guard let plugin = loadedPlugins.first(where: { $0.manifest.id == profile.plugin }) else { return [] }
        return SettingsValidator.unknownSettings(
            in: profile.settings, schema: plugin.descriptor["settings"], profile: profile.name, plugin: profile.plugin)
    }

    /// The settings warnings of the configuration file's profiles (`initialize`'s `warnings`).
    public func configurationSettingsWarnings() -> [String] {
        profiles.values.filter { $0.source == .config }.sorted { $0.name < $1.name }.flatMap(settingsWarnings)
    }

    /// Adds or replaces a profile at run time; configuration runs at once so
    /// that mistakes are reported to the caller.
    public func configureProfile(_ params: ConfigureProfileParams) async throws(SessionError) -> ProfileInfo {
        let (name, pluginID, settings) = (params.name, params.plugin, JSON.object(params.settings ?? [:]))
        if let problem = Profile.problem(withName: name) {
            throw SessionError(.invalidParams, "The profile name \(problem).", provider: nil, reason: "invalidName", field: "name")
        }
        guard plugins[pluginID] != nil else {
            throw .unknownPlugin(profile: name, plugin: pluginID, folders: pluginFolders)
        }
        let profile = Profile(name: name, plugin: pluginID, settings: settings, source: .runtime)
        let info = try await changingProfile(name) { engine async throws(SessionError) in
            try await engine.replaceProfile(profile)
        }
        for warning in settingsWarnings(profile) { logger.warning("\(warning)") }
        return info
    }

    private func replaceProfile(_ profile: Profile) async throws(SessionError) -> ProfileInfo {
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
        if let previous, !previous.sameDefinition(as: profile) {
            try await dropSession(name, context: previousContext)
        }
        return profileInfo(profile)
    }

    /// Removes a profile and the session stored for it (nothing is revoked:
    /// call signOut first to revoke).
    public func removeProfile(_ params: RemoveProfileParams) async throws(SessionError) -> RemoveProfileResult {
        let name = params.name
        return RemoveProfileResult(
            removed: try await changingProfile(name) { engine async throws(SessionError) in try await engine.forgetProfile(name) })
    }

    /// Removes profile `name` and ends its sessions; false when there was none.
    func forgetProfile(_ name: String) async throws(SessionError) -> Bool {
        let context = resolvedContext(name)
        configs[name] = nil
        fallbackConfigs[name] = nil
        guard profiles.removeValue(forKey: name) != nil else { return false }
        try await dropSession(name, context: context)
        try? await store.deleteResolvedProfile(name)
        return true
    }

    /// Runs one change of a profile (configure, remove) after the changes of
    /// that name already under way, so that no change sees the profile move
    /// under it while it awaits (actor reentrancy): `configureProfile`
    /// followed at once by `removeProfile` configures, then removes.
    func changingProfile<T: Sendable>(
        _ name: String,
        _ change: @escaping @Sendable (isolated SessionEngine) async throws(SessionError) -> T
    ) async throws(SessionError) -> T {
        let before = profileChanges[name]
        let task = Task<Result<T, SessionError>, Never> {
            await before?.value
            do throws(SessionError) { return .success(try await change(self)) } catch { return .failure(error) }
        }
        let done = Task<Void, Never> { _ = await task.value }
        profileChanges[name] = done
        // A cancelled request cancels its change (a configuration cut short changes nothing).
        let result = await withTaskCancellationHandler {
            await task.value
        } onCancel: {
            task.cancel()
        }
        if profileChanges[name] == done { profileChanges[name] = nil }
        return try result.get()
    }

    /// Forgets a changed or removed profile's sessions. With the profile's
    /// old context the frontend is also told which web-view cookies to drop.
    func dropSession(_ name: String, context: Context?) async throws(SessionError) {
        pendingSignIns.removeValue(forKey: name)?.fail(
            SessionError(.userCancelled, "The profile was changed.", provider: name, reason: "profileChanged"))
        // A record that cannot be read is set aside as it is found (corruptRecord): drop the rest all the same.
        let corrupt = VaultError.Reason.corruptRecord.rawValue
        let keys: [SessionKey]
        do { keys = try await storedKeys(of: name) } catch  where error.reason == corrupt { keys = try await storedKeys(of: name) }
        for key in keys {
            let ended: StoredSession?
            do { ended = try await loadSession(key) } catch  where error.reason == corrupt { continue }
            try await endSession(
                key, reason: .profileChanged, message: "The profile was changed or removed; its session was discarded.",
                ended: ended, context: context)
        }
    }

    // MARK: - Resolved configurations

    /// The profile, its plugin and its resolved configuration.
    struct Context: Sendable {
        var profile: Profile
        var plugin: LoadedPlugin
        var config: JSON
        var profileJSON: JSON { ["name": .string(profile.name), "settings": profile.settings, "config": config] }
    }

    /// The profile's context if its configuration is already resolved (no I/O).
    func resolvedContext(_ name: String) -> Context? {
        guard let profile = profiles[name], let plugin = plugins[profile.plugin], let config = configs[name] else { return nil }
        return Context(profile: profile, plugin: plugin, config: config)
    }

    /// How long a kept configuration is used without asking the provider
    /// again. Discovery documents change rarely, and an answer that suggests
    /// a change (see `configurationMayHaveChanged`) drops it at once.
    private static let resolvedConfigurationLifetimeMilliseconds: Int64 = 24 * 3_600_000
    /// After the provider could not be reached to resolve a profile, how long
    /// the kept configuration is used before trying again.
    static let resolveRetryMilliseconds: Int64 = 30_000

    func context(for name: String) async throws(SessionError) -> Context {
        guard let profile = profiles[name] else { throw unknownProfile(name) }
        guard let plugin = plugins[profile.plugin] else {
            throw .pluginNotLoaded(profile: name, plugin: profile.plugin, folders: pluginFolders)
        }
        if let config = configs[name] { return Context(profile: profile, plugin: plugin, config: config) }
        if let fallback = fallbackConfigs[name], fallback.profile == profile, fallback.retryAt > HostClock.nowMilliseconds() {
            return Context(profile: profile, plugin: plugin, config: fallback.config)
        }
        if let issue = SettingsValidator.problem(in: profile.settings, schema: plugin.descriptor["settings"]) {
            throw SessionError(
                .configurationError, "Profile \"\(name)\": \(issue.field) \(issue.message).", provider: name, reason: "invalidSettings",
                field: issue.field)
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
            throw SessionError.cancelled(provider: name)
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
        let now = HostClock.nowMilliseconds()
        if let config = await adoptIfFresh(kept, for: profile, now: now) { return .success(config) }
        let input: JSON = ["profile": .string(name), "settings": profile.settings]
        switch await run(.configure, input: input, plugin: plugin, profile: name, requestID: nil) {
        case .success(let config):
            guard case .object = config else {
                return .failure(
                    SessionError(
                        .pluginError, "The \(plugin.manifest.id) plugin's configure answer is not an object.", provider: name, reason: "pluginError"))
            }
            let signingKeys = kept?.config["jwksUri"] == config["jwksUri"] ? kept?.signingKeys : nil
            // Kept without the registered client: that lives in its own record, per server.
            await keep(ResolvedProfile(fingerprint: fingerprint, config: config, signingKeys: signingKeys, resolvedAt: now), for: profile)
            let merged = await withStoredRegistration(config, profile: profile)
            adopt(merged, for: profile, keys: nil)
            return .success(merged)
        case .failure(let failure) where failure.kind == .transient && kept != nil:
            let kept = kept!
            logger.notice(
                "the provider could not be reached to resolve the profile; using the configuration kept from an earlier run",
                metadata: ["provider": "\(name)", "reason": "\(failure.reason)"])
            let config = await withStoredRegistration(kept.config, profile: profile)
            if profiles[name] == profile {
                fallbackConfigs[name] = (profile, config, HostClock.nowMilliseconds() + Self.resolveRetryMilliseconds)
            }
            if let uri = kept.config["jwksUri"]?.stringValue, let keys = kept.signingKeys { verifier.remember(keys, for: uri) }
            return .success(config)
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
    /// The profile's context when no `configure` has to run for it (resolved in this process,
    /// or kept and fresh); nil when resolving it would ask the provider, or the profile or its
    /// plugin is not there.
    func contextWithoutDiscovery(for name: String) async -> Context? {
        guard let profile = profiles[name], let plugin = plugins[profile.plugin] else { return nil }
        if let config = configs[name] { return Context(profile: profile, plugin: plugin, config: config) }
        guard SettingsValidator.problem(in: profile.settings, schema: plugin.descriptor["settings"]) == nil else { return nil }
        let kept = await keptConfiguration(name, fingerprint: Self.fingerprint(profile, plugin: plugin))
        guard let config = await adoptIfFresh(kept, for: profile, now: HostClock.nowMilliseconds()) else { return nil }
        return Context(profile: profile, plugin: plugin, config: config)
    }

    /// `kept` made the profile's configuration (with its stored registration) while it is
    /// fresh; nil when it is missing or stale. The profile's secret settings are noted for
    /// redaction either way, before a plugin or provider sees them.
    private func adoptIfFresh(_ kept: ResolvedProfile?, for profile: Profile, now: Int64) async -> JSON? {
        for (key, value) in profile.settings.objectValue ?? [:] where Redaction.isSecretName(key.lowercased()) || key.lowercased().hasSuffix("secret")
        {
            KnownSecrets.shared.remember(value.stringValue)
        }
        guard let kept, now - kept.resolvedAt < Self.resolvedConfigurationLifetimeMilliseconds, kept.resolvedAt <= now else { return nil }
        let config = await withStoredRegistration(kept.config, profile: profile)
        adopt(config, for: profile, keys: kept.signingKeys)
        return config
    }

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
    func keepSigningKeys(_ context: Context) async {
        guard let uri = context.config["jwksUri"]?.stringValue, let keys = verifier.keys(for: uri) else { return }
        let fingerprint = Self.fingerprint(context.profile, plugin: context.plugin)
        guard var kept = await keptConfiguration(context.profile.name, fingerprint: fingerprint),
            kept.config == Self.withoutRegistration(context.config) || kept.config == context.config,
            kept.signingKeys != keys
        else { return }
        kept.signingKeys = keys
        await keep(kept, for: context.profile)
    }

    /// A provider answer suggests its configuration changed (an endpoint that
    /// is no longer there, a signing key nobody knows): resolve it again on
    /// the next call, keeping the old copy for when the provider is down.
    func configurationMayHaveChanged(_ name: String, failure: ProviderFailure) async {
        guard failure.status == 404 || failure.status == 410 || failure.reason == "unknownKey",
            let profile = profiles[name], configs[name] != nil, let plugin = plugins[profile.plugin]
        else { return }
        logger.notice(
            "a provider answer suggests its configuration changed; it will be resolved again",
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
        return SHA256.hash(Array(text.utf8)).map { ($0 < 16 ? "0" : "") + String($0, radix: 16) }.joined()
    }
}
