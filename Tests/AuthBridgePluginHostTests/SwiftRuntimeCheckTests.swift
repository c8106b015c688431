import AuthBridgePluginABI
@testable import AuthBridgePluginHost
import TestSupport
import Testing

@Suite("Swift runtime check")
struct SwiftRuntimeCheckTests {
    private let host = SwiftRuntimeNote.compiled

    private func refusal(_ library: ELFCheck.Library, host: SwiftRuntimeVersion? = nil) -> PluginLoadError? {
        do {
            try SwiftRuntimeCheck.check(library, path: "/p/libx.so", host: host ?? self.host)
            return nil
        } catch {
            return error
        }
    }

    private func swiftLibrary(_ descriptors: [UInt8]...) -> ELFCheck.Library {
        ELFCheck.Library(
            needed: ["libswiftCore.so", "libc.so.6"],
            notes: descriptors.map { ELFCheck.Note(owner: SwiftRuntimeNote.owner, type: SwiftRuntimeNote.type, descriptor: $0) })
    }

    private func descriptor(_ version: SwiftRuntimeVersion) -> [UInt8] {
        runtimeDescriptor(version.major, version.minor, version.patch, flags: version.isNewerThanNamed ? 1 : 0)
    }

    @Test func aPluginBuiltWithTheHostsSwiftPasses() {
        #expect(refusal(swiftLibrary(descriptor(host))) == nil)
    }

    @Test func aCPluginIsNotChecked() {
        let c = ELFCheck.Library(needed: ["libjansson.so.4", "libc.so.6"], notes: [])
        #expect(refusal(c) == nil)
        // Even a foreign marker does not matter to a library that does not use the Swift runtime.
        var marked = swiftLibrary(runtimeDescriptor(5, 10, 0))
        marked.needed = ["libc.so.6"]
        #expect(refusal(marked) == nil)
    }

    @Test func aSwiftPluginWithoutTheMarkerIsRefused() throws {
        for needed in [["libswiftCore.so"], ["libfoo.so", "libswiftCore.so.6"]] {
            let library = ELFCheck.Library(needed: needed, notes: [ELFCheck.Note(owner: "GNU", type: 3, descriptor: [1, 2, 3, 4])])
            let error = try #require(refusal(library))
            #expect(error.reason == .swiftRuntimeMismatch)
            #expect(
                error.message
                    == "/p/libx.so was built without AuthBridge's Swift runtime marker (an SDK older than this host, or not built with AuthBridgePluginSDK); rebuild it with Swift \(host) and the SDK of this host"
            )
        }
    }

    @Test(arguments: [(6, 2, 0), (6, 3, 0), (6, 3, 2), (5, 10, 1), (7, 0, 0)] as [(UInt32, UInt32, UInt32)])
    func aPluginBuiltWithAnotherSwiftIsRefusedNamingBoth(_ version: (UInt32, UInt32, UInt32)) throws {
        let plugin = SwiftRuntimeVersion(version.0, version.1, version.2)
        try #require(plugin != host, "pick versions other than this toolchain's")
        let error = try #require(refusal(swiftLibrary(descriptor(plugin))))
        #expect(error.reason == .swiftRuntimeMismatch)
        #expect(
            error.message
                == "/p/libx.so was built for the Swift \(plugin) runtime; this host bundles Swift \(host): rebuild the plugin with Swift \(host)")
    }

    @Test func theVersionIsComparedByPatchLevel() throws {
        let nextPatch = SwiftRuntimeVersion(host.major, host.minor, host.patch + 1)
        #expect(refusal(swiftLibrary(descriptor(nextPatch)))?.reason == .swiftRuntimeMismatch)
    }

    @Test func oneForeignMarkerAmongSeveralIsRefused() {
        #expect(refusal(swiftLibrary(descriptor(host), runtimeDescriptor(6, 2, 0)))?.message.contains("6.2.0") == true)
    }

    @Test func aMalformedMarkerIsRefused() throws {
        let error = try #require(refusal(swiftLibrary([6, 0, 0, 0, 3, 0, 0, 0])))
        #expect(error.reason == .swiftRuntimeMismatch)
        #expect(error.message.contains("malformed Swift runtime marker (a 8-byte descriptor, not 16)"))
        // Another owner's note of the same type, or our owner with another type, is no marker.
        let others = ELFCheck.Library(
            needed: ["libswiftCore.so"],
            notes: [
                ELFCheck.Note(owner: "AuthBridgeX", type: SwiftRuntimeNote.type, descriptor: descriptor(host)),
                ELFCheck.Note(owner: SwiftRuntimeNote.owner, type: SwiftRuntimeNote.type + 1, descriptor: descriptor(host)),
            ])
        #expect(refusal(others)?.message.contains("without AuthBridge's Swift runtime marker") == true)
    }

    /// A compiler newer than the ladder names writes its last rung with a flag: it never equals a
    /// version, not even the same "newer than" of a host built past the ladder's end.
    @Test func newerThanTheLadderNeverMatches() throws {
        let newer = SwiftRuntimeVersion(6, 9, 9, isNewerThanNamed: true)
        let fromNewerPlugin = try #require(refusal(swiftLibrary(descriptor(newer))))
        #expect(
            fromNewerPlugin.message
                == "/p/libx.so was built for the runtime of a Swift newer than 6.9.9; this host bundles Swift \(host): rebuild the plugin with Swift \(host)"
        )
        let bothNewer = try #require(refusal(swiftLibrary(descriptor(newer)), host: newer))
        #expect(bothNewer.reason == .swiftRuntimeMismatch)
        #expect(bothNewer.message.contains("this host bundles a Swift newer than 6.9.9, which its version ladder cannot name"))
        #expect(bothNewer.message.hasSuffix("extend scripts/swift-runtime-ladder.py, then rebuild the host and the plugin"))
        #expect(refusal(swiftLibrary(descriptor(SwiftRuntimeVersion(6, 9, 9))), host: newer) != nil)
    }
}

/// The check in the loader: before dlopen, so a refused library never runs.
@Suite("Plugin loader: Swift runtime")
struct PluginLoaderSwiftRuntimeTests {
    private func loadOne(
        _ library: [UInt8], id: String = "swifttest",
        file: String = "libauthbridge-testplugin-swift.so"
    ) throws -> PluginLoadError? {
        let folder = try TemporaryFolder()
        defer { folder.remove() }
        try #require(writeFile(folder.path + "/" + file, library))
        writeFile(folder.path + "/\(id).json", manifestText(id: id, library: file))
        let reports = loadAll(folder.path)
        try #require(reports.count == 1)
        return reports[0].refusal
    }

    @Test func theSwiftTestPluginWithAnotherSwiftsMarkerIsRefused() throws {
        let library = try #require(swiftTestPluginLibrary(), "libauthbridge-testplugin-swift.so is not built")
        var bytes = try #require(FileSecurity.readFile(library, limit: 64 << 20))
        let offsets = bytes.swiftRuntimeDescriptorOffsets()
        try #require(offsets.count == 1, "one Swift runtime note in the test plugin, found \(offsets.count)")
        #expect(try loadOne(bytes) == nil, "the unmodified copy loads")
        bytes.replace(at: offsets[0], runtimeDescriptor(6, 2, 0))
        let error = try #require(try loadOne(bytes))
        #expect(error.reason == .swiftRuntimeMismatch)
        #expect(
            error.message.contains(
                "built for the Swift 6.2.0 runtime; this host bundles Swift \(SwiftRuntimeNote.compiled): rebuild the plugin with Swift \(SwiftRuntimeNote.compiled)"
            ), "\(error.message)")
    }

    /// A hand-made file that dlopen must never see (it is no real library): the check answers first.
    @Test func aSwiftLibraryWithoutTheMarkerIsRefusedBeforeDlopen() throws {
        let error = try #require(try loadOne(ELFBuilder.swiftPlugin(descriptor: nil).build().bytes, id: "nomarker", file: "libnomarker.so"))
        #expect(error.reason == .swiftRuntimeMismatch)
        #expect(error.message.contains("without AuthBridge's Swift runtime marker"))
    }

    @Test func aHostileDynamicSectionIsACleanRefusal() throws {
        var image = ELFBuilder.swiftPlugin(descriptor: nil).build()
        image.bytes.put64(.max, at: image.dynamicValue(image.dynamicEntry(ELFBuilder.dtStrsz)))
        let error = try #require(try loadOne(image.bytes, id: "hostile", file: "libhostile.so"))
        #expect(error.reason == .loadFailed && error.message.contains("string table"), "\(error)")
    }
}
