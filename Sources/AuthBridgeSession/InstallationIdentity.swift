import AuthBridgeCrypto
import AuthBridgeJSON
import AuthBridgePluginHost

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// A stable identity of this installation, given to every hook as
/// `installation: {id, name}`: providers that register a device (Tableau's
/// connected client wants one device id and a device name an administrator
/// recognises) need the same id on every run.
///
/// Stored in `$XDG_DATA_HOME/authbridge/installation-id` (folder 0700, file
/// 0600), created on first use — never on the start-up path.
public enum InstallationIdentity {
    public static let current: JSON = {
        let name = hostName()
        guard let folder = Installation.userDataFolder else { return ["id": .string(PKCE.randomToken()), "name": .string(name)] }
        return ["id": .string(loadOrCreate(folder: folder)), "name": .string(name)]
    }()

    /// `installation` as one profile's hooks see it: with `profileId`, a stable id of this
    /// installation for that profile — a name-based UUID (RFC 9562 §5.5, version 5) of the
    /// installation id and the profile name — for providers that register one device per
    /// profile (Tableau keeps one token set per device: two profiles on one server would
    /// otherwise sign each other out).
    public static func scoped(_ installation: JSON, profile: String) -> JSON {
        guard let id = installation["id"]?.stringValue else { return installation }
        return installation.setting("profileId", .string(nameBasedUUID(id + "\u{0}" + profile)))
    }

    /// The UUID namespace of `profileId`.
    static let profileNamespace: [UInt8] = [
        0xA7, 0x64, 0x42, 0xDD, 0x59, 0x84, 0x4A, 0xA8,
        0xAF, 0x48, 0xB2, 0x57, 0x6F, 0xC7, 0xC7, 0xA2,
    ]

    static func nameBasedUUID(_ name: String) -> String {
        var bytes = Array(Insecure.SHA1.hash(profileNamespace + Array(name.utf8)).prefix(16))
        bytes[6] = (bytes[6] & 0x0F) | 0x50 // version 5
        bytes[8] = (bytes[8] & 0x3F) | 0x80 // the RFC's variant
        let hex = bytes.map { ($0 < 16 ? "0" : "") + String($0, radix: 16) }
        return [0..<4, 4..<6, 6..<8, 8..<10, 10..<16].map { hex[$0].joined() }.joined(separator: "-")
    }

    private static func loadOrCreate(folder: String) -> String {
        let path = folder + "/installation-id"
        if let bytes = FileSecurity.readFile(path, limit: 256) {
            let text = trimmed(String(decoding: bytes, as: UTF8.self))
            if text.count >= 16 { return text }
        }
        let id = PKCE.randomToken()
        makeFolder(folder)
        let temporary = path + ".tmp.\(getpid())"
        let fd = open(temporary, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        guard fd >= 0 else { return id }
        let line = Array((id + "\n").utf8)
        let written = line.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        fsync(fd)
        close(fd)
        // link(2) fails when the file exists: of two hosts starting at once the
        // first wins and the other reads its id (a rename would let each keep its own).
        guard written == line.count else {
            unlink(temporary)
            return id
        }
        defer { unlink(temporary) }
        if link(temporary, path) == 0 { return id }
        if let bytes = FileSecurity.readFile(path, limit: 256) {
            let text = trimmed(String(decoding: bytes, as: UTF8.self))
            if text.count >= 16 { return text }
        }
        _ = rename(temporary, path) // a damaged file is replaced
        return id
    }

    private static func makeFolder(_ path: String) {
        var partial = ""
        for component in path.split(separator: "/") {
            partial += "/" + component
            mkdir(partial, 0o700)
        }
    }

    private static func hostName() -> String {
        var buffer = [CChar](repeating: 0, count: 256)
        guard gethostname(&buffer, buffer.count - 1) == 0 else { return "authbridge" }
        return String(decoding: buffer.prefix(while: { $0 != 0 }).map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}

private func trimmed(_ text: String) -> String {
    String(text.drop(while: \.isWhitespace).reversed().drop(while: \.isWhitespace).reversed())
}
