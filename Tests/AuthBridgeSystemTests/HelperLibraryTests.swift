import AuthBridgeSystem
import Synchronization
import TestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

@Suite("Helper library")
struct HelperLibraryTests {
    private typealias Cosine = @convention(c) (Double) -> Double

    /// The messages the HTTP transport, the cryptography libraries and the keyring gave before they
    /// shared this loader; the keyring names the loader's error for the last candidate that would
    /// not open (a missing file is one), the others do not.
    @Test(arguments: [
        (
            "The HTTP transport library (libAuthBridgeHTTP.so)",
            "The HTTP transport library (libAuthBridgeHTTP.so) is not installed next to authbridge."
        ),
        (
            "The cryptography library (libAuthBridgeNettle.so)",
            "The cryptography library (libAuthBridgeNettle.so) is not installed next to authbridge."
        ),
        (
            "The cryptography library (libAuthBridgeSwiftCrypto.so)",
            "The cryptography library (libAuthBridgeSwiftCrypto.so) is not installed next to authbridge."
        ),
        ("The keyring helper libAuthBridgeKeyring.so", "The keyring helper libAuthBridgeKeyring.so is not installed next to authbridge."),
    ])
    func aMissingLibraryIsReportedAsNotInstalled(description: String, message: String) throws {
        let folder = try TemporaryFolder()
        defer { folder.remove() }
        let last = folder.path + "/libX.so"
        let library = HelperLibrary<Int>(description, candidates: [folder.path + "/lib/libX.so", last]) { _ in 1 }
        guard case .failure(let failure) = library.load() else {
            Issue.record("a missing library loaded")
            return
        }
        #expect(failure.notInstalledMessage == message)
        #expect(failure.loadError == last + ": cannot open shared object file: No such file or directory")
        guard case .failure(let none) = HelperLibrary<Int>(description, candidates: [], bind: { _ in 1 }).load() else { return }
        #expect(none.loadError == nil)
    }

    @Test func aFileThatIsNoLibraryGivesTheLoadersMessage() throws {
        let folder = try TemporaryFolder()
        defer { folder.remove() }
        let path = folder.path + "/libX.so"
        #expect(writeFile(path, "not a library"))
        let library = HelperLibrary<Int>("The X helper", candidates: [path]) { _ in 1 }
        guard case .failure(let failure) = library.load() else {
            Issue.record("a text file loaded")
            return
        }
        #expect(failure.loadError?.contains(path) == true)
    }

    /// The first candidate that has the symbols is used; one without them is passed over; it opens once.
    @Test func theFirstCandidateWithTheSymbolsIsBoundOnce() throws {
        let binds = Atomic<Int>(0)
        let library = HelperLibrary<Cosine>("libm", candidates: ["libc.so.6", "libm.so.6"]) { symbols in
            binds.add(1, ordering: .relaxed)
            return symbols.function("cos", as: Cosine.self)
        }
        let cosine = try library.load().get()
        #expect(cosine(0) == 1)
        _ = try library.load().get()
        #expect(binds.load(ordering: .relaxed) == 2) // libc (no cos), then libm; not again
    }

    /// The keyring remembers a failure; the HTTP transport and the verifier try again on the next use.
    @Test(arguments: [true, false])
    func aFailureIsRememberedOnlyWhenAsked(remembers: Bool) throws {
        let folder = try TemporaryFolder()
        defer { folder.remove() }
        let path = folder.path + "/libm.so"
        let library = HelperLibrary<Cosine>("libm", candidates: [path], remembersFailure: remembers) { symbols in
            symbols.function("cos", as: Cosine.self)
        }
        #expect(throws: HelperLibrary<Cosine>.Failure.self) { try library.load().get() }
        #expect(symlink(try realPath(of: "libm.so.6"), path) == 0)
        let second = library.load()
        if remembers {
            #expect(throws: HelperLibrary<Cosine>.Failure.self) { try second.get() }
        } else {
            #expect(try second.get()(0) == 1)
        }
    }

    /// The file the dynamic loader mapped for `library` (from /proc/self/maps).
    private func realPath(of library: String) throws -> String {
        _ = try #require(dlopen(library, RTLD_NOW))
        let maps = String(decoding: try #require(POSIXFiles.readFile("/proc/self/maps", limit: 16 << 20)), as: UTF8.self)
        let line = try #require(maps.split(separator: "\n").first { $0.hasSuffix("/" + library) })
        return String(line[line.firstIndex(of: "/")!...])
    }
}
