import AuthBridgeJSON
import AuthBridgeRPC
import Logging
import Synchronization
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// A server as the agent has them: it holds its connection (as BridgeServer does), answers
/// "echo", tells the peer "note" before it answers, and records each request's arrival number.
private final class HoldingServer: ConnectionDelegate {
    let connection: Connection
    let sequences = Mutex<[UInt64]>([])

    init(_ connection: Connection) { self.connection = connection }

    func admit(_ request: Request) -> RPCError? { nil }

    func handle(_ request: Request) async throws -> JSON {
        sequences.withLock { $0.append(request.sequence) }
        switch request.method {
        case "echo":
            connection.notify("note", ["about": request.params ?? .null])
            return request.params ?? .null
        case "sleep":
            try await Task.sleep(for: .seconds(30))
            return "woke"
        default: throw RPCError.methodNotFound(request.method)
        }
    }

    func received(_ notification: AuthBridgeRPC.Notification) -> Connection.Disposition {
        notification.method == "exit" ? .exit(code: 0) : .proceed
    }
}

/// One end of a Unix socket pair served by a `Connection`; the other end is the test's.
private struct Served {
    let connection: Connection
    let serverFD: Int32
    let peerFD: Int32
    let run: Task<Connection.Ending, Never>

    init(arrivalOrder: ArrivalOrder = ArrivalOrder()) {
        var pair: [Int32] = [-1, -1]
        _ = socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &pair)
        serverFD = pair[0]
        peerFD = pair[1]
        let connection = Connection(input: pair[0], output: pair[0], logger: Logger(label: "test"), arrivalOrder: arrivalOrder)
        self.connection = connection
        let server = HoldingServer(connection)
        run = Task { await connection.run(delegate: server, drainGrace: .zero) }
    }

    /// Sends one request and returns its answer's line ("" if none came), passing over notifications.
    func ask(_ frame: String) async -> String {
        writeLine(frame, to: peerFD)
        while let line = await readLine(from: peerFD) {
            if line.contains(Array(#""id""#.utf8)) { return String(decoding: line, as: UTF8.self) }
        }
        return ""
    }

    /// The peer goes away; the connection ends and is released as the agent does it.
    func end() async -> Connection.Ending {
        Glibc.close(peerFD)
        let ending = await run.value
        _ = shutdown(serverFD, Int32(SHUT_RDWR))
        connection.close()
        Glibc.close(serverFD)
        return ending
    }
}

@Suite("Connection lifetime", .serialized)
struct ConnectionLifetimeTests {
    /// (Its descriptors are counted where nothing else runs: the agent's contract test, over 1,000
    /// connections; here other suites open and close descriptors meanwhile.)
    @Test func aClosedConnectionLetsGoOfTheServerThatHoldsIt() async throws {
        weak var lastConnection: Connection?
        for round in 0..<50 {
            let served = Served()
            lastConnection = served.connection
            #expect(await served.ask(#"{"jsonrpc":"2.0","id":1,"method":"echo","params":{"round":\#(round)}}"#).contains(#""round":\#(round)"#))
            #expect(await served.end() == .endOfInput)
        }
        // The reader thread holds its connection until its loop returns, a moment after the
        // connection has ended: wait for that (bounded). A cycle would hold it for good.
        let deadline = ContinuousClock.now + .seconds(10)
        while lastConnection != nil, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(2)) }
        #expect(lastConnection == nil, "a connection whose server holds it is freed once closed")
    }

    @Test func connectionsSharingAnArrivalOrderNumberRequestsAcrossThem() async throws {
        let order = ArrivalOrder()
        let first = Served(arrivalOrder: order), second = Served(arrivalOrder: order)
        _ = await first.ask(#"{"jsonrpc":"2.0","id":1,"method":"echo"}"#)
        _ = await second.ask(#"{"jsonrpc":"2.0","id":1,"method":"echo"}"#)
        _ = await first.ask(#"{"jsonrpc":"2.0","id":2,"method":"echo"}"#)
        #expect(order.next() == 4, "three requests were numbered 1, 2, 3 across both connections")
        _ = await first.end()
        _ = await second.end()
    }
}

@Suite("RPC client", .serialized)
struct RPCClientTests {
    @Test func callsAreAnsweredEventsComeFirstCancellationReachesThePeerAndAnEndFailsWhatWaits() async throws {
        let served = Served()
        let notes = Mutex<[String]>([])
        let client = RPCClient(fd: served.peerFD, logger: Logger(label: "test")) { method, _ in notes.withLock { $0.append(method) } }
        #expect(try await client.call("echo", ["a": 1]) == ["a": 1])
        #expect(notes.withLock { $0 } == ["note"], "the event the request caused came before its answer")

        // Cancelled whenever it is (even before it was sent), the server is told after the request.
        let sleeping = Task { try await client.call("sleep") }
        sleeping.cancel()
        do {
            _ = try await sleeping.value
            Issue.record("a cancelled call returned a result")
        } catch let failure as RPCClient.Failure {
            guard case .error(let error) = failure else { throw failure }
            #expect(error.code == .requestCancelled)
        }

        let waiting = Task { try await client.call("sleep") }
        _ = shutdown(served.serverFD, Int32(SHUT_RDWR)) // the server's end goes away, before or after the call
        do {
            _ = try await waiting.value
            Issue.record("a call answered by nobody returned a result")
        } catch let failure as RPCClient.Failure {
            guard case .closed = failure else { throw failure }
        }
        client.close()
        _ = await served.end()
    }
}
