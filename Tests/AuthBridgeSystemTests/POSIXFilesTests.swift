import AuthBridgeSystem
import TestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

@Suite("POSIX files")
struct POSIXFilesTests {
    @Test func aFileIsReadUpToItsLimitAndRefusedPastIt() throws {
        let folder = try TemporaryFolder()
        defer { folder.remove() }
        let path = folder.path + "/file"
        let bytes = (0..<40_000).map { UInt8($0 % 251) }
        #expect(writeFile(path, bytes))
        #expect(POSIXFiles.readFile(path, limit: 40_000) == bytes)
        #expect(POSIXFiles.readFile(path, limit: 39_999) == nil)
        #expect(POSIXFiles.readFile(folder.path + "/missing", limit: 1 << 20) == nil)
        #expect(POSIXFiles.readFile(path, limit: 0) == nil)
    }

    @Test func readAllSaysWhyItGaveNoBytes() throws {
        let folder = try TemporaryFolder()
        defer { folder.remove() }
        let path = folder.path + "/file"
        #expect(writeFile(path, [UInt8](repeating: 1, count: 100)))
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        defer { close(fd) }
        #expect(POSIXFiles.readAll(fd, limit: 99) == .failure(.tooLarge(100)))
        #expect(POSIXFiles.readAll(-1, limit: 99) == .failure(.failed(EBADF)))
        let empty = folder.path + "/empty"
        #expect(writeFile(empty, []))
        #expect(POSIXFiles.readFile(empty, limit: 0) == [])
    }

    @Test func aFolderListsItsNamesWithoutDotsAndAMissingOneIsNil() throws {
        let folder = try TemporaryFolder()
        defer { folder.remove() }
        for name in ["b.json", "a.json", ".hidden"] { #expect(writeFile(folder.path + "/" + name, "x")) }
        #expect(POSIXFiles.listFolder(folder.path)?.sorted() == [".hidden", "a.json", "b.json"])
        #expect(POSIXFiles.listFolder(folder.path + "/missing") == nil)
        #expect(POSIXFiles.listFolder(folder.path + "/a.json") == nil)
    }
}
