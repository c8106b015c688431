import AuthBridgeJSON
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
