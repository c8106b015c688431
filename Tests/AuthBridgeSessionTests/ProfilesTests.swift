import AuthBridgeJSON
@testable import AuthBridgeSession
import Testing

#if canImport(Glibc)
import Glibc
#endif

@Suite("Configuration file")
struct ConfigurationFileTests {
    private func problem(_ json: JSON) -> String? {
        do {
            _ = try ConfigurationFile.profiles(from: json)
            return nil
        } catch {
            return error.message
        }
    }

    @Test func validProfilesAreReadInNameOrder() throws {
        let profiles = try ConfigurationFile.profiles(from: [
            "profiles": [
                "work": ["plugin": "oidc", "settings": ["issuer": "https://idp.example", "clientId": "c1"]],
                "home": ["plugin": "swifttest"],
            ],
            "futureMember": true,
        ])
        #expect(profiles.map(\.name) == ["home", "work"])
        #expect(profiles[0] == Profile(name: "home", plugin: "swifttest", settings: [:], source: .config))
        #expect(profiles[1].settings["clientId"] == "c1")
        #expect(profiles.allSatisfy { $0.source == .config })
    }

    @Test func noProfilesIsAnEmptyList() throws {
        #expect(try ConfigurationFile.profiles(from: [:]).isEmpty)
        #expect(try ConfigurationFile.profiles(from: ["profiles": [:]]).isEmpty)
    }

    @Test func theFileMustBeAnObject() {
        #expect(problem([]) != nil)
        #expect(problem("profiles") != nil)
    }

    @Test(arguments: [["work"], "work", 1, .null] as [JSON])
    func profilesMustBeAnObject(_ profiles: JSON) {
        #expect(problem(["profiles": profiles])?.contains("\"profiles\"") == true)
    }

    @Test(arguments: [["settings": [:]], ["plugin": 7], ["plugin": .null], "oidc"] as [JSON])
    func aProfileMustNameItsPlugin(_ entry: JSON) {
        let message = problem(["profiles": ["work": entry]])
        #expect(message?.contains("profile \"work\"") == true)
        #expect(message?.contains("\"plugin\"") == true)
    }

    @Test(arguments: [["a"], "x", 1] as [JSON])
    func settingsMustBeAnObject(_ settings: JSON) {
        let message = problem(["profiles": ["work": ["plugin": "oidc", "settings": settings]]])
        #expect(message == "profile \"work\": \"settings\" must be an object")
    }
}

@Suite("Settings validation")
struct SettingsValidatorTests {
    private let schema: JSON = [
        "type": "object",
        "required": ["clientId"],
        "properties": [
            "clientId": ["type": "string"], "port": ["type": "integer"], "ratio": ["type": "number"],
            "pkce": ["type": "boolean"], "scopes": ["type": "array"], "extra": ["type": "object"], "free": [:],
        ],
    ]

    @Test func aRequiredSettingMissingIsNamed() throws {
        let problem = try #require(SettingsValidator.problem(in: ["port": 1], schema: schema))
        #expect(problem.field == "settings.clientId")
        #expect(problem.message == "is required by this plugin")
    }

    @Test(
        arguments: [
            ("clientId", 42, "must be of type string, not integer"),
            ("port", "8080", "must be of type integer, not string"),
            ("port", 1.5, "must be of type integer, not number"),
            ("ratio", "x", "must be of type number, not string"),
            ("pkce", "yes", "must be of type boolean, not string"),
            ("scopes", "openid", "must be of type array, not string"),
            ("extra", [1], "must be of type object, not array"),
        ] as [(String, JSON, String)])
    func aSettingOfTheWrongTypeIsNamed(_ key: String, _ value: JSON, _ message: String) throws {
        var settings: [String: JSON] = ["clientId": "c1"]
        settings[key] = value
        let problem = try #require(SettingsValidator.problem(in: .object(settings), schema: schema))
        #expect(problem.field == "settings.\(key)")
        #expect(problem.message == message)
    }

    @Test func matchingSettingsPass() {
        let settings: JSON = [
            "clientId": "c1", "port": 8080, "ratio": 1, "pkce": true, "scopes": ["openid"],
            "extra": [:], "free": [1, "two"], "unknown": .null,
        ]
        #expect(SettingsValidator.problem(in: settings, schema: schema) == nil)
        #expect(SettingsValidator.problem(in: ["port": 2.0, "clientId": "c"], schema: schema) == nil)
        #expect(SettingsValidator.problem(in: ["anything": 1], schema: nil) == nil)
    }

    @Test func settingsMustBeAnObject() {
        #expect(SettingsValidator.problem(in: ["clientId"], schema: nil)?.field == "settings")
        #expect(SettingsValidator.problem(in: .null, schema: schema)?.field == "settings")
    }

    /// Issue 25 §2.4: `dpop: true`, a key no plugin reads, was accepted in silence, so a typo went
    /// unnoticed. Keys outside the schema are warned about (not refused), naming the profile and the
    /// key, with the closest known key when one is close; host-level settings are known keys.
    @Test func settingsNothingReadsAreNamedWithTheClosestKnownKey() {
        let settings: JSON = [
            "clientId": "c1", "dpop": true, "clientID": "c2", "scope": ["openid"], "loopbackPort": 4596, "loopbakPath": "/cb",
        ]
        let warnings = SettingsValidator.unknownSettings(in: settings, schema: schema, profile: "dev", plugin: "oidc")
        #expect(
            warnings == [
                #"profile "dev": setting "clientID" is not one the oidc plugin or the host reads (ignored); did you mean "clientId"?"#,
                #"profile "dev": setting "dpop" is not one the oidc plugin or the host reads (ignored)"#,
                #"profile "dev": setting "loopbakPath" is not one the oidc plugin or the host reads (ignored); did you mean "loopbackPath"?"#,
                #"profile "dev": setting "scope" is not one the oidc plugin or the host reads (ignored); did you mean "scopes"?"#,
            ])
        // A schema that names no properties, or allows any, says nothing is unknown.
        #expect(SettingsValidator.unknownSettings(in: settings, schema: ["type": "object"], profile: "dev", plugin: "x").isEmpty)
        let open = schema.setting("additionalProperties", true)
        #expect(SettingsValidator.unknownSettings(in: settings, schema: open, profile: "dev", plugin: "x").isEmpty)
        #expect(SettingsValidator.unknownSettings(in: settings, schema: nil, profile: "dev", plugin: "x").isEmpty)
    }

    @Test(arguments: [("kitten", "sitting", 3), ("", "abc", 3), ("same", "same", 0), ("flaw", "lawn", 2)] as [(String, String, Int)])
    func editDistance(_ a: String, _ b: String, _ distance: Int) {
        #expect(SettingsValidator.editDistance(Array(a.unicodeScalars), Array(b.unicodeScalars)) == distance)
    }
}

@Suite("Configuration loader")
struct ConfigurationLoaderTests {
    private func file(_ text: String) throws -> String {
        var template = Array("/tmp/authbridge-config-test-XXXXXX".utf8CString)
        let fd = template.withUnsafeMutableBufferPointer { mkstemp($0.baseAddress!) }
        try #require(fd >= 0)
        let bytes = Array(text.utf8)
        _ = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        close(fd)
        return String(cString: template.withUnsafeBufferPointer { $0.baseAddress! })
    }

    private func message(_ result: Result<LoadedConfiguration, ConfigurationError>) -> String? {
        if case .failure(let error) = result { return error.message }
        return nil
    }

    @Test func aFileThatIsNotJSONIsAnErrorNamingTheFileAndThePlace() throws {
        let path = try file("{\"profiles\": {\"a\": {\"plugin\": \"oidc\",}}}")
        defer { unlink(path) }
        let text = try #require(message(ConfigurationLoader.load(path, required: false)))
        #expect(text.hasPrefix("\(path): not valid JSON: "))
        #expect(text.contains("(line 1, column "))
    }

    @Test func aFileOfTheWrongShapeIsAnErrorNamingTheFile() throws {
        let path = try file("{\"profiles\": [\"a\"]}")
        defer { unlink(path) }
        #expect(message(ConfigurationLoader.load(path, required: false))?.hasPrefix("\(path): \"profiles\" must be an object") == true)
    }

    @Test func aMissingFileIsAnErrorOnlyWhenNamed() {
        let path = "/tmp/authbridge-config-test-does-not-exist.json"
        #expect(message(ConfigurationLoader.load(path, required: true)) == "\(path): cannot read the file (No such file or directory)")
        guard case .success(let loaded) = ConfigurationLoader.load(path, required: false) else {
            Issue.record("a missing default file is no profiles")
            return
        }
        #expect(loaded.profiles.isEmpty && loaded.warnings.isEmpty)
    }

    @Test func unknownKeysAreWarningsNamingTheFileAndTheKey() throws {
        let path = try file("{\"profiles\": {\"b\": {\"plugin\": \"oidc\", \"setings\": {}}, \"a\": {\"plugin\": \"oidc\"}}, \"profile\": 1}")
        defer { unlink(path) }
        guard case .success(let loaded) = ConfigurationLoader.load(path, required: true) else {
            Issue.record("unknown keys are not an error")
            return
        }
        #expect(loaded.profiles.map(\.name) == ["a", "b"])
        #expect(
            loaded.warnings == [
                "\(path): unknown key \"profile\" (ignored; the file's keys are \"profiles\" and \"gitCredential\")",
                "\(path): profile \"b\": unknown key \"setings\" (ignored; a profile has \"plugin\", \"settings\" and \"gitUsername\")",
            ])
    }
}
