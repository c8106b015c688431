@testable import AuthBridgeRPC
import Testing

#if canImport(Glibc)
import Glibc
#endif

@Suite("Frame reader")
struct FrameReaderTests {
    /// Feeds `input` through a pipe and collects what the reader reports.
    private func frames(_ input: [UInt8], maxFrameBytes: Int = 1 << 20, budget: FrameBudget? = nil) -> [String] {
        var fds: [Int32] = [0, 0]
        #expect(pipe(&fds) == 0)
        let writer = Thread { fd, bytes in
            bytes.withUnsafeBytes { buffer in
                var offset = 0
                while offset < buffer.count {
                    let written = write(fd, buffer.baseAddress! + offset, buffer.count - offset)
                    if written <= 0 { break }
                    offset += written
                }
            }
            close(fd)
        }
        writer.start(fds[1], input)
        var seen: [String] = []
        FrameReader(fd: fds[0], maxFrameBytes: maxFrameBytes, budget: budget).run { event in
            switch event {
            case .frame(let bytes): seen.append(String(decoding: bytes, as: UTF8.self))
            case .tooLarge(let count): seen.append("<too large: \(count)>")
            }
            return true
        }
        close(fds[0])
        writer.join()
        return seen
    }

    @Test func splitsLinesAndDropsCarriageReturnsAndBlankLines() {
        #expect(frames(Array("a\r\n\n  \nb\nc".utf8)) == ["a", "b", "c"])
    }

    @Test func framesSpanningManyReadsAreReassembled() {
        let big = String(repeating: "x", count: 700_000)
        #expect(frames(Array("\(big)\nend\n".utf8)) == [big, "end"])
    }

    @Test func overLongFramesAreReportedOnceAndSkipped() {
        let big = String(repeating: "y", count: 5_000)
        #expect(frames(Array("ok\n\(big)\nnext\n".utf8), maxFrameBytes: 1_000) == ["ok", "<too large: 5000>", "next"])
    }

    /// Issue 26: an unfinished line grows only as far as the budget it shares with other
    /// connections' lines; one it cannot hold is dropped and reported, and the reader goes on.
    @Test func aLineTheSharedBudgetCannotHoldIsDroppedAndTheBudgetGivenBack() {
        let budget = FrameBudget(limit: 1 << 20)
        #expect(budget.take(1 << 20)) // another connection holds it all
        let big = String(repeating: "z", count: 300_000)
        #expect(frames(Array("ok\n\(big)\nnext\n".utf8), budget: budget) == ["ok", "<too large: 300000>", "next"])
        budget.give(1 << 20)
        #expect(budget.inUse == 0)
        // With room, the same line passes, and what it took is given back once it is handed out.
        #expect(frames(Array("\(big)\nnext\n".utf8), budget: budget) == [big, "next"])
        #expect(budget.inUse == 0)
    }

    /// A line is charged for the bytes it holds, not for the capacity its growth reserved: a line
    /// of 650,000 bytes whose reads doubled its capacity to 1 MiB took 960 KiB of the budget, so
    /// a budget of 700,000 bytes refused it, and what it took was unavailable to other connections
    /// (test_agent's unfinished-frames scenario failed when reads fell that way).
    @Test func aLineIsChargedForWhatItHoldsNotForItsCapacity() {
        let budget = FrameBudget(limit: 700_000)
        let big = String(repeating: "w", count: 650_000)
        // Compared by length: a failure must not print 650,000 characters.
        #expect(frames(Array("\(big)\nnext\n".utf8), budget: budget).map(\.count) == [650_000, 4])
        #expect(budget.inUse == 0)
    }
}

/// A joinable thread for feeding pipes in tests.
private final class Thread: @unchecked Sendable {
    private var handle = pthread_t()
    private let body: (Int32, [UInt8]) -> Void
    private var fd: Int32 = -1
    private var bytes: [UInt8] = []

    init(_ body: @escaping (Int32, [UInt8]) -> Void) { self.body = body }

    func start(_ fd: Int32, _ bytes: [UInt8]) {
        self.fd = fd
        self.bytes = bytes
        let context = Unmanaged.passRetained(self).toOpaque()
        pthread_create(
            &handle, nil,
            { raw in
                let thread = Unmanaged<Thread>.fromOpaque(raw!).takeRetainedValue()
                thread.body(thread.fd, thread.bytes)
                return nil
            }, context)
    }

    func join() { pthread_join(handle, nil) }
}
