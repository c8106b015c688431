import AuthBridgeJSON
import AuthBridgeProtocol
import Testing

/// The generated message types read and write the wire as bridge-spec says: problems name
/// the member at fault (bridge-spec's `data.field`), words keep their spelling, constants
/// are always sent, absent and null optionals are alike.
@Suite("Wire: the bridge's messages as types")
struct WireTests {
    /// The field and message of the problem reading `wire` as `T`, or nil when it reads.
    private func problem<T: WireCodable>(_: T.Type, _ wire: JSON) -> WireError? {
        do throws(WireError) {
            _ = try T(wire: wire)
            return nil
        } catch {
            return error
        }
    }

    @Test func requiredMembersAreNamedWhenMissingOrOfTheWrongType() {
        #expect(problem(GetAccessTokenParams.self, [:]) == WireError(field: "provider", "is required"))
        #expect(problem(GetAccessTokenParams.self, ["provider": 3]) == WireError(field: "provider", "must be a string, not integer"))
        #expect(problem(GetAccessTokenParams.self, ["provider": "p", "forceRefresh": "yes"])?.field == "forceRefresh")
        #expect(problem(GetAccessTokenParams.self, ["x"]) == WireError("must be an object, not array"))
    }

    @Test func optionalMembersAreAbsentOrNullAlike() throws {
        let absent = try GetAccessTokenParams(wire: ["provider": "p"])
        let null = try GetAccessTokenParams(wire: ["provider": "p", "account": .null, "minValidityMs": .null])
        #expect(absent == null)
        #expect(absent.account == nil && absent.minValidityMs == nil)
        #expect(absent.forceRefresh == false, "the spec's default")
        #expect(try FetchParams(wire: ["provider": "p", "url": "/x"]).method == .get, "the spec's default")
    }

    @Test func elementsAndNestedMembersAreNamedByTheirPath() {
        #expect(
            problem(RequestOAuthTokensParams.self, ["provider": "p", "scopes": ["openid", 2]])
                == WireError(field: "scopes[1]", "must be a string, not integer"))
        #expect(
            problem(SessionChangedParams.self, ["provider": "p", "state": "signedIn", "reason": "signedIn", "account": ["id": 1]])?.field
                == "account.id")
        #expect(problem(FetchParams.self, ["provider": "p", "url": "/", "headers": ["Accept": 1]])?.field == "headers.Accept")
    }

    @Test func wordsKeepTheSpecsSpellingBothWays() throws {
        #expect(
            problem(RequestOAuthTokensParams.self, ["provider": "p", "flow": "fax"])
                == WireError(field: "flow", "must be one of \"browser\", \"external\", \"device\", \"session\", \"clientCredentials\""))
        let storage = try StorageInfo(wire: ["backend": "encrypted-file", "protection": "none"])
        #expect(storage == StorageInfo(backend: .encryptedFile, protection: .unprotected))
        #expect(storage.wire == ["backend": "encrypted-file", "protection": "none"])
        #expect(FetchParams(provider: "p", url: "/", method: .patch).wire["method"] == "PATCH")
        #expect(ServerCapabilities.NotificationMethod.profilesChanged.wire == "profiles/changed")
    }

    @Test func constantsAreAlwaysWritten() {
        let signedOut = SignOutResult(provider: "p", revoked: [], failures: [])
        #expect(signedOut.wire == ["provider": "p", "signedOut": true, "revoked": [], "failures": []])
        #expect(CompleteSignInResult().wire == ["accepted": true])
        let capabilities = ServerCapabilities(flows: [.browser], notifications: [.sessionChanged])
        #expect(capabilities.wire["batches"] == false && capabilities.wire["cancellation"] == true)
        #expect(InitializeResult.ServerInfo(version: "1").wire == ["name": "authbridge", "version": "1"])
    }

    @Test func requiredNullableMembersAreWrittenAsNullAndOptionalOnesLeftOut() {
        let status = SignInStatus(provider: "p", state: .notSignedIn, reason: "noTokens")
        #expect(status.wire == ["provider": "p", "state": "notSignedIn", "account": .null, "expiresAt": .null, "reason": "noTokens"])
    }

    @Test func everyMethodsParamsReadBackWhatTheyWrite() throws {
        let samples: [String: JSON] = [
            "initialize": ["protocolVersion": "1.0", "clientInfo": ["name": "app", "version": "2"], "capabilities": [:], "settingsSchemas": true],
            "requestOAuthTokens": ["provider": "p", "flow": "session", "sessionId": "s", "scopes": ["a"], "timeoutMs": 5_000],
            "fetch": [
                "provider": "p", "url": "https://api/x", "method": "POST", "headers": ["A": "b"], "body": "{}", "timeoutMs": 2_000, "scopes": ["s"],
                "resource": "https://api/", "stepUp": false,
            ],
            "getAccessToken": [
                "provider": "p", "account": "a", "minValidityMs": 0, "forceRefresh": true, "method": "POST", "url": "https://api/x", "dpopNonce": "n",
                "scopes": ["read", "write"], "resource": ["https://a/", "urn:b"],
            ],
            "exchangeToken": [
                "provider": "p", "account": "a", "audience": "svc", "resource": "https://b/", "scopes": ["x"], "requestedTokenType": "jwt",
                "subjectTokenType": "idToken", "minValidityMs": 0,
            ],
            "configureProfile": ["name": "p", "plugin": "oidc", "settings": ["issuer": "https://i"]],
            "completeSignIn": ["provider": "p", "callbackUrl": "app:/cb?code=c&state=s"],
            "completeSignOut": ["provider": "p", "callbackUrl": "http://127.0.0.1:8400/callback?state=s"],
            "checkSignInStatus": ["provider": "p", "account": "a"],
            "signOut": ["provider": "p", "endSession": true, "flow": "external", "timeoutMs": 1_000], "listAccounts": [:],
            "removeProfile": ["name": "p"], "listProviders": [:], "shutdown": [:], "rpc.discover": [:],
        ]
        #expect(Set(samples.keys) == Set(BridgeMethods.requests.keys), "a sample for every method")
        for (method, sample) in samples {
            let type = try #require(BridgeMethods.requests[method])
            let read = try type.init(wire: sample)
            #expect(read.wire == sample, "\(method)")
            #expect(type.method == method)
        }
    }

    @Test func aPluginStatusIsLoadedOrRefusedByItsStatus() throws {
        let loaded: JSON = [
            "id": "oidc", "status": "loaded", "version": "1.0.0", "displayName": "OpenID Connect", "description": "d",
            "flows": ["browser"], "capabilities": [], "path": "/p", "isolation": "process", "manifest": ["extra": true],
        ]
        guard case .loaded(let plugin) = try PluginStatus(wire: loaded) else {
            Issue.record("not loaded")
            return
        }
        #expect(plugin.id == "oidc" && plugin.isolation == .process && plugin.flows == [.browser])
        let refused: JSON = ["status": "refused", "reason": "abiMismatch", "message": "m", "path": "/p"]
        guard case .refused(let why) = try PluginStatus(wire: refused) else {
            Issue.record("not refused")
            return
        }
        #expect(why.reason == .abiMismatch && why.id == nil)
        #expect(problem(PluginStatus.self, ["status": "asleep"]) == WireError(field: "status", "must be one of \"loaded\", \"refused\""))
    }

    @Test func errorCodesHaveTheSpecsNumbersAndNames() {
        #expect(BridgeErrorCode.notSignedIn.rawValue == -32001 && BridgeErrorCode.notSignedIn.name == "notSignedIn")
        #expect(BridgeErrorCode.invalidParams.rawValue == -32602)
        #expect(Set(BridgeErrorCode.allCases.map(\.rawValue)).count == BridgeErrorCode.allCases.count, "one case per code")
    }
}
