import AuthBridgeJSON
import AuthBridgePluginHost

#if canImport(Glibc)
import Glibc
#endif

/// What a configuration file gave: its profiles, and warnings about members
/// AuthBridge does not read (a misspelt key would otherwise be ignored in silence).
public struct LoadedConfiguration: Sendable {
    public var profiles: [Profile]
    /// Each names the file and the key.
    public var warnings: [String]
    /// Which profile answers git for which URLs (`authbridge git-credential`).
    public var git: GitCredentialRoutes

    public init(profiles: [Profile] = [], warnings: [String] = [], git: GitCredentialRoutes = GitCredentialRoutes()) {
        self.profiles = profiles
        self.warnings = warnings
        self.git = git
    }
}

/// Reads the profiles file from disk. Every error and warning names the file.
public enum ConfigurationLoader {
    /// The members a configuration file may have, at the top and in a profile.
    public static let topLevelKeys: Set<String> = ["profiles", "gitCredential"]
    public static let profileKeys: Set<String> = ["plugin", "settings", "gitUsername"]

    /// The profiles in `path`. A file that does not exist is an error only when
    /// `required` (named with --config); one that exists but cannot be read or
    /// parsed always is.
    public static func load(_ path: String, required: Bool) -> Result<LoadedConfiguration, ConfigurationError> {
        errno = 0
        guard let bytes = FileSecurity.readFile(path) else {
            let reason = errno
            var info = stat()
            if !required && stat(path, &info) != 0 && errno == ENOENT { return .success(LoadedConfiguration()) }
            let why = reason != 0 ? String(cString: strerror(reason)) : "larger than 1 MiB"
            return .failure(ConfigurationError("\(path): cannot read the file (\(why))"))
        }
        do {
            let json = try JSON.parse(bytes)
            let profiles = try ConfigurationFile.profiles(from: json)
            let git = try GitCredentialRoutes.read(from: json)
            return .success(LoadedConfiguration(profiles: profiles, warnings: unknownKeys(in: json).map { "\(path): \($0)" }, git: git))
        } catch let error as JSONParseError {
            return .failure(ConfigurationError("\(path): not valid JSON: \(error)"))
        } catch let error as ConfigurationError {
            return .failure(ConfigurationError("\(path): \(error.message)"))
        } catch {
            return .failure(ConfigurationError("\(path): \(error)"))
        }
    }

    /// Members of a (valid) configuration that nothing reads, described for a warning.
    static func unknownKeys(in json: JSON) -> [String] {
        var found: [String] = []
        for key in (json.objectValue ?? [:]).keys.sorted() where !topLevelKeys.contains(key) {
            found.append("unknown key \"\(printable(key))\" (ignored; the file's keys are \"profiles\" and \"gitCredential\")")
        }
        for (name, entry) in (json["profiles"]?.objectValue ?? [:]).sorted(by: { $0.key < $1.key }) {
            for key in (entry.objectValue ?? [:]).keys.sorted() where !profileKeys.contains(key) {
                found.append(
                    "profile \"\(printable(name))\": unknown key \"\(printable(key))\" (ignored; a profile has \"plugin\", \"settings\" and \"gitUsername\")"
                )
            }
        }
        return found
    }

    /// A key as it may be printed: control characters replaced.
    static func printable(_ text: String) -> String {
        String(String.UnicodeScalarView(text.unicodeScalars.map { $0.properties.generalCategory == .control ? "?" : $0 }))
    }
}
