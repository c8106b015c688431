@testable import AuthBridgeRPC
import Synchronization
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// The writer: frames whole and in the order sent, whichever thread writes them.
@Suite("Frame writer")
struct FrameWriterTests {
    /// A pipe: (read end, write end), both closed by `close`.
    private final class Pipe: Sendable {
        let read: Int32
        let write: Int32
        init() {
            var ends: [Int32] = [-1, -1]
            precondition(pipe(&ends) == 0)
            read = ends[0]
            write = ends[1]
        }
        func close() {
            Glibc.close(read)
            Glibc.close(write)
        }

        /// What is in the pipe now, without waiting.
        func available() -> [UInt8] {
            var out: [UInt8] = []
            var buffer = [UInt8](repeating: 0, count: 65_536)
            var target = pollfd(fd: read, events: Int16(POLLIN), revents: 0)
            while poll(&target, 1, 0) == 1 {
                let count = buffer.withUnsafeMutableBytes { Glibc.read(read, $0.baseAddress, $0.count) }
                if count <= 0 { break }
                out += buffer[..<count]
            }
            return out
        }

        /// Reads until `count` bytes came (bounded by the test's own time limit).
        func read(count: Int) -> [UInt8] {
            var out: [UInt8] = []
            var buffer = [UInt8](repeating: 0, count: 65_536)
            while out.count < count {
                let got = buffer.withUnsafeMutableBytes { Glibc.read(read, $0.baseAddress, min($0.count, count - out.count)) }
                if got <= 0 { break }
                out += buffer[..<got]
            }
            return out
        }
    }

    /// An answer given at once is in the pipe when `sendNow` returns: written on the caller's
    /// thread, with no hand-off to the writer thread.
    /// Issue 32: a connection whose answers all go out on the caller's thread (`sendNow`: a
    /// one-shot client of the agent) starts no writer thread; the first frame queued starts it.
    @Test func theWriterThreadStartsWithTheFirstFrameQueued() {
        let pipe = Pipe()
        defer { pipe.close() }
        let idle = FrameWriter(fd: pipe.write)
        idle.stop()
        #expect(!idle.hasThread, "stopped without ever writing")

        let writer = FrameWriter(fd: pipe.write)
        writer.sendNow(Array("{\"id\":1}".utf8))
        #expect(pipe.read(count: 9) == Array("{\"id\":1}\n".utf8))
        #expect(!writer.hasThread)
        writer.send(Array("{\"id\":2}".utf8))
        #expect(writer.hasThread)
        #expect(pipe.read(count: 9) == Array("{\"id\":2}\n".utf8))
        writer.close()
    }

    @Test func sendNowWritesOnTheCallersThreadWhenTheWriterIsIdle() {
        let pipe = Pipe()
        defer { pipe.close() }
        let writer = FrameWriter(fd: pipe.write)
        defer { writer.stop() }
        for index in 0..<100 {
            writer.sendNow(Array("answer \(index)".utf8))
            #expect(pipe.available() == Array("answer \(index)\n".utf8))
        }
    }

    /// A full pipe (filled by someone else): `sendNow` does not block; its frame waits in the
    /// queue ahead of frames sent after it, and everything arrives whole and in order once the
    /// peer reads.
    @Test func aFullPipeQueuesTheFrameInItsPlace() {
        let pipe = Pipe()
        defer { pipe.close() }
        let writer = FrameWriter(fd: pipe.write)
        defer { writer.stop() }
        let flags = fcntl(pipe.write, F_GETFL)
        _ = fcntl(pipe.write, F_SETFL, flags | O_NONBLOCK)
        var filler: [UInt8] = []
        let chunk = [UInt8](repeating: UInt8(ascii: "x"), count: 4096)
        while chunk.withUnsafeBytes({ Glibc.write(pipe.write, $0.baseAddress, $0.count) }) > 0 { filler += chunk }
        _ = fcntl(pipe.write, F_SETFL, flags)
        writer.sendNow(Array("first".utf8))
        writer.send(Array("second".utf8))
        writer.sendNow(Array("third".utf8))
        let expected = filler + Array("first\nsecond\nthird\n".utf8)
        #expect(pipe.read(count: expected.count) == expected)
        writer.flush()
    }

    /// Events have a hard bound of their own, counted on events alone: an answer queued ahead
    /// (a large one the peer reads slowly) never makes an event refused, and events written
    /// free their room.
    @Test func eventsAreRefusedPastTheirOwnBoundAndAnswersNever() {
        let pipe = Pipe()
        defer { pipe.close() }
        let writer = FrameWriter(fd: pipe.write, maxQueuedBytes: 1024)
        defer { writer.stop() }
        let answer = [UInt8](repeating: UInt8(ascii: "a"), count: 1 << 20)
        writer.send(answer) // past every bound: answers are always queued
        let event = [UInt8](repeating: UInt8(ascii: "e"), count: 99)
        for _ in 0..<10 { #expect(writer.sendEvent(event, limit: 1000)) } // 10 × 100 bytes
        #expect(!writer.sendEvent(event, limit: 1000))
        #expect(writer.queuedBytes == answer.count + 1 + 1000)
        #expect(pipe.read(count: answer.count + 1 + 1000).count == answer.count + 1 + 1000)
        writer.flush()
        #expect(writer.sendEvent(event, limit: 1000))
        #expect(pipe.read(count: 100) == event + [0x0A])
    }

    /// Frames sent from many threads, some written on their own thread and some by the
    /// writer's, arrive whole: no line is torn or lost.
    @Test func framesFromManyThreadsArriveWhole() async {
        let pipe = Pipe()
        defer { pipe.close() }
        let writer = FrameWriter(fd: pipe.write)
        defer { writer.stop() }
        let lines = 8 * 500
        let reader = Task.detached { pipe.read(count: lines * 10) }
        await withTaskGroup(of: Void.self) { group in
            for thread in 0..<8 {
                group.addTask {
                    for index in 0..<500 {
                        let text = Array("t\(thread) \(String(index).leftPadded(to: 6))".utf8)
                        if index % 2 == 0 { writer.sendNow(text) } else { writer.send(text) }
                    }
                }
            }
        }
        writer.flush()
        let received = String(decoding: await reader.value, as: UTF8.self).split(separator: "\n")
        #expect(received.count == lines)
        #expect(Set(received).count == lines)
        #expect(received.allSatisfy { $0.count == 9 && $0.hasPrefix("t") })
    }

    /// A peer gone while `sendNow` writes: the failure is reported once, by the writer
    /// thread — the caller may hold a lock the report takes (the connection's), and must not
    /// deadlock.
    @Test func aWriteErrorInSendNowIsReportedByTheWriterThread() async {
        let pipe = Pipe()
        Glibc.close(pipe.read)
        let callerLock = Mutex(0)
        let reports = Mutex(0)
        let reported = AsyncStream<Void>.makeStream()
        let writer = FrameWriter(
            fd: pipe.write,
            onFailure: { _ in
                callerLock.withLock { $0 += 1 }
                reports.withLock { $0 += 1 }
                reported.continuation.yield()
            })
        signal(SIGPIPE, SIG_IGN)
        callerLock.withLock { _ in writer.sendNow(Array("into the void".utf8)) }
        var iterator = reported.stream.makeAsyncIterator()
        await iterator.next()
        writer.sendNow(Array("dropped".utf8))
        writer.send(Array("dropped too".utf8))
        writer.stop()
        #expect(reports.withLock { $0 } == 1)
        Glibc.close(pipe.write)
    }
}

extension String {
    fileprivate func leftPadded(to width: Int) -> String {
        String(repeating: "0", count: max(0, width - count)) + self
    }
}
