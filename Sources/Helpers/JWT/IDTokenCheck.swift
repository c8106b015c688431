import AuthBridgeJSON
import AuthBridgeURL
import JWTKit
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// Why a token was refused: the ABI's reason word and a sentence for people.
///
/// Messages never quote the token or a claim other than `iss`/`aud`: an ID
/// token is a credential and answers end up in logs.
struct Rejection: Error {
    enum Reason: String {
        case invalidRequest, malformed, unsupportedAlgorithm, unknownKey, invalidSignature, badJWKS
        case issuerMismatch, audienceMismatch, azpMismatch, expired, issuedInFuture, nonceMismatch
    }

    var reason: Reason
    var message: String

    init(_ reason: Reason, _ message: String) {
        self.reason = reason
        self.message = message
    }
}

/// The claims OIDC Core 3.1.3.7 checks, as jwt-kit decodes them after the signature verified.
///
/// All optional so that a missing claim gets its own reason instead of "malformed";
/// a claim of the wrong type still fails decoding (malformed).
struct IDTokenClaims: JWTPayload {
    var iss: IssuerClaim?
    var aud: AudienceClaim?
    var azp: String?
    var exp: ExpirationClaim?
    var iat: IssuedAtClaim?
    var nbf: NotBeforeClaim?
    var nonce: String?

    /// Nothing here: the checks need the host's clock and exact reasons, so
    /// `IDTokenCheck` makes them once jwt-kit has returned the payload.
    func verify(using algorithm: some JWTAlgorithm) async throws {}
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

    init(_ token: String) throws(Rejection) {
        let malformed = Rejection(.malformed, "the ID token is not a signed JWT in compact form")
        guard token.utf8.count <= Self.maximumLength else {
            throw Rejection(.malformed, "the ID token is longer than \(Self.maximumLength) bytes")
        }
        let parts = token.utf8.split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false)
        guard parts.count == 3, !parts[0].isEmpty, !parts[1].isEmpty,
            let headerBytes = Base64URL.decode(parts[0]),
            let payload = Base64URL.decode(parts[1]),
            Base64URL.decode(parts[2]) != nil,
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
    }
}

/// OpenID Connect ID-token verification (OIDC Core 3.1.3.7) against the provider's JWKS.
enum IDTokenCheck {
    /// Answers `{"claims": {…}}` or `{"error": {"reason", "message"}}`; never throws.
    static func verify(request: JSON) async -> JSON {
        do throws(Rejection) {
            return ["claims": try await check(request)]
        } catch {
            return ["error": ["reason": .string(error.reason.rawValue), "message": .string(error.message)]]
        }
    }

    /// The token's claims once the signature and every claim check passed.
    static func check(_ json: JSON) async throws(Rejection) -> JSON {
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
        let verified = try await verifySignature(request.token, algorithm: token.algorithm, candidates: candidates)
        // Signature checked: from here on the payload is the provider's word. The answer's
        // claims come from jansson, which refuses duplicate names and invalid UTF-8, so it
        // reads the very members jwt-kit decoded for the checks below.
        guard let claims = try? JSON.parse(token.payload), claims.objectValue != nil else {
            throw Rejection(.malformed, "the ID token's payload is not a JSON object")
        }
        try checkClaims(verified, request)
        return claims
    }

    /// The payload as jwt-kit decodes it, after one of `candidates` verified the signature.
    ///
    /// Several candidates only when the token has no `kid` or the JWKS repeats one;
    /// badJWKS only when no candidate could even be turned into a key.
    static func verifySignature(
        _ token: String, algorithm: String,
        candidates: [JSON]
    ) async throws(Rejection) -> IDTokenClaims {
        var triedKey = false
        for candidate in candidates {
            guard let keys = await keyCollection(candidate, algorithm: algorithm) else { continue }
            triedKey = true
            switch await attempt(token, with: keys) {
            case .verified(let claims): return claims
            case .malformed: throw Rejection(.malformed, "the ID token could not be decoded")
            case .refused: continue
            }
        }
        guard triedKey else { throw Rejection(.badJWKS, "the provider's signing key is incomplete or invalid") }
        throw Rejection(.invalidSignature, "the ID token's signature does not verify with the provider's key")
    }

    /// A jwt-kit key collection holding only `candidate`, or nil if jwt-kit cannot use it.
    private static func keyCollection(_ candidate: JSON, algorithm: String) async -> JWTKeyCollection? {
        guard let jwk = try? KeySelection.makeJWK(candidate, algorithm: algorithm) else { return nil }
        let keys = JWTKeyCollection()
        do {
            try await keys.add(jwk: jwk)
        } catch {
            return nil
        }
        return keys
    }

    private enum Attempt {
        case verified(IDTokenClaims), malformed, refused
    }

    /// jwt-kit's verdict; it checks the signature before it decodes the payload.
    private static func attempt(_ token: String, with keys: JWTKeyCollection) async -> Attempt {
        do {
            return .verified(try await keys.verify(token, as: IDTokenClaims.self))
        } catch let error as JWTError where error.errorType == .malformedToken {
            return .malformed
        } catch {
            // signatureVerificationFailed, or a signature the crypto library cannot even read.
            return .refused
        }
    }

    /// OIDC Core 3.1.3.7 steps 2–5 and 9–11, on a payload whose signature verified.
    static func checkClaims(_ claims: IDTokenClaims, _ request: VerificationRequest) throws(Rejection) {
        guard let issuer = claims.iss?.value else {
            throw Rejection(.issuerMismatch, "the ID token names no issuer; expected \(quoted(request.issuer))")
        }
        guard issuer == request.issuer else {
            throw Rejection(.issuerMismatch, "the ID token was issued by \(quoted(issuer)), not \(quoted(request.issuer))")
        }
        guard let audiences = claims.aud?.value, audiences.contains(request.audience) else {
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
        guard let expiry = claims.exp?.value else {
            throw Rejection(.expired, "the ID token has no expiry time (exp)")
        }
        guard milliseconds(expiry) + leeway > now else {
            throw Rejection(.expired, "the ID token has expired")
        }
        guard let issuedAt = claims.iat?.value else {
            throw Rejection(.issuedInFuture, "the ID token has no issue time (iat)")
        }
        guard milliseconds(issuedAt) - leeway <= now else {
            throw Rejection(.issuedInFuture, "the ID token's issue time is in the future")
        }
        if let notBefore = claims.nbf?.value, milliseconds(notBefore) - leeway > now {
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

    private static func milliseconds(_ date: Date) -> Double { date.timeIntervalSince1970 * 1000 }

    /// `text` in quotes, cut short: issuers and client ids are echoed, never unbounded.
    private static func quoted(_ text: String) -> String {
        text.count <= 120 ? "\"\(text)\"" : "\"\(text.prefix(120))…\""
    }
}
