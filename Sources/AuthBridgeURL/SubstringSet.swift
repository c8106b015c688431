/// A set of byte strings looked for together: where any of them occurs in a text, found in one
/// pass over the text, whatever their number (Aho–Corasick: a trie of the needles whose nodes
/// know where to go on when the next byte does not follow; Aho and Corasick, "Efficient string
/// matching", CACM 18(6), 1975).
///
/// Made for the secrets the host holds (`KnownSecrets`): hundreds of needles of 8 bytes to a few
/// KiB, looked for in every message, event and log line. Searching for one needle after the
/// other read the text once per needle: after 400 sign-in starts, seconds of CPU for a message of
/// a few MiB (issue 26). Each byte of the text now costs at most two steps.
///
/// Memory: 6 bytes per trie node (the needles' bytes less their shared prefixes): the node a
/// needle's next byte leads to is usually the next node (`chained`), so only where needles part
/// is an edge kept, in a small hash table. Immutable once made (`Sendable`): build a new set when
/// the needles change.
public struct SubstringSet: Sendable {
    /// The byte on the edge into each node (node 0 is the root).
    private let labels: [UInt8]
    /// Per node: `chained`, `branches`, `ends`, `matches`.
    private let flags: [UInt8]
    /// Per node: the node of the longest proper suffix of its path that is also a path.
    private let fail: [UInt32]
    /// The root's edges, by byte (0: none).
    private let rootEdges: [UInt32]
    /// The other edges that do not lead to the next node: keys `node << 8 | byte` (0: empty slot).
    private let edgeKeys: [UInt64]
    private let edgeTargets: [UInt32]
    /// The length of the longest needle that ends at each node flagged `matches`.
    private let longestMatch: [UInt32: UInt32]

    /// The node's edge on its next byte goes to the node after it.
    private static let chained: UInt8 = 1
    /// The node has edges in `edgeKeys`.
    private static let branches: UInt8 = 2
    /// A needle ends at the node (its path, or a suffix of it).
    private static let matches: UInt8 = 4
    /// The node's path is a needle (while the set is made).
    private static let ends: UInt8 = 8

    /// The number of needles (the empty one and repeats not counted).
    public let count: Int

    /// A set of `needles` (an empty needle is left out).
    public init(_ needles: some Sequence<[UInt8]>) {
        var labels: [UInt8] = [0]
        var flags: [UInt8] = [0]
        var rootEdges = [UInt32](repeating: 0, count: 256)
        var edges: [UInt64: UInt32] = [:]
        var needleLengths: [UInt32: UInt32] = [:]
        for needle in needles where !needle.isEmpty {
            // Down the trie as far as the needle's prefix is already there…
            var node: UInt32 = 0
            var index = 0
            while index < needle.count {
                let byte = needle[index]
                let next: UInt32? =
                    if node == 0 {
                        rootEdges[Int(byte)] == 0 ? nil : rootEdges[Int(byte)]
                    } else if flags[Int(node)] & Self.chained != 0 && labels[Int(node) + 1] == byte {
                        node + 1
                    } else {
                        edges[Self.key(node, byte)]
                    }
                guard let next else { break }
                node = next
                index += 1
            }
            // …then the rest as new nodes, one after the other.
            if index < needle.count {
                let first = UInt32(labels.count)
                if node == 0 {
                    rootEdges[Int(needle[index])] = first
                } else if node == first - 1 {
                    flags[Int(node)] |= Self.chained // the newest node has no edge yet
                } else {
                    edges[Self.key(node, needle[index])] = first
                    flags[Int(node)] |= Self.branches
                }
                labels.append(contentsOf: needle[index...])
                flags.append(contentsOf: repeatElement(Self.chained, count: needle.count - index - 1))
                flags.append(0)
                node = UInt32(labels.count - 1)
            }
            needleLengths[node] = UInt32(needle.count)
            flags[Int(node)] |= Self.ends
        }
        count = needleLengths.count

        // The edges off the chain, in an open-addressing table at most half full.
        var capacity = 2
        while capacity < edges.count * 2 { capacity <<= 1 }
        var edgeKeys = [UInt64](repeating: 0, count: capacity)
        var edgeTargets = [UInt32](repeating: 0, count: capacity)
        var children: [UInt32: [UInt32]] = [:]
        for (key, target) in edges {
            var slot = Self.slot(key, capacity - 1)
            while edgeKeys[slot] != 0 { slot = (slot + 1) & (capacity - 1) }
            edgeKeys[slot] = key
            edgeTargets[slot] = target
            children[UInt32(key >> 8), default: []].append(target)
        }

        // Failure links, breadth first (a node's link points to a shallower node), and the
        // longest needle ending at each node, its own or one its link's path ends with.
        var fail = [UInt32](repeating: 0, count: labels.count)
        var longestMatch: [UInt32: UInt32] = [:]
        var queue: [UInt32] = rootEdges.filter { $0 != 0 }
        queue.reserveCapacity(labels.count)
        /// A child's link: the deepest node its parent's links reach that has an edge on its byte.
        func link(_ child: UInt32, of parent: UInt32) {
            let byte = labels[Int(child)]
            var link = fail[Int(parent)]
            while true {
                let target = Self.step(
                    from: link, on: byte, labels: labels, flags: flags, rootEdges: rootEdges, edgeKeys: edgeKeys, edgeTargets: edgeTargets)
                if let target {
                    fail[Int(child)] = target
                    break
                }
                if link == 0 { break }
                link = fail[Int(link)]
            }
            queue.append(child)
        }
        var head = 0
        while head < queue.count {
            let node = queue[head]
            head += 1
            let nodeFlags = flags[Int(node)]
            let own = nodeFlags & Self.ends != 0 ? needleLengths[node] ?? 0 : 0
            let linked = flags[Int(fail[Int(node)])] & Self.matches != 0 ? longestMatch[fail[Int(node)]] ?? 0 : 0
            if max(own, linked) > 0 {
                longestMatch[node] = max(own, linked)
                flags[Int(node)] |= Self.matches
            }
            if nodeFlags & Self.chained != 0 { link(node + 1, of: node) }
            if nodeFlags & Self.branches != 0 {
                for child in children[node] ?? [] { link(child, of: node) }
            }
        }
        self.labels = labels
        self.flags = flags
        self.fail = fail
        self.rootEdges = rootEdges
        self.edgeKeys = edgeKeys
        self.edgeTargets = edgeTargets
        self.longestMatch = longestMatch
    }

    public var isEmpty: Bool { count == 0 }

    /// The parts of `text` (byte offsets, in order, apart) that some needle covers: every
    /// occurrence of every needle, overlapping occurrences joined into one range.
    public func coveredRanges(in text: UnsafeBufferPointer<UInt8>) -> [Range<Int>] {
        var steps = 0
        return coveredRanges(in: text, steps: &steps)
    }

    /// `coveredRanges(in:)`, counting the steps taken (an edge followed or a failure link): at
    /// most two per byte, which the tests hold.
    package func coveredRanges(in text: UnsafeBufferPointer<UInt8>, steps: inout Int) -> [Range<Int>] {
        guard !isEmpty else { return [] }
        var covered: [Range<Int>] = []
        var node: UInt32 = 0
        for offset in 0..<text.count {
            let byte = text[offset]
            while true {
                steps += 1
                if let next = step(from: node, on: byte) {
                    node = next
                    break
                }
                if node == 0 { break }
                node = fail[Int(node)]
            }
            guard flags[Int(node)] & Self.matches != 0, let length = longestMatch[node] else { continue }
            // The longest needle ending here covers every shorter one that does; it may start
            // before ranges found earlier (which end before it does), and joins them.
            var start = offset + 1 - Int(length)
            while let last = covered.last, last.upperBound > start {
                start = min(start, last.lowerBound)
                covered.removeLast()
            }
            covered.append(start..<offset + 1)
        }
        return covered
    }

    /// `text` with each part some needle covers replaced by `replacement` (joined occurrences by
    /// one replacement); `text` itself when no needle occurs in it.
    public func replacingCovered(in text: String, with replacement: String) -> String {
        var steps = 0
        return replacingCovered(in: text, with: replacement, steps: &steps)
    }

    package func replacingCovered(in text: String, with replacement: String, steps: inout Int) -> String {
        guard !isEmpty else { return text }
        var text = text
        text.makeContiguousUTF8()
        let replaced = text.utf8.withContiguousStorageIfAvailable { bytes -> String? in
            let covered = coveredRanges(in: bytes, steps: &steps)
            guard !covered.isEmpty else { return nil }
            var output: [UInt8] = []
            output.reserveCapacity(bytes.count)
            var start = 0
            for range in covered {
                output += bytes[start..<range.lowerBound]
                output += replacement.utf8
                start = range.upperBound
            }
            output += bytes[start...]
            return String(decoding: output, as: UTF8.self)
        }
        return (replaced ?? nil) ?? text
    }

    // MARK: The automaton

    /// Where `node`'s edge on `byte` leads, if it has one.
    @inline(__always)
    private func step(from node: UInt32, on byte: UInt8) -> UInt32? {
        Self.step(
            from: node, on: byte, labels: labels, flags: flags, rootEdges: rootEdges, edgeKeys: edgeKeys, edgeTargets: edgeTargets)
    }

    @inline(__always)
    private static func step(
        from node: UInt32, on byte: UInt8, labels: [UInt8], flags: [UInt8], rootEdges: [UInt32], edgeKeys: [UInt64],
        edgeTargets: [UInt32]
    ) -> UInt32? {
        if node == 0 {
            let next = rootEdges[Int(byte)]
            return next == 0 ? nil : next
        }
        let nodeFlags = flags[Int(node)]
        if nodeFlags & chained != 0 && labels[Int(node) + 1] == byte { return node + 1 }
        guard nodeFlags & branches != 0 else { return nil }
        let key = Self.key(node, byte)
        let mask = edgeKeys.count - 1
        var slot = Self.slot(key, mask)
        while true {
            let found = edgeKeys[slot]
            if found == key { return edgeTargets[slot] }
            if found == 0 { return nil }
            slot = (slot + 1) & mask
        }
    }

    @inline(__always)
    private static func key(_ node: UInt32, _ byte: UInt8) -> UInt64 { UInt64(node) << 8 | UInt64(byte) }

    /// Fibonacci hashing: the multiplication's high bits, masked.
    @inline(__always)
    private static func slot(_ key: UInt64, _ mask: Int) -> Int { Int(truncatingIfNeeded: (key &* 0x9E37_79B9_7F4A_7C15) >> 32) & mask }
}
