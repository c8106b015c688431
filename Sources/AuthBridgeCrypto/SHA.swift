// SHA-256 and SHA-1 (FIPS 180-4) in Swift, not through libAuthBridgeSwiftCrypto.so: the host hashes
// on paths that seal nothing — PKCE challenges, a profile's configuration fingerprint, the
// installation's per-profile UUID, vault file names, advisory-lock ids — and opening swift-crypto
// with the FoundationEssentials it needs for one of those costs 5.4 MB of resident memory and
// 2–3 ms (bench/README, "Start-up"). The inputs are public or single-use (a PKCE verifier), so
// nothing here needs constant time; Tests/AuthBridgeCryptoTests holds both to the FIPS examples and
// to swift-crypto on random inputs of every length around the block boundaries.

/// SHA-256: PKCE challenges, vault file names, fingerprints, lock keys.
public enum SHA256 {
    public static let byteCount = 32

    public static func hash(_ bytes: [UInt8]) -> [UInt8] {
        var state: [UInt32] = [0x6a09_e667, 0xbb67_ae85, 0x3c6e_f372, 0xa54f_f53a, 0x510e_527f, 0x9b05_688c, 0x1f83_d9ab, 0x5be0_cd19]
        var words = [UInt32](repeating: 0, count: 64)
        for block in MessageBlocks(bytes) {
            for index in 0..<16 { words[index] = block[index] }
            for index in 16..<64 {
                let (w15, w2) = (words[index - 15], words[index - 2])
                let s0 = w15.rotatedRight(7) ^ w15.rotatedRight(18) ^ (w15 >> 3)
                let s1 = w2.rotatedRight(17) ^ w2.rotatedRight(19) ^ (w2 >> 10)
                words[index] = words[index - 16] &+ s0 &+ words[index - 7] &+ s1
            }
            var (a, b, c, d, e, f, g, h) = (state[0], state[1], state[2], state[3], state[4], state[5], state[6], state[7])
            for index in 0..<64 {
                let t1 =
                    h &+ (e.rotatedRight(6) ^ e.rotatedRight(11) ^ e.rotatedRight(25)) &+ ((e & f) ^ (~e & g)) &+ roundConstants[index]
                    &+ words[index]
                let t2 = (a.rotatedRight(2) ^ a.rotatedRight(13) ^ a.rotatedRight(22)) &+ ((a & b) ^ (a & c) ^ (b & c))
                (h, g, f, e, d, c, b, a) = (g, f, e, d &+ t1, c, b, a, t1 &+ t2)
            }
            for (index, value) in [a, b, c, d, e, f, g, h].enumerated() { state[index] = state[index] &+ value }
        }
        return state.flatMap(\.bigEndianBytes)
    }

    private static let roundConstants: [UInt32] = [
        0x428a_2f98, 0x7137_4491, 0xb5c0_fbcf, 0xe9b5_dba5, 0x3956_c25b, 0x59f1_11f1, 0x923f_82a4, 0xab1c_5ed5,
        0xd807_aa98, 0x1283_5b01, 0x2431_85be, 0x550c_7dc3, 0x72be_5d74, 0x80de_b1fe, 0x9bdc_06a7, 0xc19b_f174,
        0xe49b_69c1, 0xefbe_4786, 0x0fc1_9dc6, 0x240c_a1cc, 0x2de9_2c6f, 0x4a74_84aa, 0x5cb0_a9dc, 0x76f9_88da,
        0x983e_5152, 0xa831_c66d, 0xb003_27c8, 0xbf59_7fc7, 0xc6e0_0bf3, 0xd5a7_9147, 0x06ca_6351, 0x1429_2967,
        0x27b7_0a85, 0x2e1b_2138, 0x4d2c_6dfc, 0x5338_0d13, 0x650a_7354, 0x766a_0abb, 0x81c2_c92e, 0x9272_2c85,
        0xa2bf_e8a1, 0xa81a_664b, 0xc24b_8b70, 0xc76c_51a3, 0xd192_e819, 0xd699_0624, 0xf40e_3585, 0x106a_a070,
        0x19a4_c116, 0x1e37_6c08, 0x2748_774c, 0x34b0_bcb5, 0x391c_0cb3, 0x4ed8_aa4a, 0x5b9c_ca4f, 0x682e_6ff3,
        0x748f_82ee, 0x78a5_636f, 0x84c8_7814, 0x8cc7_0208, 0x90be_fffa, 0xa450_6ceb, 0xbef9_a3f7, 0xc671_78f2,
    ]
}

/// Hashes to use only where a standard asks for them, never for security.
public enum Insecure {
    /// SHA-1: name-based UUIDs (RFC 9562 §5.5, version 5).
    public enum SHA1 {
        public static let byteCount = 20

        public static func hash(_ bytes: [UInt8]) -> [UInt8] {
            var state: [UInt32] = [0x6745_2301, 0xefcd_ab89, 0x98ba_dcfe, 0x1032_5476, 0xc3d2_e1f0]
            var words = [UInt32](repeating: 0, count: 80)
            for block in MessageBlocks(bytes) {
                for index in 0..<16 { words[index] = block[index] }
                for index in 16..<80 {
                    words[index] = (words[index - 3] ^ words[index - 8] ^ words[index - 14] ^ words[index - 16]).rotatedLeft(1)
                }
                var (a, b, c, d, e) = (state[0], state[1], state[2], state[3], state[4])
                for index in 0..<80 {
                    let (mix, constant): (UInt32, UInt32) =
                        switch index {
                        case 0..<20: ((b & c) | (~b & d), 0x5a82_7999)
                        case 20..<40: (b ^ c ^ d, 0x6ed9_eba1)
                        case 40..<60: ((b & c) | (b & d) | (c & d), 0x8f1b_bcdc)
                        default: (b ^ c ^ d, 0xca62_c1d6)
                        }
                    let next = a.rotatedLeft(5) &+ mix &+ e &+ constant &+ words[index]
                    (e, d, c, b, a) = (d, c, b.rotatedLeft(30), a, next)
                }
                for (index, value) in [a, b, c, d, e].enumerated() { state[index] = state[index] &+ value }
            }
            return state.flatMap(\.bigEndianBytes)
        }
    }
}

/// The padded message (a 1 bit, zeros, the bit length as 64 bits big-endian) as 512-bit blocks of
/// sixteen big-endian words: what SHA-1 and SHA-256 both consume.
private struct MessageBlocks: Sequence, IteratorProtocol {
    private let padded: [UInt8]
    private var offset = 0

    init(_ message: [UInt8]) {
        var padded = message
        padded.append(0x80)
        padded += [UInt8](repeating: 0, count: (64 + 56 - padded.count % 64) % 64)
        padded += (UInt64(message.count) &* 8).bigEndianBytes
        self.padded = padded
    }

    mutating func next() -> [UInt32]? {
        guard offset < padded.count else { return nil }
        defer { offset += 64 }
        return (0..<16).map { index in
            let at = offset + index * 4
            return UInt32(padded[at]) << 24 | UInt32(padded[at + 1]) << 16 | UInt32(padded[at + 2]) << 8 | UInt32(padded[at + 3])
        }
    }
}

extension FixedWidthInteger {
    fileprivate var bigEndianBytes: [UInt8] {
        (0..<Self.bitWidth / 8).map { UInt8(truncatingIfNeeded: self >> ((Self.bitWidth / 8 - 1 - $0) * 8)) }
    }
}

extension UInt32 {
    fileprivate func rotatedRight(_ count: UInt32) -> UInt32 { self >> count | self << (32 - count) }
    fileprivate func rotatedLeft(_ count: UInt32) -> UInt32 { self << count | self >> (32 - count) }
}
