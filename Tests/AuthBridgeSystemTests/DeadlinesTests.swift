import AuthBridgeSystem
import Synchronization
import Testing

/// What the actions record, in the order they ran.
private final class Record: Sendable {
    let values = Mutex<[Int]>([])
}

/// What a deadline's action captures: `deinit` says it was let go of.
private final class Captured: Sendable {
    let released: Handoff<Bool>
    init(released: Handoff<Bool>) { self.released = released }
    deinit { released.put(true) }
}

// Deadlines (issue 32): a bound on a wait that, cancelled, lets go of its action at once, where a
// cancelled Task.sleep kept its task and captures until the deadline passed.
@Suite("Deadlines")
struct DeadlinesTests {
    @Test func aDeadlineThatPassesRunsItsAction() {
        let ran = Handoff<String>()
        _ = Deadlines().after(.milliseconds(5)) { ran.put("ran") }
        #expect(ran.take() == "ran")
    }

    @Test func theNearestDeadlineRunsFirstWhateverTheOrderTheyWereSet() {
        let order = Record()
        let second = Handoff<Bool>()
        let deadlines = Deadlines()
        _ = deadlines.after(.milliseconds(200)) {
            order.values.withLock { $0.append(2) }
            second.put(true)
        }
        _ = deadlines.after(.milliseconds(5)) { order.values.withLock { $0.append(1) } }
        #expect(second.take())
        #expect(order.values.withLock { $0 } == [1, 2])
    }

    @Test func aCancelledDeadlineLetsGoOfItsActionAtOnceAndNeverRunsIt() {
        let released = Handoff<Bool>()
        let ran = Record()
        let next = Handoff<Bool>()
        let deadlines = Deadlines()
        do {
            let captured = Captured(released: released)
            let deadline = deadlines.after(.seconds(3600)) {
                _ = captured
                ran.values.withLock { $0.append(1) }
            }
            deadline.cancel()
        }
        #expect(released.take()) // an hour early: the action and its captures are gone
        _ = deadlines.after(.milliseconds(5)) { next.put(true) }
        #expect(next.take())
        #expect(ran.values.withLock { $0 }.isEmpty)
    }
}
