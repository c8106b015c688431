import Synchronization

/// Runs `work` and returns its value, or nil when it has not finished within
/// `bound`: it is then cancelled and left to end on its own (it may have
/// joined a refresh that other callers share), so the caller moves on at once.
func firstOf<T: Sendable>(within bound: Duration, _ work: @escaping @Sendable () async -> T) async -> T? {
    let race = Race<T>()
    return await withCheckedContinuation { continuation in
        race.start(continuation)
        let worker = Task { race.finish(await work()) }
        race.deadline = Task {
            // A deadline, not synchronisation: past it the caller is answered without `work`.
            guard (try? await Task.sleep(for: bound)) != nil else { return }
            if race.finish(nil) { worker.cancel() }
        }
    }
}

/// One continuation, resumed by whichever side finishes first.
private final class Race<T: Sendable>: Sendable {
    private let waiting = Mutex<CheckedContinuation<T?, Never>?>(nil)
    private let timer = Mutex<Task<Void, Never>?>(nil)

    func start(_ continuation: CheckedContinuation<T?, Never>) { waiting.withLock { $0 = continuation } }

    var deadline: Task<Void, Never>? {
        get { timer.withLock { $0 } }
        set { timer.withLock { $0 = newValue } }
    }

    /// True when this call resumed the waiter. The work finishing first stops the deadline.
    @discardableResult
    func finish(_ value: T?) -> Bool {
        guard let continuation = waiting.withLock({ $0.take() }) else { return false }
        if value != nil { deadline?.cancel() }
        continuation.resume(returning: value)
        return true
    }
}

/// Tells people on stderr what a command waits for once it has waited
/// longer than `after` (a provider that does not answer), and stays quiet
/// when everything answers in time.
final class WaitNotice: Sendable {
    private let pending = Mutex<Set<String>>([])
    private let timer = Mutex<Task<Void, Never>?>(nil)

    init(after delay: Duration, message: @escaping @Sendable (Set<String>) -> String) {
        let task = Task { [weak self] in
            guard (try? await Task.sleep(for: delay)) != nil, let self else { return }
            let waiting = self.pending.withLock { $0 }
            if !waiting.isEmpty { Terminal.standardError.line(Terminal.standardError.styled(message(waiting), .dim)) }
        }
        timer.withLock { $0 = task }
    }

    func started(_ what: String) { pending.withLock { _ = $0.insert(what) } }
    func finished(_ what: String) { pending.withLock { _ = $0.remove(what) } }

    /// Stops the notice and waits for its timer to end: the commands exit the
    /// process themselves, and none of their tasks may still run then.
    func finish() async {
        guard let task = timer.withLock({ $0.take() }) else { return }
        task.cancel()
        await task.value
    }
}

extension WaitNotice {
    /// "waiting for the provider of PROFILE…" after a second, for one-profile commands.
    static func forProvider(of profile: String) -> WaitNotice {
        let notice = WaitNotice(after: .seconds(1)) { _ in "waiting for the provider of \(profile)…" }
        notice.started(profile)
        return notice
    }
}
