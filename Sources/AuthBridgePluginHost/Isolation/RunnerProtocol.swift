import AuthBridgeJSON
import AuthBridgeRPC
import AuthBridgeRedaction

// What the host and a plugin's runner (`authbridge plugin-runner`) say to each other: JSON-RPC 2.0
// shapes, one compact JSON text per line, requests both ways (the host asks for `load` and `hook`,
// the runner for `http`, `standard`, `emit` and `log`). The methods and their params are
// `RunnerProtocol` below; what isolation promises is bridge-spec/README.md, "Isolation".
// Frames carry tokens: never log them.
//
// The host trusts nothing that comes back: a runner runs a stranger's code, which can write any
// bytes to the channel. Every decoder here answers nil (a protocol violation) for a shape it does
// not expect, and failures pass through the same schema and redaction as in-process ones.

/// One frame of the runner channel.
enum RunnerMessage: Sendable, Equatable {
    case request(id: RequestID, method: String, params: JSON)
    case notification(method: String, params: JSON)
    case result(id: RequestID, JSON)
    case error(id: RequestID, RunnerError)

    /// The frame's bytes (no newline: `FrameWriter` adds it).
    var encoded: [UInt8] {
        switch self {
        case .request(let id, let method, let params):
            JSON.object(["jsonrpc": "2.0", "id": id.json, "method": .string(method), "params": params]).serialized()
        case .notification(let method, let params):
            JSON.object(["jsonrpc": "2.0", "method": .string(method), "params": params]).serialized()
        case .result(let id, let value):
            JSON.object(["jsonrpc": "2.0", "id": id.json, "result": value]).serialized()
        case .error(let id, let error):
            JSON.object(["jsonrpc": "2.0", "id": id.json, "error": error.json]).serialized()
        }
    }

    /// The message in `frame`, or nil when it is not one (a protocol violation).
    static func decode(_ frame: UnsafeRawBufferPointer) -> RunnerMessage? {
        guard let value = try? JSON.parse(frame), value["jsonrpc"] == "2.0" else { return nil }
        let params = value["params"] ?? .object([:])
        if let method = value["method"]?.stringValue {
            guard case .object = params else { return nil }
            guard let idValue = value["id"] else { return .notification(method: method, params: params) }
            return RequestID(idValue).map { .request(id: $0, method: method, params: params) }
        }
        guard let id = value["id"].flatMap(RequestID.init) else { return nil }
        if let result = value["result"] { return .result(id: id, result) }
        guard let error = value["error"].flatMap(RunnerError.init(json:)) else { return nil }
        return .error(id: id, error)
    }
}

/// A runner request's error answer: `{code, message, data?}`.
struct RunnerError: Error, Sendable, Equatable {
    var code: Int64
    var message: String
    var data: JSON?

    init(code: Int64 = RunnerProtocol.pluginErrorCode, message: String, data: JSON? = nil) {
        self.code = code
        self.message = message
        self.data = data
    }

    init?(json: JSON) {
        guard let code = json["code"]?.intValue, let message = json["message"]?.stringValue else { return nil }
        self.init(code: code, message: message, data: json["data"])
    }

    var json: JSON { .compactObject(["code": .int(code), "message": .string(message), "data": data]) }
}

/// The methods, their params and answers.
enum RunnerProtocol {
    static let version: Int64 = 1
    /// The bridge's plugin error code, reused for a refused `load`.
    static let pluginErrorCode: Int64 = -32008
    /// The JSON-RPC code for a method the peer does not know.
    static let methodNotFound: Int64 = -32601
    static let invalidParams: Int64 = -32602

    enum Method {
        // host → runner
        static let load = "load"
        static let hook = "hook"
        static let cancel = "cancel"
        static let shutdown = "shutdown"
        // runner → host
        static let http = "http"
        static let standard = "standard"
        static let emit = "emit"
        static let log = "log"
    }

    // MARK: load

    /// `load`'s params: the manifest (the runner checks the entry point against it), the
    /// level below which the runner drops plugin logs, and the host clock's test offset.
    static func loadParams(manifest: PluginManifest, logLevel: String, clockOffsetMs: Int64) -> JSON {
        [
            "protocol": .int(version), "manifest": manifestJSON(manifest), "logLevel": .string(logLevel),
            "clockOffsetMs": .int(clockOffsetMs),
        ]
    }

    static func manifestJSON(_ manifest: PluginManifest) -> JSON {
        [
            "id": .string(manifest.id), "version": .string(manifest.version), "abi": .string("\(manifest.abiMajor).\(manifest.abiMinor)"),
            "library": .string(manifest.library), "description": .string(manifest.description),
        ]
    }

    /// `load`'s answer: the hooks the plugin implements and the runner's pid.
    static func loadResult(implements hooks: [PluginHook], pid: Int32) -> JSON {
        ["protocol": .int(version), "implements": .array(hooks.map { .string($0.description) }), "pid": .int(Int64(pid))]
    }

    /// A refused `load` as an error answer (`data.reason`: the PluginLoadError reason).
    static func loadError(_ error: PluginLoadError) -> RunnerError {
        RunnerError(message: error.message, data: ["reason": .string(error.reason.rawValue)])
    }

    /// The refusal a runner's `load` error stands for. The reason is held to the few a runner can
    /// give (anything else is `loadFailed`), and the message redacted: it comes from plugin code.
    static func loadRefusal(_ error: RunnerError) -> PluginLoadError {
        let allowed: [PluginLoadError.Reason] = [.badEntry, .missingSymbol, .abiMismatch, .metadataMismatch, .loadFailed, .initFailed]
        let given = error.data?["reason"]?.stringValue.map(PluginLoadError.Reason.init(rawValue:))
        let reason = given.flatMap { allowed.contains($0) ? $0 : nil } ?? .loadFailed
        return PluginLoadError(reason, Redaction.redact(error.message))
    }

    /// The hook names of a `load` answer, or nil for a malformed one.
    static func implementedHooks(_ result: JSON) -> Set<PluginHook>? {
        guard result["protocol"]?.intValue == version, let names = result["implements"]?.arrayValue else { return nil }
        var hooks: Set<PluginHook> = []
        for name in names {
            guard let hook = name.stringValue.flatMap(PluginHook.init(name:)) else { return nil }
            hooks.insert(hook)
        }
        return hooks
    }

    // MARK: hook

    static func hookParams(call: Int64, hook: PluginHook, input: JSON, clockOffsetMs: Int64) -> JSON {
        ["call": .int(call), "hook": .string(hook.description), "input": input, "clockOffsetMs": .int(clockOffsetMs)]
    }

    /// A hook's outcome as `hook`'s answer.
    static func outcomeJSON(_ outcome: HookOutcome) -> JSON {
        switch outcome {
        case .result(let value): ["outcome": "result", "value": value]
        case .failure(let failure): ["outcome": "failure", "failure": failure.json]
        case .useDefault: ["outcome": "default"]
        }
    }

    /// `hook`'s answer as an outcome, or nil for a malformed one. A failure is held to the ABI's
    /// schema and its message redacted again, as for an in-process plugin's `set_error`.
    static func outcome(_ answer: JSON) -> HookOutcome? {
        switch answer["outcome"]?.stringValue {
        case "result": answer["value"].map(HookOutcome.result)
        case "failure":
            answer["failure"].flatMap { failure in
                guard case .object = failure else { return nil }
                return .failure(HookCall.failure(fromPlugin: failure))
            }
        case "default": .useDefault
        default: nil
        }
    }

    // MARK: http and standard

    /// A host service's answer (`http`, `standard`): `{status, value}`.
    static func serviceAnswer(_ answer: Result<JSON, ProviderFailure>) -> JSON {
        switch answer {
        case .success(let value): ["status": "ok", "value": value]
        case .failure(let failure): ["status": failure.kind == .cancelled ? "cancelled" : "error", "value": failure.json]
        }
    }

    /// The runner's reading of a service answer (from the host: trusted, but still checked).
    static func serviceResult(_ answer: JSON) -> Result<JSON, ProviderFailure> {
        switch (answer["status"]?.stringValue, answer["value"]) {
        case ("ok", let value?): .success(value)
        case ("error", let value?), ("cancelled", let value?): .failure(ProviderFailure(json: value))
        default: .failure(ProviderFailure(.internal, reason: "hostError", message: "The host sent a malformed service answer."))
        }
    }

    static func standardParams(call: Int64, hook: PluginHook, input: JSON) -> JSON {
        ["call": .int(call), "hook": .string(hook.description), "input": input]
    }
}
