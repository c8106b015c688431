import AuthBridgeJSON
import AuthBridgeSession
import Testing

@Suite("Installation identity")
struct InstallationIdentityTests {
    /// `profileId` is RFC 9562's version-5 UUID: the values Python's `uuid.uuid5` gives for the
    /// same namespace and names (which the Tableau scenario tests also compute).
    @Test func eachProfileGetsItsOwnStableNameBasedUUID() {
        let installation: JSON = ["id": "0123456789abcdef", "name": "laptop"]
        let work = InstallationIdentity.scoped(installation, profile: "work")
        #expect(work == ["id": "0123456789abcdef", "name": "laptop", "profileId": "79172144-8a6d-53c1-a429-80009060f2f4"])
        #expect(InstallationIdentity.scoped(installation, profile: "finance")["profileId"] == "0191a1a8-f7f5-568c-8e86-dc9b8257ce11")
        #expect(InstallationIdentity.scoped(installation, profile: "work") == work, "stable")
    }
}
