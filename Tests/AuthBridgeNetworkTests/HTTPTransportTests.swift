import AuthBridgeJSON
@testable import AuthBridgeNetwork
import AuthBridgePluginABI
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// The HTTP transport (libAuthBridgeHTTP.so over libcurl) through `HTTPClient`, against servers
/// the tests run on 127.0.0.1 themselves.
@Suite("HTTP transport", .serialized)
struct HTTPTransportTests {
    private let client = HTTPClient()

    private func get(_ server: LocalServer, _ path: String = "/", timeoutMs: Int64 = 5_000) async -> Result<JSON, ProviderFailure> {
        await client.perform(["method": "GET", "url": .string(server.url + path), "timeoutMs": .int(timeoutMs)])
    }

    @Test func aGetAnswersStatusLowerCaseHeadersAndBody() async throws {
        let server = try LocalServer { request, connection in
            #expect(request.hasPrefix("GET /things?x=1 HTTP/1.1\r\n"))
            connection.send(
                "HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nX-Twice: a\r\nX-Twice: b\r\nContent-Length: 11\r\n\r\n{\"ok\":true}")
        }
        let answer = try await get(server, "/things?x=1").get()
        #expect(answer["status"] == 201)
        #expect(answer["headers"]?["content-type"] == "application/json")
        #expect(answer["headers"]?["x-twice"] == "a, b", "repeated fields joined, as bridge-spec says")
        #expect(answer["body"] == "{\"ok\":true}")
    }

    @Test func aFormPostSendsItsBodyAndContentType() async throws {
        let server = try LocalServer { request, connection in
            #expect(request.hasPrefix("POST /token HTTP/1.1\r\n"))
            #expect(request.lowercased().contains("content-type: application/x-www-form-urlencoded\r\n"))
            #expect(request.hasSuffix("\r\n\r\ncode=a%20b&grant_type=authorization_code"))
            #expect(!request.lowercased().contains("expect: 100-continue"))
            connection.send("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")
        }
        let answer = try await client.perform([
            "method": "POST", "url": .string(server.url + "/token"),
            "form": ["grant_type": "authorization_code", "code": "a b"],
        ]).get()
        #expect(answer["status"] == 200)
    }

    @Test func aRedirectIsTheAnswerNotFollowed() async throws {
        let server = try LocalServer { _, connection in
            connection.send("HTTP/1.1 302 Found\r\nLocation: http://127.0.0.1:9/elsewhere\r\nContent-Length: 0\r\n\r\n")
        }
        let answer = try await get(server).get()
        #expect(answer["status"] == 302)
        #expect(answer["headers"]?["location"] == "http://127.0.0.1:9/elsewhere")
        #expect(server.connections == 1)
    }

    @Test func aServerThatNeverAnswersTimesOut() async throws {
        let server = try LocalServer { _, connection in connection.hold() }
        let started = ContinuousClock.now
        let failure = try #require(await get(server, "/callback?code=secret-code", timeoutMs: 1_000).failure)
        #expect(failure.reason == "timeout" && failure.kind == .transient)
        #expect(ContinuousClock.now - started < .seconds(5))
        #expect(failure.message == "\(server.url)/callback did not answer in time", "the URL without its query (which may hold a code)")
    }

    @Test func theTimeoutBoundsTheWholeExchangeNotOnlyIdleTime() async throws {
        // Headers at once, then a body byte every 300 ms: never idle for long, never done.
        let server = try LocalServer { _, connection in
            connection.send("HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n")
            for _ in 0..<40 where connection.send("x") { usleep(300_000) }
        }
        let started = ContinuousClock.now
        let failure = try #require(await get(server, timeoutMs: 1_500).failure)
        #expect(failure.reason == "timeout")
        #expect(ContinuousClock.now - started < .seconds(4))
    }

    @Test func aClosedPortIsRefused() async throws {
        let port = try LocalServer.unusedPort()
        let failure = try #require(await client.perform(["method": "GET", "url": .string("http://127.0.0.1:\(port)/x?code=secret")]).failure)
        #expect(failure.reason == "refused")
        #expect(failure.message.contains("127.0.0.1:\(port)") && !failure.message.contains("secret"))
    }

    @Test func cancellingTheTaskCancelsTheRequest() async throws {
        let server = try LocalServer { _, connection in connection.hold() }
        let task = Task { await get(server, timeoutMs: 60_000) }
        try #require(await server.waitForConnection(), "the request reached the server")
        let started = ContinuousClock.now
        task.cancel()
        let failure = try #require(await task.value.failure)
        #expect(failure.kind == .cancelled)
        // Not the request's 60 s timeout: the cancellation ended it (generous for a loaded machine).
        #expect(ContinuousClock.now - started < .seconds(30))
    }

    @Test func aBodyOver16MiBIsRefused() async throws {
        let server = try LocalServer { _, connection in
            let size = 17 * 1024 * 1024
            connection.send("HTTP/1.1 200 OK\r\nContent-Length: \(size)\r\n\r\n")
            let chunk = String(repeating: "a", count: 64 * 1024)
            for _ in 0..<(size / chunk.utf8.count) where connection.send(chunk) {}
        }
        let failure = try #require(await get(server, timeoutMs: 30_000).failure)
        #expect(failure.reason == "tooLarge")
    }

    @Test func invalidUTF8InTheBodyBecomesReplacementCharacters() async throws {
        let server = try LocalServer { _, connection in
            connection.send("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n")
            connection.send(bytes: [0x61, 0xFF, 0x62, 0xC3, 0x28])
        }
        let answer = try await get(server).get()
        #expect(answer["body"] == "a\u{FFFD}b\u{FFFD}(")
    }

    @Test func manyRequestsAtOnceAllComplete() async throws {
        let server = try LocalServer { request, connection in
            let path = request.split(separator: " ")[1]
            connection.send("HTTP/1.1 200 OK\r\nContent-Length: \(path.utf8.count)\r\nConnection: close\r\n\r\n\(path)")
        }
        let bodies = await withTaskGroup(of: String?.self) { group in
            for index in 0..<50 { group.addTask { try? await get(server, "/\(index)").get()["body"]?.stringValue } }
            return await group.reduce(into: Set<String?>()) { $0.insert($1) }
        }
        #expect(bodies == Set((0..<50).map { "/\($0)" }))
    }
}

extension Result {
    var failure: Failure? {
        if case .failure(let error) = self { return error }
        return nil
    }
}

/// A small HTTP/1.1 server on 127.0.0.1: each connection's request head (and body, by
/// Content-Length) is read, then `respond` runs on the connection's own thread. Connections
/// held open (`hold`) are closed when the server is released.
final class LocalServer: @unchecked Sendable {
    final class Connection: @unchecked Sendable {
        let fd: Int32
        private let closed: DispatchSemaphore

        init(fd: Int32, closed: DispatchSemaphore) {
            self.fd = fd
            self.closed = closed
        }

        @discardableResult
        func send(_ text: String) -> Bool { send(bytes: Array(text.utf8)) }

        @discardableResult
        func send(bytes: [UInt8]) -> Bool {
            var offset = 0
            while offset < bytes.count {
                let written = bytes[offset...].withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
                if written <= 0 { return false }
                offset += written
            }
            return true
        }

        /// Keeps the connection open, answering nothing, until the server goes away.
        func hold() { closed.wait() }
    }

    let port: UInt16
    var url: String { "http://127.0.0.1:\(port)" }
    private let listener: Int32
    private let state = State()

    /// What the accepting thread shares with the server (never the server itself, so that
    /// releasing the server stops it).
    private final class State: @unchecked Sendable {
        let lock = NSLock()
        let released = DispatchSemaphore(value: 0)
        let connected = DispatchSemaphore(value: 0)
        var accepted = 0
    }

    var connections: Int { state.lock.withLock { state.accepted } }

    init(respond: @escaping @Sendable (String, Connection) -> Void) throws {
        listener = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let fd = listener
        let bound = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) == 0 && getsockname(fd, $0, &length) == 0 }
        }
        guard bound, listen(listener, 64) == 0 else { throw POSIXError(.EADDRINUSE) }
        port = UInt16(bigEndian: address.sin_port)
        let state = state
        Thread {
            while true {
                let connection = accept(fd, nil, nil)
                guard connection >= 0 else { return }
                state.lock.withLock { state.accepted += 1 }
                state.connected.signal()
                let peer = Connection(fd: connection, closed: state.released)
                Thread {
                    respond(Self.readRequest(connection), peer)
                    close(connection)
                }.start()
            }
        }.start()
    }

    deinit {
        shutdown(listener, Int32(SHUT_RDWR))
        close(listener)
        for _ in 0..<max(1, state.lock.withLock { state.accepted }) { state.released.signal() }
    }

    /// True once a client has connected (within 60 s: the first request also opens the HTTP
    /// library). The wait blocks a thread of its own, not one of the cooperative pool: the
    /// request that is to connect runs on that pool, which has as many threads as cores, and
    /// other tests' waits may hold the rest (on 2 cores the request never ran: issue 28's CI).
    func waitForConnection() async -> Bool {
        let connected = state.connected
        return await withCheckedContinuation { continuation in
            Thread { continuation.resume(returning: connected.wait(timeout: .now() + 60) == .success) }.start()
        }
    }

    static func unusedPort() throws -> UInt16 {
        let server = try LocalServer { _, _ in }
        return server.port // closed again when `server` is released here
    }

    private static func readRequest(_ fd: Int32) -> String {
        var bytes: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65_536)
        while true {
            if let head = bytes.firstRange(of: Array("\r\n\r\n".utf8)) {
                let text = String(decoding: bytes[..<head.lowerBound], as: UTF8.self).lowercased()
                let length =
                    text.split(separator: "\r\n").first { $0.hasPrefix("content-length:") }
                    .flatMap { Int($0.dropFirst("content-length:".count).trimmingCharacters(in: .whitespaces)) } ?? 0
                if bytes.count >= head.upperBound + length { break }
            }
            let count = recv(fd, &buffer, buffer.count, 0)
            if count <= 0 { break }
            bytes += buffer[..<count]
        }
        return String(decoding: bytes, as: UTF8.self)
    }
}
