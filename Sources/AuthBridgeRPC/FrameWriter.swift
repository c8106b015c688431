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
/// dropped and `onFailure` runs once.
///
/// The queue has a soft bound, `maxQueuedBytes`: `send` always queues (an
/// answer must never be lost), but `hasRoom` turns false past the bound, and
/// the connection then stops starting work that would add to it (see
/// `Connection`), so a peer that stops reading cannot make the host's memory
/// grow without limit. `onWritten` runs after every write, so the connection
/// can resume once there is room again.
public final class FrameWriter: @unchecked Sendable {
    private let fd: Int32
    private let lock = ConditionLock()
    private var queued: [UInt8] = []
    /// Bytes handed to `write(2)` and not yet written.
    private var writing = 0
    private var busy = false
    private var closing = false
    private var stopped = false
    private var failed = false
    /// True while the writer thread sleeps for work: only then does `send`
    /// need to wake it (under load it is busy and picks frames up itself).
    private var idle = false
    /// Threads waiting in `flush`.
    private var flushWaiters = 0
    /// Bytes written so far (how `flush(timeout:)` tells a slow peer from one that does not read).
    private var progress = 0
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
        guard startThread(stackSize: 16 << 20, { [self] in self.loop() }) else { fatalError("cannot start the ab-writer thread") }
    }

    /// Queues one frame; the newline is added here.
    public func send(_ frame: [UInt8]) {
        lock.withLock {
            guard !failed, !closing else { return }
            queued.append(contentsOf: frame)
            queued.append(0x0A)
            if idle { lock.broadcast() }
        }
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
            lock.broadcast()
            while !stopped { lock.wait() }
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
            lock.broadcast()
            while !stopped { lock.wait() }
        }
    }

    private func loop() {
        var batch: [UInt8] = []
        while true {
            let stop: Bool = lock.withLock {
                while queued.isEmpty && !closing {
                    idle = true
                    lock.wait()
                    idle = false
                }
                if queued.isEmpty { return true }
                swap(&batch, &queued)
                writing = batch.count
                busy = true
                return false
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
