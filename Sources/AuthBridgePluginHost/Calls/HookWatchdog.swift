import AuthBridgeSystem

/// Runs an action when a deadline passes: hook deadlines, cancellation
/// graces and the inline mark, for every call of every plugin.
///
/// One thread and a table, not a timer per call: arming and disarming are an
/// insert and a remove (hooks run at tens of thousands per second in the
/// bench; `asyncAfter` would keep every cancelled item until it fires). The
/// thread wakes every `tick` and runs the expired actions outside the lock,
/// so an action may arm or disarm; after `idleTicks` ticks with nothing armed
/// it sleeps on the condition until something is. Only an arm that finds it
/// so asleep signals it: calls one after the other must not each wake a
/// thread (a futex wake and a context switch per hook call). Actions must not
/// block: they resume a caller, cancel a call, count a fault.
final class HookWatchdog: @unchecked Sendable {
    static let shared = HookWatchdog()

    /// An armed deadline, for `disarm`.
    struct Ticket: Hashable, Sendable {
        fileprivate let id: Int
    }

    let tick: Duration
    private let lock = ConditionLock()
    // Guarded by `lock`.
    private var armed: [Int: (deadline: ContinuousClock.Instant, action: @Sendable () -> Void)] = [:]
    private var next = 0
    private var running = false
    /// True while the thread waits with no timeout (nothing armed for `idleTicks` ticks).
    private var asleep = false
    private let idleTicks: Int
    /// How many arms had to wake the thread (tests).
    private var signals = 0

    init(tick: Duration = .milliseconds(25), idleTicks: Int = 40) {
        self.tick = tick
        self.idleTicks = idleTicks
    }

    /// Runs `action` on the watchdog's thread once `deadline` has passed, unless disarmed first.
    @discardableResult
    func arm(at deadline: ContinuousClock.Instant, _ action: @escaping @Sendable () -> Void) -> Ticket {
        let (ticket, start) = lock.withLock {
            next += 1
            armed[next] = (deadline, action)
            if asleep {
                signals += 1
                lock.signal()
            }
            defer { running = true }
            return (Ticket(id: next), !running)
        }
        // Not detachThread: its fallback would run the endless loop on the caller's thread.
        if start, !startThread({ [self] in watch() }) {
            lock.withLock { running = false } // no thread to give now: the next arm tries again
        }
        return ticket
    }

    /// Forgets a deadline; its action will not run (it may be running now).
    func disarm(_ ticket: Ticket) {
        lock.withLock { _ = armed.removeValue(forKey: ticket.id) }
    }

    /// The number of armed deadlines (for tests).
    var armedCount: Int { lock.withLock { armed.count } }

    /// Whether the thread sleeps until something is armed, and how many arms woke it (for tests).
    var sleepState: (asleep: Bool, signals: Int) { lock.withLock { (asleep, signals) } }

    private func watch() {
        var idle = 0
        while true {
            let expired: [@Sendable () -> Void] = lock.withLock {
                if armed.isEmpty {
                    idle += 1
                    if idle <= idleTicks {
                        _ = lock.wait(until: ConditionLock.deadline(after: tick))
                        return []
                    }
                    asleep = true
                    while armed.isEmpty { lock.wait() }
                    asleep = false
                }
                idle = 0
                let now = ContinuousClock.now
                let due = armed.filter { $0.value.deadline <= now }.sorted { $0.value.deadline < $1.value.deadline }
                for (id, _) in due { armed.removeValue(forKey: id) }
                // Waits a tick, or less when the next deadline comes sooner.
                if due.isEmpty, let soonest = armed.values.map(\.deadline).min() {
                    _ = lock.wait(until: ConditionLock.deadline(after: min(tick, max(soonest - now, .milliseconds(1)))))
                }
                return due.map(\.value.action)
            }
            for action in expired { action() }
        }
    }
}
