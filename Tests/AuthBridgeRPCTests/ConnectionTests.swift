import AuthBridgeJSON
import AuthBridgeRPC
import Logging
import Synchronization
import Testing
import Dispatch

#if canImport(Glibc)
import Glibc
#endif

/// A delegate with a few methods: "echo", "sleep" (until cancelled), "fail", "effect" (done
/// whatever happens: it returns a result once cancelled), "failOnCancel" (an error once cancelled).
private final class TestDelegate: ConnectionDelegate {
    let gate = Mutex<Set<String>>([])
    /// Methods `admit` was asked about, and how many requests `handle` started.
    let admitted = Mutex<[String]>([])
    let handled = Mutex(0)
    /// Notifications seen, in order (the reader's progress).
    let notifications = Mutex<[String]>([])

    func admit(_ request: Request) -> RPCError? {
        admitted.withLock { $0.append(request.method) }
        return request.method == "refused" ? RPCError(.serverNotInitialized, "not yet") : nil
    }

    func handle(_ request: Request) async throws -> JSON {
        handled.withLock { $0 += 1 }
        switch request.method {
        case "echo": return request.params ?? .null
        case "sleep":
            try await Task.sleep(for: .seconds(30))
            return "woke"
        case "fail": throw RPCError(.init(-32001), "nope", data: ["reason": "x"])
        case "crash": throw CancellationError()
        case "effect", "failOnCancel":
            // Polls for the cancellation (a test delegate: the wait is the point).
            while !Task.isCancelled { try? await Task.sleep(for: .milliseconds(2)) }
            if request.method == "effect" { return "done" }
            throw RPCError(.init(-32004), "refused after the cancel", data: ["reason": "x"])
        default: throw RPCError.methodNotFound(request.method)
        }
    }

    /// Released by the test: "blockAtOnce" waits for it on the reader thread.
    let release = DispatchSemaphore(value: 0)

    /// "atOnce" is answered on the reader thread; "blockAtOnce" too, after it has asked for a
    /// new reader (as a watchdog would) and waited for the test to release it.
    func answerAtOnce(_ request: Request, ifBlocked: @escaping @Sendable () -> Void) -> [UInt8]? {
        switch request.method {
        case "atOnce": return Array(#""quick""#.utf8)
        case "blockAtOnce":
            DispatchQueue.global().async { ifBlocked() }
            release.wait()
            return Array(#""unblocked""#.utf8)
        default: return nil
        }
    }

    func received(_ notification: AuthBridgeRPC.Notification) -> Connection.Disposition {
        notifications.withLock { $0.append(notification.method) }
        return notification.method == "exit" ? .exit(code: 3) : .proceed
    }
}

/// A connection on two pipes, driven line by line from the test.
private struct Harness {
    let toHost: Int32
    let fromHost: Int32
    let connection: Connection
    let run: Task<Connection.Ending, Never>

    let delegate: TestDelegate

    /// `outputFull`: the output pipe is filled before the connection starts, as by a peer that
    /// has stopped reading: nothing the connection writes leaves it.
    init(
        maxConcurrentRequests: Int = 256, maxQueuedOutputBytes: Int = 4 << 20, maxBacklogBytes: Int = 8 << 20,
        flushGrace: Duration = .seconds(2), outputFull: Bool = false
    ) {
        var input: [Int32] = [0, 0], output: [Int32] = [0, 0]
        pipe(&input)
        pipe(&output)
        toHost = input[1]
        fromHost = output[0]
        if outputFull {
            let flags = fcntl(output[1], F_GETFL)
            _ = fcntl(output[1], F_SETFL, flags | O_NONBLOCK)
            let junk = [UInt8](repeating: 0x20, count: 4096)
            while junk.withUnsafeBytes({ write(output[1], $0.baseAddress, $0.count) }) > 0 {}
            _ = fcntl(output[1], F_SETFL, flags)
        }
        let connection = Connection(
            input: input[0], output: output[1], logger: Logger(label: "test"),
            maxConcurrentRequests: maxConcurrentRequests, maxQueuedOutputBytes: maxQueuedOutputBytes,
            maxBacklogBytes: maxBacklogBytes, flushGrace: flushGrace)
        self.connection = connection
        let delegate = TestDelegate()
        self.delegate = delegate
        run = Task { await connection.run(delegate: delegate, drainGrace: .milliseconds(200)) }
    }

    func send(_ line: String) { writeLine(line, to: toHost) }

    /// Reads one frame, waiting at most 10 s.
    func next() async throws -> JSON {
        guard let line = await readLine(from: fromHost) else { throw RPCError.internalError }
        return try JSON.parse(line)
    }

    /// Returns once the reader has dispatched everything sent before: a
    /// notification it passes to the delegate in arrival order.
    func readerCaughtUp(_ marker: String) async {
        send(#"{"jsonrpc":"2.0","method":"\#(marker)"}"#)
        while !delegate.notifications.withLock({ $0.contains(marker) }) { try? await Task.sleep(for: .milliseconds(2)) }
    }

    /// `run`'s ending, or nil when it has not ended within `limit` (a bound, not
    /// synchronisation; a run that never ends is left behind, not awaited).
    func ending(within limit: Duration) async -> Connection.Ending? {
        let run = self.run
        let waiter = Mutex<CheckedContinuation<Connection.Ending?, Never>?>(nil)
        let take: @Sendable () -> CheckedContinuation<Connection.Ending?, Never>? = {
            waiter.withLock { continuation in
                defer { continuation = nil }
                return continuation
            }
        }
        return await withCheckedContinuation { continuation in
            waiter.withLock { $0 = continuation }
            Task {
                let ending = await run.value
                take()?.resume(returning: ending)
            }
            Task {
                try? await Task.sleep(for: limit)
                take()?.resume(returning: nil)
            }
        }
    }

    func close() { Glibc.close(toHost) }
}

@Suite("Connection", .serialized)
struct ConnectionTests {
    @Test func answersRequestsAndProtocolErrors() async throws {
        let harness = Harness()
        harness.send(#"{"jsonrpc":"2.0","id":1,"method":"echo","params":{"a":1}}"#)
        #expect(try await harness.next()["result"] == ["a": 1])
        harness.send("not json")
        let parseError = try await harness.next()
        #expect(parseError["error"]?["code"] == -32700 && parseError["id"] == .null)
        harness.send(#"{"jsonrpc":"2.0","id":"r","method":"refused"}"#)
        #expect(try await harness.next()["error"]?["code"] == -32002)
        harness.send(#"{"jsonrpc":"2.0","id":2,"method":"fail"}"#)
        let failure = try await harness.next()
        #expect(failure["error"]?["data"]?["reason"] == "x" && failure["id"] == 2)
        harness.close()
        #expect(await harness.run.value == .endOfInput)
    }

    @Test func answersGivenAtOnceAreWritten() async throws {
        let harness = Harness()
        for id in 1...3 { harness.send(#"{"jsonrpc":"2.0","id":\#(id),"method":"atOnce"}"#) }
        for id in 1...3 {
            let answer = try await harness.next()
            #expect(answer["id"] == .int(Int64(id)) && answer["result"] == "quick")
        }
        #expect(harness.delegate.handled.withLock { $0 } == 0)
        harness.close()
        #expect(await harness.run.value == .endOfInput)
    }

    /// Issue 15: an answer given on the reader thread that blocks (a plugin's inline hook) must
    /// not stop the reading: a new reader takes over, and the blocked answer is written later.
    @Test func aBlockedAnswerAtOnceHandsTheReadingToANewThread() async throws {
        let harness = Harness()
        harness.send(#"{"jsonrpc":"2.0","id":"b","method":"blockAtOnce"}"#)
        harness.send(#"{"jsonrpc":"2.0","id":1,"method":"atOnce"}"#)
        harness.send(#"{"jsonrpc":"2.0","id":2,"method":"echo","params":[2]}"#)
        let first = try await harness.next()
        let second = try await harness.next()
        #expect(Set([first["id"], second["id"]]) == [1, 2])
        harness.delegate.release.signal()
        let blocked = try await harness.next()
        #expect(blocked["id"] == "b" && blocked["result"] == "unblocked")
        harness.send(#"{"jsonrpc":"2.0","id":3,"method":"atOnce"}"#)
        #expect(try await harness.next()["id"] == 3)
        harness.close()
        #expect(await harness.ending(within: .seconds(10)) == .endOfInput)
    }

    @Test func notificationsAreNeverAnswered() async throws {
        let harness = Harness()
        harness.send(#"{"jsonrpc":"2.0","method":"whatever"}"#)
        harness.send(#"{"jsonrpc":"2.0","id":1,"method":"echo","params":[1]}"#)
        #expect(try await harness.next()["id"] == 1)
        harness.close()
        _ = await harness.run.value
    }

    @Test func slowRequestsDoNotHoldBackFastOnesAndCancelAnswers32800() async throws {
        let harness = Harness()
        harness.send(#"{"jsonrpc":"2.0","id":"slow","method":"sleep"}"#)
        harness.send(#"{"jsonrpc":"2.0","id":"fast","method":"echo","params":{}}"#)
        #expect(try await harness.next()["id"] == "fast")
        harness.send(#"{"jsonrpc":"2.0","id":"slow2","method":"sleep"}"#)
        harness.send(#"{"jsonrpc":"2.0","id":"slow2","method":"echo"}"#)
        let duplicate = try await harness.next()
        #expect(duplicate["error"]?["code"] == -32600 && duplicate["id"] == "slow2")
        harness.send(#"{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":"slow"}}"#)
        let cancelled = try await harness.next()
        #expect(cancelled["id"] == "slow" && cancelled["error"]?["code"] == -32800)
        harness.send(#"{"jsonrpc":"2.0","method":"exit"}"#)
        // exit cancels what still runs; its answer is written before run returns.
        let last = try await harness.next()
        #expect(last["id"] == "slow2" && last["error"]?["code"] == -32800)
        #expect(await harness.run.value == .exit(code: 3))
    }

    @Test func endOfInputLetsRunningRequestsFinishWithinTheGrace() async throws {
        let harness = Harness()
        harness.send(#"{"jsonrpc":"2.0","id":1,"method":"sleep"}"#)
        harness.close()
        // The 30 s sleep outlives the 200 ms grace, so it is cancelled and answered.
        #expect(try await harness.next()["error"]?["code"] == -32800)
        #expect(await harness.run.value == .endOfInput)
    }

    @Test func aResultStandsWhenTheCancelArrivesAfterTheEffect() async throws {
        let harness = Harness()
        harness.send(#"{"jsonrpc":"2.0","id":"e","method":"effect"}"#)
        harness.send(#"{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":"e"}}"#)
        // The handler saw the cancel and still finished its work: its result is the answer.
        let answer = try await harness.next()
        #expect(answer["id"] == "e" && answer["result"] == "done", "\(answer)")
        harness.send(#"{"jsonrpc":"2.0","id":"f","method":"failOnCancel"}"#)
        harness.send(#"{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":"f"}}"#)
        // An error after the cancel is the cancellation's.
        let failed = try await harness.next()
        #expect(failed["id"] == "f" && failed["error"]?["code"] == -32800, "\(failed)")
        harness.close()
        _ = await harness.run.value
    }

    @Test func cancelAndExitAreReadWhileEverySlotIsBusy() async throws {
        let harness = Harness(maxConcurrentRequests: 2)
        for id in ["s1", "s2", "s3", "s4"] { harness.send(#"{"jsonrpc":"2.0","id":"\#(id)","method":"sleep"}"#) }
        // s3 and s4 wait for a slot; cancelling s3 answers it at once.
        harness.send(#"{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":"s3"}}"#)
        let first = try await harness.next()
        #expect(first["id"] == "s3" && first["error"]?["code"] == -32800, "\(first)")
        harness.send(#"{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":"s1"}}"#)
        let second = try await harness.next()
        #expect(second["id"] == "s1" && second["error"]?["code"] == -32800, "\(second)")
        harness.send(#"{"jsonrpc":"2.0","method":"exit"}"#)
        var rest: Set<String> = []
        for _ in 0..<2 {
            let answer = try await harness.next()
            #expect(answer["error"]?["code"] == -32800)
            rest.insert(answer["id"]?.stringValue ?? "?")
        }
        #expect(rest == ["s2", "s4"])
        #expect(await harness.ending(within: .seconds(10)) == .exit(code: 3))
        #expect(harness.delegate.handled.withLock { $0 } == 3, "s3 never ran")
    }

    @Test func aDuplicateIDHasNoEffectAndIsRefusedBeforeTheFirstAnswer() async throws {
        let harness = Harness()
        harness.send(#"{"jsonrpc":"2.0","id":"d","method":"effect"}"#)
        harness.send(#"{"jsonrpc":"2.0","id":"d","method":"counted"}"#)
        let duplicate = try await harness.next()
        #expect(duplicate["id"] == "d" && duplicate["error"]?["code"] == -32600, "\(duplicate)")
        #expect(!harness.delegate.admitted.withLock { $0.contains("counted") }, "a duplicate reached admit")
        harness.send(#"{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":"d"}}"#)
        let first = try await harness.next()
        #expect(first["id"] == "d" && first["result"] == "done", "\(first)")
        harness.close()
        _ = await harness.run.value
    }

    @Test func requestsWaitWhileTheOutputIsFullAndAllAreAnsweredOnceItIsRead() async throws {
        // At most 8 run at once, so what has started is bounded whatever the scheduling: the
        // answers the pipe (64 KiB) and the output bound (4 KiB) took, plus 8 running.
        let harness = Harness(maxConcurrentRequests: 8, maxQueuedOutputBytes: 4096)
        let payload = String(repeating: "x", count: 4000)
        let count = 200 // ≈ 0.8 MB of answers: far more than the pipe and the bound hold
        for index in 0..<count { harness.send(#"{"jsonrpc":"2.0","id":\#(index),"method":"echo","params":{"p":"\#(payload)"}}"#) }
        await harness.readerCaughtUp("probe")
        // Nobody read: most requests have not started.
        #expect(harness.delegate.handled.withLock { $0 } < count / 2)
        var seen: Set<Int64> = []
        for _ in 0..<count { if let id = try await harness.next()["id"]?.intValue { seen.insert(id) } }
        #expect(seen.count == count)
        harness.close()
        #expect(await harness.ending(within: .seconds(10)) == .endOfInput)
    }

    /// Issue 26: with the output full and the backlog past its bound, the reader waited for room
    /// and never saw the end of its input: a frontend that stopped reading and closed the host's
    /// stdin (after `exit`, or without) left it running for good.
    @Test(arguments: [true, false])
    func theEndOfInputIsSeenWhileTheBacklogIsFull(exitFirst: Bool) async throws {
        let harness = Harness(maxQueuedOutputBytes: 4096, maxBacklogBytes: 8192, flushGrace: .milliseconds(300), outputFull: true)
        // Refused at once (-32002): each answer, about 600 bytes, waits for output room; 8 KiB of
        // them fill the writer, 8 KiB more the backlog, and the reader stops after some 30. The
        // rest (about 20 KB) waits in the input pipe.
        let id = String(repeating: "i", count: 500)
        for _ in 0..<60 { harness.send(#"{"jsonrpc":"2.0","id":"\#(id)","method":"refused"}"#) }
        if exitFirst { harness.send(#"{"jsonrpc":"2.0","method":"exit"}"#) }
        harness.close()
        #expect(await harness.ending(within: .seconds(10)) == (exitFirst ? .exit(code: 3) : .endOfInput))
    }

    /// Issue 26: a notification always queued, whatever the peer had left unread, so an app
    /// that never reads grew the host with every event. Past the events' bound it is dropped.
    @Test func aPeerThatReadsNoEventsIsDroppedInsteadOfQueuedFor() async throws {
        let harness = Harness(outputFull: true)
        let params: JSON = ["provider": "p", "state": "refreshed", "reason": .string(String(repeating: "r", count: 150))]
        var most = 0
        for _ in 0..<5_000 { // 1 MB of events, sixteen times the bound
            harness.connection.notify("session/changed", params)
            most = max(most, harness.connection.queuedOutputBytes)
        }
        #expect(most <= Connection.maxUnreadEventBytes, "the output grew to \(most) bytes")
        #expect(await harness.ending(within: .seconds(10)) == .peerGone)
    }

    /// Events reach a peer that reads, however many, as long as it keeps up.
    @Test func everyEventReachesAPeerThatReads() async throws {
        let harness = Harness()
        let params: JSON = ["provider": "p", "state": "refreshed", "reason": .string(String(repeating: "r", count: 150))]
        for round in 0..<50 {
            // 100 events (20 KB) between reads: far below the bound.
            for index in 0..<100 { harness.connection.notify("e", params.setting("n", .int(Int64(round * 100 + index)))) }
            for index in 0..<100 { #expect(try await harness.next()["params"]?["n"] == .int(Int64(round * 100 + index))) }
        }
        harness.send(#"{"jsonrpc":"2.0","id":1,"method":"echo","params":[1]}"#)
        #expect(try await harness.next()["id"] == 1)
        harness.close()
        #expect(await harness.ending(within: .seconds(10)) == .endOfInput)
    }

    @Test func exitEndsTheConnectionWhenThePeerNeverReads() async throws {
        let harness = Harness(maxQueuedOutputBytes: 4096, flushGrace: .milliseconds(300))
        let payload = String(repeating: "y", count: 4000)
        for index in 0..<100 { harness.send(#"{"jsonrpc":"2.0","id":\#(index),"method":"echo","params":{"p":"\#(payload)"}}"#) }
        harness.send(#"{"jsonrpc":"2.0","id":"slow","method":"sleep"}"#)
        harness.send(#"{"jsonrpc":"2.0","method":"exit"}"#)
        #expect(await harness.ending(within: .seconds(10)) == .exit(code: 3))
    }
}
