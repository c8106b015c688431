import Dispatch

#if canImport(Glibc)
import Glibc
#endif

/// Ctrl-C (or, for `serve`, SIGTERM and SIGHUP) runs `action` instead of
/// killing the process, so the loopback listener closes, plugins' runners
/// stop and nothing is left half-written.
final class Interrupt: @unchecked Sendable { // the sources are only cancelled, from one place
    private let signals: [Int32]
    private let sources: [DispatchSourceSignal]

    init(signals: [Int32] = [SIGINT], _ action: @escaping @Sendable () -> Void) {
        self.signals = signals
        sources = signals.map { number in
            signal(number, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
            source.setEventHandler(handler: action)
            source.resume()
            return source
        }
    }

    func stop() {
        for source in sources { source.cancel() }
        for number in signals { signal(number, SIG_DFL) }
    }
}
