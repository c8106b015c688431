import AuthBridgeJSON
import AuthBridgePluginHost

/// Reads the profiles file from disk.
public enum ConfigurationLoader {
    /// The profiles in `path`. A missing file is an error only when `required`.
    public static func load(_ path: String, required: Bool) -> Result<[Profile], ConfigurationError> {
        guard let bytes = FileSecurity.readFile(path) else {
            return required ? .failure(ConfigurationError("cannot read the file")) : .success([])
        }
        do {
            return .success(try ConfigurationFile.profiles(from: try JSON.parse(bytes)))
        } catch let error as JSONParseError {
            return .failure(ConfigurationError("not valid JSON: \(error)"))
        } catch let error as ConfigurationError {
            return .failure(error)
        } catch {
            return .failure(ConfigurationError("\(error)"))
        }
    }
}
