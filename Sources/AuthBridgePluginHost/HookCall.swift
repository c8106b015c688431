import AuthBridgeJSON
import CAuthBridgePlugin
import Logging
import Synchronization

/// The ABI's hooks, numbered as `ab_hook` in authbridge/plugin.h.
public enum PluginHook: Int32, Sendable, CaseIterable, CustomStringConvertible {
    case describe = 1
    case configure = 2
    case beginSignIn = 3
    case completeSignIn = 4
    case refresh = 5
    case revoke = 6
    case checkSession = 7
    case authorizeRequest = 8
    case classifyResponse = 9

    /// Hooks that must not perform I/O by the ABI's definition.
    public var isPure: Bool { self == .authorizeRequest || self == .classifyResponse }

    public var description: String {
        switch self {
        case .describe: "describe"
        case .configure: "configure"
        case .beginSignIn: "begin_sign_in"
        case .completeSignIn: "complete_sign_in"
        case .refresh: "refresh"
        case .revoke: "revoke"
        case .checkSession: "check_session"
        case .authorizeRequest: "authorize_request"
        case .classifyResponse: "classify_response"
        }
    }
}

/// A failure a plugin (or a standard step) classified, as in the ABI's error JSON.
public struct ProviderFailure: Error, Sendable, Equatable {
    public enum Kind: String, Sendable {
        /// The provider said no for good: revoked, invalid grant, licence removed.
        case definitive
        /// Might work later: network, timeout, 5xx, garbage answers.
        case transient
        /// The profile's settings are wrong.
        case configuration
        /// The plugin itself misbehaved.
        case `internal`
        /// The user (or frontend) cancelled.
        case cancelled
    }

    public var kind: Kind
    /// A stable word: "invalid_grant", "revoked", "licenseRevoked", "timeout"…
    public var reason: String
    /// A user-facing sentence; never a token.
    public var message: String
    /// The provider's own status, when there was one.
    public var status: Int?

    public init(_ kind: Kind, reason: String, message: String, status: Int? = nil) {
        self.kind = kind
        self.reason = reason
        self.message = KnownSecrets.shared.scrub(message)
        self.status = status
    }

    /// A Failure as a plugin sent it (`set_error`), held to the ABI's schema,
    /// because its members reach the frontend (`error.data`, events): a
    /// `reason` that is not a word (bridge-spec's `Reason`) makes it a plugin
    /// error (`internal` `pluginError`, as any malformed answer); an empty
    /// `message` gets one; a `status` that is not an HTTP status is dropped.
    public init(json: JSON) {
        let given = json["message"]?.stringValue.map(Redaction.redact) ?? ""
        let message = given.allSatisfy(\.isWhitespace) ? nil : given
        let status = json["status"]?.intValue.flatMap { (100...599).contains($0) ? Int($0) : nil }
        let reason = json["reason"]?.stringValue ?? "unspecified"
        guard Self.isWord(reason) else {
            self.init(.internal, reason: "pluginError",
                      message: message ?? "The provider plugin reported an error with an invalid reason.", status: status)
            return
        }
        let kind = json["kind"]?.stringValue.flatMap(Kind.init(rawValue:)) ?? .internal
        self.init(kind, reason: reason, message: message ?? "the provider plugin reported an error", status: status)
    }

    /// bridge-spec's `Reason`: `^[A-Za-z][A-Za-z0-9_.-]*$`, a stable machine word.
    public static func isWord(_ text: String) -> Bool {
        func isLetter(_ byte: UInt8) -> Bool { (65...90).contains(byte) || (97...122).contains(byte) }
        guard let first = text.utf8.first, isLetter(first) else { return false }
        return text.utf8.allSatisfy { isLetter($0) || (48...57).contains($0) || $0 == UInt8(ascii: "_") || $0 == UInt8(ascii: ".") || $0 == UInt8(ascii: "-") }
    }

    public var json: JSON {
        .compactObject(["kind": .string(kind.rawValue), "reason": .string(reason), "message": .string(message),
                        "status": status.map { .int(Int64($0)) }])
    }
}

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
        do {
            let value = try JSON.parse(text)
            state.withLock { $0.result = value; $0.error = nil; $0.invalidAnswer = nil }
            return true
        } catch {
            state.withLock { $0.invalidAnswer = "set_result with invalid JSON: \(error)" }
            return false
        }
    }

    func setError(_ text: UnsafeRawBufferPointer) -> Bool {
        do {
            let value = try JSON.parse(text)
            guard case .object = value else {
                state.withLock { $0.invalidAnswer = "set_error needs a JSON object" }
                return false
            }
            state.withLock { $0.error = value; $0.result = nil; $0.invalidAnswer = nil }
            return true
        } catch {
            state.withLock { $0.invalidAnswer = "set_error with invalid JSON: \(error)" }
            return false
        }
    }

    /// Copies `value`'s text into a buffer that stays valid until the hook returns.
    func lend(_ value: JSON) -> ab_json {
        let bytes = value.serialized()
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: bytes.count + 1, alignment: 1)
        bytes.withUnsafeBytes { buffer.copyMemory(from: $0) }
        buffer[bytes.count] = 0  // a NUL after the text, for C code that expects one
        state.withLock { $0.lent.append(LentBuffer(pointer: buffer)) }
        return ab_json(data: buffer.baseAddress!.assumingMemoryBound(to: CChar.self), length: bytes.count)
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
            if let error { return .failure(ProviderFailure(json: error)) }
            return .failure(misbehaved(invalid ?? "returned AB_ERROR without set_error"))
        case AB_DEFAULT:
            return .useDefault
        case AB_CANCELLED:
            return .failure(ProviderFailure(.cancelled, reason: "cancelled", message: "The request was cancelled."))
        default:
            return .failure(misbehaved("returned unknown status \(status.rawValue)"))
        }
    }

    private func misbehaved(_ detail: String) -> ProviderFailure {
        logger.error("plugin hook misbehaved", metadata: ["plugin": "\(pluginID)", "hook": "\(hook)", "detail": "\(detail)"])
        return ProviderFailure(.internal, reason: "pluginError",
                               message: "The \(pluginID) plugin failed in \(hook): \(detail).")
    }
}

/// A buffer lent to a plugin; freed with its call.
private struct LentBuffer: @unchecked Sendable {
    let pointer: UnsafeMutableRawBufferPointer
}
