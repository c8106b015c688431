import AuthBridgeJSON
import AuthBridgeProtocol
import AuthBridgePluginHost
@testable import AuthBridgeSession
import Logging
import Synchronization
import TestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// The engine driven with the Swift test plugin (copied from the build folder
/// into a private temp folder) and a memory store. Nothing here moves the
/// host clock: expiry comes from the plugin's "short" (1 s) and "expired" sessions.
@Suite("Session engine", .serialized)
struct SessionEngineTests {
    @Test func sessionSignInStoresTokensAndNotifies() async throws {
        try await withEngine { engine, events, store in
            let status = try await engine.requestOAuthTokens(RequestOAuthTokensParams(provider: "work", flow: .session, sessionId: "x"), requestID: 7)
            #expect(status.state == .signedIn && status.reason == "signedIn")
            #expect(status.account == Account(id: "x", name: "Swift Test User"))
            #expect(status.storage == StorageInfo(backend: .memory, protection: .unprotected))
            #expect(status.wire.serializedString().contains("sat-x") == false)
            #expect(try await store.load(SessionKey(profile: "work", account: "x"))?.tokens.refreshToken == "srt-x")
            #expect(events.methods == ["signIn/progress", "session/changed"])
            #expect(events.all.first?.1["requestId"] == 7)
            #expect(events.changes.map { $0["state"] } == ["signedIn"])

            #expect(try await engine.checkSignInStatus(CheckSignInStatusParams(provider: "work")).reason == "valid")
            let token = try await engine.getAccessToken(GetAccessTokenParams(provider: "work"))
            #expect(token.accessToken == "sat-x")
            #expect(token.headers["Authorization"] == "Bearer sat-x")
            #expect(token.headers["X-SwiftTest"] == "1")
            #expect(events.changes.count == 1)
        }
    }

    @Test func concurrentCallersShareOneRefresh() async throws {
        try await withEngine { engine, events, _ in
            // An expired token: every caller wants a refresh.
            _ = try await engine.requestOAuthTokens(RequestOAuthTokensParams(provider: "work", flow: .session, sessionId: "expired"), requestID: 1)
            let tokens = try await withThrowingTaskGroup(of: String?.self) { group in
                for _ in 0..<20 {
                    group.addTask { try await engine.getAccessToken(GetAccessTokenParams(provider: "work")).accessToken }
                }
                return try await group.reduce(into: [String?]()) { $0.append($1) }
            }
            #expect(tokens.count == 20)
            #expect(Set(tokens) == ["sat2-expired"])
            #expect(events.changes.filter { $0["state"] == "refreshed" }.count == 1)
            #expect(events.changes.last?["reason"] == "refreshed")
        }
    }

    /// Issue 12 §0: `configureProfile` followed at once by `removeProfile` of
    /// the same name crashed the host (a force-unwrap of the profile after the
    /// configure hook's await). Changes of one profile now run in turn.
    @Test func configureThenRemoveAtOnceNeverCrashesAndEndsRemoved() async throws {
        try await withEngine { engine, _, _ in
            for round in 0..<100 {
                let name = "rt\(round % 3)"
                async let configured = engine.configureProfile(ConfigureProfileParams(name: name, plugin: "swifttest", settings: ["clientId": "c"]))
                async let removed = engine.removeProfile(RemoveProfileParams(name: name)).removed
                let info = try await configured
                #expect(info.name == name && info.status == .ready)
                _ = try await removed
            }
            // Every profile configured and removed in the same breath is gone or present, never half-made.
            for profile in await engine.profileList() {
                #expect(profile.status == .ready)
            }
        }
    }

    /// Issue 12 §3: a token that lives less than the minimum validity is not
    /// refreshed while it is younger than half its lifetime.
    @Test func aShortLivedTokenIsNotRefreshedOnEveryCall() async throws {
        try await withEngine { engine, events, _ in
            _ = try await engine.requestOAuthTokens(RequestOAuthTokensParams(provider: "work", flow: .session, sessionId: "brief"), requestID: 1)
            for _ in 0..<5 { #expect(try await engine.getAccessToken(GetAccessTokenParams(provider: "work")).accessToken == "sat-brief") }
            #expect(events.changes.filter { $0["state"] == "refreshed" }.isEmpty)
            #expect(try await engine.getAccessToken(GetAccessTokenParams(provider: "work", forceRefresh: true)).accessToken == "sat2-brief")
            #expect(events.changes.filter { $0["state"] == "refreshed" }.count == 1)
        }
    }

    /// `authbridge token` without an agent (issue 32) prints a token only when the stored one
    /// serves as it is; for everything else it gets nil with nothing done, and the CLI's
    /// `getAccessToken` does the rest.
    @Test func aTokenAsStoredIsGivenOnlyWhenNothingIsDue() async throws {
        try await withEngine { engine, events, store in
            #expect(await engine.accessTokenAsStored(profile: "work", account: nil, minimumValidity: nil) == nil, "not signed in")
            _ = try await engine.requestOAuthTokens(RequestOAuthTokensParams(provider: "work", flow: .session, sessionId: "x"), requestID: 1)
            let stored = try #require(await engine.accessTokenAsStored(profile: "work", account: nil, minimumValidity: nil))
            #expect(stored.wire == (try await engine.getAccessToken(GetAccessTokenParams(provider: "work"))).wire)
            #expect(stored.headers["X-SwiftTest"] == "1", "the plugin's authorize_request ran")

            // The latest sign-in has an expired token: a refresh is due, which is not done here.
            _ = try await engine.requestOAuthTokens(RequestOAuthTokensParams(provider: "work", flow: .session, sessionId: "expired"), requestID: 2)
            let seen = events.all.count
            #expect(await engine.accessTokenAsStored(profile: "work", account: nil, minimumValidity: nil) == nil)
            #expect(events.all.count == seen, "nothing was refreshed")
            #expect(try await store.load(SessionKey(profile: "work", account: "expired"))?.tokens.accessToken == "sat-expired")
            #expect(await engine.accessTokenAsStored(profile: "work", account: "x", minimumValidity: nil)?.accessToken == "sat-x")
            #expect(await engine.accessTokenAsStored(profile: "work", account: "nobody", minimumValidity: nil) == nil)
            #expect(await engine.accessTokenAsStored(profile: "other", account: nil, minimumValidity: nil) == nil)
        }
    }

    /// Issue 12 §6: at exit, a plugin still inside a hook (a background refresh,
    /// a sign-in) is not shut down under it; the others are.
    @Test func shutdownWaitsForHooksInFlightAndSparesABusyPlugin() async throws {
        try await withEngine { engine, events, _ in
            let plugin = try #require(engine.loadedPlugins.first)
            let signIn = Task {
                try? await engine.requestOAuthTokens(RequestOAuthTokensParams(provider: "work", flow: .session, sessionId: "slow"), requestID: 1)
            }
            await events.wait { method, params in method == "signIn/progress" && params["stage"] == "exchanging" }
            await engine.shutDownPlugins(drainingFor: .milliseconds(200))
            #expect(!plugin.hasShutDown, "the plugin is inside complete_sign_in")
            signIn.cancel()
            _ = await signIn.value
            await engine.shutDownPlugins(drainingFor: .seconds(10))
            #expect(plugin.hasShutDown)
        }
    }

    @Test func aDefinitiveRefusalIsProviderRefused() async throws {
        try await withEngine { engine, events, store in
            await #expect(throws: SessionError.self) {
                try await engine.requestOAuthTokens(RequestOAuthTokensParams(provider: "work", flow: .session, sessionId: "bad"), requestID: 2)
            }
            let error = await #expect(throws: SessionError.self) {
                try await engine.requestOAuthTokens(RequestOAuthTokensParams(provider: "work", flow: .session, sessionId: "bad"), requestID: 3)
            }
            #expect(error?.kind == .providerRefused)
            #expect(error?.reason == "invalid_grant")
            #expect(error?.provider == "work")
            #expect((try? await store.keys(of: "work"))?.isEmpty == true)
            #expect(events.changes.isEmpty)
        }
    }

    @Test func unsupportedFlowsAndMissingSessionIds() async throws {
        try await withEngine { engine, _, _ in
            let deviceError = await #expect(throws: SessionError.self, "the device flow was accepted") {
                try await engine.requestOAuthTokens(RequestOAuthTokensParams(provider: "work", flow: .device), requestID: 1)
            }
            #expect(deviceError?.kind == .unsupported && deviceError?.field == "flow")
            let sessionError = await #expect(throws: SessionError.self, "a session sign-in without sessionId was accepted") {
                try await engine.requestOAuthTokens(RequestOAuthTokensParams(provider: "work", flow: .session), requestID: 1)
            }
            #expect(sessionError?.kind == .invalidParams && sessionError?.field == "sessionId")
        }
    }

    @Test func settingsAreValidatedAgainstThePluginsSchema() async throws {
        try await withEngine(settings: ["authorizationEndpoint": "https://idp.example/a"]) { engine, _, _ in
            let profiles = await engine.profileList()
            #expect(profiles.first?.status == .error)
            #expect(profiles.first?.message == "settings.clientId is required by this plugin")
            let tokenError = await #expect(throws: SessionError.self, "a profile without clientId was used") {
                try await engine.getAccessToken(GetAccessTokenParams(provider: "work"))
            }
            #expect(tokenError?.kind == .configurationError && tokenError?.field == "settings.clientId")
            let configureError = await #expect(throws: SessionError.self, "a numeric clientId was accepted") {
                try await engine.configureProfile(ConfigureProfileParams(name: "typo", plugin: "swifttest", settings: ["clientId": 5]))
            }
            #expect(configureError?.kind == .configurationError && configureError?.field == "settings.clientId")
            let ready = try await engine.configureProfile(ConfigureProfileParams(name: "fixed", plugin: "swifttest", settings: ["clientId": "c"]))
            #expect(ready.status == .ready && ready.source == .runtime)
            #expect(await engine.profileList().map { $0.name } == ["fixed", "work"])
        }
    }

    @Test func unknownProfilesAndSignedOutProfiles() async throws {
        try await withEngine { engine, events, _ in
            let unknown = await #expect(throws: SessionError.self, "an unknown profile answered") {
                try await engine.getAccessToken(GetAccessTokenParams(provider: "nobody"))
            }
            #expect(unknown?.kind == .providerUnknown && unknown?.field == "provider")
            #expect(try await engine.checkSignInStatus(CheckSignInStatusParams(provider: "work")).state == .notSignedIn)
            _ = try await engine.requestOAuthTokens(RequestOAuthTokensParams(provider: "work", flow: .session, sessionId: "y"), requestID: 1)
            let signedOut = try await engine.signOut(SignOutParams(provider: "work"), requestID: 2)
            #expect(signedOut.revoked == ["access_token", "refresh_token"])
            #expect(events.changes.last?["state"] == "signedOut" && events.changes.last?["reason"] == "userSignedOut")
            let signedOutError = await #expect(throws: SessionError.self, "a signed-out profile handed out a token") {
                try await engine.getAccessToken(GetAccessTokenParams(provider: "work"))
            }
            #expect(signedOutError?.kind == .notSignedIn && signedOutError?.reason == "noTokens")
        }
    }

    /// Issue 27 §3: a session belongs to the client it was issued to. Another engine on the same
    /// store (another process, or a host sharing the vault) whose profile names another client id
    /// ends the session instead of handing out the old client's tokens; the same client keeps it.
    @Test func aSessionOfAnotherClientIdIsEndedWhereverItIsRead() async throws {
        let store = SessionStore.inMemory()
        try await withEngine(settings: ["clientId": "c1"], store: store) { engine, _, _ in
            _ = try await engine.requestOAuthTokens(RequestOAuthTokensParams(provider: "work", flow: .session, sessionId: "x"), requestID: 1)
            #expect(try await store.load(SessionKey(profile: "work", account: "x"))?.client == SessionClient(config: ["clientId": "c1"]))
        }
        try await withEngine(settings: ["clientId": "c1"], store: store) { engine, _, _ in
            let status = try await engine.checkSignInStatus(CheckSignInStatusParams(provider: "work"))
            #expect(status.state == .signedIn, "the same client keeps its session")
        }
        try await withEngine(settings: ["clientId": "c2"], store: store) { engine, events, _ in
            let error = await #expect(throws: SessionError.self, "a token issued to client c1 was handed out as c2's") {
                try await engine.getAccessToken(GetAccessTokenParams(provider: "work"))
            }
            #expect(error?.kind == .notSignedIn && error?.reason == "profileChanged")
            #expect(error?.message.contains("client id changed from \"c1\" to \"c2\"") == true)
            #expect(events.changes.map { $0["reason"] } == ["profileChanged"])
            let discarded = try await store.load(SessionKey(profile: "work", account: "x"))
            #expect(discarded == nil, "discarded, not hidden")
            #expect(try await engine.checkSignInStatus(CheckSignInStatusParams(provider: "work")).reason == "noTokens")
        }
        // checkSignInStatus finds it too, and says why.
        try await withEngine(settings: ["clientId": "c1"], store: store) { engine, _, _ in
            _ = try await engine.requestOAuthTokens(RequestOAuthTokensParams(provider: "work", flow: .session, sessionId: "y"), requestID: 1)
        }
        try await withEngine(settings: ["clientId": "c3"], store: store) { engine, _, _ in
            let status = try await engine.checkSignInStatus(CheckSignInStatusParams(provider: "work"))
            #expect(status.state == .notSignedIn && status.reason == "profileChanged")
        }
    }

    /// A record kept before sessions named their client is used as it is (nothing to compare).
    @Test func aSessionThatNamesNoClientIsKept() async throws {
        let store = SessionStore.inMemory()
        try await withEngine(settings: ["clientId": "c1"], store: store) { engine, _, _ in
            _ = try await engine.requestOAuthTokens(RequestOAuthTokensParams(provider: "work", flow: .session, sessionId: "x"), requestID: 1)
            let key = SessionKey(profile: "work", account: "x")
            var old = try #require(try await store.load(key))
            old.client = nil
            try await store.save(old, for: key)
        }
        try await withEngine(settings: ["clientId": "c2"], store: store) { engine, _, _ in
            let status = try await engine.checkSignInStatus(CheckSignInStatusParams(provider: "work"))
            #expect(status.state == .signedIn)
        }
    }

    /// Issue 27 §1: what a reload of the configuration file changes, profile by profile.
    @Test func profileChangesBetweenTwoReadsOfTheFile() {
        func file(_ entries: [String: JSON]) -> [String: Profile] {
            entries.reduce(into: [:]) { $0[$1.key] = Profile(name: $1.key, plugin: "swifttest", settings: $1.value, source: .config) }
        }
        let before = file(["same": ["clientId": "a"], "edited": ["clientId": "b"], "gone": [:]])
        let now = file(["same": ["clientId": "a"], "edited": ["clientId": "b2"], "new": [:], "new2": [:]])
        #expect(ProfileChanges.between(before, now) == ProfileChanges(added: ["new", "new2"], changed: ["edited"], removed: ["gone"]))
        #expect(ProfileChanges.between(now, now).isEmpty)
        var otherPlugin = now
        otherPlugin["same"]?.plugin = "ctest"
        #expect(ProfileChanges.between(now, otherPlugin).changed == ["same"])
    }

    /// A reload applies only what changed in the file: an unchanged profile keeps its session, a
    /// changed one's session ends, a removed one goes, and a frontend's own profile stays.
    @Test func aReloadKeepsUnchangedProfilesSessionsAndTheFrontendsOwnProfiles() async throws {
        try await withEngine(settings: ["clientId": "c1"]) { engine, events, store in
            func file(_ profiles: [String: JSON]) -> [Profile] {
                profiles.map { Profile(name: $0.key, plugin: "swifttest", settings: $0.value, source: .config) }
            }
            _ = try await engine.requestOAuthTokens(RequestOAuthTokensParams(provider: "work", flow: .session, sessionId: "x"), requestID: 1)
            _ = try await engine.configureProfile(ConfigureProfileParams(name: "mine", plugin: "swifttest", settings: ["clientId": "m"]))

            var changes = await engine.reloadConfiguration(file(["work": ["clientId": "c1"], "extra": ["clientId": "e"]]))
            #expect(changes == ProfileChanges(added: ["extra"]))
            #expect(try await engine.checkSignInStatus(CheckSignInStatusParams(provider: "work")).state == .signedIn, "unchanged: its session stays")
            _ = try await engine.requestOAuthTokens(RequestOAuthTokensParams(provider: "extra", flow: .session, sessionId: "y"), requestID: 2)

            // The file names the frontend's profile too: the frontend's stays.
            changes = await engine.reloadConfiguration(file(["work": ["clientId": "c1"], "extra": ["clientId": "e2"], "mine": ["clientId": "f"]]))
            #expect(changes == ProfileChanges(changed: ["extra"]))
            #expect(events.changes.last?["provider"] == "extra" && events.changes.last?["reason"] == "profileChanged")
            #expect(try await store.load(SessionKey(profile: "extra", account: "y")) == nil)
            #expect(try await engine.checkSignInStatus(CheckSignInStatusParams(provider: "work")).state == .signedIn)
            let mine = await engine.profileList().first { $0.name == "mine" }
            #expect(mine?.source == .runtime)

            // Removed from the file: removed, with its session; the frontend's profile stays.
            changes = await engine.reloadConfiguration(file(["extra": ["clientId": "e2"]]))
            #expect(changes == ProfileChanges(removed: ["work"]))
            #expect(try await store.load(SessionKey(profile: "work", account: "x")) == nil)
            #expect(await engine.profileList().compactMap { $0.name } == ["extra", "mine"])
        }
    }
}

// MARK: - Harness

/// Notifications the engine sent, in order.
final class EventLog: Sendable {
    private struct State {
        var events: [(String, JSON)] = []
        var waiters: [(predicate: @Sendable (String, JSON) -> Bool, continuation: CheckedContinuation<Void, Never>)] = []
    }
    private let state = Mutex(State())

    var sink: SessionEngine.EventSink {
        { method, params in
            let ready = self.state.withLock { state in
                state.events.append((method, params))
                let done = state.waiters.filter { $0.predicate(method, params) }
                state.waiters.removeAll { $0.predicate(method, params) }
                return done
            }
            for waiter in ready { waiter.continuation.resume() }
        }
    }

    /// Returns once an event matching `predicate` has been logged (at once if one was).
    func wait(for predicate: @escaping @Sendable (String, JSON) -> Bool) async {
        await withCheckedContinuation { continuation in
            let seen = state.withLock { state in
                if state.events.contains(where: { predicate($0.0, $0.1) }) { return true }
                state.waiters.append((predicate, continuation))
                return false
            }
            if seen { continuation.resume() }
        }
    }
    var all: [(String, JSON)] { state.withLock { $0.events } }
    var methods: [String] { all.map(\.0) }
    /// The params of every session/changed notification.
    var changes: [JSON] { all.filter { $0.0 == "session/changed" }.map(\.1) }
}

/// An engine with profile "work" on the Swift test plugin, loaded from a private copy.
func withEngine(
    settings: JSON = ["clientId": "c1"], store: SessionStore = .inMemory(),
    _ body: (SessionEngine, EventLog, SessionStore) async throws -> Void
) async throws {
    let folder = try TemporaryFolder()
    defer { folder.remove() }
    try installSwiftTestPlugin(into: folder.path)
    let logger = Logger(label: "authbridge.tests", factory: { _ in SwiftLogNoOpLogHandler() })
    let reports = PluginLoader(folders: [folder.path], logger: logger).loadAll()
    let plugin = try #require(reports.first?.plugin, "the Swift test plugin did not load: \(reports.map(\.json))")
    let events = EventLog()
    let engine = SessionEngine(
        plugins: [plugin], profiles: [Profile(name: "work", plugin: "swifttest", settings: settings, source: .config)],
        store: store, logger: logger,
        installation: { ["id": "test-installation", "name": "test"] }, emit: events.sink)
    try await body(engine, events, store)
    plugin.shutdown()
}
