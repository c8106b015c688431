import Synchronization

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// Splits a byte stream into newline-delimited frames.
///
/// Threading: `run` blocks the calling thread on `read(2)` until end of input;
/// use a dedicated thread. A trailing `\r` is dropped and blank lines are
/// skipped. A line longer than `maxFrameBytes` is reported once as
/// `.tooLarge` and then discarded up to its newline, so one bad frame never
/// costs the connection.
///
/// A line that spans reads is kept until its newline: its first
/// `freeLineBytes` are its own; past them it grows only as far as its
/// `FrameBudget` (shared with other readers) allows, else it is discarded up
/// to its newline and reported as `.tooLarge` too. What it took is given back
/// as soon as the line is handed out or discarded.
///
/// Resumable: what was read but not yet handed out is kept here, and every
/// frame is taken out of it before `onEvent` sees it. So when `onEvent` stops
/// a `run` (returns false), another `run` — on another thread, even while the
/// first is still inside `onEvent` for its last frame — goes on with the next
/// frame (the connection's reader relay). Only one `run` may be reading at a
/// time, and the one that stopped must not touch the reader again.
public final class FrameReader: @unchecked Sendable {
    public enum Event {
        case frame(UnsafeRawBufferPointer)
        case tooLarge(byteCount: Int)
    }

    public let fd: Int32
    public let maxFrameBytes: Int
    /// When readable (a byte written to it, or its write end closed), `run`
    /// stops as at end of input: how another thread ends a blocked read.
    public let stopFD: Int32?
    /// What the unfinished lines of this reader and others may hold together; nil: no bound but `maxFrameBytes`.
    public let budget: FrameBudget?

    /// How much of an unfinished line is never charged to the budget: a
    /// frame of up to 64 KiB (nearly every request) that spans two reads is
    /// never refused because other connections hold the budget, and 256
    /// connections hold at most 16 MiB this way.
    public static let freeLineBytes = 64 << 10
    /// What `line`'s capacity has taken from the budget.
    private var charged = 0

    private static let chunkSize = 256 << 10
    /// The last read, handed out up to `start`.
    private let chunk = UnsafeMutableRawBufferPointer.allocate(byteCount: FrameReader.chunkSize, alignment: 16)
    private var count = 0
    private var start = 0
    /// The start of a line that spans reads.
    private var line: [UInt8] = []
    /// > 0 while skipping an over-long line.
    private var discarding = 0
    private var ended = false

    public init(fd: Int32, maxFrameBytes: Int = 64 << 20, stopFD: Int32? = nil, budget: FrameBudget? = nil) {
        self.fd = fd
        self.maxFrameBytes = maxFrameBytes
        self.stopFD = stopFD
        self.budget = budget
    }

    deinit {
        chunk.deallocate()
        budget?.give(charged)
    }

    /// Makes room in `line` for `count` bytes (at most `maxFrameBytes`),
    /// growing its capacity by doubling; false when the budget cannot pay
    /// for the bytes past `freeLineBytes`. The budget is charged for the
    /// bytes the line holds, not for the capacity it reserved: capacity
    /// never written is never resident, and charging it let one line of
    /// 48 MiB whose reads doubled it to 64 MiB take the whole 64 MiB budget,
    /// so that another connection's 300 KiB frame was refused or not
    /// depending on how the first one's reads had fallen.
    private func reserveLine(_ count: Int) -> Bool {
        let charge = max(0, count - Self.freeLineBytes)
        if let budget, charge > charged {
            guard budget.take(charge - charged) else { return false }
            charged = charge
        }
        if count > line.capacity { line.reserveCapacity(min(max(count, line.capacity * 2), maxFrameBytes)) }
        return true
    }

    /// Frees the unfinished line and gives back what it took from the budget.
    private func dropLine() {
        line = []
        budget?.give(charged)
        charged = 0
    }

    /// Waits until `fd` is readable; false when `stopFD` fired first.
    private func waitReadable() -> Bool {
        guard let stopFD else { return true }
        var fds = [pollfd(fd: fd, events: Int16(POLLIN), revents: 0), pollfd(fd: stopFD, events: Int16(POLLIN), revents: 0)]
        while true {
            let result = poll(&fds, 2, -1)
            if result < 0 && errno == EINTR { continue }
            if fds[1].revents != 0 { return false }
            return true
        }
    }

    /// Reads until end of input (or a read error, or `onEvent` returning false).
    /// `onDrained` runs once every frame of one read has been handed to
    /// `onEvent`, before waiting for more input (a caller that batches work per
    /// read flushes it there).
    public func run(onDrained: () -> Void = {}, _ onEvent: (Event) -> Bool) {
        while true {
            guard handOutBuffered(onEvent) else { return }
            if ended { return }
            onDrained()
            guard waitReadable() else { return }
            let got = read(fd, chunk.baseAddress, Self.chunkSize)
            if got < 0 {
                if errno == EINTR { continue }
                ended = true
                return
            }
            if got == 0 {
                ended = true
                guard discarding == 0, !line.isEmpty else { return }
                var last: [UInt8] = []
                swap(&last, &line)
                dropLine() // before `onEvent`: the frame is out of the reader (see Resumable)
                _ = last.withUnsafeBytes { emit($0, onEvent) }
                return
            }
            count = got
            start = 0
        }
    }

    /// Hands out the complete lines of the last read; false when `onEvent` said stop.
    private func handOutBuffered(_ onEvent: (Event) -> Bool) -> Bool {
        while start < count {
            let rest = UnsafeRawBufferPointer(rebasing: chunk[start..<count])
            guard let found = memchr(rest.baseAddress!, 0x0A, rest.count) else {
                // No newline in the rest of this read: keep it for later.
                if discarding > 0 {
                    discarding += rest.count
                } else if line.count + rest.count > maxFrameBytes || !reserveLine(line.count + rest.count) {
                    discarding = line.count + rest.count
                    dropLine()
                } else {
                    line.append(contentsOf: rest)
                }
                start = count
                return true
            }
            let length = rest.baseAddress!.distance(to: UnsafeRawPointer(found))
            let piece = UnsafeRawBufferPointer(rebasing: rest[0..<length])
            start += length + 1 // taken out before anyone sees it
            if discarding > 0 {
                let total = discarding + length
                discarding = 0
                if !onEvent(.tooLarge(byteCount: total)) { return false }
            } else if line.isEmpty {
                if piece.count > maxFrameBytes {
                    if !onEvent(.tooLarge(byteCount: piece.count)) { return false }
                } else if !emit(piece, onEvent) {
                    return false
                }
            } else if line.count + piece.count > maxFrameBytes {
                let total = line.count + piece.count
                dropLine()
                if !onEvent(.tooLarge(byteCount: total)) { return false }
            } else {
                var whole: [UInt8] = []
                swap(&whole, &line)
                whole.append(contentsOf: piece)
                // Before `onEvent`: the frame is out of the reader, which another `run` may take
                // over meanwhile (see Resumable); `whole` is freed when it has been handed out.
                dropLine()
                if !whole.withUnsafeBytes({ emit($0, onEvent) }) { return false }
            }
        }
        return true
    }

    /// One line without its trailing `\r`; blank lines are skipped.
    private func emit(_ bytes: UnsafeRawBufferPointer, _ onEvent: (Event) -> Bool) -> Bool {
        var end = bytes.count
        if end > 0, bytes[end - 1] == UInt8(ascii: "\r") { end -= 1 }
        let frame = UnsafeRawBufferPointer(rebasing: bytes[0..<end])
        if frame.allSatisfy({ $0 == 0x20 || $0 == 0x09 }) { return true }
        return onEvent(.frame(frame))
    }
}

/// What the unfinished lines of several `FrameReader`s may hold together:
/// the agent's connections share one. A line waits in memory for its
/// newline, so without it 256 connections could each hold `maxFrameBytes`
/// (issue 26: 16 × 60 MiB took the agent from 10 to 1,523 MiB). What a line
/// holds past `FrameReader.freeLineBytes` is taken from here and given back
/// when the line is handed out, discarded, or its reader freed.
public final class FrameBudget: Sendable {
    public let limit: Int
    private let used = Atomic<Int>(0)

    public init(limit: Int) { self.limit = max(0, limit) }

    /// The bytes taken now.
    public var inUse: Int { used.load(ordering: .relaxed) }

    /// Takes `bytes` when they fit under the limit.
    func take(_ bytes: Int) -> Bool {
        var current = used.load(ordering: .relaxed)
        while current + bytes <= limit {
            let (exchanged, original) = used.compareExchange(expected: current, desired: current + bytes, ordering: .relaxed)
            if exchanged { return true }
            current = original
        }
        return false
    }

    func give(_ bytes: Int) {
        guard bytes > 0 else { return }
        used.subtract(bytes, ordering: .relaxed)
    }
}
