import AuthBridgeCrypto
import AuthBridgeSystem
import AuthBridgeURL
import Synchronization

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// The one-shot redirect listener of the `browser` flow (RFC 8252 §7.3): a
/// plain HTTP listener on the loopback IP literal `127.0.0.1`, an ephemeral
/// port, one expected path. The first request on that path whose `state`
/// matches (compared in constant time) is handed over; anything else (a
/// favicon, a stale tab, a wrong state) gets a small answer and is ignored.
///
/// Any local process can connect, so none may keep the browser out: up to
/// `maximumConnections` are served at once, each within `connectionDeadline`
/// in total (a client sending a byte now and then is dropped when it runs
/// out), and a request's head is read to its end (bounded) before it is
/// answered. When `accept` fails (out of file descriptors) the listener
/// backs off instead of spinning on the pending connection.
///
/// The browser's request is held open until the engine knows the outcome
/// (code redeemed, ID token verified, session stored), so the page the user
/// sees tells the truth: `answerBrowser` writes it; `close` answers a
/// neutral page if nobody did.
///
/// Threading: one thread of its own serves every connection (non-blocking
/// sockets, one `poll`); `close` may be called from anywhere (cancellation,
/// timeout), wakes it through a pipe and returns once the port is closed.
public final class LoopbackListener: Sendable {
    /// Why the listener could not be opened (the session reports it as `providerUnavailable`, reason `listener`).
    public struct Failure: Error {
        public let message: String
        init(_ message: String) { self.message = message }
    }

    public let port: UInt16
    public let path: String
    private let socket: Int32
    private let stopPipe: (read: Int32, write: Int32)
    /// Whether `awaitCallback` started serving, and whether `close` closed the socket.
    private let lifecycle = Mutex<(serving: Bool, closed: Bool)>((false, false))
    /// Signalled when the serving thread has left its loop (it no longer touches the socket).
    private let served = Handoff<Void>()
    /// The browser's connection that delivered the callback, until answered.
    private let heldClient = Mutex<Int32?>(nil)

    /// Connections served at once (a browser opens a few: the page, a favicon, a preconnect).
    static let maximumConnections = 8
    /// The whole time a connection has to deliver its request head.
    static let connectionDeadline: Duration = .seconds(2)
    /// The longest request head read.
    static let maximumHeadBytes = 16 << 10

    /// Binds 127.0.0.1 on `port` (0: an ephemeral one, RFC 8252's choice;
    /// a fixed one only for providers that match redirect URIs exactly).
    public init(port requested: UInt16 = 0, path: String = "/callback") throws(Failure) {
        let fd = Glibc.socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0)
        guard fd >= 0 else { throw Failure("Cannot open the loopback listener.") }
        // A pinned port is reused by every sign-in, and the connection the last one served sits in
        // TIME-WAIT on it for a minute. SO_REUSEADDR lets the new listener bind over that; Linux still
        // refuses a second listener on a port someone listens on (that takes SO_REUSEPORT, by the same user).
        var reuse: Int32 = 1
        _ = setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &reuse, socklen_t(MemoryLayout<Int32>.size))
        let bound = withLoopbackAddress(port: requested) { bind(fd, $0, $1) }
        guard bound == 0, listen(fd, 16) == 0 else {
            let reason =
                errno == EADDRINUSE
                ? "port \(requested) is in use by another program (loopbackPort pins it: free it, or pin and register another)"
                : String(cString: strerror(errno))
            Glibc.close(fd)
            throw Failure("Cannot listen on 127.0.0.1 for the sign-in redirect: \(reason).")
        }
        var address = sockaddr_in() // the port the system chose when `requested` is 0
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        var fds: [Int32] = [-1, -1]
        guard pipe(&fds) == 0 else {
            Glibc.close(fd)
            throw Failure("Cannot open the loopback listener.")
        }
        for descriptor in fds { _ = fcntl(descriptor, F_SETFD, FD_CLOEXEC) }
        socket = fd
        stopPipe = (fds[0], fds[1])
        port = UInt16(bigEndian: address.sin_port)
        self.path = path
    }

    deinit {
        if !lifecycle.withLock({ $0.closed }) { Glibc.close(socket) }
        Glibc.close(stopPipe.read)
        Glibc.close(stopPipe.write)
    }

    /// The redirect URI to register for this attempt (on the IP literal).
    public var redirectURI: String { "http://127.0.0.1:\(port)\(path)" }

    /// Serves until a request on `path` carries `state`; returns its full URL,
    /// or nil once `close` was called (or when called a second time).
    public func awaitCallback(state: String) async -> String? {
        let start = lifecycle.withLock { current -> Bool in
            guard !current.closed, !current.serving else { return false }
            current.serving = true
            return true
        }
        guard start else { return nil }
        return await withCheckedContinuation { continuation in
            detachThread { [self] in
                let url = serve(state: state)
                served.put(())
                continuation.resume(returning: url)
            }
        }
    }

    /// Stops the listener (idempotent): a pending `awaitCallback` returns nil,
    /// and the port is closed when this returns (a connection attempt made
    /// afterwards is refused).
    public func close() {
        answerBrowser(signedIn: nil, message: nil)
        lifecycle.withLock { current in
            guard !current.closed else { return }
            current.closed = true
            if current.serving {
                var byte: UInt8 = 1
                _ = write(stopPipe.write, &byte, 1)
                served.take() // brief: the serving thread only ever blocks in poll, which the pipe wakes
            }
            Glibc.close(socket)
        }
    }

    /// Tells the browser how the sign-in ended (nil: unknown) and closes its
    /// connection; later calls do nothing.
    public func answerBrowser(signedIn: Bool?, message: String?) {
        switch signedIn {
        case true?: answerBrowser(saying: "Signed in. You can close this window and return to the application.")
        case false?:
            let said = message ?? "see the application"
            answerBrowser(saying: "The sign-in did not complete: \(said)\(said.hasSuffix(".") ? "" : ".")")
        case nil: answerBrowser(saying: "The sign-in has ended. Return to the application.")
        }
    }

    /// Tells the browser that the provider's session has ended (RP-initiated logout's redirect
    /// came back) and closes its connection; later calls do nothing.
    public func answerBrowserSignedOut() {
        answerBrowser(saying: "Signed out, at the provider too. You can close this window.")
    }

    private func answerBrowser(saying body: String) {
        guard
            let client = heldClient.withLock({ held -> Int32? in
                defer { held = nil }
                return held
            })
        else { return }
        respond(client, status: "200 OK", body: body)
        Glibc.close(client)
    }

    /// One connection being read: its head so far and when its time is up.
    private struct Connection {
        let fd: Int32
        let deadline: ContinuousClock.Instant
        var head: [UInt8] = []
    }

    private func serve(state: String) -> String? {
        var connections: [Connection] = []
        defer { for connection in connections { Glibc.close(connection.fd) } }
        var acceptPausedUntil: ContinuousClock.Instant?
        var backoff: Duration = .milliseconds(50)
        var chunk = [UInt8](repeating: 0, count: 4096)
        while true {
            let now = ContinuousClock.now
            if let paused = acceptPausedUntil, paused <= now { acceptPausedUntil = nil }
            let accepting = acceptPausedUntil == nil && connections.count < Self.maximumConnections
            var fds = [
                pollfd(fd: stopPipe.read, events: Int16(POLLIN), revents: 0),
                pollfd(fd: accepting ? socket : -1, events: Int16(POLLIN), revents: 0),
            ]
            fds += connections.map { pollfd(fd: $0.fd, events: Int16(POLLIN), revents: 0) }
            // Wake for the earliest deadline, or the end of an accept back-off.
            let wake = (connections.map(\.deadline) + [acceptPausedUntil].compactMap { $0 }).min()
            let timeout = wake.map { Int32(clamping: max(0, ($0 - now).milliseconds) + 1) } ?? -1
            let ready = poll(&fds, nfds_t(fds.count), timeout)
            if ready < 0 && errno != EINTR { return nil }
            if fds[0].revents != 0 { return nil }

            // Read what arrived; answer complete heads; drop what ran out of time.
            var remaining: [Connection] = []
            for (index, var connection) in connections.enumerated() {
                let events = fds[index + 2].revents
                if events != 0 {
                    let count = chunk.withUnsafeMutableBytes { read(connection.fd, $0.baseAddress, $0.count) }
                    if count == 0 || (count < 0 && errno != EAGAIN && errno != EINTR) {
                        Glibc.close(connection.fd)
                        continue
                    }
                    if count > 0 { connection.head.append(contentsOf: chunk[0..<count]) }
                }
                if let end = Self.headEnd(connection.head) {
                    if let url = handle(connection.fd, head: Array(connection.head[..<end]), state: state) {
                        remaining += connections[(index + 1)...]
                        connections = remaining
                        return url
                    }
                } else if connection.head.count > Self.maximumHeadBytes {
                    respond(connection.fd, status: "431 Request Header Fields Too Large", body: "The request is too large.")
                    Glibc.close(connection.fd)
                } else if connection.deadline <= ContinuousClock.now {
                    // Closed without a word when nothing came (a browser's unused preconnection).
                    if !connection.head.isEmpty { respond(connection.fd, status: "408 Request Timeout", body: "The request took too long.") }
                    Glibc.close(connection.fd)
                } else {
                    remaining.append(connection)
                }
            }
            connections = remaining

            guard accepting, fds[1].revents != 0 else { continue }
            let client = accept(socket, nil, nil)
            if client >= 0 {
                _ = fcntl(client, F_SETFD, FD_CLOEXEC)
                _ = fcntl(client, F_SETFL, fcntl(client, F_GETFL) | O_NONBLOCK)
                connections.append(Connection(fd: client, deadline: .now + Self.connectionDeadline))
                backoff = .milliseconds(50)
            } else if errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM {
                // The pending connection stays ready: without a pause, poll would return at once, forever.
                acceptPausedUntil = .now + backoff
                backoff = min(backoff * 2, .seconds(1))
            }
        }
    }

    /// Where the request head ends (after its blank line), if it has.
    static func headEnd(_ bytes: [UInt8]) -> Int? {
        var index = 0
        while index < bytes.count {
            if bytes[index] == 0x0A {
                if index + 1 < bytes.count, bytes[index + 1] == 0x0A { return index + 2 }
                if index + 2 < bytes.count, bytes[index + 1] == 0x0D, bytes[index + 2] == 0x0A { return index + 3 }
            }
            index += 1
        }
        return nil
    }

    /// Answers a complete request; returns the callback URL when it is the one
    /// awaited (its connection is then held for `answerBrowser`).
    private func handle(_ client: Int32, head: [UInt8], state: String) -> String? {
        let line = String(decoding: head.prefix(while: { $0 != 0x0D && $0 != 0x0A }), as: UTF8.self)
        let parts = line.split(separator: " ")
        guard parts.count >= 2, parts[0] == "GET" else {
            respond(client, status: "400 Bad Request", body: "Bad request.")
            Glibc.close(client)
            return nil
        }
        let target = String(parts[1])
        let (requestPath, query) = split(target)
        guard requestPath == path else {
            respond(client, status: "404 Not Found", body: "Not found.")
            Glibc.close(client)
            return nil
        }
        let received = FormEncoding.decode(query).first(where: { $0.name == "state" })?.value ?? ""
        guard constantTimeEquals(received, state) else {
            respond(
                client, status: "400 Bad Request",
                body: "This sign-in link is stale or belongs to another attempt. Return to the application and try again.")
            Glibc.close(client)
            return nil
        }
        heldClient.withLock { $0 = client }
        return "http://127.0.0.1:\(port)\(target)"
    }

    /// Messages may quote a provider's error_description: never markup.
    static func escapeHTML(_ text: String) -> String {
        var escaped = ""
        for character in text {
            switch character {
            case "&": escaped += "&amp;"
            case "<": escaped += "&lt;"
            case ">": escaped += "&gt;"
            case "\"": escaped += "&quot;"
            case "'": escaped += "&#39;"
            default: escaped.append(character)
            }
        }
        return escaped
    }

    private func split(_ target: String) -> (String, String) {
        guard let question = target.firstIndex(of: "?") else { return (target, "") }
        return (String(target[..<question]), String(target[target.index(after: question)...]))
    }

    private func respond(_ client: Int32, status: String, body: String) {
        let html = "<!doctype html><meta charset=utf-8><title>AuthBridge</title><p>\(Self.escapeHTML(body))</p>"
        let text =
            "HTTP/1.1 \(status)\r\nContent-Type: text/html; charset=utf-8\r\nContent-Length: \(html.utf8.count)\r\n"
            + "Cache-Control: no-store\r\nConnection: close\r\n\r\n" + html
        // Small enough for an empty socket buffer: a client that reads nothing cannot block the listener.
        _ = Array(text.utf8).withUnsafeBytes { send(client, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL) | Int32(MSG_DONTWAIT)) }
    }
}

extension Duration {
    fileprivate var milliseconds: Int64 { components.seconds * 1000 + components.attoseconds / 1_000_000_000_000_000 }
}

/// `body` with the socket address of `127.0.0.1:port` and its length: what the listener binds (and
/// its tests connect to).
func withLoopbackAddress<Result>(port: UInt16, _ body: (UnsafePointer<sockaddr>, socklen_t) -> Result) -> Result {
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_port = port.bigEndian
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    return withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { body($0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
    }
}
