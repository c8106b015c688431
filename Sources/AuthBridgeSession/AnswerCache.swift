// Answers the engine gave to getAccessToken and checkSignInStatus, kept so
// that the next ones can be given without the engine.

import AuthBridgeJSON
import AuthBridgePluginHost
import Synchronization

/// An answer kept for reuse, with its JSON text made once.
public struct Answer: Sendable, Equatable {
    public let json: JSON
    public let text: [UInt8]

    init(_ json: JSON) {
        self.json = json
        self.text = json.serialized()
    }
}

/// The engine's last `getAccessToken` and `checkSignInStatus` answers for a
/// valid session, readable from any thread without the actor: a frontend
/// asks for a token before every API call and for the status on every
/// screen, and those answers stay the same until something changes.
///
/// What makes an entry unusable — each is checked on every use:
/// - **this process changed something**: every vault write of the engine
///   (a refresh, a sign-in, a sign-out, a license mark, a kept
///   configuration) and every change of a profile or of its resolved
///   configuration moves `generation` (before and after a write: a read that
///   overlaps the write is never kept as current);
/// - **another process changed the record**: the vault's `ChangeProbe`
///   stamp differs from the one taken before the record was read (the file's
///   inode and times for the encrypted-file vault; for PostgreSQL a counter
///   of the NOTIFYs heard, with no stamp at all while the host is not
///   listening; the Secret Service has no probe, so its sessions are never
///   answered from here);
/// - **time**: the token's expiry, the caller's `minValidityMs` and the
///   refresh-ahead point are checked against the host clock on each use
///   (`TokenSet.freshness`, the rule the engine itself follows);
/// - **the plugin**: one refused meanwhile, or a `check_session` that no
///   longer runs inline or answers other than `valid`, sends the call to
///   the engine; an isolated plugin's inline `check_session` is asked again
///   (through the engine, in its runner) once its last `valid` is a second old.
/// License-revoked sessions, kept configurations used while the provider is
/// down, and answers that refreshed are never kept.
final class AnswerCache: Sendable {
    /// Which call an entry answers: a profile and the account it names (nil: the current one).
    struct Lookup: Hashable, Sendable {
        var profile: String
        var account: String?
    }

    /// What the engine saw before it read the session it answered from.
    struct Observation: Sendable {
        let generation: UInt64
        let probe: ChangeProbe
        let stamp: VaultStamp
    }

    /// How `checkSignInStatus` confirms a session: by the clock, or by the plugin's inline `check_session`.
    enum StatusCheck: Sendable {
        /// The plugin's inline `check_session` with this input (its JSON text made once).
        static func inlineHook(plugin: LoadedPlugin, input: JSON) -> StatusCheck {
            .inlineHook(plugin: plugin, input: input, text: input.serialized())
        }

        case clock
        /// The hook's input, and the same as JSON text (made once).
        case inlineHook(plugin: LoadedPlugin, input: JSON, text: [UInt8])
        /// An isolated plugin's inline `check_session` answered `valid` at this host-clock time:
        /// reused for `runnerCheckReuseMilliseconds`, the same input going to the same quick
        /// check, rather than a round trip to the runner for every call (bench/README, "Next to
        /// oidc-agent").
        case runnerCheck(confirmedAt: Int64)
    }

    /// How long an isolated plugin's inline `check_session` answer `valid` stands for its session
    /// (plugin.h: an inline hook is quick and never uses HTTP, so what it can notice that the host
    /// does not is time): the answer is at most this old, while in-process plugins are asked every time.
    static let runnerCheckReuseMilliseconds: Int64 = 1000

    struct Entry: Sendable {
        let observation: Observation
        let tokens: TokenSet
        let plugin: LoadedPlugin
        var accessToken: Answer?
        /// A DPoP-bound session's answer: `accessToken` is kept without a proof, and every call
        /// that names its request gets a new one spliced in (a proof is good for one request).
        var dpop: DPoPAnswer?
        var status: (answer: Answer, check: StatusCheck)?
    }

    private let generation = Atomic<UInt64>(0)
    private let entries = Mutex<[Lookup: Entry]>([:])

    /// Moves whenever `invalidate` runs: what a cache of other answers (`initialize`'s) compares.
    var currentGeneration: UInt64 { generation.load(ordering: .sequentiallyConsistent) }

    /// Something answers depend on changes in this process.
    func invalidate() {
        generation.add(1, ordering: .sequentiallyConsistent)
        entries.withLock { $0.removeAll(keepingCapacity: true) }
    }

    /// Runs a write with the cache invalidated before and after it.
    func invalidating<T>(_ write: () async throws -> T) async rethrows -> T {
        invalidate()
        defer { invalidate() }
        return try await write()
    }

    /// Taken before a session is read: nil when the vault cannot vouch for it.
    func observe(_ probe: ChangeProbe?) -> Observation? {
        guard let probe else { return nil }
        let generation = self.generation.load(ordering: .sequentiallyConsistent)
        guard let stamp = probe.stamp() else { return nil }
        return Observation(generation: generation, probe: probe, stamp: stamp)
    }

    /// Keeps an answer read under `observation` (dropped if something changed since).
    func keep(_ lookup: Lookup, _ observation: Observation, tokens: TokenSet, plugin: LoadedPlugin, update: (inout Entry) -> Void) {
        entries.withLock { entries in
            guard observation.generation == generation.load(ordering: .sequentiallyConsistent) else { return }
            var entry = entries[lookup] ?? Entry(observation: observation, tokens: tokens, plugin: plugin)
            if entry.observation.stamp != observation.stamp || entry.observation.generation != observation.generation || entry.tokens != tokens {
                entry = Entry(observation: observation, tokens: tokens, plugin: plugin)
            }
            update(&entry)
            entries[lookup] = entry
        }
    }

    /// The entry for `lookup` if nothing it depends on changed; nil otherwise.
    func current(_ lookup: Lookup) -> Entry? {
        guard let entry = entries.withLock({ $0[lookup] }),
            entry.observation.generation == generation.load(ordering: .sequentiallyConsistent),
            entry.plugin.refusal == nil,
            entry.observation.probe.stamp() == entry.observation.stamp
        else { return nil }
        return entry
    }
}
