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
public enum Installation {
    /// The folder holding the running executable (from /proc/self/exe).
    public static var executableFolder: String { HelperLibraryLocation.executableFolder }

    /// `PREFIX/lib/authbridge` for an installed tree.
    public static var libraryFolder: String { HelperLibraryLocation.libraryFolder }

    /// The bundled plugins folder of an installed tree.
    public static var bundledPluginsFolder: String { libraryFolder + "/plugins" }

    /// `$XDG_DATA_HOME/authbridge` (default `~/.local/share/authbridge`).
    public static var userDataFolder: String? { xdg("XDG_DATA_HOME", fallback: ".local/share").map { $0 + "/authbridge" } }

    /// `$XDG_CONFIG_HOME/authbridge` (default `~/.config/authbridge`).
    public static var userConfigFolder: String? { xdg("XDG_CONFIG_HOME", fallback: ".config").map { $0 + "/authbridge" } }

    /// The default plugin search path: bundled (in an install tree, or next
    /// to the executable in a build folder), then the user's.
    public static func defaultPluginFolders() -> [PluginFolder] {
        var folders = [PluginFolder(bundledPluginsFolder, origin: .installTree)]
        if libraryFolder != executableFolder { folders.append(PluginFolder(executableFolder + "/plugins", origin: .installTree)) }
        if let user = userDataFolder { folders.append(PluginFolder(user + "/plugins", origin: .user)) }
        return folders
    }

    /// Candidate paths of a helper library shipped with the host.
    public static func helperLibraryCandidates(_ file: String) -> [String] { HelperLibraryLocation.candidates(file) }

    static func xdg(_ variable: String, fallback: String) -> String? {
        if let value = getenv(variable).map({ String(cString: $0) }), value.hasPrefix("/") { return value }
        guard let home = getenv("HOME").map({ String(cString: $0) }), !home.isEmpty else { return nil }
        return home + "/" + fallback
    }

    static func parent(of path: String) -> String { HelperLibraryLocation.parent(of: path) }
}
