import AuthBridgeVault
import Synchronization

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// The one-shot redirect listener of the `browser` flow (RFC 8252 §7.3): a
/// plain HTTP listener on the loopback IP literal `127.0.0.1`, an ephemeral
/// port, one expected path. The first request on that path whose `state`
/// matches (compared in constant time) is handed over and the listener
/// closes; anything else (a favicon, a stale tab, a wrong state) gets a small
/// answer and is ignored.
///
/// The browser's request is held open until the engine knows the outcome
/// (code redeemed, ID token verified, session stored), so the page the user
/// sees tells the truth: `answerBrowser` writes it; `close` answers a
/// neutral page if nobody did.
///
/// Threading: `accept` runs on a thread of its own; `close` may be called
/// from anywhere (cancellation, timeout) and wakes it through a pipe.
final class LoopbackListener: Sendable {
    let port: UInt16
    let path: String
    private let socket: Int32
    private let stopPipe: (read: Int32, write: Int32)
    private let closed = Atomic<Bool>(false)
    /// The browser's connection that delivered the callback, until answered.
    private let heldClient = Mutex<Int32?>(nil)

    /// Binds 127.0.0.1 on `port` (0: an ephemeral one, RFC 8252's choice;
    /// a fixed one only for providers that match redirect URIs exactly).
    init(port requested: UInt16 = 0, path: String = "/callback") throws(SessionError) {
        let fd = Glibc.socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw SessionError(.providerUnavailable, "Cannot open the loopback listener.", reason: "listener") }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = requested.bigEndian
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard bound == 0, listen(fd, 8) == 0 else {
            let reason = errno == EADDRINUSE ? "port \(requested) is in use" : String(cString: strerror(errno))
            Glibc.close(fd)
            throw SessionError(.providerUnavailable, "Cannot listen on 127.0.0.1 for the sign-in redirect: \(reason).", reason: "listener")
        }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        var fds: [Int32] = [-1, -1]
        guard pipe(&fds) == 0 else {
            Glibc.close(fd)
            throw SessionError(.providerUnavailable, "Cannot open the loopback listener.", reason: "listener")
        }
        socket = fd
        stopPipe = (fds[0], fds[1])
        port = UInt16(bigEndian: address.sin_port)
        self.path = path
    }

    deinit {
        Glibc.close(socket)
        Glibc.close(stopPipe.read)
        Glibc.close(stopPipe.write)
    }

    /// The redirect URI to register for this attempt (on the IP literal).
    var redirectURI: String { "http://127.0.0.1:\(port)\(path)" }

    /// Serves until a request on `path` carries `state`; returns its full URL,
    /// or nil once `close` was called.
    func awaitCallback(state: String) async -> String? {
        await withCheckedContinuation { continuation in
            detachThread { [self] in continuation.resume(returning: serve(state: state)) }
        }
    }

    /// Stops the listener (idempotent); a pending `awaitCallback` returns nil.
    /// The port refuses connections once this returns — before the request
    /// that owned it is answered — not when the last reference goes (the
    /// descriptor itself is closed in `deinit`, so no thread polls a reused one).
    func close() {
        answerBrowser(signedIn: nil, message: nil)
        guard !closed.exchange(true, ordering: .acquiringAndReleasing) else { return }
        // On a listening socket, shutdown(2) leaves the LISTEN state at once: new
        // connections are refused and queued ones reset.
        _ = shutdown(socket, Int32(SHUT_RDWR))
        var byte: UInt8 = 1
        _ = write(stopPipe.write, &byte, 1)
    }

    /// Tells the browser how the sign-in ended (nil: unknown) and closes its
    /// connection; later calls do nothing.
    func answerBrowser(signedIn: Bool?, message: String?) {
        guard let client = heldClient.withLock({ held -> Int32? in defer { held = nil }; return held }) else { return }
        switch signedIn {
        case true?: respond(client, status: "200 OK", body: "Signed in. You can close this window and return to the application.")
        case false?: respond(client, status: "200 OK", body: "The sign-in did not complete: \(message ?? "see the application").")
        case nil: respond(client, status: "200 OK", body: "The sign-in has ended. Return to the application.")
        }
        Glibc.close(client)
    }

    private func serve(state: String) -> String? {
        while !closed.load(ordering: .acquiring) {
            var fds = [pollfd(fd: socket, events: Int16(POLLIN), revents: 0),
                       pollfd(fd: stopPipe.read, events: Int16(POLLIN), revents: 0)]
            guard poll(&fds, 2, -1) >= 0 || errno == EINTR else { return nil }
            if fds[1].revents != 0 { return nil }
            guard fds[0].revents != 0 else { continue }
            let client = accept(socket, nil, nil)
            guard client >= 0 else { continue }
            guard let target = readRequestTarget(client) else { Glibc.close(client); continue }
            let (requestPath, query) = split(target)
            guard requestPath == path else {
                respond(client, status: "404 Not Found", body: "Not found.")
                Glibc.close(client)
                continue
            }
            let received = FormEncoding.decode(query).first(where: { $0.name == "state" })?.value ?? ""
            guard constantTimeEquals(received, state) else {
                respond(client, status: "400 Bad Request", body: "This sign-in link is stale or belongs to another attempt. Return to the application and try again.")
                Glibc.close(client)
                continue
            }
            heldClient.withLock { $0 = client }
            guard !closed.exchange(true, ordering: .acquiringAndReleasing) else {
                answerBrowser(signedIn: nil, message: nil)
                return nil
            }
            var byte: UInt8 = 1
            _ = write(stopPipe.write, &byte, 1)
            return "http://127.0.0.1:\(port)\(target)"
        }
        return nil
    }

    /// Reads the request head (bounded in size and time) and returns the request target.
    private func readRequestTarget(_ client: Int32) -> String? {
        var head: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 4096)
        while head.count < 16 << 10 {
            var fds = [pollfd(fd: client, events: Int16(POLLIN), revents: 0)]
            guard poll(&fds, 1, 5_000) > 0 else { return nil }  // a slow or idle client is dropped
            let count = chunk.withUnsafeMutableBytes { read(client, $0.baseAddress, $0.count) }
            guard count > 0 else { return nil }
            head.append(contentsOf: chunk[0..<count])
            if let end = head.firstIndex(of: 0x0A) {
                let line = String(decoding: head[..<end], as: UTF8.self)
                let parts = line.split(separator: " ")
                guard parts.count >= 2, parts[0] == "GET" else { return nil }
                // Drain the rest of the head so the browser sees a clean answer.
                return String(parts[1])
            }
        }
        return nil
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
        let text = "HTTP/1.1 \(status)\r\nContent-Type: text/html; charset=utf-8\r\nContent-Length: \(html.utf8.count)\r\n"
            + "Cache-Control: no-store\r\nConnection: close\r\n\r\n" + html
        _ = Array(text.utf8).withUnsafeBytes { send(client, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
    }
}
