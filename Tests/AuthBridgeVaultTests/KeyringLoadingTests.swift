import AuthBridgeVault
import TestSupport
import Testing

/// Loading the keyring helper (libAuthBridgeKeyring.so): what a host without it answers.
@Suite("Keyring loading")
struct KeyringLoadingTests {
    @Test func aMissingHelperNamesTheLoadersErrorEveryTime() async throws {
        let folder = TemporaryFolder()
        defer { folder.remove() }
        let path = folder.path + "/libAuthBridgeKeyring.so"
        let keyring = Keyring(libraryPaths: [path])
        for _ in 0..<2 {
            await #expect(throws: VaultError.self) { _ = try await keyring.list(kind: "test") }
            do {
                _ = try await keyring.lookup(kind: "test", key: "k")
                Issue.record("a missing keyring helper answered")
            } catch {
                #expect(error.reason == .keyringUnavailable)
                #expect(error.message == "Cannot load the keyring helper: \(path): cannot open shared object file: No such file or directory.")
            }
        }
    }

    @Test func noCandidateIsReportedAsNotInstalled() async {
        do {
            try await Keyring(libraryPaths: []).clear(kind: "test", key: "k")
            Issue.record("a keyring without a helper answered")
        } catch {
            #expect(error.reason == .keyringUnavailable)
            #expect(error.message == "The keyring helper libAuthBridgeKeyring.so is not installed next to authbridge.")
        }
    }
}
