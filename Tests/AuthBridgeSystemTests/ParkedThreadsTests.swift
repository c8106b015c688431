@testable import AuthBridgeThreads
import Synchronization
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Set when what a body captured is let go of.
private final class Released: Sendable {
    let flag = Atomic(false)
}

private final class Holder: Sendable {
    let released: Released
    init(_ released: Released) { self.released = released }
    deinit { released.flag.store(true, ordering: .releasing) }
}

/// `startThread` hands a body to a thread that finished one and waits (issue 32: the agent's
/// reader and writer of every connection), instead of a new thread each time.
@Suite("Parked threads")
struct ParkedThreadsTests {
    /// A stack size no other test uses: these threads are this test's alone.
    private static let stackSize = (1 << 20) + 3 * 4096

    /// Whether `condition` holds within 10 s (a bounded wait for another thread's step).
    private func eventually(_ condition: () -> Bool) -> Bool {
        let clock = ContinuousClock()
        let deadline = clock.now + .seconds(10)
        while !condition() {
            guard clock.now < deadline else { return false }
            sched_yield()
        }
        return true
    }

    private func waiting(_ size: Int) -> Int { ParkedThreads.shared.waitingCount(stackSize: size) }

    /// Starts a body that holds an object nothing else holds; the thread that ran it, once it ran.
    private func startHolding(_ released: Released) -> pthread_t? {
        let holder = Holder(released)
        let ran = Handoff<pthread_t>()
        guard startThread(stackSize: Self.stackSize, { withExtendedLifetime(holder) { ran.put(pthread_self()) } }) else { return nil }
        return ran.take()
    }

    @Test func aThreadThatFinishedABodyRunsTheNextAndLetsGoOfTheLast() throws {
        let released = Released()
        let firstThread = try #require(startHolding(released))
        let parked = eventually { waiting(Self.stackSize) == 1 }
        try #require(parked)
        // What the body captured (a connection and its buffers) is let go of while its thread waits.
        let letGo = eventually { released.flag.load(ordering: .acquiring) }
        #expect(letGo)

        let second = Handoff<pthread_t>()
        let started = startThread(stackSize: Self.stackSize) { second.put(pthread_self()) }
        #expect(started)
        #expect(pthread_equal(second.take(), firstThread) != 0, "the waiting thread ran it")
        let parkedAgain = eventually { waiting(Self.stackSize) == 1 }
        #expect(parkedAgain)
    }

    @Test func aBodyOfAnotherStackSizeGetsAThreadOfItsOwn() throws {
        let size = Self.stackSize + 4096
        let first = Handoff<pthread_t>()
        let started = startThread(stackSize: size) { first.put(pthread_self()) }
        #expect(started)
        let firstThread = first.take()
        let parked = eventually { waiting(size) == 1 }
        try #require(parked)
        let other = Handoff<pthread_t>()
        let startedOther = startThread(stackSize: size + 4096) { other.put(pthread_self()) }
        #expect(startedOther)
        #expect(pthread_equal(other.take(), firstThread) == 0)
        #expect(waiting(size) == 1, "the parked one still waits")
    }
}
