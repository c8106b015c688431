// What other hosts sharing the vault do (PostgreSQL): their changes drop what this host kept,
// and their `session/changed` events reach this host's frontend.

import AuthBridgeJSON

extension SessionEngine {
    /// Follows the changes other hosts make to a shared vault (one that hears of them; the
    /// others never call back): every answer kept from what they replaced is dropped at once,
    /// and the events they announce are relayed, in the order they arrive, for the profiles
    /// this host has. `serve` calls it once; the human commands do not.
    public nonisolated func followVaultChanges() {
        let answers = store.answers
        let (events, relay) = AsyncStream<JSON>.makeStream()
        store.vault.observeChanges { change in
            answers.invalidate()
            if case .event(let params) = change { relay.yield(params) }
        }
        Task { [weak self] in
            for await params in events {
                guard let self else { return }
                await self.relay(params)
            }
        }
    }

    /// Emits another host's `session/changed`, if it is about a profile of this host and says
    /// what the spec allows (the database is shared, not this host's own word). The vault hands
    /// over only events sealed with its key, once and fresh: anyone who may connect to the
    /// database can NOTIFY its channel.
    private func relay(_ params: JSON) {
        guard let profile = params["provider"]?.stringValue, profiles[profile] != nil,
            let change = params["state"]?.stringValue.flatMap(SessionChange.init(rawValue:)),
            let reason = params["reason"]?.stringValue,
            change == .signedOut ? EndReason(rawValue: reason) != nil : reason == change.rawValue
        else { return }
        let account = params["account"]?.objectValue.map { members in
            JSON.object(members.filter { ["id", "name", "email"].contains($0.key) && $0.value.stringValue != nil })
        }
        let cookies = params["clearCookies"]?.arrayValue.map { Self.cookieRefs(.array($0)) } ?? []
        emit(
            "session/changed",
            .compactObject([
                "provider": .string(profile), "state": .string(change.rawValue), "reason": .string(reason),
                "message": params["message"]?.stringValue.map(JSON.string), "account": account,
                "clearCookies": cookies.isEmpty ? nil : .array(cookies),
            ]))
    }
}
