@testable import AuthBridgeURL
import Testing

/// The covered ranges found the slow way: every occurrence of every needle, joined where
/// they overlap (side by side they stay apart).
private func coveredSlowly(_ needles: [[UInt8]], _ text: [UInt8]) -> [Range<Int>] {
    var occurrences: [Range<Int>] = []
    for needle in needles where !needle.isEmpty && needle.count <= text.count {
        for start in 0...(text.count - needle.count) where Array(text[start..<start + needle.count]) == needle {
            occurrences.append(start..<start + needle.count)
        }
    }
    var joined: [Range<Int>] = []
    for occurrence in occurrences.sorted(by: { $0.lowerBound < $1.lowerBound }) {
        if let last = joined.last, occurrence.lowerBound < last.upperBound {
            joined[joined.count - 1] = last.lowerBound..<max(last.upperBound, occurrence.upperBound)
        } else {
            joined.append(occurrence)
        }
    }
    return joined
}

private func covered(_ set: SubstringSet, _ text: [UInt8], steps: inout Int) -> [Range<Int>] {
    text.withUnsafeBufferPointer { set.coveredRanges(in: $0, steps: &steps) }
}

/// A small generator, so that failures repeat.
private struct Random {
    var state: UInt64
    mutating func next(_ bound: Int) -> Int {
        state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
        return Int((state >> 33) % UInt64(bound))
    }
    mutating func bytes(_ count: Int, alphabet: Int) -> [UInt8] { (0..<count).map { _ in UInt8(97 + next(alphabet)) } }
}

@Suite("Substring sets")
struct SubstringSetTests {
    @Test func everyOccurrenceOfEveryNeedleIsCovered() {
        let set = SubstringSet([Array("he".utf8), Array("she".utf8), Array("his".utf8), Array("hers".utf8)])
        var steps = 0
        #expect(covered(set, Array("ushers".utf8), steps: &steps) == [1..<6], "she, he and hers overlap")
        #expect(covered(set, Array("his she".utf8), steps: &steps) == [0..<3, 4..<7])
        #expect(covered(set, Array("hehe".utf8), steps: &steps) == [0..<2, 2..<4], "side by side, apart")
        #expect(covered(set, Array("nothing".utf8), steps: &steps) == [])
        #expect(set.count == 4)
    }

    @Test func emptyNeedlesAndRepeatsAreLeftOut() {
        #expect(SubstringSet([]).isEmpty)
        #expect(SubstringSet([[]]).isEmpty)
        #expect(SubstringSet([Array("ab".utf8), Array("ab".utf8), []]).count == 1)
        var steps = 0
        #expect(covered(SubstringSet([[]]), Array("abc".utf8), steps: &steps) == [])
    }

    @Test func aNeedleThatIsAPrefixOrSuffixOfAnotherIsFound() {
        let set = SubstringSet([Array("abcdef".utf8), Array("abc".utf8), Array("def".utf8), Array("cd".utf8)])
        var steps = 0
        #expect(covered(set, Array("xabcx".utf8), steps: &steps) == [1..<4])
        #expect(covered(set, Array("xdefx".utf8), steps: &steps) == [1..<4])
        #expect(covered(set, Array("abcdeabcdef".utf8), steps: &steps) == [0..<4, 5..<11])
    }

    @Test func replacingKeepsEverythingElseByteForByte() {
        let set = SubstringSet([Array("sécret".utf8), Array("token-1".utf8)])
        #expect(set.replacingCovered(in: "é sécret € token-1token-1 ü", with: "[X]") == "é [X] € [X][X] ü")
        #expect(set.replacingCovered(in: "nothing to see: naïve", with: "[X]") == "nothing to see: naïve")
        #expect(set.replacingCovered(in: "", with: "[X]") == "")
        #expect(SubstringSet([]).replacingCovered(in: "sécret", with: "[X]") == "sécret")
    }

    /// Against the slow way, on a small alphabet where needles overlap, nest and repeat.
    @Test func randomNeedlesAndTextsAgreeWithTheSlowWay() {
        var random = Random(state: 26)
        for _ in 0..<300 {
            let alphabet = 2 + random.next(3)
            let needles = (0..<(1 + random.next(12))).map { _ in random.bytes(1 + random.next(6), alphabet: alphabet) }
            let set = SubstringSet(needles)
            let text = random.bytes(random.next(80), alphabet: alphabet)
            var steps = 0
            let found = covered(set, text, steps: &steps)
            #expect(
                found == coveredSlowly(needles, text),
                "needles \(needles.map { String(decoding: $0, as: UTF8.self) }), text \(String(decoding: text, as: UTF8.self))")
            #expect(steps <= 2 * text.count)
        }
    }

    /// One pass: at most two steps per byte, however many needles and whatever the text (the
    /// worst texts repeat a needle's start, or a needle, again and again).
    @Test func atMostTwoStepsPerByteWhateverTheNeedles() {
        var random = Random(state: 4711)
        let needles = (0..<2_560).map { _ in random.bytes(43 + random.next(20), alphabet: 26) }
        let set = SubstringSet(needles)
        let texts: [[UInt8]] = [
            [UInt8](repeating: 97, count: 1 << 18),
            Array(repeatElement(needles[0].dropLast(), count: (1 << 18) / 43).joined()),
            Array(repeatElement(needles[1], count: (1 << 18) / 43).joined()),
            random.bytes(1 << 18, alphabet: 26),
        ]
        for text in texts {
            var steps = 0
            _ = covered(set, text, steps: &steps)
            #expect(steps <= 2 * text.count, "\(steps) steps for \(text.count) bytes")
        }
        var steps = 0
        let length = needles[1].count
        #expect(covered(set, texts[2], steps: &steps) == (0..<texts[2].count / length).map { $0 * length..<($0 + 1) * length })
    }
}
