import AuthBridgeJSON
import AuthBridgeRPC
import AuthBridgeSession
import BridgeTestSupport
import Testing
import TestSupport

/// Bridge methods over a bridge served in-process (`BridgeHarness`): the lifecycle, the errors a
/// frontend relies on, and cancellation, without spawning `authbridge`.
@Suite("Bridge methods in-process")
struct BridgeMethodTests {
    /// Profile "s" of the Swift test plugin.
    private static let swiftTestProfile = Profile(name: "s", plugin: "swifttest", settings: ["clientId": "x"], source: .config)

    @Test func initializeNegotiatesTheMinorAndListsThePluginsAndProfiles() async throws {
        let bridge = try BridgeHarness(profiles: [Self.swiftTestProfile])
        let result = try await bridge.call("initialize", ["protocolVersion": "1.7", "clientInfo": ["name": "test"]])
        await bridge.close()
        #expect(result["protocolVersion"] == "1.0", "a newer minor is negotiated down to the host's")
        #expect(result["serverInfo"]?["name"] == "authbridge")
        #expect(result["capabilities"]?["cancellation"] == true)
        let providers = result["providers"]?.arrayValue ?? []
        #expect(providers.map { $0["id"] } == ["swifttest"])
        #expect(providers.first?["status"] == "loaded")
        #expect(result["profiles"]?.arrayValue?.map { $0["name"] } == ["s"])
    }

    @Test func aBridgeWithoutPluginsListsNone() async throws {
        let bridge = try BridgeHarness(plugins: .none)
        let result = try await bridge.initialize()
        await bridge.close()
        #expect(result["providers"] == [])
        #expect(result["profiles"] == [])
    }

    @Test func aRequestBeforeInitializeIsServerNotInitialized() async throws {
        let bridge = try BridgeHarness(plugins: .none)
        let error = await bridge.error("listAccounts")
        let initialized = try await bridge.initialize()
        let after = await bridge.error("listAccounts")
        await bridge.close()
        #expect(error?.code.rawValue == -32002)
        #expect(initialized["protocolVersion"] == "1.0", "the refused request did not spoil initialize")
        #expect(after == nil)
    }

    @Test func configureProfileWithAnUnknownPluginIsRefusedAndAddsNoProfile() async throws {
        let bridge = try BridgeHarness()
        try await bridge.initialize()
        let error = await bridge.error("configureProfile", ["name": "x", "plugin": "no-such-plugin", "settings": [:]])
        let profiles = try await bridge.call("listProviders")["profiles"]
        await bridge.close()
        #expect(error?.code.rawValue == -32003)
        #expect(error?.data?["reason"] == "unknownPlugin")
        #expect(error?.data?["field"] == "plugin")
        #expect(profiles == [])
    }

    @Test func listAccountsOnAnEmptyMemoryVaultIsEmpty() async throws {
        let bridge = try BridgeHarness(profiles: [Self.swiftTestProfile])
        try await bridge.initialize()
        let accounts = try await bridge.call("listAccounts")
        await bridge.close()
        #expect(accounts == ["accounts": []])
    }

    @Test func shutdownRefusesWhatFollowsAndExitEndsTheConnectionWithCode0() async throws {
        let bridge = try BridgeHarness(plugins: .none)
        try await bridge.initialize()
        let shutdown = try await bridge.call("shutdown")
        let refused = await bridge.error("listAccounts")
        bridge.notify("exit")
        let ending = await bridge.ending()
        await bridge.close()
        #expect(shutdown == .null)
        #expect(refused?.code == .invalidRequest)
        #expect(ending == .exit(code: 0))
    }

    @Test func exitWithoutShutdownEndsWithCode1() async throws {
        let bridge = try BridgeHarness(plugins: .none)
        try await bridge.initialize()
        bridge.notify("exit")
        let ending = await bridge.ending()
        await bridge.close()
        #expect(ending == .exit(code: 1))
    }

    @Test func cancelRequestEndsASlowSignInWithRequestCancelled() async throws {
        let bridge = try BridgeHarness(profiles: [Self.swiftTestProfile])
        try await bridge.initialize()
        // The Swift test plugin's session sign-in "slow" runs for 30 s unless it is cancelled.
        let slow = Task { await bridge.error("requestOAuthTokens", ["provider": "s", "flow": "session", "sessionId": "slow"]) }
        // Cancelled once the plugin runs it (its progress says it is exchanging).
        let running = await bridge.notification { method, params in method == "signIn/progress" && params["stage"] == "exchanging" }
        slow.cancel() // the client sends $/cancelRequest
        let answer = await answered(within: .seconds(10)) { await slow.value }
        await bridge.close()
        #expect(running, "the slow sign-in reported it was exchanging")
        #expect(answer??.code == .requestCancelled, "the cancelled sign-in was answered -32800 well before its 30 s")
    }
}
