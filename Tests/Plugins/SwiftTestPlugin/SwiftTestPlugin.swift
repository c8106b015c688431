import AuthBridgePluginSDK

/// A test provider written with the Swift SDK. It exercises every hook and
/// every host service so the contract tests can prove the Swift side of the
/// ABI; its behaviour is deterministic (see bridge-spec "Test plugins").
struct SwiftTestPlugin: ProviderPlugin {
    static let id = "swifttest"

    init(host: PluginHost) throws {
        host.log(.info, "swifttest initialised (host \(host.version))")
    }

    func shutdown() {}

    func describe() -> JSON {
        [
            "displayName": "Swift test provider",
            "flows": ["external", "session"],
            "capabilities": ["revoke", "checkSession", "fetch"],
            "settings": [
                "type": "object",
                "required": ["clientId"],
                "properties": [
                    "clientId": ["type": "string"],
                    "authorizationEndpoint": ["type": "string"],
                    "revokeUrl": ["type": "string"],
                    "probeUrl": ["type": "string"],
                    "apiBaseUrl": ["type": "string"],
                ],
            ],
        ]
    }

    func configure(_ input: JSON, _ call: PluginCall) throws(ProviderFailure) -> JSON? {
        // The standard step (settings as configuration), adjusted.
        try call.standard(.configure, input).setting("configuredBy", "swifttest")
    }

    func beginSignIn(_ input: JSON, _ call: PluginCall) throws(ProviderFailure) -> JSON? {
        call.emit(["stage": "plugin", "message": "Swift plugin began sign-in"])
        if input["profile"]?["config"]?["authorizationEndpoint"] != nil {
            return try call.standard(.beginSignIn, input)
        }
        let state = input["state"]?.stringValue ?? ""
        return [
            "url": .string("https://swifttest.example/login?state=\(state)"),
            "callbackPrefix": "https://swifttest.example/done",
        ]
    }

    func completeSignIn(_ input: JSON, _ call: PluginCall) throws(ProviderFailure) -> JSON? {
        let now = call.now
        if input["flow"]?.stringValue == "external" {
            let url = input["callbackUrl"]?.stringValue ?? ""
            let query = try URLQuery.callback(url)
            guard let access = query.value("access_token"), let session = query.value("session_token"), !access.isEmpty, !session.isEmpty
            else { throw .definitive("missingToken", "The callback URL did not carry both tokens.") }
            return [
                "tokens": [
                    "accessToken": .string(access), "refreshToken": .string(session),
                    "expiresAt": .int(now + 3_600_000),
                ],
                "account": ["id": "external-user"],
            ]
        }
        let sessionID = input["sessionId"]?.stringValue ?? ""
        var extras: [String: JSON] = ["sessionId": .string(sessionID)]
        switch sessionID {
        case "bad":
            throw .definitive("invalid_grant", "session id refused")
        case "slow":
            for _ in 0..<3_000 where !call.isCancelled { usleepMilliseconds(10) }
            if call.isCancelled { throw ProviderFailure(.cancelled, reason: "cancelled", message: "cancelled") }
        case "http":
            if let probe = input["profile"]?["config"]?["probeUrl"]?.stringValue {
                do {
                    let response = try call.http(["method": "GET", "url": .string(probe)])
                    extras["probeStatus"] = .int(Int64(response.status))
                } catch {
                    extras["probeError"] = .string(error.reason)
                }
            }
        default:
            break
        }
        call.log(.debug, "session sign-in complete")
        // "short" lives a second, "brief" 40 s (less than the default minimum validity);
        // "expired" arrives already expired (every caller wants a refresh).
        let lifetime: Int64 =
            switch sessionID {
            case "short": 1_000
            case "brief": 40_000
            case "expired": -1_000
            default: 3_600_000
            }
        // Details reach frontends: the host keeps only flat, non-secret ones (the last three are dropped).
        let details: JSON = [
            "sessionId": .string(sessionID), "generation": 1, "tier": "test",
            "accessToken": "named like a secret", "echo": .string("sat-\(sessionID)"), "nested": ["a": 1],
        ]
        return [
            "tokens": [
                "accessToken": .string("sat-\(sessionID)"), "refreshToken": .string("srt-\(sessionID)"),
                "tokenType": "bearer", "expiresAt": .int(now + lifetime), "extras": .object(extras), "details": details,
            ],
            "account": ["id": .string(sessionID), "name": "Swift Test User"],
        ]
    }

    func refresh(_ input: JSON, _ call: PluginCall) throws(ProviderFailure) -> JSON? {
        let refresh = input["tokens"]?["refreshToken"]?.stringValue ?? ""
        if refresh.hasPrefix("srt-revoked") { throw .definitive("invalid_grant", "expired access/refresh token") }
        if refresh.hasPrefix("srt-transient") { throw .transient("unavailable", "provider unavailable") }
        return [
            "tokens": [
                "accessToken": .string("sat2-" + refresh.dropFirst(4)), "refreshToken": .string(refresh + "+"),
                "expiresAt": .int(call.now + 3_600_000), "details": ["generation": 2],
            ]
        ]
    }

    func revoke(_ input: JSON, _ call: PluginCall) throws(ProviderFailure) -> JSON? {
        guard let url = input["profile"]?["config"]?["revokeUrl"]?.stringValue else {
            return ["revoked": ["access_token", "refresh_token"]]
        }
        var revoked: [JSON] = []
        var failures: [JSON] = []
        for (key, hint) in [("accessToken", "access_token"), ("refreshToken", "refresh_token")] {
            guard let token = input["tokens"]?[key]?.stringValue else { continue }
            do {
                let response = try call.http([
                    "method": "POST", "url": .string(url),
                    "form": ["token": .string(token), "token_hint": .string(hint)],
                ])
                if response.status == 200 {
                    revoked.append(.string(hint))
                } else {
                    failures.append(["token": .string(hint), "reason": "httpStatus", "message": .string("HTTP \(response.status)")])
                }
            } catch {
                failures.append(["token": .string(hint), "reason": .string(error.reason), "message": .string(error.message)])
            }
        }
        return ["revoked": .array(revoked), "failures": .array(failures)]
    }

    func checkSession(_ input: JSON, _ call: PluginCall) throws(ProviderFailure) -> JSON? {
        if input["tokens"]?["extras"]?["sessionId"]?.stringValue == "transient" {
            throw .transient("unavailable", "session check unavailable")
        }
        guard let expiresAt = input["tokens"]?["expiresAt"]?.intValue else { return ["state": "valid"] }
        return ["state": expiresAt > call.now ? "valid" : "expired"]
    }

    func authorizeRequest(_ input: JSON, _ call: PluginCall) throws(ProviderFailure) -> JSON? {
        let standard = try call.standard(.authorizeRequest, input)
        var request = standard["request"]?.objectValue ?? [:]
        var headers = request["headers"]?.objectValue ?? [:]
        headers["X-SwiftTest"] = "1"
        request["headers"] = .object(headers)
        return [
            "request": .object(request),
            "cookies": [
                [
                    "name": "swifttest_session", "value": .string(input["tokens"]?["accessToken"]?.stringValue ?? ""),
                    "domain": "swifttest.example", "path": "/", "maxAge": 2_629_743,
                ]
            ],
        ]
    }

    func classifyResponse(_ input: JSON, _ call: PluginCall) throws(ProviderFailure) -> JSON? {
        let status = input["response"]?["status"]?.intValue ?? 0
        let body = input["response"]?["body"]?.stringValue ?? ""
        if status == 401 && body.hasSubstring("INVALID_SESSION_ID") { return ["outcome": "sessionExpired"] }
        if status == 403 && body.hasSubstring("REVOKED") { return ["outcome": "revoked", "message": "access revoked by an administrator"] }
        return try call.standard(.classifyResponse, input)
    }
}

#if canImport(Glibc)
import Glibc
#endif

private func usleepMilliseconds(_ milliseconds: UInt32) { usleep(milliseconds * 1000) }

@_cdecl("authbridge_plugin_v1")
public func authbridgePluginEntry() -> UnsafeRawPointer { PluginExport.entry(for: SwiftTestPlugin.self) }
