import AuthBridgeJSON
import Logging

/// The host services of a hook running in a plugin's runner: what needs the host (HTTP, the
/// standard steps, events, logs) goes over the channel; the rest (`set_result`, `is_cancelled`,
/// `now_ms`…) is answered in the runner by `HostAPI.table`, as in the host.
///
/// Threading: `http` and `standard` block the hook's thread until the host answers (the host
/// runs them under its own copy of the call, so cancelling the call there aborts them).
/// `emit` is a notification: the channel's order puts it before the hook's answer.
struct RunnerEnvironment: HookEnvironment {
    let channel: RunnerChannel
    /// The host's number for the call.
    let callID: Int64

    func emit(_ event: JSON, from call: HookCall) {
        channel.notify(RunnerProtocol.Method.emit, ["call": .int(callID), "event": event])
    }

    func http(_ request: JSON, call: HookCall) -> Result<JSON, ProviderFailure> {
        ask(RunnerProtocol.Method.http, ["call": .int(callID), "request": request])
    }

    func standard(_ hook: PluginHook, input: JSON, call: HookCall) -> Result<JSON, ProviderFailure> {
        ask(RunnerProtocol.Method.standard, RunnerProtocol.standardParams(call: callID, hook: hook, input: input))
    }

    private func ask(_ method: String, _ params: JSON) -> Result<JSON, ProviderFailure> {
        switch channel.call(method, params) {
        case .success(let answer): RunnerProtocol.serviceResult(answer)
        case .failure(let error):
            .failure(ProviderFailure(.internal, reason: "hostUnavailable", message: "The host did not answer \(method): \(error.message)."))
        }
    }
}

/// A runner's logs, sent to the host as `log` notifications: the host redacts them again and
/// writes them to its own log (stderr) with the plugin's name. Levels below the host's are
/// dropped here, before they cost a frame.
struct ChannelLogHandler: LogHandler {
    let channel: RunnerChannel
    /// The host's number for the call logging, nil outside a call (`init`).
    let callID: Int64?
    var logLevel: Logger.Level
    var metadata: Logger.Metadata = [:]

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    func log(event: LogEvent) {
        channel.notify(
            RunnerProtocol.Method.log,
            ["call": callID.map { .int($0) } ?? .null, "level": .string(event.level.rawValue), "message": .string("\(event.message)")])
    }
}
