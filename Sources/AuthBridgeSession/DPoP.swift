// DPoP (RFC 9449): a session's key pair and the proofs made with it. The key is made at sign-in,
// kept in the session's sealed vault record and used only inside the host: plugins and frontends
// get proofs (and, for a frontend's own request, the headers to send), never the key.

import AuthBridgeCrypto
import AuthBridgeJSON
import AuthBridgeNetwork
import AuthBridgePluginHost
import AuthBridgeRedaction
import AuthBridgeURL
import Synchronization

/// A session's DPoP key: what signs its proofs, and its public JWK and thumbprint.
struct DPoPKey: Sendable, Equatable, CustomStringConvertible {
    let key: SigningKey
    /// The public key as a JWK (RFC 7517), as every proof's header carries it.
    let jwk: String
    /// The JWK SHA-256 thumbprint (RFC 7638), base64url: `dpop_jkt` (RFC 9449 §10).
    let thumbprint: String
    /// The proof header (RFC 9449 §4.2), base64url: the same for every proof of the key.
    private let encodedHeader: String

    init(_ key: SigningKey) {
        self.key = key
        // RFC 7638 §3.2: the required members, in lexicographic order, no white space.
        switch key.algorithm {
        case .es256:
            let x = Base64URL.encode(key.publicKey[0..<32]), y = Base64URL.encode(key.publicKey[32..<64])
            jwk = #"{"crv":"P-256","kty":"EC","x":"\#(x)","y":"\#(y)"}"#
        case .edDSA:
            jwk = #"{"crv":"Ed25519","kty":"OKP","x":"\#(Base64URL.encode(key.publicKey))"}"#
        case .rs256:
            let n = Base64URL.encode(key.publicKey[0..<256]), e = Base64URL.encode(key.publicKey[256...])
            jwk = #"{"e":"\#(e)","kty":"RSA","n":"\#(n)"}"#
        }
        thumbprint = Base64URL.encode(SHA256.hash(Array(jwk.utf8)))
        encodedHeader = Base64URL.encode(Array(#"{"typ":"dpop+jwt","alg":"\#(key.algorithm.rawValue)","jwk":\#(jwk)}"#.utf8))
        KnownSecrets.shared.remember(Base64URL.encode(key.privateKey))
    }

    /// A new key for `algorithm` (a sign-in's).
    static func generate(_ algorithm: SignatureAlgorithm) throws(CryptoFailure) -> DPoPKey {
        DPoPKey(try SigningKey.generate(algorithm))
    }

    /// As the session's sealed record keeps it.
    var json: JSON {
        [
            "alg": .string(key.algorithm.rawValue), "d": .string(Base64URL.encode(key.privateKey)),
            "pub": .string(Base64URL.encode(key.publicKey)),
        ]
    }

    init?(json: JSON) {
        guard let algorithm = json["alg"]?.stringValue.flatMap(SignatureAlgorithm.init(rawValue:)),
            let privateKey = json["d"]?.stringValue.flatMap({ Base64URL.decode(Array($0.utf8)) }),
            let publicKey = json["pub"]?.stringValue.flatMap({ Base64URL.decode(Array($0.utf8)) }),
            let key = SigningKey(algorithm: algorithm, privateKey: privateKey, publicKey: publicKey)
        else { return nil }
        self.init(key)
    }

    /// A proof for one request (RFC 9449 §4.2): `htm` the method, `htu` the URL without its query
    /// and fragment, `ath` the access token's hash on a resource request, `nonce` the server's.
    func proof(method: String, url: String, accessToken: String? = nil, nonce: String? = nil, now: Int64) throws(CryptoFailure) -> String {
        try proof(method: method, url: url, ath: accessToken.map(Self.ath), nonce: nonce, now: now)
    }

    /// A proof's `iat` for a proof made at `now` (ms): the second before. A server compares it with
    /// its own clock and may refuse one from its future (RFC 9449 §11.1); glewlwyd does with no
    /// leeway against `time(2)`, a coarse clock that can read the previous second for a few
    /// milliseconds after ours has turned: about one proof in 150 was refused "Invalid iat", a
    /// refresh failing for nothing. A second older is inside every server's window (glewlwyd's
    /// default is 10 s, idpyoidc's 60).
    static func issuedAt(_ now: Int64) -> Int64 { now / 1000 - 1 }

    /// `proof` with the access token's hash (`ath`) made before: the answer cache keeps it.
    func proof(method: String, url: String, ath: String?, nonce: String?, now: Int64) throws(CryptoFailure) -> String {
        // Written out rather than built as JSON and serialised: this runs once per request a frontend makes.
        var claims =
            #"{"jti":""# + PKCE.randomToken() + #"","htm":"#
            + Self.quoted(method.utf8.contains { (97...122).contains($0) } ? method.uppercased() : method)
        claims += #","htu":"# + Self.quoted(Self.target(url)) + #","iat":"# + String(Self.issuedAt(now))
        if let ath { claims += #","ath":"# + Self.quoted(ath) }
        if let nonce { claims += #","nonce":"# + Self.quoted(nonce) }
        claims += "}"
        let signingInput = encodedHeader + "." + Base64URL.encode(Array(claims.utf8))
        return signingInput + "." + Base64URL.encode(try key.sign(Array(signingInput.utf8)))
    }

    /// `text` as a JSON string: as it is when nothing in it needs escaping (URLs, nonces, base64url
    /// almost always), else by the JSON serialiser.
    static func quoted(_ text: String) -> String {
        let plain = text.utf8.allSatisfy { $0 >= 0x20 && $0 < 0x7F && $0 != UInt8(ascii: "\"") && $0 != UInt8(ascii: "\\") }
        return plain ? "\"" + text + "\"" : JSON.string(text).serializedString()
    }

    /// `ath`: the access token's SHA-256, base64url (RFC 9449 §4.2).
    static func ath(_ accessToken: String) -> String {
        Base64URL.encode(SHA256.hash(Array(accessToken.utf8)))
    }

    /// The `htu` of a URL: without query and fragment (RFC 9449 §4.2).
    static func target(_ url: String) -> String {
        guard let end = url.utf8.firstIndex(where: { $0 == UInt8(ascii: "?") || $0 == UInt8(ascii: "#") }) else { return url }
        return String(url[..<end])
    }

    var description: String { "DPoPKey(\(key.algorithm.rawValue), jkt \(thumbprint))" }
}

/// A DPoP-bound session's `getAccessToken` answer as the answer cache keeps it: its JSON text cut
/// where `headers.DPoP` goes, so that each call's answer is the text with a new proof spliced in,
/// without building or serialising the answer again; and the token's `ath`, hashed once.
struct DPoPAnswer: Sendable {
    let key: DPoPKey
    let ath: String
    private let head: [UInt8]
    private let tail: [UInt8]

    /// `answer`: the answer without a proof. Nil if it cannot be cut (it always can: the marker is new).
    init?(_ answer: JSON, key: DPoPKey, accessToken: String) {
        let marker = "dpop-proof-" + PKCE.randomToken()
        var headers = answer["headers"]?.objectValue ?? [:]
        headers["DPoP"] = .string(marker)
        let text = answer.setting("headers", .object(headers)).serialized()
        let needle = Array(marker.utf8)
        guard let start = text.indices.first(where: { text[$0...].starts(with: needle) }) else { return nil }
        self.key = key
        ath = DPoPKey.ath(accessToken)
        head = Array(text[..<start])
        tail = Array(text[(start + needle.count)...])
    }

    /// The answer's text with `proof` as `headers.DPoP` (a proof is base64url and dots: nothing to escape).
    func text(with proof: String) -> [UInt8] {
        var text = head
        text.reserveCapacity(head.count + proof.utf8.count + tail.count)
        text.append(contentsOf: proof.utf8)
        text.append(contentsOf: tail)
        return text
    }
}

/// The last `DPoP-Nonce` each server sent (RFC 9449 §8–9), by origin: the next proof to that
/// server carries it. Shared by every session of the process.
final class DPoPNonces: Sendable {
    static let shared = DPoPNonces()
    private let nonces = Mutex<[String: String]>([:])

    func nonce(for url: String) -> String? {
        ParsedURL(url).flatMap { nonce(origin: $0.origin) }
    }

    /// The nonce of the server at `origin` (`ParsedURL.origin`).
    func nonce(origin: String) -> String? {
        nonces.withLock { $0[origin] }
    }

    /// Keeps the nonce of `response` (if any) for `url`'s server.
    func keep(from response: JSON, for url: String) {
        guard let nonce = response["headers"]?["dpop-nonce"]?.stringValue else { return }
        keep(nonce, for: url)
    }

    /// Keeps `nonce` for `url`'s server (RFC 9449 §8: visible ASCII, kept short).
    func keep(_ nonce: String, for url: String) {
        guard !nonce.isEmpty, nonce.utf8.count <= 1024, nonce.unicodeScalars.allSatisfy({ (0x21...0x7E).contains($0.value) }),
            let origin = ParsedURL(url)?.origin
        else { return }
        nonces.withLock { $0[origin] = nonce }
    }
}

/// One request sent with proofs of a session's key: the proof is made when the request leaves,
/// and a server that answers `use_dpop_nonce` (a token endpoint's 400, RFC 9449 §8; a resource
/// server's 401 `WWW-Authenticate: DPoP error="use_dpop_nonce"`, §9) with a new nonce gets the
/// request once more with it.
struct DPoPBinding: Sendable {
    let key: DPoPKey
    var nonces: DPoPNonces = .shared

    /// `request` with a fresh proof in its `DPoP` header; `ath` when it carries a DPoP access token.
    func signed(_ request: JSON) -> Result<JSON, ProviderFailure> {
        guard let url = request["url"]?.stringValue else { return .success(request) }
        var headers = request["headers"]?.objectValue ?? [:]
        let authorization = headers.first { $0.key.lowercased() == "authorization" }?.value.stringValue
        let accessToken = authorization.flatMap { $0.lowercased().hasPrefix("dpop ") ? String($0.dropFirst(5)) : nil }
        do {
            headers["DPoP"] = .string(
                try key.proof(
                    method: request["method"]?.stringValue ?? "GET", url: url, accessToken: accessToken, nonce: nonces.nonce(for: url),
                    now: HostClock.systemMilliseconds()))
        } catch {
            return .failure(ProviderFailure(.internal, reason: "dpopUnavailable", message: "No DPoP proof could be made: \(error.message)."))
        }
        return .success(request.setting("headers", .object(headers)))
    }

    /// Whether `response` asks for `request` again with the nonce it brought (kept for the next proofs).
    func wantsNonce(_ response: JSON, for request: JSON) -> Bool {
        // Any answer may bring the server's next nonce (§8.2); only a refusal that asks for one is replayed.
        guard let url = request["url"]?.stringValue, response["headers"]?["dpop-nonce"]?.stringValue != nil else { return false }
        nonces.keep(from: response, for: url)
        switch response["status"]?.intValue {
        case 400:
            return (try? JSON.parse(response["body"]?.stringValue ?? ""))?["error"]?.stringValue == "use_dpop_nonce"
        case 401:
            return response["headers"]?["www-authenticate"]?.stringValue?.hasSubstring("use_dpop_nonce") == true
        default:
            return false
        }
    }

    /// Sends `request` with proofs through `send`, retrying once for a server nonce.
    func perform(_ request: JSON, _ send: (JSON) -> Result<JSON, ProviderFailure>) -> Result<JSON, ProviderFailure> {
        var retried = false
        while true {
            let response = signed(request).flatMap(send)
            guard !retried, case .success(let answer) = response, wantsNonce(answer, for: request) else { return response }
            retried = true
        }
    }

    /// `perform` for async callers.
    func perform(_ request: JSON, _ send: (JSON) async -> Result<JSON, ProviderFailure>) async -> Result<JSON, ProviderFailure> {
        var retried = false
        while true {
            let response: Result<JSON, ProviderFailure>
            switch signed(request) {
            case .success(let signed): response = await send(signed)
            case .failure(let failure): return .failure(failure)
            }
            guard !retried, case .success(let answer) = response, wantsNonce(answer, for: request) else { return response }
            retried = true
        }
    }
}

/// A hook's HTTP: the host's client, and where the session is sender-constrained, its DPoP key —
/// a request that says `"dpop": true` (the standard steps' token requests, a plugin's
/// `host->http`) leaves with a proof of it.
public struct HookHTTP: Sendable {
    public let client: HTTPClient
    let dpop: DPoPBinding?

    public init(_ client: HTTPClient) {
        self.client = client
        dpop = nil
    }

    init(_ client: HTTPClient, dpop: DPoPBinding?) {
        self.client = client
        self.dpop = dpop
    }

    /// Performs one request for a hook on its thread; cancelling the call cancels the request.
    public func perform(_ request: JSON, call: HookCall?) -> Result<JSON, ProviderFailure> {
        guard let dpop, request["dpop"]?.boolValue == true else { return client.perform(request, call: call) }
        return dpop.perform(request) { client.perform($0, call: call) }
    }
}
