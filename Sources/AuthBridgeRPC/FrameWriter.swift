import AuthBridgeSystem

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// The one serialized writer of protocol frames.
///
/// Threading: `send` may be called from any thread or task; frames are
/// written whole, in the order `send` was called, by a dedicated thread that
/// coalesces whatever is queued into one `write(2)`. It never blocks a caller
/// on I/O. After a write error (the peer closed its end: EPIPE), frames are
/// dropped and `onFailure` runs once. The thread starts with the first frame
/// queued: a connection whose answers all go out through `sendNow` (a
/// one-shot client of the agent) never needs one.
///
/// The queue has a soft bound, `maxQueuedBytes`: `send` always queues (an
/// answer must never be lost), but `hasRoom` turns false past the bound, and
/// the connection then stops starting work that would add to it (see
/// `Connection`), so a peer that stops reading cannot make the host's memory
/// grow without limit. Events, which nothing bounds at their source, have a
/// hard bound of their own (`sendEvent`). `onWritten` runs after every write,
/// so the connection can resume once there is room again.
public final class FrameWriter: @unchecked Sendable {
    private let fd: Int32
    private let lock = ConditionLock()
    private var queued: [UInt8] = []
    /// Bytes handed to `write(2)` and not yet written.
    private var writing = 0
    private var busy = false
    /// True while a caller's thread writes a frame itself (`sendNow`): the writer thread waits.
    private var direct = false
    /// A write error `sendNow` met, for the writer thread to report (`onFailure` may take
    /// locks the caller of `sendNow` holds).
    private var unreportedFailure: Int32 = 0
    private var closing = false
    /// Whether the writer thread was started (`startLocked`).
    private var started = false
    private var stopped = false
    private var failed = false
    /// True while the writer thread sleeps for work: only then does `send`
    /// need to wake it (under load it is busy and picks frames up itself).
    private var idle = false
    /// Threads waiting in `flush`.
    private var flushWaiters = 0
    /// Bytes written so far (how `flush(timeout:)` tells a slow peer from one that does not read).
    private var progress = 0
    /// Bytes queued so far: where the last frame queued ends in the stream, to compare with `progress`.
    private var accepted = 0
    /// The events (`sendEvent`) not written whole yet: where each ends in the stream, and its size.
    private var unwrittenEvents = FIFO<(end: Int, size: Int)>()
    private var unwrittenEventBytes = 0
    private let onFailure: @Sendable (Int32) -> Void
    private let onWritten: @Sendable () -> Void
    public let maxQueuedBytes: Int

    public init(
        fd: Int32, maxQueuedBytes: Int = 4 << 20, onFailure: @escaping @Sendable (_ errno: Int32) -> Void = { _ in },
        onWritten: @escaping @Sendable () -> Void = {}
    ) {
        self.fd = fd
        self.maxQueuedBytes = max(1, maxQueuedBytes)
        self.onFailure = onFailure
        self.onWritten = onWritten
    }

    /// Whether the writer thread was started (it is only when something was queued).
    var hasThread: Bool { lock.withLock { started } }

    /// Starts the writer thread unless it runs (or has run); with the lock held.
    private func startLocked() {
        guard !started else { return }
        started = true
        guard startThread(stackSize: 16 << 20, { [self] in self.loop() }) else { fatalError("cannot start the ab-writer thread") }
    }

    /// Queues one frame; the newline is added here.
    public func send(_ frame: [UInt8]) {
        lock.withLock {
            guard !failed, !closing else { return }
            queued.append(contentsOf: frame)
            queued.append(0x0A)
            accepted += frame.count + 1
            startLocked()
            if idle { lock.broadcast() }
        }
    }

    /// Queues an event — a frame the peer may do without, unlike an answer —
    /// unless the events queued before it that are still unwritten would,
    /// with it, weigh more than `limit` bytes: then nothing is queued and it
    /// returns false. A peer that far behind on events has stopped reading;
    /// the caller drops it rather than hold more for it. Answers queued
    /// ahead do not count: a large answer a peer reads slowly is no reason.
    /// True once the peer is gone (the frame is dropped, as by `send`).
    public func sendEvent(_ frame: [UInt8], limit: Int) -> Bool {
        lock.withLock {
            guard !failed, !closing else { return true }
            while let oldest = unwrittenEvents.first, oldest.end <= progress {
                _ = unwrittenEvents.popFirst()
                unwrittenEventBytes -= oldest.size
            }
            let size = frame.count + 1
            guard unwrittenEventBytes + size <= limit else { return false }
            queued.append(contentsOf: frame)
            queued.append(0x0A)
            accepted += size
            unwrittenEvents.append((end: accepted, size: size))
            unwrittenEventBytes += size
            startLocked()
            if idle { lock.broadcast() }
            return true
        }
    }

    /// The largest frame `sendNow` writes on the caller's thread: `PIPE_BUF`, which a pipe
    /// that polls writable takes whole without blocking (a Unix socket that polls writable
    /// has at least a quarter of its buffer free).
    static let directLimit = 4096

    /// Like `send`, but when nothing is queued or being written and the descriptor polls
    /// writable, writes the frame on the caller's thread: an answer given at once then costs
    /// no hand-off to the writer thread (a round trip's largest cost after the pipes). A
    /// frame over `directLimit`, or a descriptor that is full, goes to the queue as with `send`.
    public func sendNow(_ frame: [UInt8]) {
        var line = frame
        line.append(0x0A)
        let mayWrite = lock.withLock { () -> Bool in
            guard !failed, !closing else { return false }
            accepted += line.count
            guard queued.isEmpty, !busy, line.count <= Self.directLimit else {
                queued.append(contentsOf: line)
                startLocked()
                if idle { lock.broadcast() }
                return false
            }
            busy = true
            direct = true
            writing = line.count
            return true
        }
        guard mayWrite else { return }
        var target = pollfd(fd: fd, events: Int16(POLLOUT), revents: 0)
        let writable = poll(&target, 1, 0) == 1 && target.revents & Int16(POLLOUT) != 0 && target.revents & Int16(POLLERR | POLLHUP) == 0
        let error = writable ? writeAll(line) : 0
        lock.withLock {
            busy = false
            direct = false
            writing = 0
            if !writable {
                // Ahead of what others queued meanwhile: it was sent first.
                queued.insert(contentsOf: line, at: 0)
                startLocked()
            } else if error != 0 {
                failed = true
                queued.removeAll()
                unreportedFailure = error
                startLocked() // which reports it
            }
            // Waking the writer thread is the hand-off this avoids: only for work or waiters.
            if (idle && !queued.isEmpty) || flushWaiters > 0 || error != 0 { lock.broadcast() }
        }
        // No `onWritten`: there was room before this write (the queue was empty) and there is
        // as much after it; and the caller may hold the locks `onWritten` takes.
    }

    /// False while more than `maxQueuedBytes` wait to be written (true once
    /// the peer is gone: frames are then dropped, nothing piles up).
    public var hasRoom: Bool {
        lock.withLock { failed || queued.count + writing < maxQueuedBytes }
    }

    /// The bytes waiting to be written.
    public var queuedBytes: Int { lock.withLock { queued.count + writing } }

    /// Waits until everything queued so far has been written (or dropped).
    public func flush() {
        lock.withLock {
            flushWaiters += 1
            defer { flushWaiters -= 1 }
            if idle { lock.broadcast() }
            while (!queued.isEmpty || busy) && !failed && !stopped { lock.wait() }
        }
    }

    /// Like `flush`, but gives up once the peer has read nothing for
    /// `timeout` (a peer that does not read must not keep the host alive; a
    /// slow one still gets everything); true when everything was written.
    @discardableResult
    public func flush(timeout: Duration) -> Bool {
        lock.withLock {
            flushWaiters += 1
            defer { flushWaiters -= 1 }
            if idle { lock.broadcast() }
            var deadline = ConditionLock.deadline(after: timeout)
            var seen = progress
            while (!queued.isEmpty || busy) && !failed && !stopped {
                if lock.wait(until: deadline) { continue }
                guard progress != seen else { break }
                seen = progress
                deadline = ConditionLock.deadline(after: timeout)
            }
            return queued.isEmpty && !busy
        }
    }

    /// Flushes, then stops the writer thread. Later frames are dropped.
    public func close() {
        flush()
        lock.withLock {
            closing = true
            if !started { stopped = true }
            lock.broadcast()
            while !stopped { lock.wait() }
        }
    }

    /// Gives up on the peer (one that does not read): what is queued is
    /// dropped, later frames too, and `flush` returns at once. A write blocked
    /// on the peer goes on until the descriptor's owner ends it
    /// (`shutdown(2)` of a socket) or the process exits.
    public func abandon() {
        lock.withLock {
            failed = true
            queued.removeAll()
            unwrittenEvents = FIFO()
            unwrittenEventBytes = 0
            lock.broadcast()
        }
    }

    /// Stops the writer thread without waiting for the peer: what is queued
    /// is dropped, later frames too. A write blocked on a peer that reads
    /// nothing is ended by the descriptor's owner first (`shutdown(2)` of a
    /// socket); this waits for the thread to end.
    public func stop() {
        lock.withLock {
            queued.removeAll()
            closing = true
            if !started { stopped = true }
            lock.broadcast()
            while !stopped { lock.wait() }
        }
    }

    private func loop() {
        var batch: [UInt8] = []
        while true {
            let (stop, failure): (Bool, Int32) = lock.withLock {
                while ((queued.isEmpty && !closing) || direct) && unreportedFailure == 0 {
                    idle = true
                    lock.wait()
                    idle = false
                }
                if unreportedFailure != 0 {
                    defer { unreportedFailure = 0 }
                    return (false, unreportedFailure)
                }
                if queued.isEmpty { return (true, 0) }
                swap(&batch, &queued)
                writing = batch.count
                busy = true
                return (false, 0)
            }
            if failure != 0 {
                onFailure(failure)
                continue
            }
            if stop { break }
            let error = writeAll(batch)
            batch.removeAll(keepingCapacity: batch.capacity <= 1 << 20)
            lock.withLock {
                busy = false
                writing = 0
                if error != 0 {
                    failed = true
                    queued.removeAll()
                }
                if flushWaiters > 0 || error != 0 { lock.broadcast() }
            }
            if error != 0 { onFailure(error) }
            onWritten()
        }
        lock.withLock {
            stopped = true
            lock.broadcast()
        }
    }

    private func writeAll(_ bytes: [UInt8]) -> Int32 {
        bytes.withUnsafeBytes { buffer in
            var offset = 0
            while offset < buffer.count {
                let written = write(fd, buffer.baseAddress! + offset, buffer.count - offset)
                if written < 0 {
                    if errno == EINTR || errno == EAGAIN { continue }
                    return errno
                }
                offset += written
                lock.withLock { progress += written }
            }
            return 0
        }
    }
}
