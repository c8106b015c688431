#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Checks that a file is a complete ELF shared object for this machine
/// before it reaches `dlopen`: the dynamic loader maps a truncated library
/// and the process dies of SIGBUS when it touches the missing pages, so a
/// half-copied plugin must be refused here. It also reads, from the file, what
/// the loader decides on before any plugin code runs: the libraries the plugin
/// needs (DT_NEEDED) and its ELF notes (where the Swift runtime note lives).
///
/// The file may be hostile: every offset and size in it is checked against the
/// file and its segments before it is used, and anything that does not add up
/// is a `loadFailed` refusal, never a read out of bounds or a trap.
enum ELFCheck {
    /// What the file says about itself.
    struct Library: Equatable {
        /// DT_NEEDED names, in order.
        var needed: [String] = []
        /// DT_RUNPATH and DT_RPATH entries (`$ORIGIN/lib`…), in order.
        var searchPaths: [String] = []
        /// The notes of every PT_NOTE segment, in order.
        var notes: [Note] = []

        /// A Swift library: it needs the Swift runtime's core library.
        var needsSwiftRuntime: Bool {
            needed.contains { $0 == "libswiftCore.so" || $0.hasPrefix("libswiftCore.so.") }
        }
    }

    struct Note: Equatable {
        /// The name field without its terminating NUL(s).
        var owner: String
        var type: UInt32
        var descriptor: [UInt8]
    }

    /// Bounds on what is read: real libraries stay far below them.
    static let maxDynamicSize: UInt64 = 64 << 10
    static let maxNoteSegmentSize: UInt64 = 64 << 10
    static let maxNameLength: UInt64 = 4096

    /// Checks the file at `path` (tests; the loader checks the descriptor it vetted).
    @discardableResult
    static func validate(_ path: String) throws(PluginLoadError) -> Library {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw PluginLoadError(.loadFailed, "cannot open \(path)") }
        defer { close(fd) }
        return try validate(fd: fd, path: path)
    }

    /// Checks the file open as `fd` (read with `pread`: its offset does not
    /// move); `path` is for messages.
    @discardableResult
    static func validate(fd: Int32, path: String) throws(PluginLoadError) -> Library {
        var info = stat()
        guard fstat(fd, &info) == 0 else { throw PluginLoadError(.loadFailed, "cannot stat \(path)") }
        let size = UInt64(info.st_size)

        /// `count` bytes at `offset`, or nil when they are not all in the file.
        func read(_ count: UInt64, at offset: UInt64) -> [UInt8]? {
            guard let last = end(offset, count, 1), last <= size, count <= Int.max else { return nil }
            var bytes = [UInt8](repeating: 0, count: Int(count))
            let got = bytes.withUnsafeMutableBytes { pread(fd, $0.baseAddress, Int(count), off_t(offset)) }
            return got == Int(count) ? bytes : nil
        }
        func fail(_ why: String) -> PluginLoadError {
            PluginLoadError(.loadFailed, "\(path) is not a loadable shared library: \(why)")
        }

        guard let header = read(64, at: 0) else { throw fail("the file is too short for an ELF header") }
        guard header[0] == 0x7F, header[1] == 0x45, header[2] == 0x4C, header[3] == 0x46 else {
            throw fail("no ELF signature")
        }
        guard header[4] == 2, header[5] == 1 else { throw fail("not a 64-bit little-endian ELF file") }
        guard u16(header, 16) == 3 else { throw fail("not a shared object (ET_DYN)") }
        #if arch(x86_64)
        let machine: UInt64 = 62
        #elseif arch(arm64)
        let machine: UInt64 = 183
        #else
        let machine = u16(header, 18)
        #endif
        guard u16(header, 18) == machine else { throw fail("built for another processor (e_machine \(u16(header, 18)))") }

        let programHeaders = u64(header, 32), entrySize = u16(header, 54), count = u16(header, 56)
        guard entrySize >= 56, count > 0, let tableEnd = end(programHeaders, entrySize, count), tableEnd <= size else {
            throw fail("its program headers lie outside the file (truncated?)")
        }
        var loads: [Segment] = [], dynamic: Segment?, noteSegments: [Segment] = []
        for index in 0..<count {
            guard let entry = read(56, at: programHeaders + index * entrySize) else { throw fail("unreadable program header") }
            let segment = Segment(offset: u64(entry, 8), address: u64(entry, 16), fileSize: u64(entry, 32), align: u64(entry, 48))
            switch u32(entry, 0) {
            case 1: // PT_LOAD
                guard let segmentEnd = end(segment.offset, segment.fileSize, 1), segmentEnd <= size else {
                    throw fail("a loadable segment ends past the end of the file (\(size) bytes): the file is truncated")
                }
                loads.append(segment)
            case 2: // PT_DYNAMIC
                if dynamic == nil { dynamic = segment }
            case 4: // PT_NOTE
                noteSegments.append(segment)
            default:
                break
            }
        }
        let sections = u64(header, 40), sectionSize = u16(header, 58), sectionCount = u16(header, 60)
        if sections != 0, (end(sections, sectionSize, sectionCount) ?? .max) > size {
            throw fail("its section headers lie past the end of the file (\(size) bytes): the file is truncated")
        }

        var library = Library()
        if let dynamic {
            (library.needed, library.searchPaths) = try neededLibraries(dynamic, loads: loads, read: read, fail: fail)
        }
        for segment in noteSegments {
            library.notes += try notes(segment, read: read, fail: fail)
        }
        return library
    }

    struct Segment {
        var offset: UInt64
        var address: UInt64
        var fileSize: UInt64
        var align: UInt64
    }

    typealias Reader = (UInt64, UInt64) -> [UInt8]?
    typealias Failure = (String) -> PluginLoadError

    /// DT_NEEDED names and DT_RUNPATH/DT_RPATH entries: the dynamic table up to DT_NULL, its
    /// names in the string table that DT_STRTAB (an address) and DT_STRSZ locate inside a PT_LOAD
    /// segment.
    private static func neededLibraries(
        _ dynamic: Segment, loads: [Segment], read: Reader,
        fail: Failure
    ) throws(PluginLoadError) -> (needed: [String], searchPaths: [String]) {
        guard dynamic.fileSize <= maxDynamicSize, let table = read(dynamic.fileSize, dynamic.offset) else {
            throw fail("its dynamic section (\(dynamic.fileSize) bytes at \(dynamic.offset)) lies outside the file or is implausibly large")
        }
        var neededOffsets: [UInt64] = [], searchOffsets: [UInt64] = [], stringTable: UInt64?, stringTableSize: UInt64?, terminated = false
        for start in stride(from: 0, to: table.count - 15, by: 16) {
            let value = u64(table, start + 8)
            switch u64(table, start) {
            case 0: terminated = true // DT_NULL
            case 1: neededOffsets.append(value) // DT_NEEDED
            case 15, 29: searchOffsets.append(value) // DT_RPATH, DT_RUNPATH
            case 5: stringTable = value // DT_STRTAB
            case 10: stringTableSize = value // DT_STRSZ
            default: break
            }
            if terminated { break }
        }
        guard terminated else { throw fail("its dynamic section has no DT_NULL end") }
        guard !neededOffsets.isEmpty || !searchOffsets.isEmpty else { return ([], []) }
        guard let stringTable, let stringTableSize else {
            throw fail("its dynamic section names needed libraries but no string table (DT_STRTAB, DT_STRSZ)")
        }
        // The string table, as an offset in the file: inside one PT_LOAD segment's file bytes.
        guard let load = loads.first(where: { stringTable >= $0.address && stringTable - $0.address < $0.fileSize }),
            stringTableSize <= load.fileSize - (stringTable - load.address)
        else {
            throw fail("its dynamic string table (\(stringTableSize) bytes at address \(stringTable)) is not inside a loadable segment")
        }
        let tableOffset = load.offset + (stringTable - load.address)
        func name(at offset: UInt64) throws(PluginLoadError) -> String {
            guard offset < stringTableSize,
                let bytes = read(min(stringTableSize - offset, maxNameLength), tableOffset + offset),
                let nul = bytes.firstIndex(of: 0)
            else {
                throw fail("a needed library's name (at \(offset) in the dynamic string table) is outside the table or unterminated")
            }
            return String(decoding: bytes[..<nul], as: UTF8.self)
        }
        var needed: [String] = [], searchPaths: [String] = []
        for offset in neededOffsets { needed.append(try name(at: offset)) }
        for offset in searchOffsets { searchPaths += try name(at: offset).split(separator: ":").map(String.init) }
        return (needed, searchPaths)
    }

    /// The notes of one PT_NOTE segment: namesz, descsz, type, then name and descriptor, each
    /// padded to 4 bytes (8 in a segment aligned to 8, as gABI and glibc read them).
    private static func notes(_ segment: Segment, read: Reader, fail: Failure) throws(PluginLoadError) -> [Note] {
        guard segment.fileSize <= maxNoteSegmentSize, let bytes = read(segment.fileSize, segment.offset) else {
            throw fail("a note segment (\(segment.fileSize) bytes at \(segment.offset)) lies outside the file or is implausibly large")
        }
        let alignment: UInt64 = segment.align == 8 ? 8 : 4
        func padded(_ value: UInt64) -> UInt64 { (value + alignment - 1) & ~(alignment - 1) }
        var notes: [Note] = [], position: UInt64 = 0
        let total = UInt64(bytes.count)
        // Sizes are 32-bit and the segment at most 64 KiB: these sums cannot overflow 64 bits.
        while total - position >= 12 {
            let start = Int(position)
            let nameSize = UInt64(u32(bytes, start)), descriptorSize = UInt64(u32(bytes, start + 4))
            let nameStart = position + 12, descriptorStart = padded(nameStart + nameSize)
            guard descriptorStart <= total, descriptorStart + descriptorSize <= total else {
                throw fail("a note (name \(nameSize) bytes, descriptor \(descriptorSize) bytes) runs past the end of its segment")
            }
            var name = bytes[Int(nameStart)..<Int(nameStart + nameSize)]
            while name.last == 0 { name = name.dropLast() }
            notes.append(
                Note(
                    owner: String(decoding: name, as: UTF8.self), type: u32(bytes, start + 8),
                    descriptor: Array(bytes[Int(descriptorStart)..<Int(descriptorStart + descriptorSize)])))
            position = min(total, padded(descriptorStart + descriptorSize))
        }
        return notes
    }

    /// start + size * count, or nil on overflow.
    private static func end(_ start: UInt64, _ size: UInt64, _ count: UInt64) -> UInt64? {
        let (length, overflow) = size.multipliedReportingOverflow(by: count)
        let (sum, overflow2) = start.addingReportingOverflow(length)
        return overflow || overflow2 ? nil : sum
    }

    private static func u16(_ bytes: [UInt8], _ at: Int) -> UInt64 { UInt64(bytes[at]) | UInt64(bytes[at + 1]) << 8 }
    private static func u32(_ bytes: [UInt8], _ at: Int) -> UInt32 {
        (0..<4).reduce(UInt32(0)) { $0 | UInt32(bytes[at + $1]) << (8 * UInt32($1)) }
    }
    private static func u64(_ bytes: [UInt8], _ at: Int) -> UInt64 {
        (0..<8).reduce(UInt64(0)) { $0 | UInt64(bytes[at + $1]) << (8 * UInt64($1)) }
    }
}
