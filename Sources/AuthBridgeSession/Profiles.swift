import AuthBridgeJSON
import AuthBridgeProtocol
import AuthBridgePluginHost

/// A named configuration of one plugin: what bridge methods call `provider`.
public struct Profile: Sendable, Equatable {
    /// Whence the profile came: the configuration file or `configureProfile` (bridge-spec ProfileInfo.source).
    public typealias Source = ProfileInfo.Source

    public var name: String
    public var plugin: String
    /// The user's settings (client id, server URL, login host, scopes…).
    public var settings: JSON
    public var source: Source

    /// Why a profile name cannot be used, or nil. Names are keys of stored
    /// sessions: no control characters (U+001F joins a profile to an account).
    public static func problem(withName name: String) -> String? {
        if name.isEmpty { return "must not be empty" }
        if name.unicodeScalars.contains(where: { $0.properties.generalCategory == .control }) {
            return "must not contain control characters"
        }
        return nil
    }

    public init(name: String, plugin: String, settings: JSON, source: Source) {
        self.name = name
        self.plugin = plugin
        self.settings = settings
        self.source = source
    }
}

/// Why a configuration file could not be used.
public struct ConfigurationError: Error, Sendable, CustomStringConvertible {
    public var message: String
    public init(_ message: String) { self.message = message }
    public var description: String { message }
}

/// Reads the profiles from the configuration file:
///
///     {"profiles": {"work": {"plugin": "oidc", "settings": {"issuer": "…", "clientId": "…"}}}}
public enum ConfigurationFile {
    public static func profiles(from json: JSON) throws(ConfigurationError) -> [Profile] {
        guard case .object = json else { throw ConfigurationError("the configuration must be a JSON object") }
        guard let entries = json["profiles"] else { return [] }
        guard case .object(let members) = entries else {
            throw ConfigurationError("\"profiles\" must be an object of profile name → {plugin, settings}")
        }
        var profiles: [Profile] = []
        for (name, entry) in members.sorted(by: { $0.key < $1.key }) {
            if let problem = Profile.problem(withName: name) {
                throw ConfigurationError(
                    "profile name \"\(name.unicodeScalars.map { $0.properties.generalCategory == .control ? "?" : String($0) }.joined())\" \(problem)"
                )
            }
            guard let plugin = entry["plugin"]?.stringValue else {
                throw ConfigurationError("profile \"\(name)\": \"plugin\" must name a plugin id")
            }
            let settings = entry["settings"] ?? [:]
            guard case .object = settings else { throw ConfigurationError("profile \"\(name)\": \"settings\" must be an object") }
            profiles.append(Profile(name: name, plugin: plugin, settings: settings, source: .config))
        }
        return profiles
    }
}

/// Checks settings against the simple JSON Schema subset plugins declare in
/// `describe` (type object, `required`, property `type`s), naming the field.
enum SettingsValidator {
    static func problem(in settings: JSON, schema: JSON?) -> (field: String, message: String)? {
        guard case .object(let members) = settings else { return ("settings", "must be an object") }
        guard let schema else { return nil }
        for case .string(let required) in schema["required"]?.arrayValue ?? [] where members[required] == nil {
            return ("settings.\(required)", "is required by this plugin")
        }
        for (key, propertySchema) in (schema["properties"]?.objectValue ?? [:]).sorted(by: { $0.key < $1.key }) {
            guard let value = members[key], let type = propertySchema["type"]?.stringValue else { continue }
            let matches: Bool
            switch type {
            case "string": matches = value.stringValue != nil
            case "integer": matches = value.intValue != nil
            case "number": matches = value.doubleValue != nil
            case "boolean": matches = value.boolValue != nil
            case "array": matches = value.arrayValue != nil
            case "object": matches = value.objectValue != nil
            default: matches = true
            }
            if !matches { return ("settings.\(key)", "must be of type \(type), not \(value.typeName)") }
        }
        return nil
    }

    /// Profile settings the host itself reads, whatever the plugin (bridge-spec, "Method rules").
    static let hostLevelKeys: Set<String> = [
        "loopbackPort", "loopbackPath", "licenseGracePeriodMs", "clockSkewSeconds", "endSession", "postLogoutRedirectUri",
    ]

    /// Warnings about settings that nothing reads: keys outside the plugin's schema (and not
    /// host-level), each named with its profile and, when one is close, the key probably meant.
    /// Nothing is refused: a misspelt `clientID` must not stop a working profile, but it must not
    /// pass unnoticed either (config.json's unknown keys get the same kind of warning). A schema
    /// that names no properties, or allows any (`additionalProperties`), says nothing is unknown.
    static func unknownSettings(in settings: JSON, schema: JSON?, profile: String, plugin: String) -> [String] {
        guard let members = settings.objectValue, let known = schema?["properties"]?.objectValue else { return [] }
        if let open = schema?["additionalProperties"], open.boolValue == true || open.objectValue != nil { return [] }
        let candidates = Set(known.keys).union(hostLevelKeys)
        return members.keys.filter { !candidates.contains($0) }.sorted().map { key in
            let hint = closest(to: key, among: candidates).map { "; did you mean \"\($0)\"?" } ?? ""
            return
                "profile \"\(ConfigurationLoader.printable(profile))\": setting \"\(ConfigurationLoader.printable(key))\" is not one the \(plugin) plugin or the host reads (ignored)\(hint)"
        }
    }

    /// The candidate nearest to `key` by edit distance (letter case aside), if near enough to be a
    /// slip: at most a third of the key's length, and at most 3 edits.
    static func closest(to key: String, among candidates: Set<String>) -> String? {
        let target = Array(key.lowercased().unicodeScalars)
        let limit = min(3, max(1, target.count / 3))
        var best: (name: String, distance: Int)?
        for candidate in candidates.sorted() {
            let distance = editDistance(target, Array(candidate.lowercased().unicodeScalars))
            if distance <= limit, distance < (best?.distance ?? Int.max) { best = (candidate, distance) }
        }
        return best?.name
    }

    /// Levenshtein distance, one row at a time.
    static func editDistance(_ a: [Unicode.Scalar], _ b: [Unicode.Scalar]) -> Int {
        guard !a.isEmpty else { return b.count }
        guard !b.isEmpty else { return a.count }
        var previous = Array(0...b.count)
        var current = [Int](repeating: 0, count: b.count + 1)
        for i in 1...a.count {
            current[0] = i
            for j in 1...b.count {
                current[j] = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1))
            }
            swap(&previous, &current)
        }
        return previous[b.count]
    }
}
