import AuthBridgeJSON
import AuthBridgeNetwork
import AuthBridgePluginHost
import AuthBridgeURL

/// A profile from a protected resource's URL alone (setting `resource`, no issuer): which
/// authorization server protects it, by RFC 9728 protected resource metadata — as MCP clients
/// find theirs (MCP authorization, "Authorization Server Discovery").
///
/// 1. The resource is asked without a token; a 401's Bearer challenge names the metadata
///    (`resource_metadata`, RFC 9728 §5.1) and may name the scopes it needs (`scope`).
/// 2. Without it, the well-known URIs: `/.well-known/oauth-protected-resource` inserted before
///    the resource's path, then at the root (§3.1).
/// 3. The document's `resource` must be the URL asked about (§3.3): a document for another
///    resource could send the user's sign-in to another server's authorization server.
/// 4. Its `authorization_servers` (the first, or the setting `authorizationServer`, which must be
///    listed) becomes the issuer, read as any issuer is (RFC 8414 first: `discover`).
extension StandardSteps {
    /// `settings` with `issuer`, `resources`, `scopes` (when not set) and what was found
    /// (`protectedResource`, `resourceMetadata`), or why the resource names no usable server.
    static func discoverProtectedResource(_ settings: [String: JSON], call: HookCall, http: HookHTTP) -> Result<[String: JSON], ProviderFailure> {
        var config = settings
        guard let resource = settings["resource"]?.stringValue, isResourceIndicator(resource), let url = ParsedURL(resource),
            url.scheme == "https" || url.scheme == "http"
        else {
            return .failure(
                ProviderFailure(
                    .configuration, reason: "invalidSettings",
                    message: "\"resource\" must be the protected resource's absolute https URL, without a fragment (RFC 8707, RFC 9728)."))
        }
        guard url.isSecureTransport else { return .failure(insecure("resource")) }
        // 1. What the resource says when asked without a token.
        var challengeScopes: [String]?
        var candidates: [String] = []
        switch http.perform(["method": "GET", "url": .string(resource), "timeoutMs": 15_000], call: call) {
        case .failure(let failure):
            return .failure(
                ProviderFailure(
                    failure.kind, reason: failure.reason,
                    message: "The protected resource \(resource) could not be reached: \(failure.message)", status: failure.status))
        case .success(let answer):
            if answer["status"]?.intValue == 401,
                let challenge = AuthenticationChallenge.bearer(in: answer["headers"]?["www-authenticate"]?.stringValue)
            {
                challengeScopes = challenge.scopes
                if let metadata = challenge.resourceMetadata {
                    guard ParsedURL(metadata)?.isSecureTransport == true else {
                        return .failure(
                            ProviderFailure(
                                .configuration, reason: "insecureUrl",
                                message: "The protected resource names its metadata at a URL that is neither https nor loopback http; refusing it."))
                    }
                    candidates.append(metadata)
                }
            }
        }
        // 2. The well-known URIs (RFC 9728 §3.1), path inserted first.
        let wellKnown = url.origin + "/.well-known/oauth-protected-resource"
        if candidates.isEmpty {
            if url.path != "/" && !url.path.isEmpty { candidates.append(wellKnown + url.path) }
            candidates.append(wellKnown)
        }
        var document: JSON?
        var lastFailure = ProviderFailure(
            .configuration, reason: "discovery",
            message: "\(resource) names no authorization server: it sent no resource_metadata on a 401, and has no protected resource "
                + "metadata at \(candidates.joined(separator: " or ")) (RFC 9728). Set \"issuer\" (and \"clientId\") instead.")
        for candidate in candidates {
            switch http.perform(["method": "GET", "url": .string(candidate), "timeoutMs": 15_000], call: call) {
            case .failure(let failure):
                if SessionError.transportReasons.contains(failure.reason) || failure.kind == .cancelled { return .failure(failure) }
                lastFailure = failure
                continue
            case .success(let answer):
                guard answer["status"]?.intValue == 200, let parsed = try? JSON.parse(answer["body"]?.stringValue ?? ""), case .object = parsed
                else { continue }
                // 3. RFC 9728 §3.3: the metadata is about this very resource, or it is refused.
                guard let named = parsed["resource"]?.stringValue, sameResource(named, resource) else {
                    return .failure(
                        ProviderFailure(
                            .configuration, reason: "resourceMismatch",
                            message: "The protected resource metadata at \(candidate) is for "
                                + (parsed["resource"]?.stringValue.map { "\"\(providerText($0))\"" } ?? "no resource")
                                + ", not \(resource) (RFC 9728 §3.3); refusing it."))
                }
                document = parsed
            }
            if document != nil { break }
        }
        guard let document else { return .failure(lastFailure) }
        // 4. The authorization server.
        let servers = document["authorization_servers"]?.arrayValue?.compactMap(\.stringValue) ?? []
        let chosen: String
        if let configured = settings["authorizationServer"]?.stringValue {
            guard servers.contains(configured) else {
                return .failure(
                    ProviderFailure(
                        .configuration, reason: "invalidSettings",
                        message: "\"authorizationServer\" is \(configured), but \(resource) names "
                            + (servers.isEmpty ? "none" : servers.map { providerText($0) }.joined(separator: ", ")) + "."))
            }
            chosen = configured
        } else {
            guard let first = servers.first else {
                return .failure(
                    ProviderFailure(
                        .configuration, reason: "discovery",
                        message: "The protected resource metadata of \(resource) lists no authorization_servers (RFC 9728 §2)."))
            }
            chosen = first
        }
        guard ParsedURL(chosen)?.isSecureTransport == true else { return .failure(insecure("authorization_servers")) }
        config["issuer"] = .string(chosen)
        config["protectedResource"] = .string(resource)
        config["resourceMetadataUrl"] = candidates.first.map(JSON.string)
        // RFC 9728 §2: scopes_supported; the 401's scope is what the resource needs (MCP: use it first).
        if config["scopes"] == nil, let scopes = challengeScopes ?? document["scopes_supported"]?.arrayValue?.compactMap(\.stringValue),
            !scopes.isEmpty
        {
            config["scopes"] = .array(scopes.map(JSON.string))
        }
        if let supported = document["scopes_supported"]?.arrayValue?.compactMap(\.stringValue), !supported.isEmpty {
            config["resourceScopes"] = .array(supported.map(JSON.string))
        }
        return .success(config)
    }

    /// RFC 9728 §3.3 asks for identical values; an empty path and "/" are the same URL (RFC 3986
    /// §6.2.3), which is how URL libraries print an origin (`https://host/`).
    static func sameResource(_ named: String, _ resource: String) -> Bool {
        if named == resource { return true }
        guard let a = ParsedURL(named), let b = ParsedURL(resource), a.query == nil, b.query == nil else { return false }
        let pathA = a.path.isEmpty ? "/" : a.path
        let pathB = b.path.isEmpty ? "/" : b.path
        return a.origin == b.origin && pathA == pathB && a.fragment == nil && b.fragment == nil
    }

    /// The `resources` of a configuration whose setting `resource` names the profile's protected
    /// resource: it first (the session's own token is for it), then the others.
    static func withResourceSetting(_ config: [String: JSON]) -> [String: JSON] {
        guard let resource = config["resource"]?.stringValue else { return config }
        var config = config
        let others = (config["resources"]?.arrayValue?.compactMap(\.stringValue) ?? []).filter { $0 != resource }
        config["resources"] = .array(([resource] + others).map(JSON.string))
        return config
    }
}
