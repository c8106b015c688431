/// A folder the loader searches, and where it comes from: that decides
/// whether its plugins run inside the host by default.
public struct PluginFolder: Sendable, Equatable {
    public enum Origin: Sendable, Equatable {
        /// Installed with the host (its `lib/authbridge/plugins`, or a build folder's `plugins`):
        /// the plugins shipped and tested with it run in-process.
        case installTree
        /// A user's own folder (`$XDG_DATA_HOME/authbridge/plugins`, `--plugins`): whoever
        /// dropped a library there, it runs in its own runner process.
        case user
    }

    public var path: String
    public var origin: Origin

    public init(_ path: String, origin: Origin) {
        self.path = path
        self.origin = origin
    }
}

/// Decides where each plugin runs (bridge-spec "Isolation"). First match wins:
/// the host's `--plugin-isolation ID=MODE`, then its bare `--plugin-isolation
/// MODE`, then a manifest asking for `process`, then the folder's origin
/// (install tree: `none`, a user's folder: `process`). A manifest can ask for
/// more isolation but not for less: a user who dropped a stranger's library
/// into their folder hopes it cannot take the host down, and only the person
/// running the host can decide otherwise.
public struct IsolationPolicy: Sendable, Equatable {
    /// `--plugin-isolation ID=MODE`.
    public var byPlugin: [String: PluginIsolation] = [:]
    /// `--plugin-isolation MODE`.
    public var everyPlugin: PluginIsolation?
    /// The runner's data limit in MiB (`--plugin-memory-limit`; `RLIMIT_DATA`).
    public var memoryLimitMB = 1024

    /// The smallest memory limit: thread stacks count towards `RLIMIT_DATA`.
    public static let minimumMemoryLimitMB = 256

    public init(byPlugin: [String: PluginIsolation] = [:], everyPlugin: PluginIsolation? = nil, memoryLimitMB: Int = 1024) {
        self.byPlugin = byPlugin
        self.everyPlugin = everyPlugin
        self.memoryLimitMB = memoryLimitMB
    }

    /// Reads the values of `--plugin-isolation`: `MODE` or `ID=MODE`, MODE one of
    /// `process` and `none`.
    public init(options: [String], memoryLimitMB: Int = 1024) throws(IsolationOptionError) {
        self.memoryLimitMB = memoryLimitMB
        for option in options {
            let parts = option.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false).map(String.init)
            guard let word = parts.last, let mode = PluginIsolation(rawValue: word) else {
                throw IsolationOptionError(option: option)
            }
            if parts.count == 2 {
                guard !parts[0].isEmpty else { throw IsolationOptionError(option: option) }
                byPlugin[parts[0]] = mode
            } else {
                everyPlugin = mode
            }
        }
    }

    /// Where the plugin of `manifest`, found in a folder of `origin`, runs, and a
    /// warning when its manifest asked for less isolation than it gets.
    public func isolation(for manifest: PluginManifest, origin: PluginFolder.Origin) -> (PluginIsolation, warning: String?) {
        if let chosen = byPlugin[manifest.id] ?? everyPlugin { return (chosen, nil) }
        if manifest.isolation == .process { return (.process, nil) }
        switch origin {
        case .installTree:
            return (.none, nil)
        case .user:
            let warning =
                manifest.isolation == PluginIsolation.none
                ? "plugin \(manifest.id) asks to run inside the host, but it was found in a user's plugin folder: it runs in its own process (--plugin-isolation \(manifest.id)=none overrides this)"
                : nil
            return (.process, warning)
        }
    }
}

/// A `--plugin-isolation` value that is neither `MODE` nor `ID=MODE`.
public struct IsolationOptionError: Error, Sendable, CustomStringConvertible {
    public var option: String
    public var description: String {
        "--plugin-isolation takes process, none, or ID=process|none (got \"\(option)\")"
    }
}
