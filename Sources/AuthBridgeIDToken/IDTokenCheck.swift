import AuthBridgeCrypto
import AuthBridgeJSON
import AuthBridgeURL

// OpenID Connect ID-token verification (OIDC Core 3.1.3.7) against the provider's JWKS: the
// compact JWS, the key, the claims in Swift without Foundation; the signature by GNU Nettle
// (JWSSignature, libAuthBridgeNettle.so). Until issue 32 this was jwt-kit in libAuthBridgeJWT.so:
// with the Foundation it loaded, 7 MiB of the agent's memory from its first ID token on
// (bench/README, "ID tokens by GNU Nettle").
//
// Request JSON:  {"token","jwks":{…},"issuer","audience","nonce"?,"nowMs",
//                 "leewaySeconds"? (60),"algorithms"? (see SignatureAlgorithm)}
// Answer JSON:   {"claims":{…}}
//             or {"error":{"reason":"malformed"|"unknownKey"|…,"message":"…"}}

/// Why a token was refused: the ABI's reason word and a sentence for people.
///
/// Messages never quote the token or a claim other than `iss`/`aud`: an ID
/// token is a credential and answers end up in logs.
struct Rejection: Error {
    enum Reason: String {
        case invalidRequest, malformed, unsupportedAlgorithm, unknownKey, invalidSignature, badJWKS
        case issuerMismatch, audienceMismatch, azpMismatch, expired, issuedInFuture, nonceMismatch
        /// libAuthBridgeNettle.so is not installed (IDTokenVerifier answers `noJWTLibrary`).
        case noCryptoLibrary
    }

    var reason: Reason
    var message: String

    init(_ reason: Reason, _ message: String) {
        self.reason = reason
        self.message = message
    }
}

/// The claims OIDC Core 3.1.3.7 checks, read from the payload after the signature verified.
///
/// All optional (absent or null) so that a missing claim gets its own reason instead of
/// "malformed"; a claim of the wrong type is malformed.
struct IDTokenClaims {
    var iss: String?
    var aud: [String]?
    var azp: String?
    /// NumericDates (RFC 7519 §2): seconds since the epoch, integers or fractions.
    var exp: Double?
    var iat: Double?
    var nbf: Double?
    var nonce: String?

    init(_ payload: [String: JSON]) throws(Rejection) {
        let undecodable = Rejection(.malformed, "the ID token could not be decoded")
        func string(_ name: String) throws(Rejection) -> String? {
            switch payload[name] {
            case nil, .null?: return nil
            case .string(let value)?: return value
            default: throw undecodable
            }
        }
        func numericDate(_ name: String) throws(Rejection) -> Double? {
            switch payload[name] {
            case nil, .null?: return nil
            case .int(let value)?: return Double(value)
            case .double(let value)?: return value
            default: throw undecodable
            }
        }
        iss = try string("iss")
        azp = try string("azp")
        nonce = try string("nonce")
        exp = try numericDate("exp")
        iat = try numericDate("iat")
        nbf = try numericDate("nbf")
        // RFC 7519 §4.1.3: one string, or an array of strings.
        switch payload["aud"] {
        case nil, .null?: aud = nil
        case .string(let value)?: aud = [value]
        case .array(let values)?:
            let strings = values.compactMap(\.stringValue)
            guard strings.count == values.count else { throw undecodable }
            aud = strings
        default: throw undecodable
        }
    }
}

/// What the host asks: the token and everything it is checked against.
struct VerificationRequest {
    var token: String
    var jwks: JSON
    var issuer: String
    var audience: String
    var nonce: String?
    var nowMs: Int64
    var leewaySeconds: Int64
    var algorithms: Set<String>

    init(_ request: JSON) throws(Rejection) {
        func missing(_ name: String) -> Rejection {
            Rejection(.invalidRequest, "the verification request has no valid \"\(name)\"")
        }
        guard let token = request["token"]?.stringValue else { throw missing("token") }
        guard let jwks = request["jwks"] else { throw missing("jwks") }
        guard let issuer = request["issuer"]?.stringValue, !issuer.isEmpty else { throw missing("issuer") }
        guard let audience = request["audience"]?.stringValue, !audience.isEmpty else { throw missing("audience") }
        guard let nowMs = request["nowMs"]?.intValue else { throw missing("nowMs") }
        self.token = token
        self.jwks = jwks
        self.issuer = issuer
        self.audience = audience
        self.nowMs = nowMs
        switch request["nonce"] {
        case nil, .null?: nonce = nil
        case .string(let value)?: nonce = value
        default: throw missing("nonce")
        }
        switch request["leewaySeconds"] {
        case nil, .null?: leewaySeconds = 60
        case let value?:
            guard let seconds = value.intValue, (0...86_400).contains(seconds) else { throw missing("leewaySeconds") }
            leewaySeconds = seconds
        }
        switch request["algorithms"] {
        case nil, .null?: algorithms = SignatureAlgorithm.defaultAllowed
        case .array(let names)?:
            let strings = names.compactMap(\.stringValue)
            guard strings.count == names.count else { throw missing("algorithms") }
            // Names outside `supported` ("none", HS256…) are dropped, never honoured.
            algorithms = Set(strings).intersection(SignatureAlgorithm.supported)
        default: throw missing("algorithms")
        }
    }
}

/// A compact JWS split into its parts; only the header is read before the signature is checked.
struct CompactToken {
    static let maximumLength = 64 * 1024

    var algorithm: String
    var keyID: String?
    /// The decoded payload bytes: parsed only after the signature verified.
    var payload: [UInt8]
    /// ASCII(BASE64URL(header) ‖ '.' ‖ BASE64URL(payload)): what was signed (RFC 7515 §5.2 step 8).
    var signingInput: [UInt8]
    var signature: [UInt8]

    init(_ token: String) throws(Rejection) {
        let malformed = Rejection(.malformed, "the ID token is not a signed JWT in compact form")
        guard token.utf8.count <= Self.maximumLength else {
            throw Rejection(.malformed, "the ID token is longer than \(Self.maximumLength) bytes")
        }
        let parts = token.utf8.split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false)
        guard parts.count == 3, !parts[0].isEmpty, !parts[1].isEmpty,
            let headerBytes = Base64URL.decode(parts[0]),
            let payload = Base64URL.decode(parts[1]),
            let signature = Base64URL.decode(parts[2]),
            let header = (try? JSON.parse(headerBytes))?.objectValue
        else { throw malformed }
        guard let algorithm = header["alg"]?.stringValue else {
            throw Rejection(.malformed, "the ID token's header names no algorithm")
        }
        switch header["kid"] {
        case nil: keyID = nil
        case .string(let kid)?: keyID = kid
        default: throw Rejection(.malformed, "the ID token's key id is not a string")
        }
        // RFC 7515 §4.1.11: extensions marked critical must be understood; we understand none.
        guard header["crit"] == nil else {
            throw Rejection(.malformed, "the ID token's header lists critical extensions")
        }
        self.algorithm = algorithm
        self.payload = payload
        self.signingInput = Array(token.utf8[..<parts[1].endIndex])
        self.signature = signature
    }
}

/// OpenID Connect ID-token verification (OIDC Core 3.1.3.7) against the provider's JWKS.
public enum IDTokenCheck {
    /// Answers `{"claims": {…}}` or `{"error": {"reason", "message"}}`; never throws.
    /// Synchronous (the signature check is Nettle's, on the calling thread); any thread.
    public static func verify(request: JSON) -> JSON {
        do throws(Rejection) {
            return ["claims": try check(request)]
        } catch {
            return ["error": ["reason": .string(error.reason.rawValue), "message": .string(error.message)]]
        }
    }

    /// The token's claims once the signature and every claim check passed.
    static func check(_ json: JSON) throws(Rejection) -> JSON {
        let request = try VerificationRequest(json)
        let token = try CompactToken(request.token)
        guard request.algorithms.contains(token.algorithm) else {
            throw Rejection(
                .unsupportedAlgorithm, "the ID token's algorithm is not accepted (allowed: \(request.algorithms.sorted().joined(separator: ", ")))")
        }
        guard request.jwks.objectValue != nil else {
            throw Rejection(.badJWKS, "the provider's key set is not a JSON object")
        }
        let candidates = try KeySelection.candidates(in: request.jwks, kid: token.keyID, algorithm: token.algorithm)
        guard !candidates.isEmpty else {
            throw Rejection(
                .unknownKey,
                token.keyID == nil
                    ? "no key in the provider's key set fits the ID token's algorithm"
                    : "no key in the provider's key set has the ID token's key id and algorithm")
        }
        try verifySignature(token, candidates: candidates)
        // Signature checked: from here on the payload is the provider's word. jansson refuses
        // duplicate names and invalid UTF-8, so the claims checked are the claims answered.
        guard let claims = try? JSON.parse(token.payload), let members = claims.objectValue else {
            throw Rejection(.malformed, "the ID token's payload is not a JSON object")
        }
        try checkClaims(IDTokenClaims(members), request)
        return claims
    }

    /// Returns when one of `candidates` verifies the token's signature.
    ///
    /// Several candidates only when the token has no `kid` or the JWKS repeats one;
    /// badJWKS only when no candidate could even be used as a key.
    static func verifySignature(_ token: CompactToken, candidates: [JSON]) throws(Rejection) {
        var triedKey = false
        for candidate in candidates {
            guard let key = KeySelection.publicKey(candidate) else { continue }
            let verdict: JWSSignature.Verdict
            do {
                verdict = try JWSSignature.verify(token.signature, of: token.signingInput, algorithm: token.algorithm, key: key)
            } catch {
                guard error.reason == .unavailable else { continue }
                throw Rejection(.noCryptoLibrary, error.message)
            }
            switch verdict {
            case .verified: return
            case .refused: triedKey = true
            case .unusableKey: continue
            }
        }
        guard triedKey else { throw Rejection(.badJWKS, "the provider's signing key is incomplete or invalid") }
        throw Rejection(.invalidSignature, "the ID token's signature does not verify with the provider's key")
    }

    /// OIDC Core 3.1.3.7 steps 2–5 and 9–11, on a payload whose signature verified.
    static func checkClaims(_ claims: IDTokenClaims, _ request: VerificationRequest) throws(Rejection) {
        guard let issuer = claims.iss else {
            throw Rejection(.issuerMismatch, "the ID token names no issuer; expected \(quoted(request.issuer))")
        }
        guard issuer == request.issuer else {
            throw Rejection(.issuerMismatch, "the ID token was issued by \(quoted(issuer)), not \(quoted(request.issuer))")
        }
        guard let audiences = claims.aud, audiences.contains(request.audience) else {
            throw Rejection(.audienceMismatch, "the ID token is not meant for the client \(quoted(request.audience))")
        }
        if let azp = claims.azp {
            guard azp == request.audience else {
                throw Rejection(.azpMismatch, "the ID token was issued to another authorized party than \(quoted(request.audience))")
            }
        } else if Set(audiences).count > 1 {
            throw Rejection(.azpMismatch, "the ID token has several audiences and no authorized party (azp)")
        }

        let now = Double(request.nowMs)
        let leeway = Double(request.leewaySeconds) * 1000
        guard let expiry = claims.exp else {
            throw Rejection(.expired, "the ID token has no expiry time (exp)")
        }
        guard milliseconds(expiry) + leeway > now else {
            throw Rejection(.expired, "the ID token has expired")
        }
        guard let issuedAt = claims.iat else {
            throw Rejection(.issuedInFuture, "the ID token has no issue time (iat)")
        }
        guard milliseconds(issuedAt) - leeway <= now else {
            throw Rejection(.issuedInFuture, "the ID token's issue time is in the future")
        }
        if let notBefore = claims.nbf, milliseconds(notBefore) - leeway > now {
            throw Rejection(.issuedInFuture, "the ID token is not valid yet (nbf)")
        }

        if let expected = request.nonce {
            guard let nonce = claims.nonce else {
                throw Rejection(.nonceMismatch, "the ID token has no nonce, but one was sent")
            }
            guard nonce == expected else {
                throw Rejection(.nonceMismatch, "the ID token's nonce is not the one sent")
            }
        }
    }

    private static func milliseconds(_ seconds: Double) -> Double { seconds * 1000 }

    /// `text` in quotes, cut short: issuers and client ids are echoed, never unbounded.
    private static func quoted(_ text: String) -> String {
        text.count <= 120 ? "\"\(text)\"" : "\"\(text.prefix(120))…\""
    }
}
