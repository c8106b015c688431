import AuthBridgeRPC
import AuthBridgeSystem
import Logging
import Synchronization

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// `authbridge agent`: the bridge on a listening Unix socket, one per login
/// session, as ssh-agent is. Every connection is a bridge session of its own
/// (`BridgeServer`: its own `initialize`, ids, cancellation, `shutdown`;
/// `exit` or closing it ends only its requests) over one `BridgeHost`, so
/// refreshes are single-flight across every app and a sign-out in one reaches
/// the others at once. A connection from another user is closed before
/// anything is read from it: the kernel names the peer at `connect`.
public final class BridgeAgent: Sendable {
    /// Who may connect: the agent's own user, and root only when allowed.
    public struct PeerPolicy: Sendable {
        public var uid: UInt32
        public var allowRoot: Bool

        public init(uid: UInt32 = getuid(), allowRoot: Bool = false) {
            self.uid = uid
            self.allowRoot = allowRoot
        }

        public func admits(_ peer: UnixSocket.PeerCredentials) -> Bool {
            peer.uid == uid || (peer.uid == 0 && allowRoot)
        }
    }

    private let host: BridgeHost
    private let listener: Int32
    private let logger: Logger
    private let policy: PeerPolicy
    private let maximumConnections: Int
    private let handshakeDeadline: Duration
    /// What the unfinished frames of every connection may hold together.
    private let frameBudget = FrameBudget(limit: BridgeAgent.unfinishedFrameBudget)

    /// How long a connection may go without `initialize` before it is
    /// dropped. The agent serves at most `maximumConnections`: without a
    /// deadline, that many that never start a session lock every app out
    /// for good (issue 26). A frontend sends `initialize` as soon as it
    /// connects; 10 s leaves room for a machine under load.
    public static let handshakeDeadline: Duration = .seconds(10)

    /// What the unfinished frames (lines not yet ended by their newline) of
    /// all connections may hold together, past each one's first
    /// `FrameReader.freeLineBytes`: one frame of the largest size (64 MiB)
    /// when no other connection holds one. Beyond it, the frame that would
    /// grow is dropped and answered -32600 (issue 26: 16 connections × 60 MiB
    /// took the agent to 1.5 GiB).
    public static let unfinishedFrameBudget = 64 << 20
    /// How many requests of one connection run at once; the others wait in its backlog, in
    /// arrival order, as frames (a few hundred bytes each). A running request is a task with its
    /// frames, ~25 KiB at its peak: 4 apps that pipeline requests 256 at a time (`Connection`'s
    /// default) took the agent to 80 MiB, and glibc kept it after they were done (issue 32).
    /// Plugin hooks run one at a time per plugin process anyway.
    public static let concurrentRequestsPerConnection = 32
    /// Requests numbered in arrival order across connections (which sign-in is newer).
    private let arrivalOrder = ArrivalOrder()
    private let state = Mutex(State())
    /// Written (closed) by `stop` to wake the accepting thread.
    private let stopPipe: (read: Int32, write: Int32)
    private let stopped = Atomic<Bool>(false)

    private struct State {
        var connections: [UInt64: (connection: Connection, task: Task<Void, Never>)] = [:]
        /// The connections whose handshake deadline has not passed, by id: the accepting thread
        /// drops those still without a session then. A table the accepting thread sweeps, not a
        /// timer per connection: a cancelled `Task.sleep` keeps its task, and with it the closed
        /// connection it captured (~800 bytes), until its deadline passes (issue 32).
        var handshakes: [UInt64: Handshake] = [:]
        var lastID: UInt64 = 0
    }

    private struct Handshake {
        let server: BridgeServer
        let connection: Connection
        let deadline: ContinuousClock.Instant
    }

    /// `listener`: a listening Unix stream socket, non-blocking; its owner
    /// closes it after `run` returns.
    public init(
        host: BridgeHost, listener: Int32, logger: Logger, policy: PeerPolicy = PeerPolicy(), maximumConnections: Int = 256,
        handshakeDeadline: Duration = BridgeAgent.handshakeDeadline
    ) {
        self.host = host
        self.listener = listener
        self.logger = logger
        self.policy = policy
        self.maximumConnections = maximumConnections
        self.handshakeDeadline = handshakeDeadline
        var fds: [Int32] = [-1, -1]
        if pipe(&fds) == 0 {
            for fd in fds { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
        } else {
            fds = [-1, -1]
        }
        stopPipe = (fds[0], fds[1])
    }

    /// Accepts and serves connections until `stop()`. Then every connection
    /// ends as at end of input — running requests get their grace, then are
    /// cancelled and answered. The plugins are left to the process to shut
    /// down, after this returns (AuthBridgeLaunch's `HostProcess`).
    public func run() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let started = startThread { [self] in
                acceptLoop()
                continuation.resume()
            }
            if !started {
                logger.critical("cannot start the agent's accepting thread")
                continuation.resume()
            }
        }
        let open = state.withLock { Array($0.connections.values) }
        for (connection, _) in open { connection.stopReading() }
        for (_, task) in open { await task.value }
    }

    deinit {
        for fd in [stopPipe.read, stopPipe.write] where fd >= 0 { close(fd) }
    }

    /// Stops accepting and ends every connection. Safe from any thread, any
    /// number of times.
    public func stop() {
        guard !stopped.exchange(true, ordering: .acquiringAndReleasing), stopPipe.write >= 0 else { return }
        _ = write(stopPipe.write, "x", 1)
    }

    // MARK: - Accepting (its own thread)

    private func acceptLoop() {
        var fds = [pollfd(fd: listener, events: Int16(POLLIN), revents: 0), pollfd(fd: stopPipe.read, events: Int16(POLLIN), revents: 0)]
        while !stopped.load(ordering: .acquiring) {
            fds[0].revents = 0
            fds[1].revents = 0
            let ready = poll(&fds, 2, dropLateHandshakes())
            if ready < 0 {
                if errno == EINTR { continue }
                logger.critical("the agent cannot wait for connections", metadata: ["errno": "\(errno)"])
                return
            }
            if fds[1].revents != 0 { return }
            if ready == 0 { continue }
            switch UnixSocket.accept(listener) {
            case .success(let fd):
                admit(fd)
            case .failure(let failure) where [EAGAIN, EWOULDBLOCK, EINTR, ECONNABORTED, EPROTO].contains(failure.errno):
                continue
            case .failure(let failure):
                // Out of descriptors (EMFILE, ENFILE) or memory: the connection waits in the
                // backlog; a pause bounds the retries (a deadline, not synchronisation).
                logger.error("the agent could not accept a connection: \(failure)")
                var wake = [fds[1]]
                _ = poll(&wake, 1, 100)
            }
        }
    }

    /// Drops the connections whose handshake deadline has passed without `initialize` (a
    /// deadline, not synchronisation) and forgets those whose deadline has passed; the poll
    /// timeout (ms) until the next deadline, -1 when none is pending.
    private func dropLateHandshakes() -> Int32 {
        let now = ContinuousClock.now
        var late: [Handshake] = []
        var next: ContinuousClock.Instant?
        state.withLock { current in
            guard !current.handshakes.isEmpty else { return }
            current.handshakes = current.handshakes.filter { _, handshake in
                if handshake.deadline <= now {
                    late.append(handshake)
                    return false
                }
                if handshake.server.receivesEvents { return false } // initialized: nothing to wait for
                next = min(next ?? handshake.deadline, handshake.deadline)
                return true
            }
        }
        for handshake in late where !handshake.server.receivesEvents {
            handshake.connection.drop(because: "it did not initialize within \(handshakeDeadline.components.seconds) s")
        }
        guard let next else { return -1 }
        let (seconds, attoseconds) = (next - now).components
        // Rounded up: a wake-up a little early would only poll again.
        return Int32(clamping: seconds * 1000 + (attoseconds + 999_999_999_999_999) / 1_000_000_000_000_000)
    }

    /// Serves a new connection, or closes it unread: another user, or too many.
    private func admit(_ fd: Int32) {
        guard let peer = UnixSocket.peerCredentials(fd), policy.admits(peer) else {
            let who = UnixSocket.peerCredentials(fd).map { "uid \($0.uid) (pid \($0.pid))" } ?? "an unknown peer"
            let allowed = policy.uid == 0 ? "only root" : "only uid \(policy.uid)\(policy.allowRoot ? " and root" : "")"
            logger.warning("refused a connection from \(who): \(allowed) may use this agent")
            close(fd)
            return
        }
        let refused: Bool = state.withLock { current in
            guard current.connections.count < maximumConnections else { return true }
            current.lastID += 1
            let id = current.lastID
            // What the connection logs (why it was dropped, say) names it and its peer.
            var connectionLogger = logger
            connectionLogger[metadataKey: "connection"] = "\(id)"
            connectionLogger[metadataKey: "pid"] = "\(peer.pid)"
            let connection = Connection(
                input: fd, output: fd, logger: connectionLogger, maxConcurrentRequests: BridgeAgent.concurrentRequestsPerConnection,
                arrivalOrder: arrivalOrder, frameBudget: frameBudget)
            let server = BridgeServer(host: host, connection: connection)
            // Read from now on: a one-shot client's frames are answered without waiting for a task.
            server.start()
            let task = Task { [self] in
                _ = await server.ended()
                // The peer may be reading nothing: shutdown ends a write blocked on it.
                _ = shutdown(fd, Int32(SHUT_RDWR))
                connection.close()
                self.state.withLock {
                    $0.connections.removeValue(forKey: id)
                    $0.handshakes.removeValue(forKey: id)
                }
                close(fd)
                logger.debug("connection closed", metadata: ["pid": "\(peer.pid)"])
            }
            current.connections[id] = (connection, task)
            current.handshakes[id] = Handshake(server: server, connection: connection, deadline: .now + handshakeDeadline)
            return false
        }
        if refused {
            logger.warning("refused a connection from pid \(peer.pid): \(maximumConnections) connections are open already")
            close(fd)
        } else {
            logger.debug("connection accepted", metadata: ["pid": "\(peer.pid)"])
        }
    }
}
