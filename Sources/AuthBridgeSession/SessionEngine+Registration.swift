// Dynamic client registration (RFC 7591): a profile without a client id signs in with a client
// AuthBridge registers itself, kept in the vault per authorization server and shared by its profiles.

import AuthBridgeJSON
import AuthBridgeNetwork
import AuthBridgePluginHost
import AuthBridgeURL

extension SessionEngine {
    /// `config` with the client registered at its server merged in, when the profile signs in
    /// with one (vault only, no HTTP): what status, refresh and sign-out use. Without a stored
    /// registration the configuration has no client id until a sign-in registers one.
    func withStoredRegistration(_ config: JSON, profile: Profile) async -> JSON {
        guard ClientRegistration.isNeeded(config, settings: profile.settings), let issuer = config["issuer"]?.stringValue else { return config }
        do {
            guard let registration = try await store.registration(at: issuer) else { return config }
            return registration.applied(to: config)
        } catch {
            logger.notice("the stored client registration could not be read", metadata: ["provider": "\(profile.name)", "error": "\(error)"])
            return config
        }
    }

    /// The context a sign-in uses: with a client registered now when the profile needs one and
    /// none is stored, or the stored one is no longer known to the server, or it lacks the redirect
    /// URI the sign-in will use (`redirectUri`, the external flow's).
    /// `portsTaken`: none of the registered loopback ports is free; a registration with new ones is made.
    func registeredContext(
        _ context: Context, clientName: String?, redirectUri: String?, portsTaken: Bool = false
    ) async throws(SessionError) -> Context {
        guard ClientRegistration.isNeeded(context.config, settings: context.profile.settings),
            let issuer = context.config["issuer"]?.stringValue
        else { return context }
        var stale: String?
        if portsTaken {
            stale = context.config["clientId"]?.stringValue
        } else if context.config["dynamicClient"]?.boolValue == true {
            let registered = context.config["registeredRedirectUris"]?.arrayValue?.compactMap(\.stringValue) ?? []
            if let redirectUri, !registered.contains(redirectUri) {
                stale = context.config["clientId"]?.stringValue
            } else if await registrationForgotten(context) {
                stale = context.config["clientId"]?.stringValue
                logger.notice(
                    "the authorization server no longer knows the client AuthBridge registered; registering again",
                    metadata: ["provider": "\(context.profile.name)"])
            } else {
                return context
            }
        }
        let registration = try await register(context, issuer: issuer, clientName: clientName, redirectUri: redirectUri, stale: stale)
        var updated = context
        updated.config = registration.applied(to: Self.withoutRegistration(context.config))
        adoptRegistration(issuer: issuer, context: updated)
        return updated
    }

    /// The browser flow's loopback listener: on the first free port of the registration's
    /// redirect URIs (servers match them exactly), or nil when the profile has no registration.
    func registeredListener(_ context: Context) -> LoopbackListener? {
        guard context.config["dynamicClient"]?.boolValue == true else { return nil }
        for uri in context.config["registeredRedirectUris"]?.arrayValue?.compactMap(\.stringValue) ?? [] {
            guard let url = ParsedURL(uri), url.scheme == "http", url.host == "127.0.0.1", let port = url.port, let port = UInt16(exactly: port),
                port != 0, url.query == nil
            else { continue }
            if let listener = try? LoopbackListener(port: port, path: url.path) { return listener }
        }
        return nil
    }

    /// The server refused the registered client (`invalid_client` at its token endpoint): the
    /// registration is forgotten, so that the next sign-in registers again.
    func forgetRegistration(_ context: Context, refusedClient clientId: String?) async {
        guard context.config["dynamicClient"]?.boolValue == true, let issuer = context.config["issuer"]?.stringValue,
            let clientId, clientId == context.config["clientId"]?.stringValue
        else { return }
        do {
            try await store.withRegistrationLock(issuer) {
                if try await self.store.registration(at: issuer)?.clientId == clientId { try await self.store.deleteRegistration(at: issuer) }
            }
        } catch {
            logger.notice("a refused client registration could not be forgotten", metadata: ["provider": "\(context.profile.name)"])
        }
        logger.notice(
            "the authorization server refused the registered client; the next sign-in registers again",
            metadata: ["provider": "\(context.profile.name)"])
        for (name, config) in configs where config["issuer"]?.stringValue == issuer && config["dynamicClient"]?.boolValue == true {
            configs[name] = nil
        }
    }

    /// Makes the new registration the client of `context`'s profile, and of every other profile
    /// of that server on their next use.
    private func adoptRegistration(issuer: String, context: Context) {
        for (name, config) in configs where name != context.profile.name && config["issuer"]?.stringValue == issuer {
            configs[name] = nil
        }
        if profiles[context.profile.name] == context.profile { configs[context.profile.name] = context.config }
    }

    /// The configuration without what a registration merged into it.
    static func withoutRegistration(_ config: JSON) -> JSON {
        guard case .object(var members) = config, members["dynamicClient"]?.boolValue == true else { return config }
        for key in ["dynamicClient", "registeredRedirectUris", "clientSecret", "clientAuthentication", "clientId"] { members[key] = nil }
        return .object(members)
    }

    /// Registers AuthBridge at the profile's server (RFC 7591 §3), under the registration's
    /// cross-process lock: a registration another process (or profile) made meanwhile is used
    /// unless it is the `stale` one.
    private func register(
        _ context: Context, issuer: String, clientName: String?, redirectUri: String?, stale: String?
    ) async throws(SessionError) -> ClientRegistration {
        let profile = context.profile.name
        guard let endpoint = context.config["registrationEndpoint"]?.stringValue else {
            throw SessionError(.configurationError, "The profile needs the setting \"clientId\".", provider: profile, reason: "missingSetting")
        }
        let settings = context.profile.settings
        let name = settings["clientName"]?.stringValue ?? clientName ?? "AuthBridge"
        let path = settings["loopbackPath"]?.stringValue ?? "/callback"
        let pinned = settings["loopbackPort"]?.intValue ?? 0
        var scopes = context.config["scopes"]?.arrayValue?.compactMap(\.stringValue) ?? []
        // Every scope the resource knows: a later step-up (insufficient_scope) asks for one the
        // first sign-in did not, and servers hold a client to the scope it registered (the MCP SDK).
        for scope in context.config["resourceScopes"]?.arrayValue?.compactMap(\.stringValue) ?? [] where !scopes.contains(scope) {
            scopes.append(scope)
        }
        let http = self.http
        let store = self.store
        let result: Result<ClientRegistration, SessionError>
        do {
            result = try await store.withRegistrationLock(issuer) { () async -> Result<ClientRegistration, SessionError> in
                if let existing = try? await store.registration(at: issuer), existing.clientId != stale,
                    redirectUri.map(existing.redirectUris.contains) ?? true
                {
                    return .success(existing)
                }
                var uris: [String]
                if pinned != 0 {
                    uris = ["http://127.0.0.1:\(pinned)\(path)"]
                } else {
                    // Ports free now, held together so that they differ; the sign-in takes the first free one.
                    let listeners = (0..<ClientRegistration.loopbackPortCount).compactMap { _ in try? LoopbackListener(port: 0, path: path) }
                    uris = listeners.map(\.redirectURI)
                    listeners.forEach { $0.close() }
                }
                for extra in [context.config["redirectUri"]?.stringValue, redirectUri].compactMap({ $0 }) where !uris.contains(extra) {
                    uris.append(extra)
                }
                let request = ClientRegistration.request(endpoint: endpoint, clientName: name, redirectUris: uris, scopes: scopes)
                let registration: ClientRegistration
                switch await http.perform(request).flatMap({
                    ClientRegistration.parse(
                        $0, issuer: issuer, clientName: name, redirectUris: uris, scopes: scopes, now: HostClock.systemMilliseconds())
                }) {
                case .failure(let failure): return .failure(SessionError(failure, provider: profile))
                case .success(let value): registration = value
                }
                do { try await store.save(registration) } catch { return .failure(self.storageError(error, profile: profile)) }
                return .success(registration)
            }
        } catch {
            throw storageError(error, profile: profile)
        }
        let registration = try result.get()
        logger.info(
            "registered AuthBridge as a client of the authorization server (RFC 7591)",
            metadata: ["provider": "\(profile)", "issuer": "\(issuer)"])
        return registration
    }

    /// Whether the server has forgotten the registered client (an in-memory server restarted, a
    /// registration expired): a code grant with a made-up code is answered `invalid_client` for
    /// an unknown client and `invalid_grant` for a known one (RFC 6749 §5.2). Asked before a
    /// sign-in sends the user to the server, which would otherwise show its own error page and
    /// never come back. Anything else (no answer, another error) counts as known.
    private func registrationForgotten(_ context: Context) async -> Bool {
        guard let endpoint = context.config["tokenEndpoint"]?.stringValue, let clientID = context.config["clientId"]?.stringValue else {
            return false
        }
        let redirect = context.config["registeredRedirectUris"]?.arrayValue?.first?.stringValue
        let form: JSON = .compactObject([
            "grant_type": "authorization_code", "code": .string(PKCE.randomToken()), "code_verifier": .string(PKCE().verifier),
            "redirect_uri": redirect.map(JSON.string), "client_id": .string(clientID),
        ])
        let request: JSON = ["method": "POST", "url": .string(endpoint), "form": form, "timeoutMs": 10_000]
        guard case .success(let authenticated) = ClientAuthentication.authenticate(request, config: context.config),
            case .success(let answer) = await http.perform(authenticated)
        else { return false }
        let status = answer["status"]?.intValue ?? 0
        let body = (try? JSON.parse(answer["body"]?.stringValue ?? "")) ?? .null
        return (status == 400 || status == 401) && body["error"]?.stringValue == "invalid_client"
    }
}
