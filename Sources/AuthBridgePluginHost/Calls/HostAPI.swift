import AuthBridgePluginABI
import AuthBridgeJSON
import AuthBridgeRedaction
import AuthBridgeURL
import CAuthBridgePlugin
import Logging

/// The host's version, written once: plugins read it (`ab_host_api.host_version`), frontends see it
/// (`serverInfo.version`, `--version`), and `make dist` names every distribution by it.
public let hostVersion = "0.1.0"

/// The `ab_host_api` table every plugin receives: C entry points that
/// forward to the running `HookCall`. Allocated once and never freed, since
/// plugins may keep the pointer until shutdown.
enum HostAPI {
    nonisolated(unsafe) static var pluginLogger = Logger(label: "authbridge.plugin")

    nonisolated(unsafe) static let table: UnsafePointer<ab_host_api> = {
        let versionText = strdupStatic(hostVersion)
        let table = UnsafeMutablePointer<ab_host_api>.allocate(capacity: 1)
        table.initialize(
            to: ab_host_api(
                size: UInt32(MemoryLayout<ab_host_api>.size),
                abi_major: UInt16(AB_ABI_MAJOR),
                abi_minor: UInt16(AB_ABI_MINOR),
                host_version: versionText,
                log: { call, level, message, length in
                    guard let message else { return }
                    let text = Redaction.redact(String(decoding: UnsafeRawBufferPointer(start: message, count: length), as: UTF8.self))
                    let logger = call.map { HostAPI.call($0).logger } ?? HostAPI.pluginLogger
                    var metadata: Logger.Metadata = [:]
                    if let call {
                        let hookCall = HostAPI.call(call)
                        metadata = ["plugin": "\(hookCall.pluginID)", "hook": "\(hookCall.hook)"]
                    }
                    logger.log(level: HostAPI.level(level), "\(text)", metadata: metadata)
                },
                now_ms: { HostClock.nowMilliseconds() },
                set_result: { call, result in
                    guard let call, let data = result.data else { return AB_INVALID }
                    return HostAPI.call(call).setResult(UnsafeRawBufferPointer(start: data, count: result.length)) ? AB_OK : AB_INVALID
                },
                set_error: { call, error in
                    guard let call, let data = error.data else { return AB_INVALID }
                    return HostAPI.call(call).setError(UnsafeRawBufferPointer(start: data, count: error.length)) ? AB_OK : AB_INVALID
                },
                emit: { call, event in
                    guard let call, let data = event.data,
                        let value = try? JSON.parse(UnsafeRawBufferPointer(start: data, count: event.length)),
                        case .object = value
                    else { return AB_INVALID }
                    let hookCall = HostAPI.call(call)
                    hookCall.environment.emit(value, from: hookCall)
                    return AB_OK
                },
                http: { call, request, response in
                    guard let call, let data = request.data, let response,
                        let value = try? JSON.parse(UnsafeRawBufferPointer(start: data, count: request.length))
                    else { return AB_INVALID }
                    let hookCall = HostAPI.call(call)
                    guard hookCall.mayBlock else {
                        hookCall.logger.error(
                            "plugin called http in a non-blocking hook", metadata: ["plugin": "\(hookCall.pluginID)", "hook": "\(hookCall.hook)"])
                        return AB_INVALID
                    }
                    return hookCall.lend(hookCall.environment.http(value, call: hookCall), into: response)
                },
                standard: { call, hook, input, output in
                    guard let call, let output, let data = input.data,
                        let hookValue = PluginHook(rawValue: Int32(bitPattern: hook.rawValue)),
                        let value = try? JSON.parse(UnsafeRawBufferPointer(start: data, count: input.length))
                    else { return AB_INVALID }
                    let hookCall = HostAPI.call(call)
                    return hookCall.lend(hookCall.environment.standard(hookValue, input: value, call: hookCall), into: output)
                },
                is_cancelled: { call in
                    guard let call else { return 0 }
                    return HostAPI.call(call).isCancelled ? 1 : 0
                },
                fail: { call, kind, reason, message, status in
                    guard let call, let kind, let reason, let message else { return AB_INVALID }
                    let kindText = String(cString: kind)
                    let failure: JSON = .compactObject([
                        "kind": .string(kindText), "reason": .string(String(cString: reason)),
                        "message": .string(String(cString: message)), "status": status == 0 ? nil : .int(Int64(status)),
                    ])
                    let bytes = failure.serialized()
                    guard bytes.withUnsafeBytes({ HostAPI.call(call).setError($0) }) else { return AB_INVALID }
                    return kindText == ProviderFailure.Kind.cancelled.rawValue ? AB_CANCELLED : AB_ERROR
                },
                query_value: { call, url, urlLength, name, value, length, count in
                    guard let call, let url, let name else { return AB_INVALID }
                    let text = String(decoding: UnsafeRawBufferPointer(start: url, count: urlLength), as: UTF8.self)
                    guard let query = URLQuery(url: text) else { return AB_ERROR }
                    let wanted = String(cString: name)
                    let found = query.value(wanted)
                    value?.pointee = found.map { HostAPI.call(call).lend(bytes: Array($0.utf8)) }
                    length?.pointee = found?.utf8.count ?? 0
                    count?.pointee = query.count(wanted)
                    return AB_OK
                }
            ))
        return UnsafePointer(table)
    }()

    static func call(_ pointer: OpaquePointer) -> HookCall {
        Unmanaged<HookCall>.fromOpaque(UnsafeRawPointer(pointer)).takeUnretainedValue()
    }

    static func level(_ level: ab_log_level) -> Logger.Level {
        switch level {
        case AB_LOG_TRACE: .trace
        case AB_LOG_DEBUG: .debug
        case AB_LOG_INFO: .info
        case AB_LOG_NOTICE: .notice
        case AB_LOG_WARNING: .warning
        case AB_LOG_ERROR: .error
        default: .critical
        }
    }

    private static func strdupStatic(_ text: String) -> UnsafePointer<CChar> {
        let bytes = Array(text.utf8CString)
        let buffer = UnsafeMutablePointer<CChar>.allocate(capacity: bytes.count)
        buffer.initialize(from: bytes, count: bytes.count)
        return UnsafePointer(buffer)
    }
}
