import AuthBridgeJSON
@testable import AuthBridgePluginHost
import TestSupport
import Testing

@Suite("Loaded Swift test plugin")
struct LoadedPluginTests {
    private let environment = StubEnvironment(standard: { hook, input in
        hook == .configure ? .success(input["settings"] ?? [:]) : .failure(ProviderFailure(.internal, reason: "unavailable", message: "-"))
    })

    private func withPlugin(_ body: (LoadedPlugin) throws -> Void) throws {
        let folder = try TemporaryFolder()
        defer { folder.remove() }
        try installSwiftTestPlugin(into: folder.path)
        let reports = loadAll(folder.path)
        let plugin = try #require(reports.first?.plugin, "\(String(describing: reports.first?.refusal))")
        try body(plugin)
    }

    @Test func descriptorAndReport() throws {
        try withPlugin { plugin in
            #expect(plugin.descriptor["id"] == "swifttest")
            #expect(plugin.descriptor["flows"] == ["external", "session"])
            #expect(plugin.version == "1.0.0")
            let report = PluginReport(id: "swifttest", manifestPath: "m", status: .loaded(plugin)).json
            #expect(report["status"] == "loaded" && report["displayName"] == "Swift test provider")
            #expect(report["settings"]?["required"] == ["clientId"])
        }
    }

    @Test func everyHookIsImplementedAndOnlyPureHooksRunInline() throws {
        try withPlugin { plugin in
            #expect(PluginHook.allCases.allSatisfy(plugin.implements))
            #expect(plugin.implements(.refresh))
            #expect(plugin.inlineHooks == [.authorizeRequest, .classifyResponse])
        }
    }

    @Test func checkSessionComparesWithTheHostClock() throws {
        try withPlugin { plugin in
            let now = HostClock.nowMilliseconds()
            for (expiresAt, state) in [(now - 3_600_000, "expired"), (now + 86_400_000, "valid")] {
                let outcome = plugin.invokeBlocking(
                    .checkSession, input: ["tokens": ["expiresAt": .int(expiresAt)]],
                    environment: environment)
                guard case .result(let answer) = outcome else {
                    Issue.record("\(outcome)")
                    continue
                }
                #expect(answer["state"] == .string(state))
            }
        }
    }

    @Test func aDefinitiveFailureComesBackClassified() throws {
        try withPlugin { plugin in
            let outcome = plugin.invokeBlocking(
                .completeSignIn, input: ["flow": "session", "sessionId": "bad"],
                environment: environment)
            guard case .failure(let failure) = outcome else {
                Issue.record("\(outcome)")
                return
            }
            #expect(failure.kind == .definitive)
            #expect(failure.reason == "invalid_grant")
            #expect(failure.message == "session id refused")
        }
    }

    @Test func hooksReachTheHostsStandardSteps() throws {
        try withPlugin { plugin in
            let outcome = plugin.invokeBlocking(.configure, input: ["settings": ["clientId": "c1"]], environment: environment)
            guard case .result(let config) = outcome else {
                Issue.record("\(outcome)")
                return
            }
            #expect(config == ["clientId": "c1", "configuredBy": "swifttest"])
        }
    }

    @Test func asyncInvocationRunsOnAWorkerAndShutdownStopsHooks() async throws {
        let folder = try TemporaryFolder()
        defer { folder.remove() }
        try installSwiftTestPlugin(into: folder.path)
        let plugin = try #require(loadAll(folder.path).first?.plugin)
        let outcome = await plugin.invoke(.completeSignIn, input: ["flow": "session", "sessionId": "s"], environment: environment)
        guard case .result(let answer) = outcome else {
            Issue.record("\(outcome)")
            return
        }
        #expect(answer["tokens"]?["accessToken"] == "sat-s")
        #expect(answer["account"]?["id"] == "s")
        plugin.shutdown()
        guard case .failure(let failure) = await plugin.invoke(.refresh, input: [:], environment: environment) else {
            Issue.record("a hook ran after shutdown")
            return
        }
        #expect(failure.reason == "pluginShutDown")
    }
}
