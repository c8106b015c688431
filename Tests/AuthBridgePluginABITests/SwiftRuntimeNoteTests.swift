import AuthBridgePluginABI
import Testing

@Suite("Swift runtime note")
struct SwiftRuntimeNoteTests {
    private func word(_ bytes: [UInt8], _ index: Int) -> UInt32 {
        (0..<4).reduce(UInt32(0)) { $0 | UInt32(bytes[index * 4 + $1]) << (8 * UInt32($1)) }
    }

    /// The ladder's literal words agree with the constants the host reads them by.
    @Test func theNoteIsAnELFNoteOfOurOwnerAndType() {
        let bytes = SwiftRuntimeNote.bytes
        let owner = Array(SwiftRuntimeNote.owner.utf8) + [0]
        let namePadded = (owner.count + 3) / 4 * 4
        #expect(bytes.count == 12 + namePadded + SwiftRuntimeNote.descriptorSize)
        #expect(word(bytes, 0) == UInt32(owner.count))
        #expect(word(bytes, 1) == UInt32(SwiftRuntimeNote.descriptorSize))
        #expect(word(bytes, 2) == SwiftRuntimeNote.type)
        #expect(Array(bytes[12..<12 + namePadded]) == owner + [UInt8](repeating: 0, count: namePadded - owner.count))
        #expect(SwiftRuntimeNote.version(descriptor: bytes[(12 + namePadded)...]) == SwiftRuntimeNote.compiled)
    }

    @Test func thisToolchainIsNamedExactly() {
        let compiled = SwiftRuntimeNote.compiled
        #expect(!compiled.isNewerThanNamed, "extend scripts/swift-runtime-ladder.py for this Swift")
        #expect(compiled.major >= 6)
        #expect(compiled.matches(compiled))
    }

    @Test func descriptorsAreReadByTheirFirstSixteenBytes() {
        let words: [UInt32] = [6, 2, 0, 0, 99]
        let bytes = words.flatMap { value in (0..<4).map { UInt8(truncatingIfNeeded: value >> (8 * UInt32($0))) } }
        #expect(SwiftRuntimeNote.version(descriptor: bytes) == SwiftRuntimeVersion(6, 2, 0))
        #expect(SwiftRuntimeNote.version(descriptor: bytes.prefix(15)) == nil)
        #expect(
            SwiftRuntimeNote.version(descriptor: [6, 0, 0, 0, 9, 0, 0, 0, 9, 0, 0, 0, 1, 0, 0, 0])
                == SwiftRuntimeVersion(6, 9, 9, isNewerThanNamed: true))
    }

    @Test func versionsMatchOnlyWhenExactlyKnownAndEqual() {
        #expect(SwiftRuntimeVersion(6, 3, 1).matches(SwiftRuntimeVersion(6, 3, 1)))
        #expect(!SwiftRuntimeVersion(6, 3, 1).matches(SwiftRuntimeVersion(6, 3, 0)))
        let newer = SwiftRuntimeVersion(6, 9, 9, isNewerThanNamed: true)
        #expect(!newer.matches(newer))
        #expect(!newer.matches(SwiftRuntimeVersion(6, 9, 9)))
        #expect("\(newer)" == "newer than 6.9.9" && "\(SwiftRuntimeVersion(6, 3, 1))" == "6.3.1")
    }
}
