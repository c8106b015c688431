#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif
import Synchronization

/// The host's wall clock, in milliseconds since the Unix epoch, shared with
/// plugins (`host->now_ms`). Tests advance it with `HostClock.shift` (the
/// bridge exposes that only when the host runs with `--test-clock`).
public enum HostClock {
    private static let offset = Atomic<Int64>(0)

    public static func nowMilliseconds() -> Int64 {
        systemMilliseconds() + offset.load(ordering: .relaxed)
    }

    /// The system's clock, which a test shift does not move: for what a server compares with its
    /// own clock as it receives it (a DPoP proof's `iat`), not for the expiry of what is kept.
    public static func systemMilliseconds() -> Int64 {
        var spec = timespec()
        clock_gettime(CLOCK_REALTIME, &spec)
        return Int64(spec.tv_sec) * 1000 + Int64(spec.tv_nsec) / 1_000_000
    }

    /// The current offset from the system clock, in milliseconds (sent to plugin runners).
    public static var offsetMilliseconds: Int64 { offset.load(ordering: .relaxed) }

    /// Sets the offset outright: a plugin runner follows its host's clock.
    public static func setOffset(_ milliseconds: Int64) {
        offset.store(milliseconds, ordering: .relaxed)
    }

    /// Moves the clock forward (or back) by `milliseconds`; returns the new offset.
    @discardableResult
    public static func shift(by milliseconds: Int64) -> Int64 {
        offset.add(milliseconds, ordering: .relaxed).newValue
    }
}
