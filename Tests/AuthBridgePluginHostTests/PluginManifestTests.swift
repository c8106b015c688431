import AuthBridgeJSON
import AuthBridgePluginABI
import AuthBridgePluginHost
import Testing

@Suite("Plugin manifest")
struct PluginManifestTests {
    private let valid: [String: JSON] = [
        "id": "oidc", "version": "0.1.0", "abi": "1.2", "library": "libauthbridge-oidc.so", "description": "OpenID Connect",
    ]

    private func refusal(_ json: JSON) -> PluginLoadError? {
        do {
            _ = try PluginManifest(json: json)
            return nil
        } catch {
            return error
        }
    }

    @Test func validManifestIsRead() throws {
        let manifest = try PluginManifest(json: .object(valid))
        #expect(manifest.id == "oidc")
        #expect(manifest.version == "0.1.0")
        #expect(manifest.abiMajor == 1 && manifest.abiMinor == 2)
        #expect(manifest.library == "libauthbridge-oidc.so")
        #expect(manifest.description == "OpenID Connect")
    }

    @Test func descriptionIsOptional() throws {
        var members = valid
        members["description"] = nil
        #expect(try PluginManifest(json: .object(members)).description == "")
    }

    @Test(arguments: ["id", "version", "abi", "library"])
    func requiredFieldMissingEmptyOrNotAString(_ field: String) {
        for replacement: JSON? in [nil, "", 1, .null] {
            var members = valid
            members[field] = replacement
            let error = refusal(.object(members))
            #expect(error?.reason == .invalidManifest, "\(field) = \(String(describing: replacement))")
            #expect(error?.message.contains("\"\(field)\"") == true)
        }
    }

    @Test func notAnObjectIsInvalid() {
        #expect(refusal(["oidc"])?.reason == .invalidManifest)
        #expect(refusal("oidc")?.reason == .invalidManifest)
    }

    @Test(arguments: ["a b", "a/b", "../x", "ünï", "id\u{0}", "semi;colon"])
    func idWithForbiddenCharactersIsInvalid(_ id: String) {
        var members = valid
        members["id"] = .string(id)
        #expect(refusal(.object(members))?.reason == .invalidManifest)
    }

    @Test(arguments: ["my-plugin_2.0", "A", "x.y"])
    func idWithAllowedCharactersIsAccepted(_ id: String) throws {
        var members = valid
        members["id"] = .string(id)
        #expect(try PluginManifest(json: .object(members)).id == id)
    }

    @Test(arguments: ["1", "x.y", "1.0.0", "1.", ".0", "1.x", "v1.0"])
    func malformedABIIsInvalid(_ abi: String) {
        var members = valid
        members["abi"] = .string(abi)
        let error = refusal(.object(members))
        #expect(error?.reason == .invalidManifest)
        #expect(error?.message.contains(abi) == true)
    }

    @Test(arguments: ["lib/x.so", "../libx.so", "/usr/lib/libx.so", "..", "."])
    func libraryMustBeAFileNameInTheFolder(_ library: String) {
        var members = valid
        members["library"] = .string(library)
        #expect(refusal(.object(members))?.reason == .invalidManifest)
    }
}

@Suite("Plugin manifest: isolation and deadlines")
struct ManifestIsolationTests {
    private let base: [String: JSON] = ["id": "p", "version": "1", "abi": "1.0", "library": "libp.so"]

    private func manifest(_ extra: [String: JSON]) throws(PluginLoadError) -> PluginManifest {
        try PluginManifest(json: .object(base.merging(extra) { $1 }))
    }

    @Test func isolationAndDeadlinesAreRead() throws {
        let read = try manifest(["isolation": "process", "deadlines": ["check_session": 1500, "refresh": 120_000]])
        #expect(read.isolation == .process)
        #expect(read.deadlines == [.checkSession: .milliseconds(1500), .refresh: .milliseconds(120_000)])
        #expect(HookDeadlines(overrides: read.deadlines)[.checkSession] == .milliseconds(1500))
        #expect(HookDeadlines(overrides: read.deadlines)[.revoke] == .seconds(90))
        #expect(try manifest([:]).isolation == nil)
    }

    @Test(
        arguments: [
            ["isolation": "sandbox"], ["isolation": true], ["deadlines": ["check_sesion": 1000]], ["deadlines": ["refresh": 99]],
            ["deadlines": ["refresh": 600_001]], ["deadlines": ["refresh": "10s"]], ["deadlines": [1000]],
        ] as [[String: JSON]])
    func badValuesAreInvalidManifests(_ extra: [String: JSON]) {
        #expect(throws: PluginLoadError.self) { try manifest(extra) }
        do { _ = try manifest(extra) } catch { #expect(error.reason == .invalidManifest) }
    }
}

@Suite("Isolation policy")
struct IsolationPolicyTests {
    private func manifest(_ id: String, isolation: PluginIsolation? = nil) throws -> PluginManifest {
        var json: [String: JSON] = ["id": .string(id), "version": "1", "abi": "1.0", "library": "lib.so"]
        if let isolation { json["isolation"] = .string(isolation.rawValue) }
        return try PluginManifest(json: .object(json))
    }

    @Test func theOriginDecidesByDefault() throws {
        let policy = IsolationPolicy()
        #expect(policy.isolation(for: try manifest("a"), origin: .installTree).0 == .none)
        #expect(policy.isolation(for: try manifest("a"), origin: .user).0 == .process)
        #expect(policy.isolation(for: try manifest("a", isolation: .process), origin: .installTree).0 == .process)
    }

    /// A stranger's library cannot ask its way into the host; the person running it can.
    @Test func aUserFolderManifestCannotLowerIsolation() throws {
        let (isolation, warning) = IsolationPolicy().isolation(for: try manifest("a", isolation: PluginIsolation.none), origin: .user)
        #expect(isolation == .process)
        #expect(warning?.contains("--plugin-isolation a=none") == true)
        let chosen = try IsolationPolicy(options: ["a=none"])
        #expect(chosen.isolation(for: try manifest("a", isolation: PluginIsolation.none), origin: .user) == (.none, nil))
    }

    @Test func aPluginsOwnOptionWinsOverTheBareOne() throws {
        let policy = try IsolationPolicy(options: ["none", "b=process"])
        #expect(policy.isolation(for: try manifest("a"), origin: .user).0 == .none)
        #expect(policy.isolation(for: try manifest("b"), origin: .installTree).0 == .process)
    }

    @Test(arguments: ["", "sandbox", "=none", "a=", "a=b=none"])
    func badOptionsAreRefused(_ option: String) {
        #expect(throws: IsolationOptionError.self) { try IsolationPolicy(options: [option]) }
    }
}
