import AuthBridgeJSON
import AuthBridgePluginABI

/// The JSON file beside a plugin library that lets the host vet a plugin
/// before running any of its code, and the one place where a plugin's id,
/// version and description are stated (plugin.h, "Metadata").
///
///     {"id": "oidc", "version": "0.1.0", "abi": "1.0",
///      "library": "libauthbridge-oidc.so", "description": "…"}
///
/// Optional: `"isolation": "process"` (run in its own runner process even
/// from the install tree; bridge-spec "Isolation") and `"deadlines":
/// {"refresh": 120000}` (milliseconds, by hook name, for a plugin whose
/// provider is known to be slow).
public struct PluginManifest: Sendable, Equatable {
    public var id: String
    public var version: String
    public var abiMajor: Int
    public var abiMinor: Int
    /// The library's file name, relative to the manifest's folder.
    public var library: String
    /// What people read about the plugin (`initialize`'s provider list); "" when none is given.
    public var description: String
    /// Where the plugin asks to run; nil: where its folder's origin says.
    public var isolation: PluginIsolation?
    /// The plugin's own deadlines, by hook (`HookDeadlines.overrides`).
    public var deadlines: [PluginHook: Duration] = [:]

    /// The deadlines a manifest may set, in milliseconds.
    public static let deadlineRange = 100...600_000

    public init(json: JSON) throws(PluginLoadError) {
        func string(_ key: String) throws(PluginLoadError) -> String {
            guard let value = json[key]?.stringValue, !value.isEmpty else {
                throw PluginLoadError(.invalidManifest, "manifest field \"\(key)\" must be a non-empty string")
            }
            return value
        }
        guard case .object = json else { throw PluginLoadError(.invalidManifest, "manifest must be a JSON object") }
        id = try string("id")
        guard id.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "-" || $0 == "_" || $0 == ".") }) else {
            throw PluginLoadError(.invalidManifest, "manifest id \"\(id)\" may only use letters, digits, '-', '_' and '.'")
        }
        version = try string("version")
        let abi = try string("abi")
        let parts = abi.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 2, let major = Int(parts[0]), let minor = Int(parts[1]) else {
            throw PluginLoadError(.invalidManifest, "manifest \"abi\" must look like \"1.0\", not \"\(abi)\"")
        }
        abiMajor = major
        abiMinor = minor
        library = try string("library")
        guard !library.contains("/"), library != "..", library != "." else {
            throw PluginLoadError(.invalidManifest, "manifest \"library\" must be a file name in the plugin folder")
        }
        description = json["description"]?.stringValue ?? ""
        if let value = json["isolation"] {
            guard let word = value.stringValue, let isolation = PluginIsolation(rawValue: word) else {
                throw PluginLoadError(.invalidManifest, "manifest \"isolation\" must be \"process\" or \"none\"")
            }
            self.isolation = isolation
        }
        if let value = json["deadlines"] {
            guard case .object(let members) = value else {
                throw PluginLoadError(.invalidManifest, "manifest \"deadlines\" must be an object of hook names and milliseconds")
            }
            for (name, milliseconds) in members {
                guard let hook = PluginHook(name: name) else {
                    throw PluginLoadError(.invalidManifest, "manifest \"deadlines\" names \"\(name)\", which is not a hook")
                }
                guard let value = milliseconds.intValue.map(Int.init), Self.deadlineRange.contains(value) else {
                    throw PluginLoadError(
                        .invalidManifest,
                        "manifest deadline of \(name) must be a whole number of milliseconds from \(Self.deadlineRange.lowerBound) to \(Self.deadlineRange.upperBound)"
                    )
                }
                deadlines[hook] = .milliseconds(value)
            }
        }
    }
}

/// Why a plugin was refused. `reason` is a stable word for machines,
/// `message` a sentence for people.
public struct PluginLoadError: Error, Sendable, Equatable, CustomStringConvertible {
    public struct Reason: RawRepresentable, Hashable, Sendable {
        public var rawValue: String
        public init(rawValue: String) { self.rawValue = rawValue }
        public static let invalidManifest = Reason(rawValue: "invalidManifest")
        public static let insecurePermissions = Reason(rawValue: "insecurePermissions")
        public static let symlinkEscapes = Reason(rawValue: "symlinkEscapes")
        public static let duplicateID = Reason(rawValue: "duplicateId")
        public static let abiMismatch = Reason(rawValue: "abiMismatch")
        public static let loadFailed = Reason(rawValue: "loadFailed")
        public static let missingSymbol = Reason(rawValue: "missingSymbol")
        public static let badEntry = Reason(rawValue: "badEntry")
        public static let initFailed = Reason(rawValue: "initFailed")
        public static let describeFailed = Reason(rawValue: "describeFailed")
        /// The library or its `describe` states an id, version or description other than its
        /// manifest's (the manifest is where they are stated).
        public static let metadataMismatch = Reason(rawValue: "metadataMismatch")
        /// A Swift plugin built for another Swift runtime than the host's, or without the
        /// Swift runtime note that says which (refused before `dlopen`).
        public static let swiftRuntimeMismatch = Reason(rawValue: "swiftRuntimeMismatch")
        /// The library's path named another file when it was about to be opened than the one
        /// vetted (replaced in between): nothing of the replacement ran.
        public static let libraryChanged = Reason(rawValue: "libraryChanged")
    }

    public var reason: Reason
    public var message: String
    /// A command that removes the cause, when there is one (e.g. `chmod go-w PATH`), for people.
    public var fix: String?

    public init(_ reason: Reason, _ message: String, fix: String? = nil) {
        self.reason = reason
        self.message = message
        self.fix = fix
    }

    public var description: String { "\(reason.rawValue): \(message)" }
}
