import AuthBridgeHost
import AuthBridgeJSON
import AuthBridgeRPC
import AuthBridgeSession
import BridgeTestSupport
import Testing
import Logging
import TestSupport

#if canImport(Glibc)
import Glibc
#endif

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

    /// Issue 32: a connection's `initialize` is the answer the last one got, given on its reader
    /// thread, while nothing it shows has changed; a change (a profile configured) is shown to the
    /// next connection at once.
    @Test func theNextConnectionsInitializeIsTheLastAnswerUntilSomethingItShowsChanges() async throws {
        let bridge = try BridgeHarness(profiles: [Self.swiftTestProfile])
        let given = try await bridge.call("initialize", ["protocolVersion": "1.0", "clientInfo": ["name": "first"]])
        let request = Request(id: .int(1), method: "initialize", params: ["protocolVersion": "1.0", "clientInfo": ["name": "next"]])
        let next = try OtherConnection(host: bridge.host)
        #expect(next.server.admit(request) == nil)
        let answered = next.server.answerAtOnce(request, ifBlocked: {})
        let atOnce = try #require(answered, "answered without a task")
        #expect(try JSON.parse(atOnce) == given)
        // Another shape (settings schemas) has no answer yet: it is made, then kept too.
        let schemas = Request(id: .int(1), method: "initialize", params: ["protocolVersion": "1.0", "settingsSchemas": true])
        let withSchemas = try OtherConnection(host: bridge.host)
        #expect(withSchemas.server.admit(schemas) == nil)
        let notYet = withSchemas.server.answerAtOnce(schemas, ifBlocked: {})
        #expect(notYet == nil)

        _ = try await bridge.call("configureProfile", ["name": "added", "plugin": "swifttest", "settings": ["clientId": "y"]])
        let after = try OtherConnection(host: bridge.host)
        #expect(after.server.admit(request) == nil)
        let stale = after.server.answerAtOnce(request, ifBlocked: {})
        #expect(stale == nil, "the kept answer lists one profile less")
        let made = try await after.server.handle(request)
        #expect(made["profiles"]?.arrayValue?.map { $0["name"] } == ["added", "s"])
        let last = try OtherConnection(host: bridge.host)
        #expect(last.server.admit(request) == nil)
        let kept = last.server.answerAtOnce(request, ifBlocked: {})
        #expect(try kept.map { try JSON.parse($0) } == made)
        for connection in [next, withSchemas, after, last] { connection.close() }
        await bridge.close()
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

/// A second connection to a harness's host, not served: its `BridgeServer` is driven directly.
private final class OtherConnection: Sendable {
    let server: BridgeServer
    private let connection: Connection
    private let fds: (Int32, Int32)

    init(host: BridgeHost) throws {
        var pair: [Int32] = [-1, -1]
        guard socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &pair) == 0 else { throw TestSupportError("socketpair failed") }
        fds = (pair[0], pair[1])
        connection = Connection(input: pair[0], output: pair[0], logger: Logger(label: "other") { _ in SwiftLogNoOpLogHandler() })
        server = BridgeServer(host: host, connection: connection)
    }

    func close() {
        connection.close()
        Glibc.close(fds.0)
        Glibc.close(fds.1)
    }
}
