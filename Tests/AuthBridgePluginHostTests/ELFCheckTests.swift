@testable import AuthBridgePluginHost
import AuthBridgePluginABI
import AuthBridgeSystem
import TestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

@Suite("ELF check")
struct ELFCheckTests {
    /// This test binary: a position-independent executable, so ET_DYN like a library.
    private func ownImage() throws -> [UInt8] {
        let bytes = try #require(FileSecurity.readFile("/proc/self/exe", limit: 512 << 20))
        try #require(bytes.count > 4096 && bytes[16] == 3 && bytes[17] == 0, "the test binary is not a PIE (ET_DYN)")
        return bytes
    }

    private func failure(_ path: String) -> PluginLoadError? {
        do {
            try ELFCheck.validate(path)
            return nil
        } catch {
            return error
        }
    }

    @Test func aCompleteSharedObjectPasses() throws {
        #expect(failure("/proc/self/exe") == nil)
        if let library = swiftTestPluginLibrary() {
            #expect(failure(library) == nil)
        }
    }

    @Test(arguments: [200, 1000, -2])
    func truncatedCopiesAreLoadFailed(_ size: Int) throws {
        let image = try ownImage()
        let folder = try TemporaryFolder()
        defer { folder.remove() }
        let path = folder.path + "/libtruncated.so"
        let length = size == -2 ? image.count / 2 : size
        #expect(writeFile(path, Array(image.prefix(length))))
        let error = try #require(failure(path))
        #expect(error.reason == .loadFailed)
        #expect(error.message.contains("truncated"), "\(error.message)")
    }

    @Test func aTextFileHasNoELFSignature() throws {
        let folder = try TemporaryFolder()
        defer { folder.remove() }
        let path = folder.path + "/libtext.so"
        writeFile(path, String(repeating: "not a library, just text\n", count: 10))
        let error = try #require(failure(path))
        #expect(error.reason == .loadFailed)
        #expect(error.message.contains("no ELF signature"))
    }

    @Test func shortFilesAndMissingFilesAreLoadFailed() throws {
        let folder = try TemporaryFolder()
        defer { folder.remove() }
        writeFile(folder.path + "/libshort.so", [0x7F, 0x45, 0x4C, 0x46])
        #expect(failure(folder.path + "/libshort.so")?.message.contains("too short") == true)
        #expect(failure(folder.path + "/libmissing.so")?.reason == .loadFailed)
    }

    @Test func anExecutableThatIsNotPositionIndependentIsRefused() throws {
        var header = Array(try ownImage().prefix(64))
        header[16] = 2 // ET_EXEC
        let folder = try TemporaryFolder()
        defer { folder.remove() }
        writeFile(folder.path + "/libexec.so", header)
        #expect(failure(folder.path + "/libexec.so")?.message.contains("ET_DYN") == true)
    }

    /// A corrupt header whose program-header offset is near 2^64 must be
    /// refused, not crash the host: `programHeaders + entrySize * count`
    /// overflows and traps.
    @Test func aHugeProgramHeaderOffsetIsRefusedWithoutCrashing() async {
        await #expect(processExitsWith: .success) {
            var header = [UInt8](repeating: 0, count: 64)
            header[0...5] = [0x7F, 0x45, 0x4C, 0x46, 2, 1]
            header[16] = 3 // ET_DYN
            header[18] = 62 // EM_X86_64
            #if arch(arm64)
            header[18] = 183 // EM_AARCH64
            #endif
            for index in 32..<40 { header[index] = 0xFF } // e_phoff = 2^64 - 1
            header[54] = 56 // e_phentsize
            header[56] = 1 // e_phnum
            // An unlinked temp file, read through /proc: nothing is left behind if it traps.
            var template = Array("/tmp/authbridge-elf-XXXXXX".utf8CString)
            let fd = template.withUnsafeMutableBufferPointer { mkstemp($0.baseAddress!) }
            template.withUnsafeBufferPointer { _ = unlink($0.baseAddress!) }
            _ = header.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
            _ = try? ELFCheck.validate("/proc/self/fd/\(fd)")
            close(fd)
        }
    }
}

/// What ELFCheck reads before dlopen (DT_NEEDED, PT_NOTE), and hostile files that must be
/// refused cleanly: every offset and size in them lies.
@Suite("ELF check: needed libraries and notes")
struct ELFContentsTests {
    private func inspect(_ bytes: [UInt8]) throws -> Result<ELFCheck.Library, PluginLoadError> {
        let folder = try TemporaryFolder()
        defer { folder.remove() }
        try #require(writeFile(folder.path + "/libimage.so", bytes))
        do { return .success(try ELFCheck.validate(folder.path + "/libimage.so")) } catch { return .failure(error) }
    }

    private func refusal(_ bytes: [UInt8]) throws -> PluginLoadError {
        let result = try inspect(bytes)
        guard case .failure(let error) = result else {
            Issue.record("a hostile file was accepted: \(result)")
            return PluginLoadError(.loadFailed, "")
        }
        return error
    }

    @Test func theSwiftTestPluginNeedsTheSwiftRuntimeAndCarriesTheHostsNote() throws {
        let path = try #require(swiftTestPluginLibrary(), "libauthbridge-testplugin-swift.so is not built")
        let library = try ELFCheck.validate(path)
        #expect(library.needsSwiftRuntime)
        #expect(library.needed.contains("libc.so.6"))
        let notes = library.notes.filter { $0.owner == SwiftRuntimeNote.owner }
        #expect(notes.map(\.type) == [SwiftRuntimeNote.type])
        #expect(notes.first.flatMap { SwiftRuntimeNote.version(descriptor: $0.descriptor) } == SwiftRuntimeNote.compiled)
        #expect(library.notes.contains { $0.owner == "GNU" }, "the build-id note is read as well")
    }

    @Test(arguments: ["oidc", "salesforce", "tableau", "marketsharp"])
    func everyBundledSwiftPluginCarriesTheNote(_ id: String) throws {
        let path = try #require(builtLibrary("libauthbridge-\(id).so"), "libauthbridge-\(id).so is not built")
        let library = try ELFCheck.validate(path)
        #expect(library.needsSwiftRuntime)
        #expect(throws: Never.self) { try SwiftRuntimeCheck.check(library, path: path) }
    }

    @Test func aCPluginNeedsNoSwiftRuntime() throws {
        let path = try #require(builtLibrary("test-plugins/libauthbridge-ctest.so"), "the C test plugin is not built: run `make build`")
        let library = try ELFCheck.validate(path)
        #expect(library.needed.contains("libjansson.so.4") && library.needed.contains("libc.so.6"))
        #expect(!library.needsSwiftRuntime)
        #expect(!library.notes.contains { $0.owner == SwiftRuntimeNote.owner })
    }

    @Test(arguments: [4, 8] as [UInt64])
    func aBuiltImageReadsBackExactly(_ align: UInt64) throws {
        var builder = ELFBuilder.swiftPlugin(descriptor: runtimeDescriptor(6, 2, 0))
        builder.needed.append("libswiftGlibc.so")
        builder.notes.append(ELFCheck.Note(owner: "odd-length!", type: 7, descriptor: [1, 2, 3]))
        builder.noteAlign = align
        let library = try inspect(builder.build().bytes).get()
        #expect(library.needed == builder.needed)
        #expect(library.notes == builder.notes)
    }

    @Test func aLibraryWithoutDynamicNeedsOrNotesIsFine() throws {
        let library = try inspect(ELFBuilder().build().bytes).get()
        #expect(library == ELFCheck.Library())
    }

    /// One lie each, and the words that must be in the refusal.
    enum Lie: String, CaseIterable {
        case stringTableOutsideEverySegment, stringTableAtTheTopOfMemory, hugeStringTableSize, nameOffsetPastTheTable,
            unterminatedName, noDynamicEnd, dynamicPastTheFile, hugeDynamicSize, hugeNoteNameSize, hugeNoteDescriptorSize,
            noteSegmentPastTheFile, hugeNoteSegment, noteCutInTheMiddle
    }

    @Test(arguments: Lie.allCases)
    func aHostileFileIsRefusedCleanly(_ lie: Lie) throws {
        var image = ELFBuilder.swiftPlugin(descriptor: runtimeDescriptor(6, 3, 1)).build()
        let strtab = image.dynamicValue(image.dynamicEntry(ELFBuilder.dtStrtab))
        let strsz = image.dynamicValue(image.dynamicEntry(ELFBuilder.dtStrsz))
        let dynamicSize = ELFBuilder.Image.programHeader(ELFBuilder.Image.dynamic, field: 32)
        let noteOffset = ELFBuilder.Image.programHeader(ELFBuilder.Image.note, field: 8)
        let noteSize = ELFBuilder.Image.programHeader(ELFBuilder.Image.note, field: 32)
        let expected: String
        switch lie {
        case .stringTableOutsideEverySegment:
            image.bytes.put64(0x10_0000, at: strtab)
            expected = "string table"
        case .stringTableAtTheTopOfMemory:
            image.bytes.put64(.max - 2, at: strtab)
            expected = "string table"
        case .hugeStringTableSize:
            image.bytes.put64(.max, at: strsz)
            expected = "string table"
        case .nameOffsetPastTheTable:
            image.bytes.put64(1 << 40, at: image.dynamicValue(0))
            expected = "needed library's name"
        case .unterminatedName:
            image.bytes.put64(5, at: strsz) // "\0libs": the first name has no NUL inside the table
            expected = "unterminated"
        case .noDynamicEnd:
            let last = image.dynamicEntry(ELFBuilder.dtNull)
            image.bytes.put64(ELFBuilder.dtNeeded, at: image.dynamic + last * 16)
            expected = "DT_NULL"
        case .dynamicPastTheFile:
            image.bytes.put64(UInt64(image.bytes.count) - 8, at: ELFBuilder.Image.programHeader(ELFBuilder.Image.dynamic, field: 8))
            expected = "dynamic section"
        case .hugeDynamicSize:
            image.bytes.put64(.max, at: dynamicSize)
            expected = "dynamic section"
        case .hugeNoteNameSize:
            image.bytes.put32(.max, at: image.notes)
            expected = "runs past the end"
        case .hugeNoteDescriptorSize:
            image.bytes.put32(.max - 3, at: image.notes + 4)
            expected = "runs past the end"
        case .noteSegmentPastTheFile:
            image.bytes.put64(.max - 4, at: noteOffset)
            expected = "note segment"
        case .hugeNoteSegment:
            image.bytes.put64(1 << 62, at: noteSize)
            expected = "note segment"
        case .noteCutInTheMiddle:
            image.bytes.put64(image.bytes.u64(at: noteSize) - 6, at: noteSize)
            expected = "runs past the end"
        }
        let error = try refusal(image.bytes)
        #expect(error.reason == .loadFailed)
        #expect(error.message.contains("is not a loadable shared library") && error.message.contains(expected), "\(error.message)")
    }

    /// Garbage over the parts ELFCheck reads: each file is refused or read, never a trap or a read
    /// out of bounds (a trap would end this test process). Deterministic: a fixed seed.
    @Test func garbageHeadersDynamicSectionsAndNotesNeverCrash() throws {
        let base = ELFBuilder.swiftPlugin(descriptor: runtimeDescriptor(6, 3, 1)).build()
        let folder = try TemporaryFolder()
        defer { folder.remove() }
        var random = SplitMix64(seed: 0xA07B_51D6)
        let regions = [ELFBuilder.Image.programHeaders..<base.strings, base.dynamic..<base.notes, base.notes..<base.bytes.count]
        var refused = 0
        for round in 0..<600 {
            var bytes = base.bytes
            let region = regions[round % regions.count]
            for _ in 0...(random.next() % 6) {
                let at = region.lowerBound + Int(random.next() % UInt64(region.count))
                // Half the time a whole 64-bit word (huge or small sizes), else one byte.
                if random.next() % 2 == 0, at + 8 <= bytes.count {
                    let word = [UInt64.max, 1 << 63, 0, UInt64(bytes.count), random.next()][Int(random.next() % 5)]
                    bytes.put64(word, at: at)
                } else {
                    bytes[at] = UInt8(truncatingIfNeeded: random.next())
                }
            }
            try #require(writeFile(folder.path + "/libfuzz.so", bytes))
            do { _ = try ELFCheck.validate(folder.path + "/libfuzz.so") } catch {
                #expect(error.reason == .loadFailed)
                refused += 1
            }
        }
        #expect(refused > 100, "the garbage should mostly be refused (\(refused) of 600)")
    }
}

/// The bundled plugins and test plugins as `make build` leaves them (next to the test binary).
func builtLibrary(_ name: String) -> String? {
    [
        HelperLibraryLocation.executableFolder + "/" + name, HelperLibraryLocation.executableFolder + "/plugins/" + name,
        repositoryRoot() + "/.build/debug/" + name,
    ]
    .first { access($0, R_OK) == 0 }
}

/// A small deterministic generator (SplitMix64), so that a failure can be replayed.
struct SplitMix64 {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
