import Dispatch

#if canImport(Glibc)
import Glibc
#endif

// The test's end of a connection: newline-delimited frames written and read on a socket.

/// Writes `line` and its newline to `fd`.
func writeLine(_ line: String, to fd: Int32) {
    let bytes = Array((line + "\n").utf8)
    bytes.withUnsafeBytes { _ = write(fd, $0.baseAddress, $0.count) }
}

/// Reads one line from `fd` (without its newline), waiting at most 10 s for each byte; nil at the
/// end of input or past the wait. The blocking read runs on a Dispatch thread, never on the
/// cooperative pool the connection's own tasks need.
func readLine(from fd: Int32) async -> [UInt8]? {
    await withCheckedContinuation { continuation in
        DispatchQueue.global().async {
            var line: [UInt8] = []
            var byte: UInt8 = 0
            var ready = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            while poll(&ready, 1, 10_000) == 1, read(fd, &byte, 1) == 1 {
                if byte == 0x0A {
                    continuation.resume(returning: line)
                    return
                }
                line.append(byte)
            }
            continuation.resume(returning: nil)
        }
    }
}
