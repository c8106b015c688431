import AuthBridgeJSON
@testable import AuthBridgeSession
import AuthBridgeVault
import Testing

@Suite("Token sets and the memory store")
struct TokenSetTests {
    private let full = TokenSet(
        accessToken: "at-1", refreshToken: "rt-1", tokenType: "Bearer", expiresAt: 1_700_000_000_000,
        idToken: "id-1", scope: "openid email", extras: ["instance_url": "https://na1.example", "n": 2])

    @Test func theMinimumValidityIsCappedAtHalfTheLifetime() {
        let brief = TokenSet(accessToken: "a", expiresAt: 10_000, obtainedAt: 5_000)
        #expect(brief.effectiveMinimumValidity(60_000) == 2_500)
        #expect(brief.effectiveMinimumValidity(1_000) == 1_000)
        #expect(TokenSet(accessToken: "a", expiresAt: 10_000).effectiveMinimumValidity(60_000) == 60_000, "no known lifetime")
        #expect(TokenSet(accessToken: "a", expiresAt: 4_000, obtainedAt: 5_000).effectiveMinimumValidity(60_000) == 60_000)
    }

    @Test func providerAnswersTooBigToKeepAreNamed() {
        #expect(TokenSet.sizeProblem(["accessToken": "a"], account: ["id": "x"]) == nil)
        let huge = String(repeating: "t", count: TokenSet.maximumTokenBytes + 1)
        #expect(TokenSet.sizeProblem(["accessToken": .string(huge)], account: nil)?.contains("accessToken") == true)
        let extras = JSON.object(Dictionary(uniqueKeysWithValues: (0..<8).map { ("k\($0)", JSON.string(String(repeating: "x", count: 40_000))) }))
        #expect(TokenSet.sizeProblem(["accessToken": "a", "extras": extras], account: nil) != nil)
    }

    @Test func jsonRoundTrips() throws {
        #expect(TokenSet(json: full.json) == full)
        let minimal = TokenSet(accessToken: "at")
        #expect(minimal.json == ["accessToken": "at", "tokenType": "Bearer"])
        #expect(TokenSet(json: minimal.json) == minimal)
        #expect(TokenSet(json: try JSON.parse(full.json.serialized())) == full)
    }

    @Test func readingPluginJSON() {
        #expect(TokenSet(json: ["refreshToken": "rt"]) == nil)
        #expect(TokenSet(json: ["accessToken": ""]) == nil)
        #expect(TokenSet(json: .null) == nil)
        let read = TokenSet(json: ["accessToken": "a", "refreshToken": "", "expiresAt": 5.0])
        #expect(read?.refreshToken == nil)
        #expect(read?.expiresAt == 5)
        #expect(read?.tokenType == "Bearer")
    }

    @Test func aRefreshWithoutARefreshTokenKeepsTheOldOneAndMergesExtras() {
        let fresh = TokenSet(accessToken: "at-2", expiresAt: 1_700_003_600_000, extras: ["n": 3, "issued_at": "now"])
        let merged = full.updated(with: fresh)
        #expect(merged.accessToken == "at-2")
        #expect(merged.refreshToken == "rt-1")
        #expect(merged.idToken == "id-1")
        #expect(merged.expiresAt == 1_700_003_600_000)
        #expect(merged.extras == ["instance_url": "https://na1.example", "n": 3, "issued_at": "now"])
    }

    @Test func aRotatedRefreshTokenReplacesTheOldOne() {
        let merged = full.updated(with: TokenSet(accessToken: "at-2", refreshToken: "rt-2", idToken: "id-2"))
        #expect(merged.refreshToken == "rt-2")
        #expect(merged.idToken == "id-2")
    }

    @Test func descriptionNeverShowsATokenValue() {
        let text = "\(full) \(String(describing: full)) \(String(reflecting: full))"
        for secret in ["at-1", "rt-1", "id-1"] { #expect(!text.contains(secret)) }
        #expect(text.contains("[REDACTED]"))
        #expect(TokenSet(accessToken: "only-access").description.contains("refreshToken: nil"))
    }

    @Test func memoryStoreSavesLoadsDeletesAndListsSorted() async throws {
        let store = SessionStore.inMemory()
        #expect(store.backend == "memory" && store.protection == "none")
        let work = SessionKey(profile: "work", account: "u1")
        #expect(try await store.load(work) == nil)
        var session = StoredSession(tokens: full, account: ["id": "u1"])
        session.signedInAt = 42
        try await store.save(session, for: work)
        try await store.save(StoredSession(tokens: TokenSet(accessToken: "x"), account: nil), for: SessionKey(profile: "home", account: ""))
        #expect(try await store.load(work) == session)
        #expect(try await store.keys().map(\.description) == ["home", "work (u1)"])
        var revoked = session
        revoked.licenseRevoked = true
        try await store.save(revoked, for: work)
        #expect(try await store.load(work)?.licenseRevoked == true)
        try await store.delete(work)
        #expect(try await store.load(work) == nil)
        #expect(try await store.keys(of: "work").isEmpty)
    }

    @Test func accountsOfOneProfileAreSeparateRecords() async throws {
        let store = SessionStore.inMemory()
        let ada = SessionKey(profile: "dot", account: "ada")
        let grace = SessionKey(profile: "dot", account: "grace")
        try await store.save(StoredSession(tokens: TokenSet(accessToken: "a"), account: ["id": "ada"]), for: ada)
        try await store.save(StoredSession(tokens: TokenSet(accessToken: "g"), account: ["id": "grace"]), for: grace)
        #expect(Set(try await store.keys(of: "dot")) == [ada, grace])
        try await store.delete(ada)
        #expect(try await store.load(grace)?.tokens.accessToken == "g", "signing one account out leaves the other")
    }

    @Test func aSessionKeyRoundTripsThroughTheVaultKey() {
        let key = SessionKey(profile: "work", account: "00u1@example.com")
        #expect(SessionKey(vaultKey: key.vaultKey) == key)
        #expect(SessionKey(profile: "work", account: "").vaultKey == "work", "an unnamed account keeps the profile's own record")
        #expect(SessionKey(vaultKey: "work") == SessionKey(profile: "work", account: ""))
    }

    @Test func theRefreshAheadPointIsThreeQuartersIntoTheLifetime() {
        #expect(TokenSet(accessToken: "a", expiresAt: 5_000, obtainedAt: 1_000).refreshAheadAt == 4_000)
        #expect(TokenSet(accessToken: "a", expiresAt: 5_000).refreshAheadAt == nil, "unknown lifetime")
        #expect(TokenSet(accessToken: "a", expiresAt: 1_000, obtainedAt: 1_000).refreshAheadAt == nil)
    }

    @Test func detailsKeepOnlyFlatNonSecretFacts() {
        let tokens = TokenSet(json: [
            "accessToken": "at-7f3a", "refreshToken": "rt-99-2f0c4d1e",
            "details": [
                "instanceUrl": "https://acme.my.salesforce.com", "issuedAt": 1_700_000_000_000, "sandbox": false, "site": .null,
                "xsrfToken": "named like a secret", "session_id": "named like a secret",
                "echo": "Bearer at-7f3a", "leak": "prefix rt-99-2f0c4d1e suffix", "same": "at-7f3a",
                "jwt": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2ln", "nested": ["a": 1], "list": [1],
                "has space": "x", "9lives": "x", "": "x",
            ],
        ])!
        #expect(
            tokens.details == [
                "instanceUrl": "https://acme.my.salesforce.com", "issuedAt": 1_700_000_000_000,
                "sandbox": false, "site": .null,
            ])
    }

    @Test func aRefreshMergesDetailsAndScreensThemAgainstTheNewTokens() {
        let old = TokenSet(
            accessToken: "access-1", refreshToken: "refresh-1",
            details: ["instanceUrl": "https://na1.example", "orgId": "00D"])
        let fresh = TokenSet(accessToken: "access-2", details: ["instanceUrl": "https://na2.example", "copy": "was refresh-1"])
        let merged = old.updated(with: fresh)
        #expect(
            merged.details == ["instanceUrl": "https://na2.example", "orgId": "00D"],
            "new values win; a value holding the kept refresh token is dropped")
    }

    /// A record the vault opens but that holds no tokens cannot be used: before, every call on
    /// its profile failed with corruptRecord for good; now it is set aside and reported once.
    @Test func aStoredRecordWithoutTokensIsSetAsideOnce() async throws {
        let vault = MemoryVault()
        let store = SessionStore(vault: vault)
        let key = SessionKey(profile: "work", account: "ada")
        try await vault.save(VaultRecord(profile: key.vaultKey, account: "ada", secret: ["account": ["id": "ada"]]))
        await #expect(throws: VaultError.self) { try await store.load(key) }
        let again = try await store.load(key)
        #expect(again == nil)
    }

}
