@testable import AuthBridgePluginHost
import TestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

@Suite("File security")
struct FileSecurityTests {
    private func check(mode: mode_t) throws -> PluginLoadError? {
        let folder = try TemporaryFolder()
        defer { folder.remove() }
        let path = folder.path + "/file"
        #expect(writeFile(path, "x", mode: mode))
        do {
            try FileSecurity.checkNotTamperable(path, what: "manifest")
            return nil
        } catch {
            return error
        }
    }

    @Test(arguments: [0o644, 0o600, 0o755, 0o444] as [mode_t])
    func filesOnlyWeCanWriteAreAccepted(_ mode: mode_t) throws {
        #expect(try check(mode: mode) == nil)
    }

    @Test(arguments: [0o664, 0o646, 0o666, 0o620, 0o602] as [mode_t])
    func groupOrOtherWritableFilesAreRefused(_ mode: mode_t) throws {
        let error = try check(mode: mode)
        #expect(error?.reason == .insecurePermissions)
        #expect(error?.message.contains(String(mode, radix: 8)) == true)
    }

    /// People are told the command that removes the cause (`authbridge plugins`, the CLI's errors).
    @Test func aWritableFileNamesItsFix() throws {
        let folder = try TemporaryFolder()
        defer { folder.remove() }
        let path = folder.path + "/it's here.json"
        #expect(writeFile(path, "x", mode: 0o664))
        chmod(path, 0o664)
        do {
            try FileSecurity.checkNotTamperable(path, what: "manifest")
            Issue.record("a group-writable file was accepted")
        } catch {
            #expect(error.fix == "chmod go-w " + FileSecurity.shellQuoted(path))
        }
    }

    @Test(arguments: [
        ("/usr/lib/authbridge/plugins/oidc.json", "/usr/lib/authbridge/plugins/oidc.json"),
        ("/home/a b/x.json", "'/home/a b/x.json'"), ("it's", "'it'\\''s'"), ("", "''"),
    ])
    func pathsAreQuotedForAShell(path: String, quoted: String) {
        #expect(FileSecurity.shellQuoted(path) == quoted)
    }

    @Test func aGroupWritableFolderIsRefused() throws {
        let folder = try TemporaryFolder()
        defer { folder.remove() }
        let sub = folder.subfolder("plugins")
        #expect(throws: Never.self) { try FileSecurity.checkNotTamperable(sub, what: "plugin folder") }
        chmod(sub, 0o775)
        #expect(throws: PluginLoadError.self) { try FileSecurity.checkNotTamperable(sub, what: "plugin folder") }
    }

    @Test func aMissingPathIsLoadFailed() {
        #expect(throws: PluginLoadError(.loadFailed, "cannot read manifest /nonexistent/authbridge.json: No such file or directory")) {
            try FileSecurity.checkNotTamperable("/nonexistent/authbridge.json", what: "manifest")
        }
    }

    @Test func readFileHonoursItsLimit() throws {
        let folder = try TemporaryFolder()
        defer { folder.remove() }
        let path = folder.path + "/data"
        writeFile(path, [UInt8](repeating: 7, count: 40_000))
        #expect(FileSecurity.readFile(path)?.count == 40_000)
        #expect(FileSecurity.readFile(path, limit: 39_999) == nil)
        #expect(FileSecurity.readFile(folder.path + "/missing") == nil)
    }

    @Test func listFolderIsSortedWithoutDotEntries() throws {
        let folder = try TemporaryFolder()
        defer { folder.remove() }
        for name in ["b.json", "a.json", ".hidden"] { writeFile(folder.path + "/" + name, "{}") }
        #expect(FileSecurity.listFolder(folder.path) == [".hidden", "a.json", "b.json"])
    }
}

@Suite("File security: descriptors and ancestors")
struct DescriptorSecurityTests {
    @Test func aSymlinkIsNeverOpenedAsTheFile() throws {
        let folder = try TemporaryFolder()
        defer { folder.remove() }
        #expect(writeFile(folder.path + "/real", "x", mode: 0o644))
        symlink(folder.path + "/real", folder.path + "/link")
        #expect(throws: PluginLoadError.self) { try FileSecurity.openVetted(folder.path + "/link", what: "library") }
        let (fd, info) = try FileSecurity.openVetted(folder.path + "/real", what: "library")
        defer { close(fd) }
        #expect(FileSecurity.stillNames(folder.path + "/real", info))
        #expect(!FileSecurity.stillNames(folder.path + "/link-absent", info))
    }

    @Test(arguments: [0o664, 0o646] as [mode_t])
    func aWritableFileIsRefusedOnItsDescriptor(_ mode: mode_t) throws {
        let folder = try TemporaryFolder()
        defer { folder.remove() }
        #expect(writeFile(folder.path + "/lib.so", "x", mode: mode))
        chmod(folder.path + "/lib.so", mode)
        do {
            let (fd, _) = try FileSecurity.openVetted(folder.path + "/lib.so", what: "library")
            close(fd)
            Issue.record("a writable file was accepted")
        } catch {
            #expect(error.reason == .insecurePermissions)
        }
    }

    @Test func aFifoIsNotAFile() throws {
        let folder = try TemporaryFolder()
        defer { folder.remove() }
        mkfifo(folder.path + "/pipe", 0o644)
        // O_NONBLOCK: opening a FIFO with no writer must not block the loader.
        #expect(throws: PluginLoadError.self) { try FileSecurity.openVetted(folder.path + "/pipe", what: "manifest") }
    }

    @Test func everyFolderUpToTheRootIsChecked() throws {
        let folder = try TemporaryFolder()
        defer { folder.remove() }
        let deep = folder.subfolder("a") + "/b"
        mkdir(deep, 0o755)
        try FileSecurity.checkAncestors(deep)
        chmod(folder.path + "/a", 0o775)
        #expect(throws: PluginLoadError.self) { try FileSecurity.checkAncestors(deep) }
    }
}
