@testable import AuthBridgePluginHost
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
        header[16] = 2  // ET_EXEC
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
            header[16] = 3       // ET_DYN
            header[18] = 62      // EM_X86_64
            #if arch(arm64)
            header[18] = 183    // EM_AARCH64
            #endif
            for index in 32..<40 { header[index] = 0xFF }  // e_phoff = 2^64 - 1
            header[54] = 56      // e_phentsize
            header[56] = 1       // e_phnum
            // An unlinked temp file, read through /proc: nothing is left behind if it traps.
            var template = Array("/tmp/authbridge-elf-XXXXXX".utf8CString)
            let fd = template.withUnsafeMutableBufferPointer { mkstemp($0.baseAddress!) }
            unlink(String(cString: template))
            _ = header.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
            _ = try? ELFCheck.validate("/proc/self/fd/\(fd)")
            close(fd)
        }
    }
}
