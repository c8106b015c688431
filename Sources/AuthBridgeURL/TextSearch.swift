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
        let target = Array(needle.utf8)
        return withUTF8Bytes { TextSearch.firstOffset(of: target, in: $0, from: 0) != nil }
    }

    /// The string's UTF-8 bytes where they are, copied only when the string keeps them apart.
    func withUTF8Bytes<Result>(_ body: (UnsafeBufferPointer<UInt8>) -> Result) -> Result {
        if let result = utf8.withContiguousStorageIfAvailable(body) { return result }
        return Array(utf8).withUnsafeBufferPointer(body)
    }
}

extension String {
    /// This string with every occurrence of `needle` (left to right, not overlapping) replaced
    /// by `replacement`; unchanged when `needle` is empty.
    public func replacingEvery(_ needle: some StringProtocol, with replacement: some StringProtocol) -> String {
        let target = Array(needle.utf8)
        guard !target.isEmpty else { return self }
        let replaced = withUTF8Bytes { bytes -> [UInt8]? in
            guard var found = TextSearch.firstOffset(of: target, in: bytes, from: 0) else { return nil }
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
            return output
        }
        return replaced.map { String(decoding: $0, as: UTF8.self) } ?? self
    }
}

enum TextSearch {
    /// The offset of the first `needle` in `haystack` at or after `start`. Naive, for the short
    /// needles of ordinary text; many needles at once (the secrets a host holds) are a
    /// `SubstringSet`'s.
    static func firstOffset(of needle: [UInt8], in haystack: UnsafeBufferPointer<UInt8>, from start: Int) -> Int? {
        guard !needle.isEmpty else { return start <= haystack.count ? start : nil }
        guard haystack.count >= needle.count, start <= haystack.count - needle.count else { return nil }
        let first = needle[0]
        var index = start
        while index <= haystack.count - needle.count {
            if haystack[index] == first, haystack[index..<index + needle.count].elementsEqual(needle) { return index }
            index += 1
        }
        return nil
    }
}
