import AuthBridgeJSON
@testable import AuthBridgeHost
import AuthBridgeRPC
import Testing

/// The params checks come from bridge-spec's own schemas (`ParamsSchema`).
@Suite("Params schema")
struct ParamsSchemaTests {
    let schemas = ParamsSchema.shared

    /// The field of the -32602 that `params` get, or nil when they pass.
    private func field(_ method: String, _ params: JSON?) -> String? {
        do {
            try schemas.check(method: method, params: params)
            return nil
        } catch {
            #expect(error.code == .invalidParams)
            return error.data?["field"]?.stringValue
        }
    }

    /// Every schema object reachable from the methods' `x-params` (following `$ref`).
    private func paramsSchemas() -> [JSON] {
        var found: [JSON] = []
        var seen: Set<String> = []
        func walk(_ schema: JSON) {
            guard case .object(let keywords) = schema else { return }
            found.append(schema)
            if let reference = keywords["$ref"]?.stringValue, seen.insert(reference).inserted, let target = schemas.resolve(reference) {
                walk(target)
            }
            for key in ["items", "additionalProperties", "propertyNames", "not", "if", "then", "else"] {
                if let sub = keywords[key] { walk(sub) }
            }
            for key in ["allOf", "anyOf", "oneOf"] { keywords[key]?.arrayValue?.forEach(walk) }
            keywords["properties"]?.objectValue?.values.forEach(walk)
        }
        for (_, schema) in schemas.methods { walk(schema) }
        return found
    }

    /// The cut-down copy the host reads (`make spec`) holds exactly the whole document's params schemas.
    @Test func theParamsSchemasAreTheWholeDocumentsOwn() throws {
        let whole = ParamsSchema(document: try JSON.parse(OpenRPCDocument.text))
        #expect(whole.methods == schemas.methods)
        #expect(!schemas.methods.isEmpty)
        var references: Set<String> = []
        func collect(_ value: JSON) {
            switch value {
            case .object(let members):
                if let reference = members["$ref"]?.stringValue { references.insert(reference) }
                members.values.forEach(collect)
            case .array(let elements): elements.forEach(collect)
            default: break
            }
        }
        schemas.methods.values.forEach(collect)
        schemas.document["components"].map(collect)
        for reference in references {
            #expect(schemas.resolve(reference) != nil && schemas.resolve(reference) == whole.resolve(reference), "\(reference)")
        }
        let names = Set(schemas.document["components"]?["schemas"]?.objectValue?.keys.map { "#/components/schemas/\($0)" } ?? [])
        #expect(names == references, "the cut-down copy holds what the params schemas reach, no more")
    }

    @Test func theDocumentIsReadAndNamesEveryMethod() {
        for method in [
            "initialize", "shutdown", "rpc.discover", "listProviders", "configureProfile", "removeProfile", "listAccounts",
            "checkSignInStatus", "requestOAuthTokens", "completeSignIn", "signOut", "getAccessToken", "fetch",
        ] {
            #expect(schemas.knows(method), "\(method)")
        }
    }

    /// A keyword the validator does not implement would be silently ignored: the spec and the host would drift.
    @Test func everyKeywordOfTheParamsSchemasIsImplemented() {
        var unknown: Set<String> = []
        for schema in paramsSchemas() {
            for key in schema.objectValue?.keys ?? [:].keys
            where !ParamsSchema.supportedKeywords.contains(key) && !ParamsSchema.annotations.contains(key) {
                unknown.insert(key)
            }
        }
        #expect(unknown.isEmpty, "implement these keywords in ParamsSchema: \(unknown.sorted())")
    }

    /// Patterns are ECMA-262 in JSON Schema and POSIX ERE here: they must stay in the subset both read alike.
    @Test func everyPatternCompilesAndStaysInThePortableSubset() {
        let patterns = paramsSchemas().compactMap { $0["pattern"]?.stringValue }
        #expect(!patterns.isEmpty)
        for pattern in patterns {
            #expect(PatternCache.shared.compiles(pattern), "\(pattern)")
            for escape in ["\\d", "\\D", "\\w", "\\W", "\\s", "\\S", "\\b", "(?", "\\u", "\\p"] {
                #expect(!pattern.contains(escape), "\(pattern) uses \(escape), which POSIX regular expressions lack")
            }
        }
    }

    @Test(
        arguments: [
            // (method, params, the field named, or nil when valid)
            ("getAccessToken", ["provider": "c"], nil),
            ("getAccessToken", ["provider": "c", "minValidityMs": 1000.0], nil),
            ("getAccessToken", ["provider": "c", "minValidityMs": 1e3], nil),
            ("getAccessToken", ["provider": "c", "minValidityMs": 1000.5], "minValidityMs"),
            ("getAccessToken", ["provider": "c", "minValidityMs": .double(9.3e18)], "minValidityMs"),
            ("getAccessToken", ["provider": "c", "minValidityMs": .double(.infinity)], "minValidityMs"),
            ("getAccessToken", ["provider": "c", "minValidityMs": -1], "minValidityMs"),
            ("getAccessToken", ["provider": "c", "minValidityMs": nil], "minValidityMs"),
            ("getAccessToken", ["provider": "c", "zz": .double(-.infinity)], "zz"),
            ("getAccessToken", ["provider": ""], "provider"),
            ("getAccessToken", [:], "provider"),
            ("listAccounts", [:], nil),
            ("listAccounts", ["provider": nil], "provider"),
            ("listAccounts", ["provider": 5], "provider"),
            ("checkSignInStatus", ["provider": "c", "account": ""], "account"),
            ("requestOAuthTokens", ["provider": "c", "flow": "session"], "sessionId"),
            ("requestOAuthTokens", ["provider": "c", "flow": "session", "sessionId": "s"], nil),
            ("requestOAuthTokens", ["provider": "c", "scopes": ["a", ""]], "scopes[1]"),
            ("requestOAuthTokens", ["provider": "c", "redirectUri": ""], "redirectUri"),
            ("requestOAuthTokens", ["provider": "c", "timeoutMs": 3_600_001], "timeoutMs"),
            ("fetch", ["provider": "c", "url": "/x", "headers": ["X-A": "1"], "body": ""], nil),
            ("fetch", ["provider": "c", "url": "/x", "headers": ["X A": "1"]], "headers.X A"),
            ("fetch", ["provider": "c", "url": "/x", "headers": ["X-A": 1]], "headers.X-A"),
            ("fetch", ["provider": "c", "url": "/x", "method": "get"], "method"),
            ("configureProfile", ["name": "n", "plugin": "p", "settings": ["deep": ["x": [1, .double(.infinity)]]]], "settings.deep.x[1]"),
            ("configureProfile", ["name": "n", "plugin": "a b"], "plugin"),
            ("shutdown", [:], nil),
            ("shutdown", ["x": 1], "x"),
            ("rpc.discover", ["x": nil], "x"),
            ("initialize", ["protocolVersion": "1.0", "future": true, "clientInfo": ["name": "n", "more": 1]], nil),
            ("initialize", ["protocolVersion": "1.0", "clientInfo": ["version": "1"]], "clientInfo.name"),
            ("initialize", ["protocolVersion": "1"], "protocolVersion"),
            ("initialize", [:], "protocolVersion"),
        ] as [(String, JSON, String?)])
    func paramsAreCheckedAsTheSpecSays(_ method: String, _ params: JSON, _ expected: String?) {
        #expect(field(method, params) == expected)
    }

    @Test func absentParamsAreAnEmptyObject() {
        #expect(field("listProviders", nil) == nil)
        #expect(field("getAccessToken", nil) == "provider")
    }

    @Test func messagesSayWhatIsWrong() throws {
        do {
            try schemas.check(method: "getAccessToken", params: ["provider": "c", "minValidityMs": 100_000_000])
            Issue.record("should have failed")
        } catch {
            #expect(error.message == "Invalid params: minValidityMs: must be between 0 and 86400000")
        }
        do {
            try schemas.check(method: "checkSignInStatus", params: ["provider": "c", "account": nil])
            Issue.record("should have failed")
        } catch {
            #expect(error.message == "Invalid params: account: must be a string, not null")
        }
    }

    @Test func patternsMatchLikeTheSpecsRegularExpressions() {
        let version = "^(0|[1-9][0-9]*)\\.(0|[1-9][0-9]*)$"
        #expect(PatternCache.shared.matches("1.0", version))
        #expect(PatternCache.shared.matches("10.20", version))
        #expect(!PatternCache.shared.matches("01.0", version))
        #expect(!PatternCache.shared.matches("1.0\u{0}x", version), "a NUL does not end the text")
        #expect(!PatternCache.shared.matches("1.0\n", version))
        #expect(PatternCache.shared.matches("ab", "b"), "unanchored unless the pattern says so")
    }

    @Test func unknownMethodsAreMethodNotFoundWhateverTheirParams() {
        for method in ["nope", "initialized", "exit", "$/cancelRequest", "session/changed"] {
            do {
                _ = try BridgeServer.decodedParams(Request(id: .int(1), method: method, params: ["x": 1]))
                Issue.record("\(method) was accepted")
            } catch {
                #expect(error.code == .methodNotFound, "\(method)")
            }
        }
    }
}
