// How the host authenticates a confidential client at the endpoints that ask for it (token, pushed
// authorization requests, revocation): RFC 6749 §2.3.1 (client_secret_basic, client_secret_post),
// RFC 7523 §2.2 with OpenID Connect Core §9 (client_secret_jwt, private_key_jwt). The secret and
// the private key stay in the host: a plugin's request asks for authentication, the host adds it.

import AuthBridgeCrypto
import AuthBridgeJSON
import AuthBridgePluginHost
import AuthBridgeRedaction
import AuthBridgeSystem
import AuthBridgeURL
import Synchronization

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// A profile's client authentication method (the setting `clientAuthentication`).
public enum ClientAuthentication: String, Sendable, CaseIterable {
    case clientSecretBasic = "client_secret_basic"
    case clientSecretPost = "client_secret_post"
    case clientSecretJWT = "client_secret_jwt"
    case privateKeyJWT = "private_key_jwt"
    /// A public client: only `client_id` (PKCE protects its codes).
    case none

    static let assertionType = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"
    /// How long an assertion is good for: long enough for a slow network, short against replay.
    static let assertionLifetimeSeconds: Int64 = 60

    /// The method for a configuration: the setting `clientAuthentication` when given, else from what
    /// the client has (a private key file, a secret, nothing) and what the server's metadata lists
    /// (`tokenEndpointAuthMethods`, discovered from `token_endpoint_auth_methods_supported`): a
    /// secret goes in the Authorization header where the server lists client_secret_basic (RFC 8414's
    /// default), else in the form as before.
    static func method(_ config: JSON) -> Result<ClientAuthentication, ProviderFailure> {
        let secret = config["clientSecret"]?.stringValue.flatMap { $0.isEmpty ? nil : $0 }
        let keyFile = config["privateKeyFile"]?.stringValue
        if let setting = config["clientAuthentication"] {
            guard let name = setting.stringValue, let method = ClientAuthentication(rawValue: name) else {
                let names = allCases.map { "\"\($0.rawValue)\"" }.joined(separator: ", ")
                return .failure(invalid("\"clientAuthentication\" must be one of \(names)."))
            }
            switch method {
            case .clientSecretBasic where secret == nil, .clientSecretPost where secret == nil, .clientSecretJWT where secret == nil:
                return .failure(
                    ProviderFailure(
                        .configuration, reason: "missingSetting",
                        message: "\"clientAuthentication\": \"\(name)\" needs the setting \"clientSecret\"."))
            case .privateKeyJWT where keyFile == nil:
                return .failure(
                    ProviderFailure(
                        .configuration, reason: "missingSetting",
                        message: "\"clientAuthentication\": \"private_key_jwt\" needs the setting \"privateKeyFile\" (a PEM file of mode 0600)."))
            default: return .success(method)
            }
        }
        if keyFile != nil { return .success(.privateKeyJWT) }
        guard secret != nil else { return .success(.none) }
        let advertised = config["tokenEndpointAuthMethods"]?.arrayValue?.compactMap(\.stringValue) ?? []
        if advertised.contains(ClientAuthentication.clientSecretBasic.rawValue) { return .success(.clientSecretBasic) }
        if advertised.isEmpty || advertised.contains(ClientAuthentication.clientSecretPost.rawValue) { return .success(.clientSecretPost) }
        if advertised.contains(ClientAuthentication.clientSecretJWT.rawValue) { return .success(.clientSecretJWT) }
        return .success(.clientSecretPost)
    }

    /// A setting that cannot work, found at configure time: an unknown method, a missing secret or
    /// key, a key file that is not private or holds no key.
    static func problem(_ config: JSON) -> ProviderFailure? {
        switch method(config) {
        case .failure(let failure): return failure
        case .success(.privateKeyJWT):
            if case .failure(let failure) = ClientKeys.shared.key(config) { return failure }
            return nil
        case .success: return nil
        }
    }

    /// `request` (an HTTPRequest with a `form` that names the client in `client_id`) with the
    /// client's authentication added for `endpoint`: a Basic header, the secret in the form, or a
    /// signed assertion whose audience is `audience(config)`.
    static func authenticate(_ request: JSON, config: JSON, now: Int64 = HostClock.systemMilliseconds()) -> Result<JSON, ProviderFailure> {
        guard let clientID = config["clientId"]?.stringValue else { return .failure(StandardSteps.missingSetting("clientId")) }
        var form = request["form"]?.objectValue ?? [:]
        var headers = request["headers"]?.objectValue ?? [:]
        form["client_id"] = .string(clientID)
        form["client_secret"] = nil
        let method: ClientAuthentication
        switch Self.method(config) {
        case .failure(let failure): return .failure(failure)
        case .success(let value): method = value
        }
        let secret = config["clientSecret"]?.stringValue ?? ""
        switch method {
        case .none: break
        case .clientSecretPost: form["client_secret"] = .string(secret)
        case .clientSecretBasic:
            // RFC 6749 §2.3.1: both parts form-urlencoded before the Basic encoding.
            let pair = FormEncoding.percentEncode(clientID) + ":" + FormEncoding.percentEncode(secret)
            headers["Authorization"] = .string("Basic " + Base64.encode(Array(pair.utf8)))
            form["client_id"] = nil
        case .clientSecretJWT, .privateKeyJWT:
            let assertion: String
            switch self.assertion(method, clientID: clientID, config: config, now: now) {
            case .failure(let failure): return .failure(failure)
            case .success(let value): assertion = value
            }
            form["client_assertion_type"] = .string(assertionType)
            form["client_assertion"] = .string(assertion)
        }
        return .success(request.setting("form", .object(form)).setting("headers", .object(headers)))
    }

    /// The assertion's audience (RFC 7523 §3, OpenID Connect Core §9): the setting
    /// `clientAssertionAudience` — "tokenEndpoint" (the default, as OpenID Connect asks),
    /// "issuer", or a URI of its own — resolved against the configuration.
    static func audience(_ config: JSON) -> String? {
        let setting = config["clientAssertionAudience"]?.stringValue ?? "tokenEndpoint"
        switch setting {
        case "tokenEndpoint": return config["tokenEndpoint"]?.stringValue
        case "issuer": return config["issuer"]?.stringValue ?? config["tokenEndpoint"]?.stringValue
        default: return setting
        }
    }

    /// A client assertion (RFC 7523 §3): `iss` and `sub` the client id, `aud`, a fresh `jti`, `iat`,
    /// `exp` a minute later; HS256 under the client secret, or the private key's algorithm with its
    /// `kid` (the setting `privateKeyId`).
    static func assertion(_ method: ClientAuthentication, clientID: String, config: JSON, now: Int64) -> Result<String, ProviderFailure> {
        guard let audience = audience(config) else { return .failure(StandardSteps.missingSetting("tokenEndpoint")) }
        let issuedAt = now / 1000
        let claims: JSON = [
            "iss": .string(clientID), "sub": .string(clientID), "aud": .string(audience), "jti": .string(PKCE.randomToken()),
            "iat": .int(issuedAt), "exp": .int(issuedAt + assertionLifetimeSeconds),
        ]
        var header: [String: JSON] = ["typ": "JWT"]
        do {
            switch method {
            case .clientSecretJWT:
                header["alg"] = "HS256"
                let input = signingInput(header, claims)
                let secret = Array((config["clientSecret"]?.stringValue ?? "").utf8)
                return .success(input + "." + Base64URL.encode(try HMACSHA256.authenticationCode(Array(input.utf8), key: secret)))
            default:
                let key: SigningKey
                switch ClientKeys.shared.key(config) {
                case .failure(let failure): return .failure(failure)
                case .success(let value): key = value
                }
                header["alg"] = .string(key.algorithm.rawValue)
                header["kid"] = config["privateKeyId"]
                let input = signingInput(header, claims)
                return .success(input + "." + Base64URL.encode(try key.sign(Array(input.utf8))))
            }
        } catch {
            return .failure(
                ProviderFailure(.internal, reason: "cryptoUnavailable", message: "No client assertion could be signed: \(error.message)."))
        }
    }

    private static func signingInput(_ header: [String: JSON], _ claims: JSON) -> String {
        Base64URL.encode(JSON.object(header).serialized()) + "." + Base64URL.encode(claims.serialized())
    }

    private static func invalid(_ message: String) -> ProviderFailure {
        ProviderFailure(.configuration, reason: "invalidSettings", message: message)
    }
}

/// Clients' private keys, read from their PEM files (the setting `privateKeyFile`) and kept while
/// the file is unchanged: an assertion per token request must not parse the key each time, and a
/// replaced key file is read again.
final class ClientKeys: Sendable {
    static let shared = ClientKeys()
    /// A key file larger than this is no PEM key (RSA 4096 is about 3.3 KB).
    static let fileLimit = 64 << 10

    private struct Identity: Equatable {
        var device: UInt64, inode: UInt64, size: Int64, modified: Int64, modifiedNanoseconds: Int64
    }
    private let keys = Mutex<[String: (identity: Identity, key: SigningKey)]>([:])

    /// The key of the configuration's `privateKeyFile`: a regular file of this user that no one
    /// else may read or change (mode 0600 or stricter), holding one P-256, Ed25519 or RSA private key.
    func key(_ config: JSON) -> Result<SigningKey, ProviderFailure> {
        guard let setting = config["privateKeyFile"]?.stringValue, !setting.isEmpty else {
            return .failure(StandardSteps.missingSetting("privateKeyFile"))
        }
        let path = Self.expanded(setting)
        let fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK)
        guard fd >= 0 else {
            let why = String(cString: strerror(errno))
            return .failure(refusal("missingSetting", "The private key file \(path) (\"privateKeyFile\") cannot be opened: \(why)."))
        }
        defer { close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0, (info.st_mode & S_IFMT) == S_IFREG else {
            return .failure(refusal("invalidSettings", "The private key file \(path) (\"privateKeyFile\") is not a regular file."))
        }
        guard info.st_uid == geteuid() else {
            return .failure(
                refusal("insecurePermissions", "The private key file \(path) belongs to uid \(info.st_uid), not to this user; refusing to use it."))
        }
        guard info.st_mode & 0o077 == 0 else {
            let mode = String(info.st_mode & 0o777, radix: 8)
            return .failure(
                refusal(
                    "insecurePermissions",
                    "The private key file \(path) is accessible to other users (mode \(mode)); refusing to use it. Fix with: chmod 600 \(path)"))
        }
        let identity = Identity(
            device: UInt64(info.st_dev), inode: UInt64(info.st_ino), size: Int64(info.st_size), modified: Int64(info.st_mtim.tv_sec),
            modifiedNanoseconds: Int64(info.st_mtim.tv_nsec))
        if let known = keys.withLock({ $0[path] }), known.identity == identity { return .success(known.key) }
        guard case .success(var bytes) = POSIXFiles.readAll(fd, limit: Self.fileLimit) else {
            return .failure(refusal("invalidSettings", "The private key file \(path) cannot be read (or is over \(Self.fileLimit) bytes)."))
        }
        defer { for index in bytes.indices { bytes[index] = 0 } }
        let parsed: SigningKey?
        do { parsed = try SigningKey.importing(pem: String(decoding: bytes, as: UTF8.self)) } catch {
            return .failure(ProviderFailure(.internal, reason: "cryptoUnavailable", message: "The private key cannot be read: \(error.message)."))
        }
        guard let key = parsed else {
            return .failure(
                refusal(
                    "invalidSettings",
                    "The private key file \(path) holds no private key AuthBridge can sign with (PEM: P-256, Ed25519, or RSA of 2048 to 4096 bits)."
                ))
        }
        KnownSecrets.shared.remember(Base64URL.encode(key.privateKey))
        keys.withLock { $0[path] = (identity, key) }
        return .success(key)
    }

    /// `~/` expanded to the home folder; other paths as they are.
    static func expanded(_ path: String) -> String {
        guard path.hasPrefix("~/"), let home = getenv("HOME").map({ String(cString: $0) }) else { return path }
        return home + path.dropFirst(1)
    }

    private func refusal(_ reason: String, _ message: String) -> ProviderFailure {
        ProviderFailure(.configuration, reason: reason, message: message)
    }
}
