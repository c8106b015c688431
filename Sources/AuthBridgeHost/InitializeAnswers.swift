import AuthBridgeProtocol
import AuthBridgeSession
import Synchronization

/// The `initialize` answer last given, per shape (the protocol minor agreed on, settings schemas
/// or not), kept for the next connection that asks the same while nothing it shows has changed.
/// A one-shot client (`authbridge token`, a script asking for one token) then gets it on the
/// reader thread: no task, no actor, no hand-off to the writer thread, which cost more than the
/// rest of its exchange (issue 32; bench/README, "Next to oidc-agent").
///
/// What the answer shows changes with the engine's profiles and their resolved configurations
/// (`SessionEngine.answerGeneration` moves), a plugin refused after it loaded, the vault's
/// storage description and the configuration file's problem: an answer is given again only
/// while every one of them is as it was before the answer was made, and one made while any
/// moved is not kept.
final class InitializeAnswers: Sendable {
    struct Shape: Hashable, Sendable {
        var minor: Int
        var settingsSchemas: Bool
    }

    /// What the answer depends on beyond its shape, as read before it was made.
    struct Stamp: Equatable, Sendable {
        var generation: UInt64
        var refusedPlugins: Int
        var storage: StorageInfo
        var configurationProblem: String?
    }

    private let kept = Mutex<[Shape: (stamp: Stamp, text: [UInt8])]>([:])

    /// The answer's JSON text when one of `shape` was made at `stamp`.
    func answer(_ shape: Shape, at stamp: Stamp) -> [UInt8]? {
        kept.withLock { $0[shape].flatMap { $0.stamp == stamp ? $0.text : nil } }
    }

    /// Keeps `text`, made after `before` was read, unless something moved while it was made (`after`).
    func keep(_ text: [UInt8], for shape: Shape, before: Stamp, after: Stamp) {
        guard before == after else { return }
        kept.withLock { $0[shape] = (before, text) }
    }

    /// The stamp of `engine` and `host` now.
    static func stamp(_ engine: SessionEngine, host: BridgeHost) -> Stamp {
        Stamp(
            generation: engine.answerGeneration, refusedPlugins: engine.refusedPluginCount, storage: engine.storageInfo,
            configurationProblem: host.configurationProblem)
    }
}
