// What other hosts sharing the vault do (PostgreSQL): their changes drop what this host kept,
// and their `session/changed` events reach this host's frontend.

import AuthBridgeJSON
import AuthBridgeProtocol

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
        guard let event = try? SessionChangedParams(wire: params), profiles[event.provider] != nil,
            event.state == .signedOut ? EndReason(rawValue: event.reason) != nil : event.reason == event.state.rawValue
        else { return }
        // Read into the spec's types: what another host added beyond them is not relayed.
        send(event)
    }
}
