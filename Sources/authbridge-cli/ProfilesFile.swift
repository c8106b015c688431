import AuthBridgeJSON
import AuthBridgeSystem
import AuthBridgeURL

#if canImport(Glibc)
import Glibc
#endif

/// `authbridge login URL`: the profile a protected resource's URL makes (the oidc plugin with
/// only `resource`), named and written into the profiles file so that later commands, the agent
/// and the credential helpers know it.
enum ResourceProfile {
    /// `text` as a protected resource's URL (https, or http on a loopback IP), or nil when it is a
    /// profile name.
    static func url(_ text: String) -> ParsedURL? {
        guard text.hasPrefix("https://") || text.hasPrefix("http://"), let url = ParsedURL(text), !url.host.isEmpty,
            url.fragment == nil
        else { return nil }
        return url
    }

    /// The profile name for `url`: its host, and its port when not the scheme's own
    /// (`mcp.example.com`, `127.0.0.1-8080`).
    static func defaultName(for url: ParsedURL) -> String {
        let port = url.port.flatMap { port in (url.scheme == "https" && port == 443) || (url.scheme == "http" && port == 80) ? nil : port }
        return url.host + (port.map { "-\($0)" } ?? "")
    }

    /// The profile's entry in the file.
    static func entry(_ resource: String) -> JSON { ["plugin": "oidc", "settings": ["resource": .string(resource)]] }

    enum Outcome { case added, alreadyThere }

    struct Failure: Error { var message: String }

    /// Adds profile `name` for `resource` to the profiles file at `path` (created 0600 in a
    /// 0700 folder when missing), keeping everything else in it. A profile of that name for
    /// something else is left alone and reported.
    static func add(_ name: String, resource: String, to path: String) throws(Failure) -> Outcome {
        var document: JSON = ["profiles": [:]]
        if let bytes = POSIXFiles.readFile(path, limit: 4 << 20) {
            guard let parsed = try? JSON.parse(bytes), case .object = parsed else {
                throw Failure(message: "\(path) is not a JSON object; fix it first (nothing was changed)")
            }
            document = parsed
        }
        var profiles = document["profiles"]?.objectValue ?? [:]
        if let existing = profiles[name] {
            if existing["plugin"]?.stringValue == "oidc", existing["settings"]?["resource"]?.stringValue == resource { return .alreadyThere }
            throw Failure(message: "\(path) already has a profile \"\(name)\" for something else; name another with --profile NAME")
        }
        profiles[name] = entry(resource)
        document = document.setting("profiles", .object(profiles))
        try write(Array((document.prettyPrinted() + "\n").utf8), to: path)
        return .added
    }

    /// Why profile `name` for `resource` cannot be added to the file at `path`, or nil.
    static func conflict(_ name: String, resource: String, in path: String) -> String? {
        guard let bytes = POSIXFiles.readFile(path, limit: 4 << 20) else { return nil }
        guard let parsed = try? JSON.parse(bytes), case .object = parsed else { return "\(path) is not a JSON object; fix it first" }
        guard let existing = parsed["profiles"]?[name] else { return nil }
        if existing["plugin"]?.stringValue == "oidc", existing["settings"]?["resource"]?.stringValue == resource { return nil }
        return "\(path) already has a profile \"\(name)\" for something else; name another with --profile NAME"
    }

    /// Writes `bytes` to `path` atomically (a temporary file renamed over it), mode 0600.
    private static func write(_ bytes: [UInt8], to path: String) throws(Failure) {
        let folder = path.lastIndex(of: "/").map { String(path[..<$0]) } ?? "."
        try makeFolders(folder)
        let temporary = path + ".tmp-\(getpid())"
        let fd = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw Failure(message: "\(path) could not be written (\(String(cString: strerror(errno))))") }
        var written = 0
        while written < bytes.count {
            let count = bytes[written...].withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) }
            if count < 0 && errno == EINTR { continue }
            guard count > 0 else {
                close(fd)
                unlink(temporary)
                throw Failure(message: "\(path) could not be written")
            }
            written += count
        }
        fsync(fd)
        close(fd)
        guard rename(temporary, path) == 0 else {
            unlink(temporary)
            throw Failure(message: "\(path) could not be written (\(String(cString: strerror(errno))))")
        }
    }

    /// Creates `folder` and its missing parents, mode 0700.
    private static func makeFolders(_ folder: String) throws(Failure) {
        var info = stat()
        if stat(folder, &info) == 0 { return }
        if let parent = folder.lastIndex(of: "/").map({ String(folder[..<$0]) }), !parent.isEmpty { try makeFolders(parent) }
        guard mkdir(folder, 0o700) == 0 || errno == EEXIST else {
            throw Failure(message: "\(folder) could not be created (\(String(cString: strerror(errno))))")
        }
    }
}
