@testable import AuthBridgeNetwork
import AuthBridgeSystem
import Synchronization
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// The browser flow's redirect listener against local clients that misbehave.
@Suite("Loopback listener")
struct LoopbackListenerTests {
    /// Before: one connection at a time, 5 s per read; a local process sending a byte every few
    /// seconds held the listener for hours and the real callback never got in.
    @Test func aClientDrippingBytesDoesNotKeepTheCallbackOut() async throws {
        let listener = try LoopbackListener()
        defer { listener.close() }
        let waiting = Task { await listener.awaitCallback(state: "s1") }
        let dripper = try #require(TestClient(port: listener.port))
        let dripping = Atomic<Bool>(true)
        detachThread {
            // One byte a second, below any per-read timeout, never finishing its head.
            for byte in Array("GET /callback?state=s1".utf8) where dripping.load(ordering: .relaxed) {
                dripper.send([byte])
                var pause = timespec(tv_sec: 1, tv_nsec: 0)
                nanosleep(&pause, nil)
            }
        }
        defer { dripping.store(false, ordering: .relaxed) }
        let browser = try #require(TestClient(port: listener.port))
        browser.send(Array("GET /callback?state=s1&code=c1 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".utf8))
        // A bound, not synchronisation: the callback arrives at once; before, never while the drip went on.
        let url = await firstOf(waiting, orNilAfter: .seconds(20))
        #expect(url == "http://127.0.0.1:\(listener.port)/callback?state=s1&code=c1")
        listener.answerBrowser(signedIn: true, message: nil)
        #expect(String(decoding: await browser.readAll(), as: UTF8.self).contains("Signed in."))
    }

    /// Before: the port stayed open until the listener was deallocated, after the request that
    /// held it had been answered (a connection right after a cancelled sign-in still succeeded).
    @Test func thePortIsClosedWhenCloseReturns() async throws {
        let listener = try LoopbackListener()
        let waiting = Task { await listener.awaitCallback(state: "s1") }
        // Serving: a stray request is answered.
        let stray = try #require(TestClient(port: listener.port))
        stray.send(Array("GET /favicon.ico HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".utf8))
        #expect(String(decoding: await stray.readAll(), as: UTF8.self).hasPrefix("HTTP/1.1 404"))
        listener.close()
        #expect(TestClient(port: listener.port) == nil, "a connection after close must be refused")
        #expect(await waiting.value == nil)
        withExtendedLifetime(listener) {}

        let unused = try LoopbackListener()
        unused.close()
        #expect(TestClient(port: unused.port) == nil)
        withExtendedLifetime(unused) {}
    }

    /// Providers that match redirect URIs exactly need a pinned port, and every sign-in after the
    /// first used it too. Before: the listener bound without SO_REUSEADDR, the connection it had
    /// served and closed sat in TIME-WAIT on that port, and the next sign-in within a minute was
    /// refused "port … is in use".
    @Test func aPinnedPortIsFreeAgainAsSoonAsTheSignInEnds() async throws {
        let first = try LoopbackListener()
        let port = first.port
        let waiting = Task { await first.awaitCallback(state: "s1") }
        let browser = try #require(TestClient(port: port))
        browser.send(Array("GET /callback?state=s1&code=c1 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".utf8))
        #expect(await firstOf(waiting, orNilAfter: .seconds(20)) != nil)
        first.answerBrowser(signedIn: true, message: nil) // the listener closes the connection first: TIME-WAIT is ours
        _ = await browser.readAll()
        first.close()
        withExtendedLifetime(first) {}

        let second = try LoopbackListener(port: port)
        defer { second.close() }
        #expect(second.port == port)
        // Still one listener per port: a third one on a port in use is refused.
        #expect(throws: LoopbackListener.Failure.self) { try LoopbackListener(port: port) }
    }

    /// The answer comes after the whole head (before, after its first line: the rest arrived
    /// on a closed socket and the browser could see a reset instead of the page).
    @Test func aHeadSentInPiecesIsAnsweredAfterItsEnd() async throws {
        let listener = try LoopbackListener()
        defer { listener.close() }
        let waiting = Task { await listener.awaitCallback(state: "s1") }
        let client = try #require(TestClient(port: listener.port))
        for piece in ["GET /callback?sta", "te=s1&code=c2 HTTP/1.1\r\n", "Host: 127.0.0.1\r\n", "Accept: */*\r\n", "\r\n"] {
            client.send(Array(piece.utf8))
        }
        #expect(await firstOf(waiting, orNilAfter: .seconds(20)) == "http://127.0.0.1:\(listener.port)/callback?state=s1&code=c2")
        listener.answerBrowser(signedIn: false, message: "<denied>")
        let page = String(decoding: await client.readAll(), as: UTF8.self)
        #expect(page.hasPrefix("HTTP/1.1 200 OK") && page.contains("&lt;denied&gt;"))
    }

    /// A request is handled once its head is complete: before, the first line was enough, so a
    /// request whose head never ends properly (here: headers past the 16 KiB bound) was taken
    /// for the callback.
    @Test func aRequestWhoseHeadNeverEndsIsNotTakenForTheCallback() async throws {
        let listener = try LoopbackListener()
        defer { listener.close() }
        let waiting = Task { await listener.awaitCallback(state: "s1") }
        let flood = try #require(TestClient(port: listener.port))
        flood.send(Array(("GET /callback?state=s1&code=flood HTTP/1.1\r\nX-Filler: " + String(repeating: "f", count: 20_000)).utf8))
        #expect(String(decoding: await flood.readAll(), as: UTF8.self).hasPrefix("HTTP/1.1 431"))
        let browser = try #require(TestClient(port: listener.port))
        browser.send(Array("GET /callback?state=s1&code=real HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".utf8))
        #expect(await firstOf(waiting, orNilAfter: .seconds(20)) == "http://127.0.0.1:\(listener.port)/callback?state=s1&code=real")
    }

    @Test(arguments: [
        ("POST /callback HTTP/1.1\r\n\r\n", "400"), ("GET /callback?state=other HTTP/1.1\r\n\r\n", "400"),
        ("GET /<20000 characters>", "431"),
    ])
    func strayRequestsAreAnsweredAndIgnored(_ text: String, _ status: String) async throws {
        let request = text.replacingOccurrences(of: "<20000 characters>", with: String(repeating: "a", count: 20_000))
        let listener = try LoopbackListener()
        defer { listener.close() }
        let waiting = Task { await listener.awaitCallback(state: "s1") }
        let stray = try #require(TestClient(port: listener.port))
        stray.send(Array(request.utf8))
        #expect(String(decoding: await stray.readAll(), as: UTF8.self).hasPrefix("HTTP/1.1 \(status)"))
        let browser = try #require(TestClient(port: listener.port))
        browser.send(Array("GET /callback?state=s1 HTTP/1.1\r\n\r\n".utf8))
        #expect(await firstOf(waiting, orNilAfter: .seconds(20)) != nil)
    }

    @Test func headEnds() {
        #expect(LoopbackListener.headEnd(Array("GET / HTTP/1.1\r\nHost: x\r\n\r\nbody".utf8)) == 27)
        #expect(LoopbackListener.headEnd(Array("GET / HTTP/1.0\n\n".utf8)) == 16)
        #expect(LoopbackListener.headEnd(Array("GET / HTTP/1.1\r\nHost: x\r\n".utf8)) == nil)
    }
}

extension String {
    fileprivate func replacingOccurrences(of target: String, with replacement: String) -> String {
        split(separator: target, omittingEmptySubsequences: false).joined(separator: replacement)
    }
}

/// The task's value, or nil when `limit` passes first (a bound for a test that fails, never a wait).
func firstOf(_ task: Task<String?, Never>, orNilAfter limit: Duration) async -> String? {
    await withTaskGroup(of: String?.self) { group in
        group.addTask { await task.value }
        group.addTask {
            try? await Task.sleep(for: limit)
            return nil
        }
        let first = await group.next() ?? nil
        group.cancelAll()
        return first
    }
}

/// A blocking TCP client of 127.0.0.1 (reads bounded by a 20 s receive timeout).
final class TestClient: Sendable, Equatable {
    let fd: Int32

    init?(port: UInt16) {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        let connected = withLoopbackAddress(port: port) { connect(fd, $0, $1) }
        guard connected == 0 else {
            close(fd)
            return nil
        }
        var limit = timeval(tv_sec: 20, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, socklen_t(MemoryLayout<timeval>.size))
        self.fd = fd
    }

    deinit { close(fd) }

    func send(_ bytes: [UInt8]) {
        _ = bytes.withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
    }

    /// Everything until the server closes (or the bound), read on a thread of its own: a
    /// blocking read on the test's executor could starve the listener's tasks.
    func readAll() async -> [UInt8] {
        await withCheckedContinuation { continuation in
            detachThread { continuation.resume(returning: self.readAllBlocking()) }
        }
    }

    private func readAllBlocking() -> [UInt8] {
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 4096)
        while true {
            let count = chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if count <= 0 { return bytes }
            bytes += chunk[0..<count]
        }
    }

    static func == (lhs: TestClient, rhs: TestClient) -> Bool { lhs === rhs }
}
