import AuthBridgeJSON
import AuthBridgeSystem
import Synchronization

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// What a PostgreSQL vault hears of the other hosts' changes, on a connection of its own that
/// LISTENs to the vault's channel:
///
/// - `stamp`, the `ChangeProbe` answer for every record: a counter moved by each change
///   another host announces, each write of this process, and each loss or recovery of the
///   connection; nil while not listening — nothing kept can then be vouched for, so every
///   answer is read again (a host that lost its connection re-reads before answering);
/// - the observers (`observe`), told of each change and of each event another host published.
///
/// The connection is opened on first use, checked with `SELECT 1` when quiet for 5 s (a
/// silent network is found out within 10 s), and opened again after a loss with a back-off
/// (100 ms, doubling, at most 2 s; 30 s after a refused login).
final class ChangeFeed: Sendable {
    private let pool: PostgresPool
    private let channel: String
    /// This vault's name in payloads: its own notifications are no news to it.
    let origin: String
    /// generation << 1 | listening.
    private let state = Atomic<Int64>(0)
    private let started = Atomic<Bool>(false)
    private let observers = Mutex<[@Sendable (VaultChange) -> Void]>([])

    /// How long the connection may stay quiet before it is checked.
    static let quietCheck: Duration = .seconds(5)

    init(pool: PostgresPool, channel: String, origin: String) {
        self.pool = pool
        self.channel = channel
        self.origin = origin
    }

    /// The stamp now: nil while not listening.
    var stamp: VaultStamp? {
        let value = state.load(ordering: .acquiring)
        return value & 1 == 1 ? VaultStamp(value) : nil
    }

    /// Something changed (a write of this process, or news from another).
    func changed() { state.add(2, ordering: .sequentiallyConsistent) }

    /// Starts listening (once; later calls do nothing).
    func start() {
        guard !started.load(ordering: .relaxed),
            started.compareExchange(expected: false, desired: true, ordering: .acquiringAndReleasing).exchanged
        else { return }
        detachThread { [self] in listen() }
    }

    func observe(_ observer: @escaping @Sendable (VaultChange) -> Void) {
        observers.withLock { $0.append(observer) }
        start()
    }

    private func tell(_ change: VaultChange) {
        for observer in observers.withLock({ $0 }) { observer(change) }
    }

    private func listen() {
        var backOff = PostgresPool.firstBackOff
        while true {
            do throws(PostgresFailure) {
                let connection = try pool.client.connect(pool.conninfo, timeout: pool.connectTimeout)
                _ = try connection.run("LISTEN \(channel)", timeout: pool.connectTimeout)
                backOff = PostgresPool.firstBackOff
                // Listening from here on: whatever changed before may have been missed.
                state.add(2, ordering: .sequentiallyConsistent)
                state.bitwiseOr(1, ordering: .sequentiallyConsistent)
                tell(.records(nil))
                while true {
                    if let payload = try connection.nextNotification(timeout: Self.quietCheck) {
                        received(payload)
                    } else {
                        _ = try connection.run("SELECT 1", timeout: pool.connectTimeout)
                    }
                }
            } catch {
                // A refused login or a missing helper will not mend in a second: try again less often.
                let lasting = error.isRefusal || error.kind == .invalid || error.kind == .notLoaded
                if state.load(ordering: .acquiring) & 1 == 1 {
                    state.bitwiseAnd(~1, ordering: .sequentiallyConsistent)
                    state.add(2, ordering: .sequentiallyConsistent)
                    tell(.records(nil))
                }
                // A back-off between attempts to reach a database that is down, not synchronisation.
                let pause = backOff + .milliseconds(Int.random(in: 0...max(1, backOff.wholeMilliseconds / 4)))
                usleep(UInt32(pause.wholeMilliseconds * 1000))
                backOff = lasting ? .seconds(30) : min(backOff * 2, PostgresPool.longestBackOff)
            }
        }
    }

    private func received(_ payload: String) {
        guard let message = try? JSON.parse(payload), message["h"]?.stringValue != origin else { return }
        if let event = message["e"] {
            tell(.event(event))
        } else {
            changed()
            tell(.records(message["k"]?.stringValue))
        }
    }

    // MARK: - Payloads

    /// NOTIFY payloads stay under PostgreSQL's 8,000 bytes.
    static let payloadLimit = 7_500

    /// The payload announcing a change of `key` (without the key when it is too long: "any").
    func changePayload(_ key: String) -> String {
        let full = JSON.object(["h": .string(origin), "k": .string(key)]).serializedString()
        return full.utf8.count <= Self.payloadLimit ? full : JSON.object(["h": .string(origin)]).serializedString()
    }

    /// The payload publishing `event`; nil when it cannot be made small enough.
    func eventPayload(_ event: JSON) -> String? {
        var event = event
        for _ in 0..<2 {
            let text = JSON.object(["h": .string(origin), "e": event]).serializedString()
            if text.utf8.count <= Self.payloadLimit { return text }
            // A long provider message or many cookies: the rest of the event still says what happened.
            event = event.setting("message", nil).setting("clearCookies", nil)
        }
        return nil
    }
}
