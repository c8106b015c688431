import AuthBridgeCrypto
import AuthBridgeJSON
import AuthBridgeSystem
import AuthBridgeURL
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
/// Any role with CONNECT on the database may NOTIFY the channel (and LISTEN to it), so every
/// payload is sealed with a key derived from the vault key (AES-GCM, the channel authenticated):
/// what does not open is only a hint that something may have changed (records are re-read, and
/// their own seals checked), never an event; an event is relayed once, and only within
/// `eventWindow` of when it was sealed (a payload heard on the channel cannot be replayed).
///
/// Listening starts once the vault key is proven (`start(vaultKey:)`). The connection is
/// checked with `SELECT 1` when quiet for 5 s (a silent network is found out within 10 s), and
/// opened again after a loss with a back-off (100 ms, doubling, at most 2 s; 30 s after a
/// refused login).
final class ChangeFeed: Sendable {
    private let pool: PostgresPool
    private let channel: String
    /// This vault's name in payloads: its own notifications are no news to it.
    let origin: String
    /// generation << 1 | listening.
    private let state = Atomic<Int64>(0)
    private let started = Atomic<Bool>(false)
    private let observers = Mutex<[@Sendable (VaultChange) -> Void]>([])
    /// What payloads are sealed with: set (once) by `start(vaultKey:)`.
    private let sealingKey = Mutex<SymmetricKey?>(nil)
    /// The events relayed within the last `eventWindow`: nonce → when sealed (ms since 1970).
    private let relayed = Mutex<[String: Int64]>([:])

    /// How long the connection may stay quiet before it is checked.
    static let quietCheck: Duration = .seconds(5)
    /// How far an event's seal may be from this host's clock (the hosts' clocks differ by less).
    static let eventWindow: Int64 = 120_000

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

    /// Starts listening (once; later calls do nothing), with payloads sealed under a key derived
    /// from `vaultKey`, the proven key of the vault.
    func start(vaultKey: SymmetricKey) throws(VaultError) {
        guard !started.load(ordering: .relaxed) else { return }
        let key: SymmetricKey
        do {
            key = try HKDF.sha256(
                inputKeyMaterial: vaultKey.bytes, salt: [], info: Array("authbridge vault changes v1".utf8), outputByteCount: 32)
        } catch {
            throw VaultError(.io, error.message)
        }
        sealingKey.withLock { $0 = $0 ?? key }
        guard started.compareExchange(expected: false, desired: true, ordering: .acquiringAndReleasing).exchanged else { return }
        detachThread { [self] in listen() }
    }

    /// Tells `observer` of what other hosts change from when the vault listens (its owner opens
    /// the vault for that).
    func observe(_ observer: @escaping @Sendable (VaultChange) -> Void) {
        observers.withLock { $0.append(observer) }
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
        guard let (content, nonce) = open(message) else {
            // Not sealed with this vault's key (an older host, or any role that may connect): a hint only.
            changed()
            tell(.records(nil))
            return
        }
        guard content["h"]?.stringValue != origin else { return } // this host's own, heard again
        if let event = content["e"] {
            guard let sealedAt = content["t"]?.intValue, firstHearing(nonce, sealedAt: sealedAt) else { return }
            tell(.event(event))
        } else {
            changed()
            tell(.records(content["k"]?.stringValue))
        }
    }

    /// Whether an event sealed at `sealedAt` under `nonce` is to be relayed: sealed within
    /// `eventWindow` of now and not relayed before (what is older is forgotten: it is refused).
    private func firstHearing(_ nonce: String, sealedAt: Int64) -> Bool {
        let now = Self.now()
        guard abs(now - sealedAt) <= Self.eventWindow else { return false }
        return relayed.withLock { relayed in
            if relayed.count >= 64 { relayed = relayed.filter { now - $0.value <= Self.eventWindow } }
            return relayed.updateValue(sealedAt, forKey: nonce) == nil
        }
    }

    static func now() -> Int64 {
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        return Int64(now.tv_sec) * 1000 + Int64(now.tv_nsec) / 1_000_000
    }

    // MARK: - Payloads

    /// NOTIFY payloads stay under PostgreSQL's 8,000 bytes.
    static let payloadLimit = 7_500

    /// `{"h": origin, "s": sealed}`: the sender in the clear (a host skips its own at once), and
    /// sealed (base64 of nonce ‖ ciphertext ‖ tag, the channel authenticated) `content`, which
    /// names the sender again and when it was sealed. Nil without the key or when too long.
    private func seal(_ content: [String: JSON], at time: Int64 = ChangeFeed.now()) -> String? {
        guard let key = sealingKey.withLock({ $0 }) else { return nil }
        var content = content
        content["h"] = .string(origin)
        content["t"] = .int(time)
        guard let sealed = try? AESGCM.seal(JSON.object(content).serialized(sortKeys: true), using: key, authenticating: Array(channel.utf8))
        else { return nil }
        let payload = JSON.object(["h": .string(origin), "s": .string(Base64.encode(sealed))]).serializedString()
        return payload.utf8.count <= Self.payloadLimit ? payload : nil
    }

    /// The content of a payload sealed with this vault's key, and its nonce; nil for anything else.
    private func open(_ message: JSON) -> (content: JSON, nonce: String)? {
        guard let key = sealingKey.withLock({ $0 }), let text = message["s"]?.stringValue, let sealed = Base64.decode(text),
            let plain = try? AESGCM.open(sealed, using: key, authenticating: Array(channel.utf8)),
            let content = try? JSON.parse(plain), content.objectValue != nil
        else { return nil }
        return (content, Base64.encode(sealed.prefix(12)))
    }

    /// The payload announcing a change of `key` (without the key when it is too long: "any").
    func changePayload(_ key: String) -> String {
        seal(["k": .string(key)]) ?? seal([:]) ?? JSON.object(["h": .string(origin)]).serializedString()
    }

    /// The payload publishing `event` (sealed `at` now, but in tests); nil when it cannot be
    /// sealed or made small enough.
    func eventPayload(_ event: JSON, at time: Int64 = ChangeFeed.now()) -> String? {
        var event = event
        for _ in 0..<2 {
            if let payload = seal(["e": event], at: time) { return payload }
            // A long provider message or many cookies: the rest of the event still says what happened.
            event = event.setting("message", nil).setting("clearCookies", nil)
        }
        return nil
    }
}
