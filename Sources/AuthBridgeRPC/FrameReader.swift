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
public struct FrameReader: Sendable {
    public enum Event {
        case frame(UnsafeRawBufferPointer)
        case tooLarge(byteCount: Int)
    }

    public let fd: Int32
    public let maxFrameBytes: Int
    /// When readable (a byte written to it, or its write end closed), `run`
    /// stops as at end of input: how another thread ends a blocked read.
    public let stopFD: Int32?

    public init(fd: Int32, maxFrameBytes: Int = 64 << 20, stopFD: Int32? = nil) {
        self.fd = fd
        self.maxFrameBytes = maxFrameBytes
        self.stopFD = stopFD
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
        let chunkSize = 256 << 10
        let chunk = UnsafeMutableRawBufferPointer.allocate(byteCount: chunkSize, alignment: 16)
        defer { chunk.deallocate() }
        var line: [UInt8] = [] // the start of a line that spans reads
        var discarding = 0 // > 0 while skipping an over-long line

        func emit(_ bytes: UnsafeRawBufferPointer) -> Bool {
            var end = bytes.count
            if end > 0, bytes[end - 1] == UInt8(ascii: "\r") { end -= 1 }
            let frame = UnsafeRawBufferPointer(rebasing: bytes[0..<end])
            if frame.allSatisfy({ $0 == 0x20 || $0 == 0x09 }) { return true }
            return onEvent(.frame(frame))
        }

        while true {
            onDrained()
            guard waitReadable() else { return }
            let count = read(fd, chunk.baseAddress, chunkSize)
            if count < 0 {
                if errno == EINTR { continue }
                return
            }
            if count == 0 {
                if discarding == 0, !line.isEmpty { _ = line.withUnsafeBytes(emit) }
                return
            }
            var start = 0
            let data = UnsafeRawBufferPointer(rebasing: chunk[0..<count])
            while start < count {
                let rest = UnsafeRawBufferPointer(rebasing: data[start...])
                guard let found = memchr(rest.baseAddress!, 0x0A, rest.count) else {
                    // No newline in the rest of this chunk: keep it for later.
                    if discarding > 0 {
                        discarding += rest.count
                    } else if line.count + rest.count > maxFrameBytes {
                        discarding = line.count + rest.count
                        line.removeAll(keepingCapacity: false)
                    } else {
                        line.append(contentsOf: rest)
                    }
                    break
                }
                let length = rest.baseAddress!.distance(to: UnsafeRawPointer(found))
                let piece = UnsafeRawBufferPointer(rebasing: rest[0..<length])
                start += length + 1
                if discarding > 0 {
                    let total = discarding + length
                    discarding = 0
                    if !onEvent(.tooLarge(byteCount: total)) { return }
                } else if line.isEmpty {
                    if piece.count > maxFrameBytes {
                        if !onEvent(.tooLarge(byteCount: piece.count)) { return }
                    } else if !emit(piece) {
                        return
                    }
                } else if line.count + piece.count > maxFrameBytes {
                    let total = line.count + piece.count
                    line.removeAll(keepingCapacity: false)
                    if !onEvent(.tooLarge(byteCount: total)) { return }
                } else {
                    line.append(contentsOf: piece)
                    let keepGoing = line.withUnsafeBytes(emit)
                    line.removeAll(keepingCapacity: true)
                    if !keepGoing { return }
                }
            }
        }
    }
}
