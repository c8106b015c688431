import AuthBridgePluginABI
import AuthBridgeThreads
import CAuthBridgePlugin
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Level of a plugin's log line.
public enum PluginLogLevel: Int32, Sendable {
    case trace = 0, debug, info, notice, warning, error, critical
}

/// The host as a plugin sees it outside hooks (logging, clock).
public struct PluginHost: @unchecked Sendable {
    let api: UnsafePointer<ab_host_api>

    /// The host's version, e.g. "0.1.0".
    public var version: String { api.pointee.host_version.map { String(cString: $0) } ?? "unknown" }

    /// Milliseconds since the epoch, on the host's clock (tests can move it).
    public var now: Int64 { api.pointee.now_ms?() ?? 0 }

    public func log(_ level: PluginLogLevel, _ message: String) {
        log(call: nil, level, message)
    }

    func log(call: OpaquePointer?, _ level: PluginLogLevel, _ message: String) {
        var text = message
        text.withUTF8 { utf8 in
            utf8.withMemoryRebound(to: CChar.self) {
                api.pointee.log?(call, ab_log_level(rawValue: UInt32(level.rawValue)), $0.baseAddress, $0.count)
            }
        }
    }
}

/// The running hook: the host services of the C ABI, in Swift.
///
/// Valid only while the hook runs; do not keep it.
public struct PluginCall: @unchecked Sendable {
    public let host: PluginHost
    let call: OpaquePointer

    public var now: Int64 { host.now }

    /// True when the frontend cancelled the request this hook serves.
    public var isCancelled: Bool { host.api.pointee.is_cancelled?(call) == 1 }

    public func log(_ level: PluginLogLevel, _ message: String) { host.log(call: call, level, message) }

    /// Emits a `signIn/progress` event ({"stage": …, "message": …}).
    public func emit(_ event: JSON) {
        _ = withJSON(event) { host.api.pointee.emit?(call, $0) }
    }

    /// One HTTP exchange through the host (https only, except loopback IPs).
    /// Request: {method, url, headers, form | json | body, timeoutMs, dpop}; `"dpop": true` gets a
    /// DPoP proof of the session's key (which stays in the host) where the session has one.
    public func http(_ request: JSON) throws(ProviderFailure) -> HTTPResponse {
        let answer = try exchange(request) { input, output in host.api.pointee.http?(call, input, output) }
        var headers: [String: String] = [:]
        for (name, value) in answer["headers"]?.objectValue ?? [:] { headers[name] = value.stringValue }
        return HTTPResponse(status: Int(answer["status"]?.intValue ?? 0), headers: headers, body: answer["body"]?.stringValue ?? "")
    }

    /// Several HTTP exchanges at once, each on its own thread (the ABI lets host
    /// services be called from any thread while the hook runs): the whole takes
    /// as long as the slowest, not the sum — e.g. two revocations against a
    /// server that does not answer wait one timeout, not two. Answers are in
    /// the order of `requests`.
    public func http(concurrently requests: [JSON]) -> [Result<HTTPResponse, ProviderFailure>] {
        let call = self
        // All but the first on threads of their own (AuthBridgeSystem's; in turn, on this thread, when
        // none can be started) …
        let others = requests.dropFirst().map { request in
            let answer = Handoff<Result<HTTPResponse, ProviderFailure>>()
            detachThread { answer.put(Result { () throws(ProviderFailure) in try call.http(request) }) }
            return answer
        }
        guard let first = requests.first else { return [] }
        // … the first on this one; every answer is in before the hook goes on (host services serve a
        // call only while its hook runs; the plugin's library is never unmapped, so a thread may
        // still be ending after its answer).
        return [Result { () throws(ProviderFailure) in try http(first) }] + others.map { $0.take() }
    }

    /// Waits `milliseconds` (real time) unless the request is cancelled first;
    /// throws the `cancelled` failure then. For a provider that asks to try
    /// again shortly; the wait is checked for cancellation every 50 ms.
    public func pause(milliseconds: Int) throws(ProviderFailure) {
        var remaining = max(0, milliseconds)
        while remaining > 0 {
            if isCancelled { throw ProviderFailure.cancelled }
            let step = min(remaining, 50)
            var interval = timespec(tv_sec: 0, tv_nsec: step * 1_000_000)
            var left = timespec()
            while nanosleep(&interval, &left) != 0 && errno == EINTR { interval = left }
            remaining -= step
        }
        if isCancelled { throw ProviderFailure.cancelled }
    }

    /// The host's standard implementation of `hook` on `input`.
    public func standard(_ hook: PluginHook, _ input: JSON) throws(ProviderFailure) -> JSON {
        try exchange(input) { input, output in
            host.api.pointee.standard?(call, hook.number, input, output)
        }
    }

    private func exchange(_ value: JSON, _ body: (ab_json, UnsafeMutablePointer<ab_json>) -> ab_status?) throws(ProviderFailure) -> JSON {
        var output = ab_json(data: nil, length: 0)
        let status = withJSON(value) { input in body(input, &output) } ?? AB_INVALID
        let answer = output.data.flatMap { try? JSON.parse(UnsafeRawBufferPointer(start: $0, count: output.length)) }
        switch status {
        case AB_OK:
            guard let answer else { throw ProviderFailure(.internal, reason: "hostError", message: "the host answered without JSON") }
            return answer
        case AB_ERROR, AB_CANCELLED:
            throw ProviderFailure(json: answer ?? ["kind": "internal", "reason": "hostError", "message": "the host service failed"])
        default:
            throw ProviderFailure(.internal, reason: "invalid", message: "the host refused the service call")
        }
    }

    private func withJSON<T>(_ value: JSON, _ body: (ab_json) -> T) -> T {
        let bytes = value.serialized()
        return bytes.withUnsafeBytes { buffer in
            body(ab_json(data: buffer.baseAddress?.assumingMemoryBound(to: CChar.self), length: buffer.count))
        }
    }
}
