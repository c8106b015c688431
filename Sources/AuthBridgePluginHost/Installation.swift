import AuthBridgeSystem

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// Where an installed AuthBridge finds its parts, relative to its own
/// executable so that an install tree can be moved anywhere:
///
///     PREFIX/bin/authbridge
///     PREFIX/lib/authbridge/authbridge-cli        (the command-line tool; finds the rest the same way)
///     PREFIX/lib/authbridge/plugins/NAME.json + libNAME.so
///     PREFIX/lib/authbridge/libAuthBridgeHTTP.so
///
/// In a SwiftPM build folder the libraries and authbridge-cli sit next to the executable.
///
/// The executable's folder, the library folder and the helper libraries' paths are
/// `HelperLibraryLocation`'s (`AuthBridgeSystem`); this adds the plugins' and the user's folders.
public enum Installation {
    /// The folder of the plugins that came with this host (see `bundledPluginsFolder(executableFolder:)`).
    public static var bundledPluginsFolder: String { bundledPluginsFolder(executableFolder: HelperLibraryLocation.executableFolder) }

    /// The bundled plugins of the executable in `folder`: `PREFIX/lib/authbridge/plugins` when it runs
    /// from an install tree (`PREFIX/bin`: the host; `PREFIX/lib/authbridge`: authbridge-cli and the
    /// plugin runner), else `plugins/` next to it (a SwiftPM build folder, `.build/debug`). One or
    /// the other, never both: a `bin/plugins` in an install tree is no folder AuthBridge installs.
    static func bundledPluginsFolder(executableFolder folder: String) -> String {
        if folder.hasSuffix("/lib/authbridge") { return folder + "/plugins" }
        if folder.hasSuffix("/bin") { return HelperLibraryLocation.parent(of: folder) + "/lib/authbridge/plugins" }
        return folder + "/plugins"
    }

    /// `$XDG_DATA_HOME/authbridge` (default `~/.local/share/authbridge`).
    public static var userDataFolder: String? { xdg("XDG_DATA_HOME", fallback: ".local/share").map { $0 + "/authbridge" } }

    /// `$XDG_CONFIG_HOME/authbridge` (default `~/.config/authbridge`).
    public static var userConfigFolder: String? { xdg("XDG_CONFIG_HOME", fallback: ".config").map { $0 + "/authbridge" } }

    /// The default plugin search path: the bundled plugins (of the install tree, or next to the
    /// executable in a build folder), then the user's.
    public static func defaultPluginFolders() -> [PluginFolder] {
        [PluginFolder(bundledPluginsFolder, origin: .installTree)] + (userDataFolder.map { [PluginFolder($0 + "/plugins", origin: .user)] } ?? [])
    }

    static func xdg(_ variable: String, fallback: String) -> String? {
        if let value = getenv(variable).map({ String(cString: $0) }), value.hasPrefix("/") { return value }
        guard let home = getenv("HOME").map({ String(cString: $0) }), !home.isEmpty else { return nil }
        return home + "/" + fallback
    }
}
