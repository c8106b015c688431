import Synchronization

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// Where the host's helper libraries are: `PREFIX/lib/authbridge/FILE` for an install tree
/// (`PREFIX/bin/authbridge`, and `PREFIX/lib/authbridge/authbridge-cli` itself), else next to the
/// executable (a SwiftPM build folder).
public enum HelperLibraryLocation {
    /// The folder holding the running executable (from /proc/self/exe).
    public static let executableFolder: String = {
        var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        let count = readlink("/proc/self/exe", &buffer, Int(PATH_MAX))
        guard count > 0 else { return "." }
        return parent(of: String(decoding: buffer[0..<count].map { UInt8(bitPattern: $0) }, as: UTF8.self))
    }()

    /// `PREFIX/lib/authbridge` for an installed tree.
    public static var libraryFolder: String {
        executableFolder.hasSuffix("/lib/authbridge") ? executableFolder : parent(of: executableFolder) + "/lib/authbridge"
    }

    /// Candidate paths of the helper file `file`, in the order they are tried.
    public static func candidates(_ file: String) -> [String] {
        libraryFolder == executableFolder ? [libraryFolder + "/" + file] : [libraryFolder + "/" + file, executableFolder + "/" + file]
    }

    /// The folder part of `path` ("/" for a file in the root, "." for a bare name).
    public static func parent(of path: String) -> String {
        guard let slash = path.lastIndex(of: "/") else { return "." }
        return slash == path.startIndex ? "/" : String(path[..<slash])
    }
}

/// A helper library shipped with the host (the HTTP transport, the ID-token
/// verifier, the keyring), opened with `dlopen` on first use so that what it
/// links (libcurl and TLS, Foundation, glib and D-Bus) stays off the host's
/// start-up path.
///
/// The first of `candidates` that opens and has every symbol `bind` asks for
/// is used (a candidate without them is passed over); it is opened once,
/// under a lock, however many threads ask at once, and never closed. `Entry`
/// is what `bind` makes of the symbols: the library's C functions, typed.
public final class HelperLibrary<Entry: Sendable>: Sendable {
    /// What the library is, as error messages name it ("The HTTP transport library (libAuthBridgeHTTP.so)").
    public let description: String
    /// Paths tried in order.
    public let candidates: [String]
    private let remembersFailure: Bool
    private let bind: @Sendable (Symbols) -> Entry?
    private let opened = Mutex<Result<Entry, Failure>?>(nil)

    /// `remembersFailure`: whether a failed attempt is final for the process
    /// (later uses fail at once) or tried again on the next use.
    public init(
        _ description: String, candidates: [String], remembersFailure: Bool = false,
        bind: @escaping @Sendable (Symbols) -> Entry?
    ) {
        self.description = description
        self.candidates = candidates
        self.remembersFailure = remembersFailure
        self.bind = bind
    }

    /// The library's symbols while `bind` runs (the handle stays open for good).
    public struct Symbols {
        fileprivate let handle: UnsafeMutableRawPointer

        /// The symbol `name` as a C function of type `type`; nil when the library lacks it.
        public func function<Function>(_ name: String, as type: Function.Type) -> Function? {
            dlsym(handle, name).map { unsafeBitCast($0, to: Function.self) }
        }
    }

    /// Why no candidate could be used.
    public struct Failure: Error, Sendable {
        /// The library's description, as given to `HelperLibrary`.
        public let description: String
        /// The dynamic loader's message for the last candidate that would not open
        /// (its path when the loader gave none); nil when none was there to try.
        public let loadError: String?

        /// "<description> is not installed next to authbridge."
        public var notInstalledMessage: String { "\(description) is not installed next to authbridge." }
    }

    /// The library's entry points, opening it on first use.
    public func load() -> Result<Entry, Failure> {
        opened.withLock { cached in
            if let cached { return cached }
            var failure = Failure(description: description, loadError: nil)
            for path in candidates {
                guard let handle = dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE) else {
                    failure = Failure(description: description, loadError: dlerror().map { String(cString: $0) } ?? path)
                    continue
                }
                guard let entry = bind(Symbols(handle: handle)) else { continue }
                cached = .success(entry)
                return .success(entry)
            }
            if remembersFailure { cached = .failure(failure) }
            return .failure(failure)
        }
    }
}
