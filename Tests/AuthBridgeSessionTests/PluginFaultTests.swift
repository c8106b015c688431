import AuthBridgeJSON
import AuthBridgeProtocol
@testable import AuthBridgePluginHost
@testable import AuthBridgeSession
@testable import AuthBridgeVault
import Logging
import Synchronization
import TestSupport
import Testing

/// A plugin whose hooks answer what the test says, and whose `check_session`
/// (unless told otherwise) never returns.
private final class ScriptedBackend: PluginBackend {
    let isolation = PluginIsolation.none
    private let answers: @Sendable (PluginHook) -> HookOutcome?
    private let held = Mutex<[@Sendable (HookOutcome) -> Void]>([])

    init(_ answers: @escaping @Sendable (PluginHook) -> HookOutcome?) { self.answers = answers }

    func load() throws(PluginLoadError) {}
    func implements(_ hook: PluginHook) -> Bool { true }
    func start(_ hook: PluginHook, input: JSON, call: HookCall, inline: Bool, done: @escaping @Sendable (HookOutcome) -> Void) {
        if let outcome = answers(hook) { done(outcome) } else { held.withLock { $0.append(done) } }
    }
    func abandon(_ call: HookCall, because: Abandonment) {}
    func shutdown(within grace: Duration) {}

    /// Lets the held hooks return (their outcomes are dropped).
    func finish() {
        for done in held.withLock({ $0 }) { done(.useDefault) }
    }
}

/// Issue 14: a plugin that crashes or hangs must never cost the user a session.
@Suite("Plugin faults in the engine", .serialized)
struct PluginFaultTests {
    private static let manifest = try! PluginManifest(json: ["id": "fake", "version": "1.0.0", "abi": "1.0", "library": "libfake.so"])
    private static let key = SessionKey(profile: "work", account: "a")

    private func withEngine(
        _ answers: @escaping @Sendable (PluginHook) -> HookOutcome?,
        expiresIn: Int64 = 3_600_000,
        _ body: (SessionEngine, LoadedPlugin, EventLog, SessionStore) async throws -> Void
    ) async throws {
        let backend = ScriptedBackend(answers)
        let logger = Logger(label: "authbridge.tests", factory: { _ in SwiftLogNoOpLogHandler() })
        let plugin = LoadedPlugin(
            manifest: Self.manifest, libraryPath: "/nowhere/libfake.so", backend: backend,
            deadlines: HookDeadlines(overrides: [.checkSession: .milliseconds(100), .refresh: .milliseconds(100)]), logger: logger)
        plugin.descriptor = ["id": "fake", "flows": ["session"], "capabilities": [], "settings": ["type": "object"]]
        let events = EventLog()
        let store = SessionStore.inMemory()
        let tokens = TokenSet(accessToken: "at-fault", refreshToken: "rt-fault", expiresAt: HostClock.nowMilliseconds() + expiresIn)
        try await store.save(StoredSession(tokens: tokens, account: ["id": "a"]), for: Self.key)
        let engine = SessionEngine(
            plugins: [plugin], profiles: [Profile(name: "work", plugin: "fake", settings: [:], source: .config)],
            store: store, logger: logger, installation: { ["id": "test-installation", "name": "test"] }, emit: events.sink)
        try await body(engine, plugin, events, store)
        backend.finish()
    }

    private static func configure(_ hook: PluginHook) -> HookOutcome? {
        hook == .configure ? .result(["issuer": "https://idp.example"]) : nil
    }

    /// Before: a hung check_session was never answered; and a plugin failure answered
    /// `offline`. Now it is `-32008` with the plugin's reason, and the session stays.
    @Test func aHungCheckSessionIsAPluginErrorAndTheSessionIsKept() async throws {
        try await withEngine(Self.configure) { engine, _, events, store async throws in
            let outcome = await answered(within: .seconds(20)) { () -> SessionError? in
                do throws(SessionError) {
                    _ = try await engine.checkSignInStatus(CheckSignInStatusParams(provider: "work"))
                    return nil
                } catch {
                    return error
                }
            }
            let error = try #require(outcome ?? nil, "checkSignInStatus was not answered, or not with an error")
            #expect(error.kind == .pluginError && error.reason == "pluginTimeout" && error.provider == "work")
            #expect(!error.retryable)
            #expect(try await store.load(Self.key)?.tokens.accessToken == "at-fault", "the session is kept")
            #expect(events.changes.isEmpty, "no session/changed for a plugin fault")
        }
    }

    @Test func aCrashedCheckSessionIsAPluginErrorNotOffline() async throws {
        let crashed = ProviderFailure.pluginCrashed(plugin: "fake", hook: .checkSession, detail: "killed by signal 11 (SIGSEGV)")
        try await withEngine({ $0 == .checkSession ? .failure(crashed) : Self.configure($0) }) { engine, _, _, store async throws in
            let error = await #expect(throws: SessionError.self, "answered a status") {
                try await engine.checkSignInStatus(CheckSignInStatusParams(provider: "work"))
            }
            #expect(error?.kind == .pluginError && error?.reason == "pluginCrashed")
            #expect(try await store.load(Self.key) != nil)
        }
    }

    /// A cancelled check (the frontend's `$/cancelRequest`, answered after the grace even when the
    /// hook ignores it) is `-32800`; it answered `offline` "The request was cancelled." before.
    @Test func aCancelledCheckIsCancelledNotOffline() async throws {
        let cancelled = ProviderFailure.cancelled
        try await withEngine({ $0 == .checkSession ? .failure(cancelled) : Self.configure($0) }) { engine, _, events, store async throws in
            let error = await #expect(throws: SessionError.self, "answered a status") {
                try await engine.checkSignInStatus(CheckSignInStatusParams(provider: "work"))
            }
            #expect(error?.kind == .userCancelled)
            #expect(try await store.load(Self.key) != nil)
            #expect(events.changes.isEmpty)
        }
    }

    /// A transient failure still answers `offline` (unchanged).
    @Test func aTransientFailureIsStillOffline() async throws {
        let offline = ProviderFailure.transient("timeout", "no answer")
        try await withEngine({ $0 == .checkSession ? .failure(offline) : Self.configure($0) }) { engine, _, _, _ async throws in
            #expect(try await engine.checkSignInStatus(CheckSignInStatusParams(provider: "work")).state == .offline)
        }
    }

    /// An expired token whose refresh hangs: `-32008`, the session kept.
    @Test func aHungRefreshIsAPluginErrorAndTheSessionIsKept() async throws {
        try await withEngine({ $0 == .checkSession ? .result(["state": "expired"]) : Self.configure($0) }, expiresIn: -1000) {
            engine, _, _, store async throws in
            let tokenError = await #expect(throws: SessionError.self, "a hung refresh handed out a token") {
                try await engine.getAccessToken(GetAccessTokenParams(provider: "work"))
            }
            #expect(tokenError?.kind == .pluginError && tokenError?.reason == "pluginTimeout")
            let statusError = await #expect(throws: SessionError.self, "a hung refresh answered a status") {
                try await engine.checkSignInStatus(CheckSignInStatusParams(provider: "work"))
            }
            #expect(statusError?.reason == "pluginTimeout")
            #expect(try await store.load(Self.key)?.tokens.refreshToken == "rt-fault")
        }
    }

    /// The user asked to sign out: a crashed `revoke` is reported, the local session still goes.
    @Test func signOutWipesLocallyWhenRevokeCrashes() async throws {
        let crashed = ProviderFailure.pluginCrashed(plugin: "fake", hook: .revoke, detail: "exited with status 3")
        try await withEngine({ $0 == .revoke ? .failure(crashed) : Self.configure($0) }) { engine, _, events, store async throws in
            let answer = try await engine.signOut(SignOutParams(provider: "work"), requestID: 1)
            #expect(answer.failures.map(\.reason).contains("pluginCrashed"), "\(answer)")
            #expect(try await store.load(Self.key) == nil)
            #expect(events.changes.last?["state"] == "signedOut")
        }
    }

    @Test func aRefusedPluginShowsInItsProfilesAndFailsFast() async throws {
        try await withEngine(Self.configure) { engine, plugin, _, store async throws in
            let start = ContinuousClock.now
            for second in 0..<3 { plugin.health.record(.crashed(detail: "killed by signal 6 (SIGABRT)"), at: start + .seconds(second)) }
            let info = try #require(await engine.profileList().first)
            #expect(info.status == .error)
            #expect(info.message?.contains("stopped after 3 failures") == true)
            let error = await #expect(throws: SessionError.self, "a refused plugin answered") {
                try await engine.checkSignInStatus(CheckSignInStatusParams(provider: "work"))
            }
            #expect(error?.kind == .pluginError && error?.reason == "pluginCrashed")
            #expect(try await store.load(Self.key) != nil)
        }
    }

    /// Another process held the account's lock past the bound: `-32006` accountBusy, retryable.
    @Test func aLockHeldElsewhereIsAccountBusy() async throws {
        try await withEngine({ $0 == .checkSession ? .result(["state": "expired"]) : Self.configure($0) }, expiresIn: -1000) {
            engine, _, _, store async throws in
            let holding = AsyncStream<Void>.makeStream()
            let release = AsyncStream<Void>.makeStream()
            let holder = Task {
                try await store.withExclusiveAccess(to: Self.key) {
                    holding.continuation.yield()
                    for await _ in release.stream { break }
                }
            }
            for await _ in holding.stream { break }
            let error = await ProfileFileLock.$maximumWait.withValue(.milliseconds(100)) { () -> SessionError? in
                do throws(SessionError) {
                    _ = try await engine.getAccessToken(GetAccessTokenParams(provider: "work"))
                    return nil
                } catch {
                    return error
                }
            }
            #expect(error?.kind == .timeout && error?.reason == "accountBusy" && error?.retryable == true)
            #expect(error?.message.contains("Another authbridge process") == true)
            release.continuation.yield()
            try await holder.value
        }
        let mapped = await SessionEngineTestsProbe.storageError(VaultError(.lockTimeout, "held"))
        #expect(mapped.kind == .timeout && mapped.reason == "accountBusy")
        #expect(SessionError(ProviderFailure.transient("accountBusy", "busy"), provider: "p").kind == .timeout)
    }
}

/// `storageError` of an engine with nothing in it.
private enum SessionEngineTestsProbe {
    static func storageError(_ error: any Error) async -> SessionError {
        let engine = SessionEngine(
            plugins: [], profiles: [], store: SessionStore.inMemory(),
            logger: Logger(label: "authbridge.tests", factory: { _ in SwiftLogNoOpLogHandler() }), emit: { _, _ in })
        return await engine.storageError(error, profile: "p")
    }
}
