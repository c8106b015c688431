@testable import AuthBridgePluginHost
import AuthBridgeSystem
import Testing

/// The only test that moves the process-wide clock: by a few seconds, which
/// changes no outcome elsewhere (test tokens live for an hour, or are already expiring).
@Suite("Host clock and installation", .serialized)
struct HostClockTests {
    @Test func shiftMovesTheClockAndBack() {
        let before = HostClock.nowMilliseconds()
        let offset = HostClock.shift(by: 10_000)
        let shifted = HostClock.nowMilliseconds()
        #expect(HostClock.shift(by: -10_000) == offset - 10_000)
        let after = HostClock.nowMilliseconds()
        #expect(shifted - before >= 10_000)
        #expect(after < shifted && after >= before)
    }

    @Test func parentFolders() {
        #expect(HelperLibraryLocation.parent(of: "/opt/authbridge/bin/authbridge") == "/opt/authbridge/bin")
        #expect(HelperLibraryLocation.parent(of: "/authbridge") == "/")
        #expect(HelperLibraryLocation.parent(of: "authbridge") == ".")
        #expect(HelperLibraryLocation.executableFolder.hasPrefix("/"))
        #expect(HelperLibraryLocation.candidates("libX.so").last == HelperLibraryLocation.executableFolder + "/libX.so")
    }

    /// One bundled plugins folder, where the layout puts it: an install tree's `bin/plugins` is not
    /// searched (the wheel's host looked in `…/_host/bin/plugins`).
    @Test func bundledPluginsFolderOfEachLayout() {
        #expect(Installation.bundledPluginsFolder(executableFolder: "/opt/ab/bin") == "/opt/ab/lib/authbridge/plugins")
        #expect(Installation.bundledPluginsFolder(executableFolder: "/opt/ab/lib/authbridge") == "/opt/ab/lib/authbridge/plugins")
        #expect(Installation.bundledPluginsFolder(executableFolder: "/usr/bin") == "/usr/lib/authbridge/plugins")
        #expect(Installation.bundledPluginsFolder(executableFolder: "/src/.build/debug") == "/src/.build/debug/plugins")
        // The tests run from a build folder: its plugins/, then the user's; nothing else.
        let folders = Installation.defaultPluginFolders()
        #expect(folders.first == PluginFolder(HelperLibraryLocation.executableFolder + "/plugins", origin: .installTree))
        #expect(folders.filter { $0.origin == .installTree }.count == 1)
    }
}
