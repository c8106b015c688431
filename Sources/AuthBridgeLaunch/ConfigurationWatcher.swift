import AuthBridgeSystem

#if canImport(Glibc)
import Glibc
#endif

/// Tells the agent when its configuration file may have changed, so that a profile added to
/// the file is served without restarting an agent that lives as long as the login session.
///
/// inotify watches the file's folder — an editor that saves by writing a new file and renaming
/// it over the old one replaces the file, which a watch on the file alone would lose — and the
/// file itself (a symbolic link's target changes without an event in the folder). Events settle
/// for `settle` before `changed` runs, each new one starting the wait again: a file written in
/// two steps is read once, whole. `reloadNow` (SIGHUP) runs it at once. A folder that does not
/// exist (yet) is looked for again every `retry`, and its appearing counts as a change.
/// `changed` runs on the watcher's own thread, one call at a time, never after `stop`.
final class ConfigurationWatcher: Sendable {
    private let wake: (read: Int32, write: Int32)

    /// Nil when inotify or a pipe is not available (the agent then reloads on SIGHUP only).
    init?(
        path: String, settle: Duration = .milliseconds(150), retry: Duration = .seconds(2),
        changed: @escaping @Sendable () -> Void
    ) {
        var fds: [Int32] = [-1, -1]
        guard pipe(&fds) == 0 else { return nil }
        for fd in fds { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
        _ = fcntl(fds[1], F_SETFL, O_NONBLOCK)
        let inotify = inotify_init1(Int32(IN_CLOEXEC | IN_NONBLOCK))
        guard inotify >= 0 else {
            close(fds[0])
            close(fds[1])
            return nil
        }
        wake = (fds[0], fds[1])
        let loop = Loop(path: path, inotify: inotify, wake: fds[0], settle: settle, retry: retry, changed: changed)
        detachThread { loop.run() }
    }

    /// Reads the file again now (SIGHUP), without waiting for it to settle.
    func reloadNow() { signal(Loop.reload) }

    /// Ends the watcher's thread; `changed` is not called again once it returns from a call under way.
    func stop() { signal(Loop.stop) }

    private func signal(_ byte: UInt8) {
        var byte = byte
        _ = write(wake.write, &byte, 1)
    }

    /// The watcher's thread: its descriptors and watches are its own.
    private final class Loop: @unchecked Sendable {
        static let reload: UInt8 = 0x68 // "h"
        static let stop: UInt8 = 0x73 // "s"
        private static let folderEvents = UInt32(IN_CLOSE_WRITE | IN_MOVED_TO | IN_MOVED_FROM | IN_CREATE | IN_DELETE | IN_MODIFY)
        private static let fileEvents = UInt32(IN_CLOSE_WRITE | IN_MODIFY | IN_ATTRIB | IN_DELETE_SELF | IN_MOVE_SELF)

        let path: String
        let folder: String
        let name: String
        let inotify: Int32
        let wake: Int32
        let settle: Duration
        let retry: Duration
        let changed: @Sendable () -> Void
        var folderWatch: Int32 = -1
        var fileWatch: Int32 = -1

        init(path: String, inotify: Int32, wake: Int32, settle: Duration, retry: Duration, changed: @escaping @Sendable () -> Void) {
            self.path = path
            let slash = path.lastIndex(of: "/")
            folder = slash.map { $0 == path.startIndex ? "/" : String(path[..<$0]) } ?? "."
            name = slash.map { String(path[path.index(after: $0)...]) } ?? path
            self.inotify = inotify
            self.wake = wake
            self.settle = settle
            self.retry = retry
            self.changed = changed
        }

        func run() {
            defer {
                close(inotify)
                close(wake)
            }
            let clock = ContinuousClock()
            _ = watch()
            var due: ContinuousClock.Instant?
            while true {
                var timeout = due.map { Self.milliseconds(max(.zero, $0 - clock.now)) } ?? -1
                if folderWatch < 0 { timeout = timeout < 0 ? Self.milliseconds(retry) : min(timeout, Self.milliseconds(retry)) }
                var fds = [pollfd(fd: inotify, events: Int16(POLLIN), revents: 0), pollfd(fd: wake, events: Int16(POLLIN), revents: 0)]
                if poll(&fds, 2, timeout) < 0 && errno != EINTR { return }
                if fds[1].revents != 0 {
                    var bytes = [UInt8](repeating: 0, count: 16)
                    let count = read(wake, &bytes, bytes.count)
                    if count <= 0 || bytes[..<count].contains(Self.stop) { return }
                    due = clock.now
                }
                if fds[0].revents != 0, readEvents() { due = clock.now + settle }
                if folderWatch < 0, watch() { due = clock.now } // the folder appeared
                if let when = due, clock.now >= when {
                    due = nil
                    _ = watch() // the file may be a new one (renamed over): watch it
                    changed()
                }
            }
        }

        /// Adds the watches that are missing; true when the folder's is (now) in place.
        private func watch() -> Bool {
            if folderWatch < 0 { folderWatch = inotify_add_watch(inotify, folder, Self.folderEvents) }
            if folderWatch >= 0 { fileWatch = inotify_add_watch(inotify, path, Self.fileEvents) }
            return folderWatch >= 0
        }

        /// Reads the pending events; true when one concerns the file. A watch the kernel
        /// dropped (its folder or file removed) is added again later.
        private func readEvents() -> Bool {
            var concerned = false
            var buffer = [UInt8](repeating: 0, count: 4096)
            while true {
                let count = read(inotify, &buffer, buffer.count)
                guard count > 0 else { return concerned }
                var offset = 0
                buffer.withUnsafeBytes { raw in
                    while offset + MemoryLayout<inotify_event>.size <= count {
                        let wd = raw.loadUnaligned(fromByteOffset: offset, as: Int32.self)
                        let mask = raw.loadUnaligned(fromByteOffset: offset + 4, as: UInt32.self)
                        let length = Int(raw.loadUnaligned(fromByteOffset: offset + 12, as: UInt32.self))
                        let start = offset + MemoryLayout<inotify_event>.size
                        let nameBytes = raw[start..<min(start + length, count)].prefix { $0 != 0 }
                        offset = start + length
                        if mask & UInt32(IN_IGNORED) != 0 {
                            if wd == folderWatch { folderWatch = -1 }
                            if wd == fileWatch { fileWatch = -1 }
                            concerned = true
                        } else if wd == fileWatch || (wd == folderWatch && String(decoding: nameBytes, as: UTF8.self) == name) {
                            concerned = true
                        } else if mask & UInt32(IN_DELETE_SELF | IN_MOVE_SELF) != 0 {
                            concerned = true
                        }
                    }
                }
            }
        }

        private static func milliseconds(_ duration: Duration) -> Int32 {
            let (seconds, attoseconds) = duration.components
            return Int32(clamping: seconds * 1000 + attoseconds / 1_000_000_000_000_000 + (attoseconds % 1_000_000_000_000_000 > 0 ? 1 : 0))
        }
    }
}
