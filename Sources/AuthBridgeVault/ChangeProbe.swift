import Synchronization

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// What a vault holds for a key, or for all of a profile's keys, summed up
/// without reading a record: two equal stamps mean nothing was written or
/// removed in between.
public struct VaultStamp: Hashable, Sendable {
    let parts: [Int64]

    init(_ parts: Int64...) { self.parts = parts }
}

/// Takes a record's (or a profile's) `VaultStamp` cheaply — one `stat`, or
/// one counter read — so that a host can answer from what it read before
/// and still notice, on the very next call, that another process refreshed
/// or removed the record.
///
/// A probe answers nil when it cannot vouch for the present state: the
/// record is missing, or it changed so recently that a change in the same
/// clock tick would leave the stamp as it is (see `FileProbe`). A caller
/// then reads the record itself.
public struct ChangeProbe: Sendable {
    private let take: @Sendable () -> VaultStamp?

    public init(_ take: @escaping @Sendable () -> VaultStamp?) { self.take = take }

    /// The stamp now, or nil when the record must be read.
    public func stamp() -> VaultStamp? { take() }
}

/// File stamps: device, inode, size, modification and status-change times.
///
/// A vault replaces a record by renaming a new file over it and removes it
/// by unlinking, so a change makes a new inode or none (and the folder's
/// times move with every rename and unlink). File times come from a coarse
/// clock, though (a kernel tick, 1–4 ms): a change in the tick of the last
/// one can leave every time as it was. So a stamp whose times are not at
/// least `settle` old is refused, as git treats a "racily clean" index entry:
/// whatever changes after a settled stamp was taken gets later times.
/// Filesystems that keep whole seconds (no nanoseconds) settle after 2 s.
enum FileProbe {
    /// Two ticks of the clock the kernel stamps files with, and at least 5 ms.
    static let settle: Int64 = {
        var resolution = timespec()
        clock_getres(CLOCK_REALTIME_COARSE, &resolution)
        return max(5_000_000, 2 * (Int64(resolution.tv_sec) * 1_000_000_000 + Int64(resolution.tv_nsec)))
    }()

    /// The stamp of `path`, if it settled by `now` (ns since the epoch; the real-time clock by default).
    static func stamp(_ path: String, now: Int64? = nil) -> VaultStamp? {
        var info = stat()
        guard lstat(path, &info) == 0 else { return nil }
        let nowNs = now ?? realTimeNanoseconds()
        let modified = Int64(info.st_mtim.tv_sec) * 1_000_000_000 + Int64(info.st_mtim.tv_nsec)
        let changed = Int64(info.st_ctim.tv_sec) * 1_000_000_000 + Int64(info.st_ctim.tv_nsec)
        let coarse = info.st_mtim.tv_nsec == 0 && info.st_ctim.tv_nsec == 0
        let newest = max(modified, changed)
        guard nowNs - newest >= (coarse ? 2_000_000_000 : settle) else { return nil }
        return VaultStamp(Int64(info.st_dev), Int64(info.st_ino), Int64(info.st_size), modified, changed)
    }

    static func realTimeNanoseconds() -> Int64 {
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        return Int64(now.tv_sec) * 1_000_000_000 + Int64(now.tv_nsec)
    }
}

/// A count of the writes a vault in memory took: its stamp for every key.
final class WriteCounter: Sendable {
    private let count = Atomic<Int64>(0)

    /// Called after each write (a reader that stamps before it reads then
    /// never pairs an old record with a new count).
    func wrote() { count.add(1, ordering: .releasing) }

    var probe: ChangeProbe { ChangeProbe { VaultStamp(self.count.load(ordering: .acquiring)) } }
}
