#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Checks that a file is a complete ELF shared object for this machine
/// before it reaches `dlopen`: the dynamic loader maps a truncated library
/// and the process dies of SIGBUS when it touches the missing pages, so a
/// half-copied plugin must be refused here.
enum ELFCheck {
    static func validate(_ path: String) throws(PluginLoadError) {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw PluginLoadError(.loadFailed, "cannot open \(path)") }
        defer { close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0 else { throw PluginLoadError(.loadFailed, "cannot stat \(path)") }
        let size = UInt64(info.st_size)

        func read(_ count: Int, at offset: UInt64) -> [UInt8]? {
            guard offset + UInt64(count) <= size else { return nil }
            var bytes = [UInt8](repeating: 0, count: count)
            let got = bytes.withUnsafeMutableBytes { pread(fd, $0.baseAddress, count, off_t(offset)) }
            return got == count ? bytes : nil
        }
        func fail(_ why: String) -> PluginLoadError {
            PluginLoadError(.loadFailed, "\(path) is not a loadable shared library: \(why)")
        }

        guard let header = read(64, at: 0) else { throw fail("the file is too short for an ELF header") }
        guard header[0] == 0x7F, header[1] == 0x45, header[2] == 0x4C, header[3] == 0x46 else {
            throw fail("no ELF signature")
        }
        guard header[4] == 2, header[5] == 1 else { throw fail("not a 64-bit little-endian ELF file") }
        func u16(_ bytes: [UInt8], _ at: Int) -> UInt64 { UInt64(bytes[at]) | UInt64(bytes[at + 1]) << 8 }
        func u64(_ bytes: [UInt8], _ at: Int) -> UInt64 {
            (0..<8).reduce(UInt64(0)) { $0 | UInt64(bytes[at + $1]) << (8 * UInt64($1)) }
        }
        guard u16(header, 16) == 3 else { throw fail("not a shared object (ET_DYN)") }
        #if arch(x86_64)
        let machine: UInt64 = 62
        #elseif arch(arm64)
        let machine: UInt64 = 183
        #else
        let machine = u16(header, 18)
        #endif
        guard u16(header, 18) == machine else { throw fail("built for another processor (e_machine \(u16(header, 18)))") }

        /// start + size * count, or nil on overflow.
        func end(_ start: UInt64, _ size: UInt64, _ count: UInt64) -> UInt64? {
            let (length, overflow) = size.multipliedReportingOverflow(by: count)
            let (sum, overflow2) = start.addingReportingOverflow(length)
            return overflow || overflow2 ? nil : sum
        }
        let programHeaders = u64(header, 32), entrySize = u16(header, 54), count = u16(header, 56)
        guard entrySize >= 56, count > 0, let tableEnd = end(programHeaders, entrySize, count), tableEnd <= size else {
            throw fail("its program headers lie outside the file (truncated?)")
        }
        for index in 0..<count {
            guard let entry = read(56, at: programHeaders + index * entrySize) else { throw fail("unreadable program header") }
            let type = UInt32(entry[0]) | UInt32(entry[1]) << 8 | UInt32(entry[2]) << 16 | UInt32(entry[3]) << 24
            guard type == 1 else { continue }  // PT_LOAD
            let offset = u64(entry, 8), fileSize = u64(entry, 32)
            guard let segmentEnd = end(offset, fileSize, 1), segmentEnd <= size else {
                throw fail("a loadable segment ends past the end of the file (\(size) bytes): the file is truncated")
            }
        }
        let sections = u64(header, 40), sectionSize = u16(header, 58), sectionCount = u16(header, 60)
        if sections != 0, (end(sections, sectionSize, sectionCount) ?? .max) > size {
            throw fail("its section headers lie past the end of the file (\(size) bytes): the file is truncated")
        }
    }
}
