import AuthBridgeCrypto
import AuthBridgeJSON
import AuthBridgeURL
import Synchronization
import Testing

@testable import AuthBridgeSession

/// RFC 9449 proofs as the host makes them, and the one replay a server nonce earns.
@Suite("DPoP")
struct DPoPTests {
    static func parts(_ jwt: String) throws -> (header: JSON, claims: JSON, signingInput: String, signature: [UInt8]) {
        let segments = jwt.split(separator: ".", omittingEmptySubsequences: false).map(String.init)
        try #require(segments.count == 3)
        let decode = { (text: String) throws -> JSON in
            try JSON.parse(String(decoding: try #require(Base64URL.decode(Array(text.utf8))), as: UTF8.self))
        }
        return (
            try decode(segments[0]), try decode(segments[1]), segments[0] + "." + segments[1], try #require(Base64URL.decode(Array(segments[2].utf8)))
        )
    }

    @Test func aProofNamesItsRequestAndCarriesOnlyThePublicKey() throws {
        let key = try DPoPKey.generate(.es256)
        let proof = try key.proof(
            method: "get", url: "https://api.example/v1/me?x=1#frag", accessToken: "at-123", nonce: "n-1", now: 1_700_000_000_123)
        let (header, claims, _, signature) = try Self.parts(proof)
        #expect(header["typ"] == "dpop+jwt" && header["alg"] == "ES256")
        #expect(header["jwk"]?.objectValue?.keys.sorted() == ["crv", "kty", "x", "y"], "the public key only")
        #expect(claims["htm"] == "GET" && claims["htu"] == "https://api.example/v1/me" && claims["iat"] == 1_699_999_999)
        #expect(claims["ath"]?.stringValue == Base64URL.encode(SHA256.hash(Array("at-123".utf8))))
        #expect(claims["nonce"] == "n-1" && (claims["jti"]?.stringValue?.count ?? 0) >= 22)
        #expect(signature.count == 64)
        let bare = try Self.parts(try key.proof(method: "POST", url: "https://as.example/token", now: 0)).claims
        #expect(bare["ath"] == nil && bare["nonce"] == nil && bare["jti"] != claims["jti"])
    }

    /// RFC 7638 §3: the thumbprint is the SHA-256 of the required members in order, no white space.
    @Test func theThumbprintIsRFC7638s() throws {
        let key = try DPoPKey.generate(.es256)
        let x = Base64URL.encode(key.key.publicKey[0..<32]), y = Base64URL.encode(key.key.publicKey[32..<64])
        let canonical = "{\"crv\":\"P-256\",\"kty\":\"EC\",\"x\":\"\(x)\",\"y\":\"\(y)\"}"
        #expect(key.thumbprint == Base64URL.encode(SHA256.hash(Array(canonical.utf8))))
        let ed = try DPoPKey.generate(.edDSA)
        #expect(ed.jwk == "{\"crv\":\"Ed25519\",\"kty\":\"OKP\",\"x\":\"\(Base64URL.encode(ed.key.publicKey))\"}")
        let rsa = try DPoPKey.generate(.rs256)
        let n = Base64URL.encode(rsa.key.publicKey[0..<256])
        #expect(rsa.jwk == "{\"e\":\"AQAB\",\"kty\":\"RSA\",\"n\":\"\(n)\"}")
        #expect(rsa.thumbprint == Base64URL.encode(SHA256.hash(Array(rsa.jwk.utf8))))
    }

    @Test func theKeyReadsBackFromItsRecordAndIsNeverPrinted() throws {
        let key = try DPoPKey.generate(.es256)
        #expect(DPoPKey(json: key.json) == key)
        #expect(DPoPKey(json: ["alg": "RS256", "d": "AA", "pub": "AA"]) == nil)
        #expect(!"\(key)".contains(key.json["d"]!.stringValue!))
    }

    /// A token endpoint's use_dpop_nonce (§8) and a resource server's 401 (§9) each earn one replay
    /// with the server's nonce, which the next proofs to that server carry.
    @Test func aServerNonceIsAnsweredOnceAndKept() throws {
        let binding = DPoPBinding(key: try DPoPKey.generate(.es256), nonces: DPoPNonces())
        let sent = Mutex<[JSON]>([])
        let refusal: JSON = ["status": 400, "headers": ["dpop-nonce": "server-1"], "body": "{\"error\":\"use_dpop_nonce\"}"]
        let request: JSON = ["method": "POST", "url": "https://as.example/token", "dpop": true]
        let answer = binding.perform(request) { signed in
            sent.withLock { $0.append(signed) }
            return .success(sent.withLock { $0.count } == 1 ? refusal : ["status": 200, "headers": [:], "body": "{}"])
        }
        #expect(answer.map { $0["status"] } == .success(200))
        let proofs = try sent.withLock { $0 }.map { try Self.parts($0["headers"]!["DPoP"]!.stringValue!).claims }
        #expect(proofs.count == 2 && proofs[0]["nonce"] == nil && proofs[1]["nonce"] == "server-1")
        #expect(binding.nonces.nonce(for: "https://as.example/other") == "server-1", "kept for the server")
        // A server that keeps refusing is not asked a third time.
        let resource: JSON = ["method": "GET", "url": "https://rs.example/me", "headers": ["Authorization": "DPoP at"]]
        let count = Mutex(0)
        let refused = binding.perform(resource) { _ in
            let nonce =
                "rs-"
                + String(
                    count.withLock {
                        $0 += 1
                        return $0
                    })
            return .success([
                "status": 401, "headers": ["dpop-nonce": .string(nonce), "www-authenticate": "DPoP error=\"use_dpop_nonce\""],
                "body": "",
            ])
        }
        #expect(count.withLock { $0 } == 2 && refused.map { $0["status"] } == .success(401))
        // Other refusals are answers, not nonce requests.
        count.withLock { $0 = 0 }
        _ = binding.perform(resource) { _ in
            count.withLock { $0 += 1 }
            return .success(["status": 401, "headers": ["www-authenticate": "DPoP error=\"invalid_token\""], "body": ""])
        }
        #expect(count.withLock { $0 } == 1)
    }

    /// Only requests that ask for it get a proof; without a session key none does.
    @Test func hookRequestsAskForTheirProof() throws {
        let binding = DPoPBinding(key: try DPoPKey.generate(.es256), nonces: DPoPNonces())
        let signed = try binding.signed(["method": "GET", "url": "https://rs.example/x", "headers": ["authorization": "DPoP tok"]]).get()
        #expect(
            try Self.parts(signed["headers"]!["DPoP"]!.stringValue!).claims["ath"]?.stringValue == Base64URL.encode(SHA256.hash(Array("tok".utf8))))
        let bearer = try binding.signed(["method": "GET", "url": "https://rs.example/x", "headers": ["Authorization": "Bearer tok"]]).get()
        #expect(try Self.parts(bearer["headers"]!["DPoP"]!.stringValue!).claims["ath"] == nil)
    }

    @Test func theDPoPSettingChoosesTheKeyAlgorithm() throws {
        let discovered = { (settings: [String: JSON], algorithms: [String]?) in
            StandardSteps.choosingDPoP(settings, advertised: algorithms, discovered: true)
        }
        #expect(try discovered([:], ["RS256", "ES256"]).get()["dpopAlgorithm"] == "ES256")
        #expect(try discovered([:], ["EdDSA"]).get()["dpopAlgorithm"] == "EdDSA")
        #expect(try discovered([:], ["PS256", "RS256"]).get()["dpopAlgorithm"] == "RS256")
        #expect(try discovered([:], nil).get()["dpopAlgorithm"] == nil, "auto: off where not advertised")
        #expect(try discovered(["dpop": false], ["ES256"]).get()["dpopAlgorithm"] == nil)
        #expect(try discovered(["dpop": "auto"], ["PS256"]).get()["dpopAlgorithm"] == nil, "auto: none the host can make")
        for (settings, algorithms) in [(["dpop": true], nil), (["dpop": true], ["PS256", "ES512"])] as [([String: JSON], [String]?)] {
            guard case .failure(let failure) = discovered(settings, algorithms) else {
                Issue.record("required DPoP accepted without it")
                continue
            }
            #expect(failure.kind == .configuration && failure.reason == "dpopUnsupported")
        }
        #expect(try StandardSteps.choosingDPoP(["dpop": true], advertised: nil, discovered: false).get()["dpopAlgorithm"] == "ES256")
        guard case .failure(let failure) = discovered(["dpop": "yes"], ["ES256"]) else {
            Issue.record("a bad setting accepted")
            return
        }
        #expect(failure.reason == "invalidSettings")
    }
}

extension DPoPTests {
    /// A proof's `iat` is the second before it was made: glewlwyd refuses one from its future with
    /// no leeway, and its clock (`time(2)`) can still read the previous second when ours turned.
    @Test(arguments: [1_700_000_000_000, 1_700_000_000_001, 1_700_000_000_999] as [Int64])
    func aProofIsNeverFromTheServersFuture(_ now: Int64) throws {
        let key = try DPoPKey.generate(.es256)
        let claims = try Self.parts(try key.proof(method: "POST", url: "https://as.example/token", now: now)).claims
        #expect(claims["iat"] == 1_699_999_999)
    }

    /// The claims are written out by hand: whatever a URL or nonce holds, they stay one JSON object.
    @Test func claimsStayJSONWhateverTheURLAndNonceHold() throws {
        let key = try DPoPKey.generate(.es256)
        let url = "https://api.example/a\"b\\c/\u{e9}"
        let claims = try Self.parts(try key.proof(method: "post", url: url + "?q", ath: "x", nonce: "n\"1\\", now: 5_000)).claims
        #expect(claims["htu"]?.stringValue == url && claims["nonce"] == "n\"1\\" && claims["htm"] == "POST" && claims["iat"] == 4)
        #expect(claims.objectValue?.keys.sorted() == ["ath", "htm", "htu", "iat", "jti", "nonce"])
    }
}
