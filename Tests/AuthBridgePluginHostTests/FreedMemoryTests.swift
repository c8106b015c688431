import CAuthBridgeProcess
import Testing

#if canImport(Glibc)
import Glibc
#endif

// What the agent's trimming thread calls (issue 32): glibc keeps what is freed in its arenas;
// ab_process_trim_freed_memory gives the pages back when enough is held free. (Here with the
// other process-level C pieces, as RunnerConfinementTests: this target links CAuthBridgeProcess.)

@Suite("Freed memory")
struct FreedMemoryTests {
    @Test func whatWasFreedIsGivenBack() {
        // 20 MiB in blocks below the mmap threshold (they come from an arena), written, then freed.
        let blocks = UnsafeMutablePointer<UnsafeMutableRawPointer?>.allocate(capacity: 80_000)
        defer { blocks.deallocate() }
        for index in 0..<80_000 {
            blocks[index] = malloc(256)
            if let block = blocks[index] { memset(block, 1, 256) }
        }
        for index in 0..<80_000 { free(blocks[index]) }
        #expect(ab_process_trim_freed_memory(1 << 20) == 1)
    }

    @Test func belowTheThresholdNothingIsDone() {
        #expect(ab_process_trim_freed_memory(Int.max) == 0)
    }
}
