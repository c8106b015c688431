import AuthBridgeJSON
import AuthBridgePluginHost

/// A named configuration of one plugin: what bridge methods call `provider`.
public struct Profile: Sendable, Equatable {
    public enum Source: String, Sendable { case config, runtime }

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
}
