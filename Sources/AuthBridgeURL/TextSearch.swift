// Substring search and replacement over UTF-8, for a host built without the _StringProcessing
// module (its `contains(_:)` and `replacing(_:with:)` for strings): linked, it and _RegexParser
// cost every start 0.9 MB of resident memory (bench/README, "Start-up"). The Makefile builds
// with `-disable-implicit-string-processing-module-import`, so a use of those creeps back in
// only as a compile error.
//
// Matching is by UTF-8 bytes, not by grapheme clusters: "é" as one scalar and as "e" + U+0301
// differ, and a needle may match inside a cluster. Every caller searches for ASCII text or for
// exact secrets, where bytes are what matter.

extension StringProtocol {
    /// Whether `needle` occurs in this string (an empty needle always does).
    public func hasSubstring(_ needle: some StringProtocol) -> Bool {
        TextSearch.firstOffset(of: Array(needle.utf8), in: Array(utf8), from: 0) != nil
    }
}

extension String {
    /// This string with every occurrence of `needle` (left to right, not overlapping) replaced
    /// by `replacement`; unchanged when `needle` is empty.
    public func replacingEvery(_ needle: some StringProtocol, with replacement: some StringProtocol) -> String {
        let target = Array(needle.utf8)
        let bytes = Array(utf8)
        guard !target.isEmpty, var found = TextSearch.firstOffset(of: target, in: bytes, from: 0) else { return self }
        var output: [UInt8] = []
        output.reserveCapacity(bytes.count)
        var start = 0
        while true {
            output += bytes[start..<found]
            output += replacement.utf8
            start = found + target.count
            guard let next = TextSearch.firstOffset(of: target, in: bytes, from: start) else { break }
            found = next
        }
        output += bytes[start...]
        return String(decoding: output, as: UTF8.self)
    }
}

enum TextSearch {
    /// The offset of the first `needle` in `haystack` at or after `start`.
    static func firstOffset(of needle: [UInt8], in haystack: [UInt8], from start: Int) -> Int? {
        guard !needle.isEmpty else { return start <= haystack.count ? start : nil }
        guard haystack.count >= needle.count, start <= haystack.count - needle.count else { return nil }
        var index = start
        while index <= haystack.count - needle.count {
            if haystack[index] == needle[0], haystack[index..<index + needle.count].elementsEqual(needle) { return index }
            index += 1
        }
        return nil
    }
}
