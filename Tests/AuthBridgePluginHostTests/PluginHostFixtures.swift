import AuthBridgeJSON
@testable import AuthBridgePluginHost
import Logging
import TestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

func manifestText(id: String, abi: String = "1.0", library: String) -> String {
    #"{"id":"\#(id)","version":"1.0.0","abi":"\#(abi)","library":"\#(library)"}"#
}

let quietLogger = Logger(label: "authbridge.tests", factory: { _ in SwiftLogNoOpLogHandler() })

func loadAll(_ folders: String...) -> [PluginReport] {
    PluginLoader(folders: folders, logger: quietLogger).loadAll()
}

extension PluginReport {
    var refusal: PluginLoadError? {
        if case .refused(let error) = status { return error }
        return nil
    }
}

/// A hook's outcome, read in one expression: its result or its failure (nil when it is the other).
extension HookOutcome {
    var result: JSON? {
        if case .result(let value) = self { return value }
        return nil
    }
    var failure: ProviderFailure? {
        if case .failure(let failure) = self { return failure }
        return nil
    }
}

/// Host services for hooks run directly from tests: no network, and the
/// standard step answers what `standard` returns.
struct StubEnvironment: HookEnvironment {
    var standard: @Sendable (PluginHook, JSON) -> Result<JSON, ProviderFailure> = { _, _ in
        .failure(ProviderFailure(.internal, reason: "unavailable", message: "no standard steps in tests"))
    }

    func emit(_ event: JSON, from call: HookCall) {}
    func http(_ request: JSON, call: HookCall) -> Result<JSON, ProviderFailure> {
        .failure(ProviderFailure(.transient, reason: "offline", message: "no network in tests"))
    }
    func standard(_ hook: PluginHook, input: JSON, call: HookCall) -> Result<JSON, ProviderFailure> {
        standard(hook, input)
    }
}
