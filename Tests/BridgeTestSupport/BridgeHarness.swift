// A bridge served in-process, for tests of its methods without spawning `authbridge`: the host's
// end of a socketpair is a `Connection` served by `BridgeServer`, the test's end an `RPCClient`.
// A target of its own, beside `TestSupport`, so that only the test targets that drive a bridge
// link the host.

import AuthBridgeHost
import AuthBridgeJSON
import AuthBridgePluginHost
import AuthBridgeRPC
import AuthBridgeSession
import Logging
import Synchronization
import TestSupport

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// One bridge connection over a `BridgeHost` with a memory vault, as `authbridge serve --vault
/// memory` gives one on stdio. `call` sends a request and returns its answer; notifications
/// are kept in arrival order (`notifications`); `close()` ends the connection as at end of input
/// and shuts the host down, as `HostProcess` does. Every wait is bounded.
public final class BridgeHarness: Sendable {
    public let host: BridgeHost
    private let client: RPCClient
    private let connection: Connection
    private let clientFD: Int32
    private let hostFD: Int32
    private let serving: Task<Connection.Ending, Never>
    private let received = Received()
    private let closed = Atomic(false)
    private let folder: TemporaryFolder?

    /// The plugins a harness loads: none, or the Swift test plugin (`swifttest`).
    public enum Plugins: Sendable { case none, swiftTest }

    /// A bridge over `plugins` (from a private folder of the install tree: they run in-process),
    /// `profiles` and an empty memory vault, its connection already served.
    public init(plugins: Plugins = .swiftTest, profiles: [Profile] = []) throws {
        var pluginFolders: [PluginFolder] = []
        if plugins == .swiftTest {
            let folder = try TemporaryFolder(prefix: "authbridge-harness")
            self.folder = folder
            let pluginFolder = folder.subfolder("plugins")
            do { try installSwiftTestPlugin(into: pluginFolder) } catch {
                folder.remove()
                throw error
            }
            pluginFolders = [PluginFolder(pluginFolder, origin: .installTree)]
        } else {
            folder = nil
        }
        // As the host process does (`HostProcess.start`): a peer gone is an error, not a signal —
        // `close()` ends the test's end while the host may still write an answer to it.
        signal(SIGPIPE, SIG_IGN)
        var pair: [Int32] = [-1, -1]
        guard socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &pair) == 0 else {
            folder?.remove()
            throw TestSupportError("socketpair failed (errno \(errno))")
        }
        hostFD = pair[0]
        clientFD = pair[1]
        let logger = Logger(label: "bridge-harness") { _ in SwiftLogNoOpLogHandler() }
        let host = BridgeHost(
            configuration: HostConfiguration(pluginFolders: pluginFolders, profiles: profiles), store: .inMemory(), logger: logger)
        self.host = host
        let connection = Connection(input: pair[0], output: pair[0], logger: logger)
        self.connection = connection
        let server = BridgeServer(host: host, connection: connection)
        serving = Task { await server.serve() }
        let received = received
        // The client reads on a thread of its own, never on the cooperative pool the host needs.
        client = RPCClient(fd: pair[1], logger: logger) { method, params in received.append(method, params) }
    }

    /// `method`'s result; throws `RPCClient.Failure` (`.error` with the bridge's error, or
    /// `.closed`). Cancelling the calling task sends `$/cancelRequest`.
    public func call(_ method: String, _ params: JSON = [:]) async throws(RPCClient.Failure) -> JSON {
        try await client.call(method, params)
    }

    /// The error `method` is answered with, or nil when it returned a result.
    public func error(_ method: String, _ params: JSON = [:]) async -> RPCError? {
        do {
            _ = try await client.call(method, params)
            return nil
        } catch {
            guard case .error(let error) = error else { return RPCError(.internalError, "the connection ended") }
            return error
        }
    }

    /// `initialize` (protocol 1.0) and the `initialized` notification; its result.
    @discardableResult
    public func initialize() async throws(RPCClient.Failure) -> JSON {
        let result = try await call("initialize", ["protocolVersion": "1.0", "clientInfo": ["name": "bridge-harness"]])
        client.notify("initialized")
        return result
    }

    /// Sends a notification (`exit`, `$/cancelRequest`, …).
    public func notify(_ method: String, _ params: JSON? = nil) { client.notify(method, params) }

    /// The notifications received so far, in arrival order.
    public var notifications: [(method: String, params: JSON)] { received.all }

    /// True once a notification `matching` has arrived, within `limit`.
    public func notification(
        within limit: Duration = .seconds(10), matching: @escaping @Sendable (_ method: String, _ params: JSON) -> Bool
    ) async -> Bool {
        await eventually(within: limit) { [received] in received.all.contains { matching($0.method, $0.params) } }
    }

    /// How the connection ended (end of input, `exit` and its code, the peer gone), or nil when
    /// it has not within `limit`.
    public func ending(within limit: Duration = .seconds(10)) async -> Connection.Ending? {
        let serving = serving
        return await answered(within: limit) { await serving.value }
    }

    /// Ends the connection as at end of input (running requests get their grace, then are
    /// answered -32800), shuts the plugins down, and lets go of the descriptors and the plugin
    /// folder. Safe to call more than once.
    public func close() async {
        guard !closed.exchange(true, ordering: .acquiringAndReleasing) else { return }
        client.close()
        _ = await ending()
        let host = host
        _ = await answered(within: .seconds(10)) { await host.shutDown() }
        connection.flush()
        _ = shutdown(hostFD, Int32(SHUT_RDWR))
        connection.close()
        _ = Glibc.close(clientFD)
        _ = Glibc.close(hostFD)
        folder?.remove()
    }
}

/// The notifications a harness received, appended on the client's reader thread.
private final class Received: Sendable {
    private let list = Mutex<[(method: String, params: JSON)]>([])

    func append(_ method: String, _ params: JSON) { list.withLock { $0.append((method, params)) } }

    var all: [(method: String, params: JSON)] { list.withLock { $0 } }
}
