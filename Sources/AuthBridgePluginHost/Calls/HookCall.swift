@_exported import AuthBridgePluginABI
import AuthBridgeJSON
import AuthBridgeRedaction
import CAuthBridgePlugin
import Logging
import Synchronization

/// What running a hook produced.
public enum HookOutcome: Sendable {
    case result(JSON)
    case failure(ProviderFailure)
    /// The plugin has no such hook or declined it: use the standard behaviour.
    case useDefault
}

/// The services a hook may use, provided per call by the layer above
/// (the session engine). Methods block: they run on plugin worker threads.
public protocol HookEnvironment: Sendable {
    /// A `signIn/progress`-style event from the plugin.
    func emit(_ event: JSON, from call: HookCall)
    /// One HTTP exchange: the response JSON or a transient failure.
    func http(_ request: JSON, call: HookCall) -> Result<JSON, ProviderFailure>
    /// The host's standard implementation of a hook.
    func standard(_ hook: PluginHook, input: JSON, call: HookCall) -> Result<JSON, ProviderFailure>
}

/// One running hook invocation: the `ab_call *` of the C ABI.
///
/// Threading: created and completed by `LoadedPlugin`; its methods may be
/// called from any thread while the hook runs (the ABI's rule), so state is
/// behind a mutex.
public final class HookCall: Sendable {
    public let pluginID: String
    public let hook: PluginHook
    public let logger: Logger
    /// False for inline hooks: they run on the caller's thread and may not block.
    public let mayBlock: Bool
    let environment: HookEnvironment

    private struct State {
        var result: JSON?
        var error: JSON?
        var invalidAnswer: String?
        /// Buffers lent to the plugin; they live until the hook returns.
        var lent: [LentBuffer] = []
        var cancelled = false
        var cancelHandlers: [@Sendable () -> Void] = []
    }
    private let state = Mutex(State())

    init(pluginID: String, hook: PluginHook, logger: Logger, environment: HookEnvironment, mayBlock: Bool = true) {
        self.pluginID = pluginID
        self.hook = hook
        self.logger = logger
        self.environment = environment
        self.mayBlock = mayBlock
    }

    deinit {
        state.withLock { state in for buffer in state.lent { buffer.pointer.deallocate() } }
    }

    public var isCancelled: Bool { state.withLock { $0.cancelled } }

    /// Runs `handler` when the call is cancelled (at once if it already is).
    /// Used by blocking services such as HTTP to abort.
    public func onCancel(_ handler: @escaping @Sendable () -> Void) {
        let runNow = state.withLock { state -> Bool in
            if state.cancelled { return true }
            state.cancelHandlers.append(handler)
            return false
        }
        if runNow { handler() }
    }

    func cancel() {
        let handlers = state.withLock { state -> [@Sendable () -> Void] in
            guard !state.cancelled else { return [] }
            state.cancelled = true
            defer { state.cancelHandlers.removeAll() }
            return state.cancelHandlers
        }
        for handler in handlers { handler() }
    }

    func setResult(_ text: UnsafeRawBufferPointer) -> Bool {
        keep(text, from: "set_result", as: \.result) { text throws(JSONParseError) in try ShortAnswers.shared.parse(text) }
    }

    func setError(_ text: UnsafeRawBufferPointer) -> Bool {
        keep(text, from: "set_error", as: \.error, objectOnly: true) { text throws(JSONParseError) in try JSON.parse(text) }
    }

    /// The hook's answer (`set_result` or `set_error`): the last one given stands, and one that
    /// does not parse (or is not the object `set_error` needs) is recorded as the plugin's fault.
    private func keep(
        _ text: UnsafeRawBufferPointer, from function: String, as answer: WritableKeyPath<State, JSON?>, objectOnly: Bool = false,
        parse: (UnsafeRawBufferPointer) throws(JSONParseError) -> JSON
    ) -> Bool {
        let value: JSON
        do {
            value = try parse(text)
        } catch {
            state.withLock { $0.invalidAnswer = "\(function) with invalid JSON: \(error)" }
            return false
        }
        if objectOnly, value.objectValue == nil {
            state.withLock { $0.invalidAnswer = "\(function) needs a JSON object" }
            return false
        }
        state.withLock {
            ($0.result, $0.error, $0.invalidAnswer) = (nil, nil, nil)
            $0[keyPath: answer] = value
        }
        return true
    }

    /// Copies `value`'s text into a buffer that stays valid until the hook returns.
    func lend(_ value: JSON) -> ab_json {
        let bytes = value.serialized()
        // A NUL after the text, for C code that expects one.
        return ab_json(data: lend(bytes: bytes), length: bytes.count)
    }

    /// Copies `bytes` into a NUL-terminated buffer that stays valid until the hook returns.
    func lend(bytes: [UInt8]) -> UnsafePointer<CChar> {
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: bytes.count + 1, alignment: 1)
        bytes.withUnsafeBytes { buffer.copyMemory(from: $0) }
        buffer[bytes.count] = 0
        state.withLock { $0.lent.append(LentBuffer(pointer: buffer)) }
        return UnsafePointer(buffer.baseAddress!.assumingMemoryBound(to: CChar.self))
    }

    /// Lends a host service's answer to the plugin and returns the matching status.
    func lend(_ answer: Result<JSON, ProviderFailure>, into target: UnsafeMutablePointer<ab_json>) -> ab_status {
        switch answer {
        case .success(let value):
            target.pointee = lend(value)
            return AB_OK
        case .failure(let failure):
            target.pointee = lend(failure.json)
            return failure.kind == .cancelled ? AB_CANCELLED : AB_ERROR
        }
    }

    /// Turns the hook's return status and what it set into an outcome.
    func outcome(status: ab_status) -> HookOutcome {
        let (result, error, invalid) = state.withLock { ($0.result, $0.error, $0.invalidAnswer) }
        switch status {
        case AB_OK:
            if let result { return .result(result) }
            return .failure(misbehaved(invalid ?? "returned AB_OK without set_result"))
        case AB_ERROR:
            if let error { return .failure(Self.failure(fromPlugin: error)) }
            return .failure(misbehaved(invalid ?? "returned AB_ERROR without set_error"))
        case AB_DEFAULT:
            return .useDefault
        case AB_CANCELLED:
            return .failure(ProviderFailure.cancelled)
        default:
            return .failure(misbehaved("returned unknown status \(status.rawValue)"))
        }
    }

    /// A plugin's Failure (`set_error`), its message redacted before anything else sees it:
    /// plugin text may carry what looks like a credential.
    static func failure(fromPlugin error: JSON) -> ProviderFailure {
        guard let message = error["message"]?.stringValue else { return ProviderFailure(json: error) }
        return ProviderFailure(json: error.setting("message", .string(Redaction.redact(message))))
    }

    private func misbehaved(_ detail: String) -> ProviderFailure {
        logger.error("plugin hook misbehaved", metadata: ["plugin": "\(pluginID)", "hook": "\(hook)", "detail": "\(detail)"])
        return ProviderFailure(
            .internal, reason: "pluginError",
            message: "The \(pluginID) plugin failed in \(hook): \(detail).")
    }
}

/// The last short answer a plugin set, parsed once: a status check answers
/// `{"state":"valid"}` again and again, and the hot path calls it for every
/// `checkSignInStatus`. Longer answers are parsed each time.
final class ShortAnswers: Sendable {
    static let shared = ShortAnswers()
    static let maximumLength = 64
    private let last = Mutex<(text: [UInt8], value: JSON)?>(nil)

    func parse(_ text: UnsafeRawBufferPointer) throws(JSONParseError) -> JSON {
        guard text.count <= Self.maximumLength else { return try JSON.parse(text) }
        let remembered: JSON? = last.withLock { last in
            guard let last, last.text.elementsEqual(text) else { return JSON?.none }
            return last.value
        }
        if let remembered { return remembered }
        let value = try JSON.parse(text)
        last.withLock { $0 = (Array(text), value) }
        return value
    }
}

/// A buffer lent to a plugin; freed with its call.
private struct LentBuffer: @unchecked Sendable {
    let pointer: UnsafeMutableRawBufferPointer
}
