import AuthBridgeSystem

#if canImport(Glibc)
import Glibc
#endif

/// The processes' one signal path: a signal runs `action` instead of killing the process, so
/// the loopback listener closes, plugins' runners stop and nothing is left half-written.
/// `HostProcess` turns the stop signals (`serve`: SIGTERM and SIGHUP; `agent`: SIGTERM and
/// SIGINT) into its graceful shutdown; the agent's SIGHUP reads the configuration again; the
/// CLI's Ctrl-C cancels a sign-in.
///
/// A signal handler writes the signal's number to a pipe (write(2) is all a handler may safely
/// do); a thread of its own reads it and runs `action` there. Not libdispatch's signal sources:
/// the Dispatch overlay would link _StringProcessing back into `authbridge` (bench/README,
/// "Start-up"). One Interrupt per signal at a time; `stop` gives the signals back their default.
public final class Interrupt: Sendable {
    private let signals: [Int32]
    private let writeFD: Int32

    public init(signals: [Int32] = [SIGINT], _ action: @escaping @Sendable () -> Void) {
        self.signals = signals
        var fds: [Int32] = [-1, -1]
        guard pipe(&fds) == 0 else {
            // No pipe, no handler: the signals keep their default (they end the process).
            writeFD = -1
            return
        }
        let (readFD, writeFD) = (fds[0], fds[1])
        self.writeFD = writeFD
        _ = fcntl(readFD, F_SETFD, FD_CLOEXEC)
        _ = fcntl(writeFD, F_SETFD, FD_CLOEXEC)
        _ = fcntl(writeFD, F_SETFL, O_NONBLOCK) // a handler never blocks: a full pipe already holds a wake-up
        detachThread {
            var number: UInt8 = 0
            while true {
                let count = read(readFD, &number, 1)
                if count < 0 && errno == EINTR { continue }
                if count <= 0 || number == Interrupt.stopMarker { break }
                action()
            }
            close(readFD)
        }
        for number in signals where number > 0 && number < Int32(Interrupt.slots) {
            Interrupt.pipes[Int(number)] = writeFD
            var handler = sigaction()
            handler.__sigaction_handler.sa_handler = { number in
                guard number > 0 && number < Int32(Interrupt.slots) else { return }
                let fd = Interrupt.pipes[Int(number)]
                guard fd >= 0 else { return }
                let saved = errno
                var byte = UInt8(truncatingIfNeeded: number)
                _ = write(fd, &byte, 1)
                errno = saved
            }
            handler.sa_flags = SA_RESTART
            sigemptyset(&handler.sa_mask)
            sigaction(number, &handler, nil)
        }
    }

    public func stop() {
        for number in signals where number > 0 && number < Int32(Interrupt.slots) {
            signal(number, SIG_DFL)
            Interrupt.pipes[Int(number)] = -1
        }
        guard writeFD >= 0 else { return }
        var marker = Interrupt.stopMarker
        _ = write(writeFD, &marker, 1)
        close(writeFD)
    }

    /// What `stop` writes: no signal has number 0.
    private static let stopMarker: UInt8 = 0
    private static let slots = 65
    /// The pipe each signal's handler writes to (-1: none), read by the handler: plain aligned
    /// words set before the handler is installed and after it is removed.
    private nonisolated(unsafe) static let pipes: UnsafeMutablePointer<Int32> = {
        let table = UnsafeMutablePointer<Int32>.allocate(capacity: slots)
        table.initialize(repeating: -1, count: slots)
        return table
    }()
}
