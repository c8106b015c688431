import AuthBridgeJSON
import AuthBridgeRPC
import Logging
import Synchronization
import Testing
import Dispatch

#if canImport(Glibc)
import Glibc
#endif

/// A delegate with a few methods: "echo", "sleep" (until cancelled), "fail".
private final class TestDelegate: ConnectionDelegate {
    let gate = Mutex<Set<String>>([])

    func admit(_ request: Request) -> RPCError? {
        request.method == "refused" ? RPCError(.serverNotInitialized, "not yet") : nil
    }

    func handle(_ request: Request) async throws -> JSON {
        switch request.method {
        case "echo": return request.params ?? .null
        case "sleep":
            try await Task.sleep(for: .seconds(30))
            return "woke"
        case "fail": throw RPCError(.init(-32001), "nope", data: ["reason": "x"])
        case "crash": throw CancellationError()
        default: throw RPCError.methodNotFound(request.method)
        }
    }

    func received(_ notification: AuthBridgeRPC.Notification) -> Connection.Disposition {
        notification.method == "exit" ? .exit(code: 3) : .proceed
    }
}

/// A connection on two pipes, driven line by line from the test.
private struct Harness {
    let toHost: Int32
    let fromHost: Int32
    let connection: Connection
    let run: Task<Connection.Ending, Never>

    init() {
        var input: [Int32] = [0, 0], output: [Int32] = [0, 0]
        pipe(&input)
        pipe(&output)
        toHost = input[1]
        fromHost = output[0]
        let connection = Connection(input: input[0], output: output[1], logger: Logger(label: "test"))
        self.connection = connection
        let delegate = TestDelegate()
        run = Task { await connection.run(delegate: delegate, drainGrace: .milliseconds(200)) }
    }

    func send(_ line: String) {
        let bytes = Array((line + "\n").utf8)
        bytes.withUnsafeBytes { _ = write(toHost, $0.baseAddress, $0.count) }
    }

    /// Reads one frame. The blocking read runs on a Dispatch thread, never on
    /// the cooperative pool the connection's own tasks need.
    func next() async throws -> JSON {
        let fd = fromHost
        let line: [UInt8]? = await withCheckedContinuation { continuation in
            DispatchQueue.global().async {
                var line: [UInt8] = []
                var byte: UInt8 = 0
                while read(fd, &byte, 1) == 1 {
                    if byte == 0x0A { continuation.resume(returning: line); return }
                    line.append(byte)
                }
                continuation.resume(returning: nil)
            }
        }
        guard let line else { throw RPCError.internalError }
        return try JSON.parse(line)
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
}
