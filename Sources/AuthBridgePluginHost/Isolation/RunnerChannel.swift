import AuthBridgeJSON
import AuthBridgeRPC
import AuthBridgeSystem
import Synchronization

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// One end of the channel between the host and a plugin's runner: a JSON-RPC 2.0 peer over a
/// stream socket in which both sides send requests. Unlike `Connection`, which only serves,
/// it keeps a table of its own requests waiting for answers.
///
/// Threading: one reader thread (started by `start`) reads frames in order and runs the
/// handlers on it, so that what a handler does (an `emit`) happens before what a later frame
/// says (the hook's answer); handlers must not block. Frames go out through one serialized
/// `FrameWriter`; `request`, `notify`, `respond` and `close` may be called from any thread.
///
/// A frame that is not JSON-RPC, an answer to a request never sent, or a frame over
/// `maxFrameBytes` is a protocol violation: reading stops, and `onEnd` says so.
final class RunnerChannel: Sendable {
    /// Why the channel ended.
    enum End: Sendable, Equatable {
        /// The peer closed its end (or it was closed here).
        case endOfInput
        /// The peer sent something it must not; the words say what.
        case violation(String)
    }

    struct Handlers: Sendable {
        var onRequest: @Sendable (_ id: RequestID, _ method: String, _ params: JSON) -> Void
        var onNotification: @Sendable (_ method: String, _ params: JSON) -> Void
        /// Runs once, on the reader thread, after every waiting `request` was answered `closed`.
        var onEnd: @Sendable (End) -> Void
    }

    /// The code of the error every waiting request gets when the channel ends.
    static let closedCode: Int64 = -32099

    typealias Reply = @Sendable (Result<JSON, RunnerError>) -> Void

    private struct State {
        var pending: [RequestID: Reply] = [:]
        var nextID: Int64 = 1
        var ended = false
    }

    private let socket: ChannelSocket
    private let idPrefix: String?
    private let maxFrameBytes: Int
    private let writer: FrameWriter
    private let state = Mutex(State())

    /// `fd`: the channel's end, owned (and closed) by the channel from now on. `idPrefix` nil:
    /// integer request ids (the host's); else strings `"<prefix><n>"` (the runner's "r").
    init(fd: Int32, idPrefix: String?, maxFrameBytes: Int = 64 << 20) {
        self.socket = ChannelSocket(fd)
        self.idPrefix = idPrefix
        self.maxFrameBytes = maxFrameBytes
        _ = Self.ignoreBrokenPipes
        self.writer = FrameWriter(fd: fd, maxQueuedBytes: 64 << 20)
    }

    /// A write to a runner that died raises SIGPIPE, which would end the host (`serve` ignores
    /// it already; the human commands run runners too): the writer sees EPIPE instead.
    private static let ignoreBrokenPipes: Void = { _ = signal(SIGPIPE, SIG_IGN) }()

    /// Starts the reader thread. False when no thread could be started (the channel is then closed).
    @discardableResult
    func start(_ handlers: Handlers) -> Bool {
        // A stack large enough for deep JSON, as the bridge connection's reader has.
        let started = startThread(stackSize: 16 << 20) { [self] in
            let end = read(handlers)
            finish(end, handlers)
        }
        if !started { finish(.endOfInput, handlers) }
        return started
    }

    /// Sends a request; `reply` runs once, on the reader thread, with the answer (or, on a
    /// closed channel, an error with `closedCode`, at once or when the channel ends).
    func request(_ method: String, _ params: JSON, reply: @escaping Reply) {
        let id: RequestID? = state.withLock { state in
            guard !state.ended else { return nil }
            let number = state.nextID
            state.nextID += 1
            let id: RequestID = idPrefix.map { .string($0 + String(number)) } ?? .int(number)
            state.pending[id] = reply
            return id
        }
        guard let id else { return reply(.failure(Self.closedError)) }
        writer.send(RunnerMessage.request(id: id, method: method, params: params).encoded)
    }

    /// Sends a request and blocks the calling thread (never the reader's) for its answer.
    func call(_ method: String, _ params: JSON) -> Result<JSON, RunnerError> {
        let answer = Handoff<Result<JSON, RunnerError>>()
        request(method, params) { answer.put($0) }
        return answer.take()
    }

    func notify(_ method: String, _ params: JSON) {
        guard !isEnded else { return }
        writer.send(RunnerMessage.notification(method: method, params: params).encoded)
    }

    func respond(_ id: RequestID, _ answer: Result<JSON, RunnerError>) {
        guard !isEnded else { return }
        switch answer {
        case .success(let value): writer.send(RunnerMessage.result(id: id, value).encoded)
        case .failure(let error): writer.send(RunnerMessage.error(id: id, error).encoded)
        }
    }

    /// Waits until what was sent so far is written (or the peer is gone).
    func flush() { writer.flush() }

    var isEnded: Bool { state.withLock { $0.ended } }

    /// Ends the channel: the reader sees end of input (even when another process, such as a
    /// child the plugin forked, still holds the peer's end open), later frames are dropped. Safe
    /// at any time, also after the channel ended (its descriptor's number is never touched again).
    func close() {
        socket.shutdown()
    }

    static let closedError = RunnerError(code: closedCode, message: "the plugin runner's channel is closed")

    private func read(_ handlers: Handlers) -> End {
        var end = End.endOfInput
        FrameReader(fd: socket.fd, maxFrameBytes: maxFrameBytes).run { event in
            switch event {
            case .tooLarge(let count):
                end = .violation("sent a message of \(count) bytes, over the \(maxFrameBytes >> 20) MiB limit")
                return false
            case .frame(let bytes):
                guard let message = RunnerMessage.decode(bytes) else {
                    end = .violation("sent a malformed message")
                    return false
                }
                switch message {
                case .request(let id, let method, let params):
                    handlers.onRequest(id, method, params)
                case .notification(let method, let params):
                    handlers.onNotification(method, params)
                case .result(let id, let value):
                    guard let reply = takePending(id) else {
                        end = .violation("answered a request it was never sent")
                        return false
                    }
                    reply(.success(value))
                case .error(let id, let error):
                    guard let reply = takePending(id) else {
                        end = .violation("answered a request it was never sent")
                        return false
                    }
                    reply(.failure(error))
                }
                return true
            }
        }
        return end
    }

    private func takePending(_ id: RequestID) -> Reply? {
        state.withLock { $0.pending.removeValue(forKey: id) }
    }

    /// After the reader stopped: no more frames either way, waiting requests answered, the
    /// writer stopped, then the descriptor closed (nothing can use its number any more).
    private func finish(_ end: End, _ handlers: Handlers) {
        let waiting = state.withLock { state -> [Reply] in
            state.ended = true
            defer { state.pending.removeAll() }
            return Array(state.pending.values)
        }
        close()
        for reply in waiting { reply(.failure(Self.closedError)) }
        handlers.onEnd(end)
        writer.close()
        socket.close()
    }
}

/// The channel's socket, owned once and closed once. Once closed, its number names whatever the
/// process opens next (another runner's channel; in the agent, an app's connection), so no
/// `shutdown` may reach it after that: a runner's reaper ending a channel whose reader had
/// already closed it used to cut a new runner's channel (issue 26).
///
/// Threading: `shutdown` and `close` hold one lock, so a shutdown never meets a closed number.
/// The channel's reader and writer use `fd` without it: the channel closes it only after both
/// have stopped.
final class ChannelSocket: Sendable {
    let fd: Int32
    private let isOpen = Mutex(true)

    init(_ fd: Int32) { self.fd = fd }

    /// Ends both directions while the socket is open (a reader blocked on it sees end of input).
    func shutdown() {
        isOpen.withLock { isOpen in
            if isOpen { _ = Glibc.shutdown(fd, Int32(SHUT_RDWR)) }
        }
    }

    /// Closes the socket, once.
    func close() {
        isOpen.withLock { isOpen in
            guard isOpen else { return }
            isOpen = false
            _ = Glibc.close(fd)
        }
    }

    deinit { close() }
}
