@testable import AuthBridgePluginHost
import AuthBridgePluginABI

/// A small ELF shared object to feed `ELFCheck` (never `dlopen`ed): one PT_LOAD over the whole
/// file, a PT_DYNAMIC with DT_NEEDED entries, and a PT_NOTE. Tests break it through `Image`'s
/// offsets to play a hostile file.
struct ELFBuilder {
    var needed: [String] = []
    var notes: [ELFCheck.Note] = []
    /// The PT_NOTE segment's p_align (4, or 8 for gABI's 8-byte padding).
    var noteAlign: UInt64 = 4

    /// The built file and where its parts are.
    struct Image {
        var bytes: [UInt8]
        static let programHeaders = 64
        /// Program header index of PT_LOAD, PT_DYNAMIC, PT_NOTE.
        static let load = 0, dynamic = 1, note = 2
        var strings: Int
        var dynamic: Int
        var notes: Int

        /// Byte offset of a field of program header `index` (p_offset 8, p_vaddr 16, p_filesz 32, p_align 48).
        static func programHeader(_ index: Int, field: Int) -> Int { programHeaders + index * 56 + field }
        /// Byte offset of the value (d_val) of dynamic entry `index`.
        func dynamicValue(_ index: Int) -> Int { dynamic + index * 16 + 8 }
        /// Index of the first dynamic entry with `tag`.
        func dynamicEntry(_ tag: UInt64) -> Int {
            (0...).first { bytes.u64(at: dynamic + $0 * 16) == tag }!
        }
    }

    static let dtNull: UInt64 = 0, dtNeeded: UInt64 = 1, dtStrtab: UInt64 = 5, dtStrsz: UInt64 = 10

    /// A Swift plugin's shape: it needs libswiftCore.so and carries `descriptor` as its runtime note.
    static func swiftPlugin(descriptor: [UInt8]?) -> ELFBuilder {
        var builder = ELFBuilder(needed: ["libswiftCore.so", "libc.so.6"])
        builder.notes.append(ELFCheck.Note(owner: "GNU", type: 3, descriptor: Array(repeating: 0xAB, count: 20)))
        if let descriptor {
            builder.notes.append(ELFCheck.Note(owner: SwiftRuntimeNote.owner, type: SwiftRuntimeNote.type, descriptor: descriptor))
        }
        return builder
    }

    func build() -> Image {
        var bytes = [UInt8](repeating: 0, count: Image.programHeaders + 3 * 56)
        let strings = bytes.count
        var stringOffsets: [UInt64] = []
        bytes.append(0)
        for name in needed {
            stringOffsets.append(UInt64(bytes.count - strings))
            bytes += Array(name.utf8) + [0]
        }
        let stringSize = UInt64(bytes.count - strings)
        bytes.pad(to: 8)
        let dynamic = bytes.count
        let entries: [(UInt64, UInt64)] =
            stringOffsets.map { (Self.dtNeeded, $0) }
            + [(Self.dtStrtab, UInt64(strings)), (Self.dtStrsz, stringSize), (Self.dtNull, 0)]
        for (tag, value) in entries {
            bytes.append64(tag)
            bytes.append64(value)
        }
        let notesStart = bytes.count
        for note in notes {
            let name = Array(note.owner.utf8) + [0]
            bytes.append32(UInt32(name.count))
            bytes.append32(UInt32(note.descriptor.count))
            bytes.append32(note.type)
            bytes += name
            bytes.pad(to: Int(noteAlign))
            bytes += note.descriptor
            bytes.pad(to: Int(noteAlign))
        }
        let notesEnd = bytes.count

        bytes.replace(at: 0, [0x7F, 0x45, 0x4C, 0x46, 2, 1, 1])
        bytes.put16(3, at: 16) // ET_DYN
        #if arch(arm64)
        bytes.put16(183, at: 18)
        #else
        bytes.put16(62, at: 18)
        #endif
        bytes.put32(1, at: 20)
        bytes.put64(UInt64(Image.programHeaders), at: 32)
        bytes.put16(64, at: 52)
        bytes.put16(56, at: 54)
        bytes.put16(3, at: 56)
        let segments: [(type: UInt32, offset: Int, size: Int, align: UInt64)] = [
            (1, 0, bytes.count, 0x1000), (2, dynamic, notesStart - dynamic, 8), (4, notesStart, notesEnd - notesStart, noteAlign),
        ]
        for (index, segment) in segments.enumerated() {
            let at = Image.programHeader(index, field: 0)
            bytes.put32(segment.type, at: at)
            bytes.put32(4, at: at + 4) // PF_R
            for field in [8, 16, 24] { bytes.put64(UInt64(segment.offset), at: at + field) }
            for field in [32, 40] { bytes.put64(UInt64(segment.size), at: at + field) }
            bytes.put64(segment.align, at: at + 48)
        }
        return Image(bytes: bytes, strings: strings, dynamic: dynamic, notes: notesStart)
    }
}

extension [UInt8] {
    mutating func pad(to alignment: Int) {
        while count % alignment != 0 { append(0) }
    }

    mutating func replace(at offset: Int, _ values: [UInt8]) {
        replaceSubrange(offset..<offset + values.count, with: values)
    }

    mutating func put(_ value: UInt64, bytes width: Int, at offset: Int) {
        replace(at: offset, (0..<width).map { UInt8(truncatingIfNeeded: value >> (8 * UInt64($0))) })
    }

    mutating func put16(_ value: UInt64, at offset: Int) { put(value, bytes: 2, at: offset) }
    mutating func put32(_ value: UInt32, at offset: Int) { put(UInt64(value), bytes: 4, at: offset) }
    mutating func put64(_ value: UInt64, at offset: Int) { put(value, bytes: 8, at: offset) }
    mutating func append32(_ value: UInt32) {
        self += [UInt8](repeating: 0, count: 4)
        put32(value, at: count - 4)
    }
    mutating func append64(_ value: UInt64) {
        self += [UInt8](repeating: 0, count: 8)
        put64(value, at: count - 8)
    }

    func u64(at offset: Int) -> UInt64 {
        (0..<8).reduce(UInt64(0)) { $0 | UInt64(self[offset + $1]) << (8 * UInt64($1)) }
    }

    /// Where the descriptor of the Swift runtime note starts: the note is found by its header and
    /// owner name (namesz 11, descsz 16, type, "AuthBridge\0\0").
    func swiftRuntimeDescriptorOffsets() -> [Int] {
        var header: [UInt8] = []
        header.append32(UInt32(SwiftRuntimeNote.owner.utf8.count + 1))
        header.append32(UInt32(SwiftRuntimeNote.descriptorSize))
        header.append32(SwiftRuntimeNote.type)
        header += Array(SwiftRuntimeNote.owner.utf8) + [0, 0]
        guard count >= header.count else { return [] }
        return (0...(count - header.count)).filter { start in
            self[start] == header[0] && self[start..<start + header.count].elementsEqual(header)
        }.map { $0 + header.count }
    }
}

/// The descriptor of a Swift runtime note naming `version`.
func runtimeDescriptor(_ major: UInt32, _ minor: UInt32, _ patch: UInt32, flags: UInt32 = 0) -> [UInt8] {
    var bytes: [UInt8] = []
    for word in [major, minor, patch, flags] { bytes.append32(word) }
    return bytes
}
