import AuthBridgePluginABI
import Synchronization

// What a plugin's faults cost it: a crash or a hook past its deadline fails
// the calls in flight (never the user's sessions), and the third fault within
// five minutes gets the plugin refused until the host restarts — VS Code's
// rule for its extension host ("terminated unexpectedly 3 times within the
// last 5 minutes", microsoft/vscode#145804).

extension ProviderFailure {
    /// The plugin's code stopped under a call (its runner crashed, aborted,
    /// exited or broke the protocol). `-32008` on the wire; sessions are kept.
    public static func pluginCrashed(plugin: String, hook: PluginHook, detail: String) -> ProviderFailure {
        ProviderFailure(
            .internal, reason: PluginLoadError.Reason.pluginCrashed.rawValue,
            message: "The \(plugin) plugin stopped (\(detail)) in \(hook); it will be restarted; your sessions are kept.")
    }

    /// A hook ran past its deadline. `-32008` on the wire; sessions are kept.
    public static func pluginTimeout(plugin: String, hook: PluginHook, after deadline: Duration) -> ProviderFailure {
        ProviderFailure(
            .internal, reason: PluginLoadError.Reason.pluginTimeout.rawValue,
            message: "The \(plugin) plugin did not answer \(hook) within \(HookDeadlines.words(deadline)); your sessions are kept.")
    }

    /// True for a failure of the plugin's code itself (a crash, a deadline, a
    /// refusal after repeated faults) rather than an answer about the session:
    /// it says nothing about whether the user is signed in.
    public var isPluginFault: Bool {
        kind == .internal && (reason == PluginLoadError.Reason.pluginCrashed.rawValue || reason == PluginLoadError.Reason.pluginTimeout.rawValue)
    }
}

extension PluginLoadError.Reason {
    /// The plugin's code crashed (at load, or repeatedly at run time).
    public static let pluginCrashed = Self(rawValue: "pluginCrashed")
    /// The plugin's code did not answer within its deadline (at load, or repeatedly at run time).
    public static let pluginTimeout = Self(rawValue: "pluginTimeout")
}

/// How long each hook may run (bridge-spec, "Isolation"). A manifest may set
/// its own per hook (`"deadlines"`); the rest are the defaults below.
public struct HookDeadlines: Sendable, Equatable {
    /// A manifest's own deadlines, by hook.
    public var overrides: [PluginHook: Duration]
    /// Loading: spawn, `dlopen`, `init` (no network at load).
    public var load: Duration = .seconds(10)
    /// How long an inline hook may hold the caller's thread before the plugin loses its inline hooks.
    public var inlineMark: Duration = .milliseconds(50)
    /// How long a cancelled call waits for its hook to notice before it is answered `cancelled`.
    public var cancelGrace: Duration = .seconds(2)
    /// How long after its deadline an isolated hook's runner is killed.
    public var killGrace: Duration = .seconds(2)

    public init(overrides: [PluginHook: Duration] = [:]) {
        self.overrides = overrides
    }

    /// The deadline of `hook`.
    public subscript(hook: PluginHook) -> Duration { overrides[hook] ?? Self.standard(for: hook) }

    /// The default deadline of `hook`: 10 s for hooks without network (describe
    /// and the pure ones), 90 s for those that talk to the provider — three
    /// times the transport's 30 s default, for two exchanges plus host work.
    public static func standard(for hook: PluginHook) -> Duration {
        hook == .describe || hook.isPure ? .seconds(10) : .seconds(90)
    }

    /// "90 s", "1.5 s", "250 ms": a deadline in a message.
    static func words(_ duration: Duration) -> String {
        let milliseconds = duration.components.seconds * 1000 + duration.components.attoseconds / 1_000_000_000_000_000
        if milliseconds < 1000 { return "\(milliseconds) ms" }
        if milliseconds % 1000 == 0 { return "\(milliseconds / 1000) s" }
        return "\(Double(milliseconds) / 1000) s"
    }
}

/// One fault of a plugin's code, as its health counts it.
enum PluginFault: Sendable, Equatable {
    /// The code stopped: "killed by signal 11 (SIGSEGV) in check_session".
    case crashed(detail: String)
    /// A hook ran past its deadline.
    case timedOut(hook: PluginHook, after: Duration)

    var reason: PluginLoadError.Reason {
        switch self {
        case .crashed: .pluginCrashed
        case .timedOut: .pluginTimeout
        }
    }

    /// A few words for the refusal message.
    var detail: String {
        switch self {
        case .crashed(let detail): detail
        case .timedOut(let hook, let after): "\(hook) ran past its \(HookDeadlines.words(after)) deadline"
        }
    }
}

/// When a faulty plugin gets another chance: restart after a back-off that
/// doubles (500 ms, 1 s, … at most 8 s), and refuse it at the `limit`th fault
/// within `window`.
struct RestartPolicy: Sendable {
    enum Decision: Sendable, Equatable {
        case restart(after: Duration)
        case refuse
    }

    var window: Duration = .seconds(300)
    var limit = 3
    var firstBackOff: Duration = .milliseconds(500)
    var maximumBackOff: Duration = .seconds(8)
    /// When the faults inside the window happened, oldest first.
    var faults: [ContinuousClock.Instant] = []

    mutating func record(at now: ContinuousClock.Instant) -> Decision {
        faults.removeAll { now - $0 >= window }
        faults.append(now)
        if faults.count >= limit { return .refuse }
        var backOff = firstBackOff
        for _ in 1..<faults.count { backOff = min(backOff * 2, maximumBackOff) }
        return .restart(after: backOff)
    }
}

/// A plugin's faults and, after too many, its refusal: read by every call
/// (a refused plugin fails fast) and by `PluginReport.json` (listProviders).
///
/// Threading: any thread; the state is behind a mutex.
final class PluginHealth: Sendable {
    private struct State {
        var policy: RestartPolicy
        var refusal: PluginLoadError?
    }
    private let state: Mutex<State>
    let pluginID: String

    init(pluginID: String, policy: RestartPolicy = RestartPolicy()) {
        self.pluginID = pluginID
        state = Mutex(State(policy: policy))
    }

    /// Why the plugin is refused, once it is (until the host restarts).
    var refusal: PluginLoadError? { state.withLock { $0.refusal } }

    /// Records one fault; at the limit the plugin is refused, its reason the last fault's.
    @discardableResult
    func record(_ fault: PluginFault, at now: ContinuousClock.Instant = .now) -> RestartPolicy.Decision {
        state.withLock { state in
            if state.refusal != nil { return .refuse }
            let decision = state.policy.record(at: now)
            if decision == .refuse {
                let limit = state.policy.limit, minutes = state.policy.window.components.seconds / 60
                state.refusal = PluginLoadError(
                    fault.reason,
                    "The \(pluginID) plugin was stopped after \(limit) failures within \(minutes) minutes (last: \(fault.detail)); restart the host to load it again."
                )
            }
            return decision
        }
    }

    /// Refuses the plugin for good (a fault at load, or the runner's own count).
    func refuse(_ error: PluginLoadError) {
        state.withLock { if $0.refusal == nil { $0.refusal = error } }
    }

    /// The failure every call of a refused plugin answers at once.
    var refusalFailure: ProviderFailure? {
        refusal.map { ProviderFailure(.internal, reason: $0.reason.rawValue, message: $0.message) }
    }
}
