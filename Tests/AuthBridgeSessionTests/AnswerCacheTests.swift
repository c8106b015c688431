import AuthBridgeJSON
import AuthBridgeProtocol
import AuthBridgePluginHost
@testable import AuthBridgeSession
import Logging
import TestSupport
import Testing

/// Answers given without the engine (`accessTokenAtOnce`, `statusAtOnce`):
/// the same as the engine's, and gone the moment anything they depend on
/// changes — here, in another process (another engine on the same vault
/// folder), or on the clock.
@Suite("Answers at once")
struct AnswerCacheTests {
    private func atOnce(_ engine: SessionEngine, account: String? = nil, minimumValidity: Int64 = 60_000) -> JSON? {
        engine.accessTokenAtOnce("work", account: account, minimumValidity: minimumValidity).flatMap { try? JSON.parse($0) }
    }

    @Test func aValidSessionIsAnsweredAtOnceAsTheEngineAnsweredIt() async throws {
        try await withEngine { engine, _, _ in
            _ = try await engine.requestOAuthTokens(RequestOAuthTokensParams(provider: "work", flow: .session, sessionId: "x"), requestID: 1)
            #expect(atOnce(engine) == nil, "nothing is answered before the engine answered once")
            let answer = try await engine.getAccessToken(GetAccessTokenParams(provider: "work"))
            #expect(answer.accessToken == "sat-x")
            #expect(atOnce(engine) == answer.wire)
            #expect(atOnce(engine, account: "x") == nil, "a call naming the account is another entry")
            #expect(try await engine.getAccessToken(GetAccessTokenParams(provider: "work", account: "x")) == answer)
            #expect(atOnce(engine, account: "x") == answer.wire)
        }
    }

    @Test func aRefreshHereInvalidatesAndTheNewTokenIsAnsweredNext() async throws {
        try await withEngine { engine, _, _ in
            _ = try await engine.requestOAuthTokens(RequestOAuthTokensParams(provider: "work", flow: .session, sessionId: "x"), requestID: 1)
            _ = try await engine.getAccessToken(GetAccessTokenParams(provider: "work"))
            #expect(atOnce(engine)?["accessToken"] == "sat-x")
            #expect(try await engine.getAccessToken(GetAccessTokenParams(provider: "work", forceRefresh: true)).accessToken == "sat2-x")
            #expect(atOnce(engine) == nil)
            #expect(try await engine.getAccessToken(GetAccessTokenParams(provider: "work")).accessToken == "sat2-x")
            #expect(atOnce(engine)?["accessToken"] == "sat2-x")
        }
    }

    @Test func aSignOutHereInvalidates() async throws {
        try await withEngine { engine, _, _ in
            _ = try await engine.requestOAuthTokens(RequestOAuthTokensParams(provider: "work", flow: .session, sessionId: "x"), requestID: 1)
            _ = try await engine.getAccessToken(GetAccessTokenParams(provider: "work"))
            #expect(atOnce(engine) != nil)
            _ = try await engine.signOut(SignOutParams(provider: "work"), requestID: nil)
            #expect(atOnce(engine) == nil)
            #expect(engine.statusAtOnce("work", account: nil, requestID: 2, runningHooks: true) == nil)
        }
    }

    @Test func aProfileChangeInvalidates() async throws {
        try await withEngine { engine, _, _ in
            _ = try await engine.requestOAuthTokens(RequestOAuthTokensParams(provider: "work", flow: .session, sessionId: "x"), requestID: 1)
            _ = try await engine.getAccessToken(GetAccessTokenParams(provider: "work"))
            #expect(atOnce(engine) != nil)
            _ = try await engine.configureProfile(ConfigureProfileParams(name: "work", plugin: "swifttest", settings: ["clientId": "other"]))
            #expect(atOnce(engine) == nil)
        }
    }

    @Test func aRevokedLicenseInvalidatesAndIsNeverKept() async throws {
        try await withEngine { engine, _, store in
            _ = try await engine.requestOAuthTokens(RequestOAuthTokensParams(provider: "work", flow: .session, sessionId: "x"), requestID: 1)
            _ = try await engine.getAccessToken(GetAccessTokenParams(provider: "work"))
            #expect(atOnce(engine) != nil)
            let key = SessionKey(profile: "work", account: "x")
            let session = try #require(try await store.load(key))
            _ = try await engine.markLicenseRevoked(key, session: session, context: try await engine.context(for: "work"), message: "gone")
            #expect(atOnce(engine) == nil)
            await #expect(throws: SessionError.self) { try await engine.getAccessToken(GetAccessTokenParams(provider: "work")) }
            #expect(atOnce(engine) == nil)
        }
    }

    @Test func aTokenPastTheCallersMinimumValidityIsLeftToTheEngine() async throws {
        try await withEngine { engine, _, store in
            // "short" lives 1 s: usable at once while half its life remains, then the engine refreshes.
            _ = try await engine.requestOAuthTokens(RequestOAuthTokensParams(provider: "work", flow: .session, sessionId: "short"), requestID: 1)
            let first = try await engine.getAccessToken(GetAccessTokenParams(provider: "work"))
            let expiresAt = try #require(first.expiresAt)
            // Half of the life the engine recorded (expiry minus the moment it stored the
            // tokens): under load that moment comes later than the plugin's, so it is under 500 ms.
            let stored = try #require(try await store.load(SessionKey(profile: "work", account: "short")))
            let minimum = stored.tokens.effectiveMinimumValidity(60_000)
            #expect(minimum <= 500)
            // Whatever the moment, an answer at once is one the rule allows; by expiry there is none.
            // The clock is read before the call, so a pause after it cannot fail a correct answer.
            let passed = await eventually(within: .seconds(10)) {
                let before = HostClock.nowMilliseconds()
                let answer = engine.accessTokenAtOnce("work", account: nil, minimumValidity: 60_000).flatMap { try? JSON.parse($0) }
                if answer != nil { #expect(expiresAt - before >= minimum) }
                return answer == nil
            }
            #expect(passed)
            #expect(try await engine.getAccessToken(GetAccessTokenParams(provider: "work")).accessToken == "sat2-short")
        }
    }

    @Test func aCheckSessionThatDoesNotRunInlineIsLeftToTheEngine() async throws {
        try await withEngine { engine, _, _ in
            // The Swift test plugin's check_session runs on a worker thread (not in its inlineHooks).
            _ = try await engine.requestOAuthTokens(RequestOAuthTokensParams(provider: "work", flow: .session, sessionId: "x"), requestID: 1)
            #expect(try await engine.checkSignInStatus(CheckSignInStatusParams(provider: "work")).reason == "valid")
            #expect(engine.statusAtOnce("work", account: nil, requestID: 2, runningHooks: true) == nil)
        }
    }

    /// Two engines on one encrypted-file vault folder: two processes as far as
    /// the vault can tell. A refresh or a sign-out in one is noticed by the
    /// other's very next call.
    @Test func aRefreshOrSignOutInAnotherProcessIsNoticedOnTheNextCall() async throws {
        let folder = try TemporaryFolder()
        defer { folder.remove() }
        let key = VaultKeySource.secret("b5934ee0af8b00d7e960e8fedce2d0d98baf308b7d0cbf69e17a8efd0ff7cba0")
        let here = SessionStore(vault: EncryptedFileVault(folder: folder.path + "/vault", keySource: key))
        let there = SessionStore(vault: EncryptedFileVault(folder: folder.path + "/vault", keySource: key))
        try await withEngine(store: here) { engine, _, _ in
            try await withEngine(store: there) { other, _, _ in
                _ = try await engine.requestOAuthTokens(RequestOAuthTokensParams(provider: "work", flow: .session, sessionId: "x"), requestID: 1)
                // A record written moments ago is not vouched for (its times may not have settled): ask until it is.
                #expect(try await answeredAtOnce(engine)?["accessToken"] == "sat-x")
                #expect(try await other.getAccessToken(GetAccessTokenParams(provider: "work", forceRefresh: true)).accessToken == "sat2-x")
                #expect(atOnce(engine) == nil, "another process refreshed")
                #expect(try await answeredAtOnce(engine)?["accessToken"] == "sat2-x")
                _ = try await other.signOut(SignOutParams(provider: "work"), requestID: nil)
                #expect(atOnce(engine) == nil, "another process signed out")
                await #expect(throws: SessionError.self) { try await engine.getAccessToken(GetAccessTokenParams(provider: "work")) }
            }
        }
    }

    /// Asks the engine until its answer is also given at once (bounded: the
    /// vault vouches for a record once its times are a few ms old).
    private func answeredAtOnce(_ engine: SessionEngine) async throws -> JSON? {
        let end = ContinuousClock.now + .seconds(10)
        while ContinuousClock.now < end {
            let answer = try await engine.getAccessToken(GetAccessTokenParams(provider: "work"))
            if let quick = atOnce(engine) {
                #expect(quick == answer.wire)
                return quick
            }
        }
        return nil
    }
}
