import AuthBridgeJSON
import AuthBridgePluginABI
import AuthBridgeSystem
import AuthBridgeURL
import Synchronization

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// The host's HTTP service, for plugins (`host->http`) and standard steps.
///
/// It vets every request before it leaves — https, or http to a loopback IP
/// literal only — encodes forms and JSON bodies, and hands the request to the
/// transport library (`libAuthBridgeHTTP.so`), which is dlopened on first use
/// so that libcurl and TLS stay off the start-up path. Failures come
/// back as transient `ProviderFailure`s with a reason word; messages never
/// contain URLs' queries, bodies or headers.
public final class HTTPClient: Sendable {
    public static let shared = HTTPClient()

    public static let defaultTimeoutMilliseconds: Int64 = 30_000

    private let transport = HelperLibrary<TransportLibrary>(
        "The HTTP transport library (libAuthBridgeHTTP.so)",
        candidates: HelperLibraryLocation.candidates("libAuthBridgeHTTP.so")
    ) { symbols in
        guard let perform = symbols.function("authbridge_http_perform_v1", as: TransportLibrary.Perform.self),
            let cancel = symbols.function("authbridge_http_cancel_v1", as: TransportLibrary.Handle.self),
            let release = symbols.function("authbridge_http_release_v1", as: TransportLibrary.Handle.self)
        else { return nil }
        return TransportLibrary(perform: perform, cancel: cancel, release: release)
    }

    public init() {}

    /// Performs one request; blocks the calling thread (use from hook threads). `onCancel` is
    /// handed what cancels the request (a hook call registers it: `perform(_:call:)` in the session).
    public func perform(_ request: JSON, onCancel: (@escaping @Sendable () -> Void) -> Void) -> Result<JSON, ProviderFailure> {
        let answer = Handoff<Result<JSON, ProviderFailure>>()
        start(request, onCancelRegistration: onCancel) { result in answer.put(result) }
        return answer.take()
    }

    /// Performs one request from async code; task cancellation aborts it.
    public func perform(_ request: JSON) async -> Result<JSON, ProviderFailure> {
        let cancelHolder = Mutex<(@Sendable () -> Void)?>(nil)
        let cancelled = Atomic<Bool>(false)
        return await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                start(
                    request,
                    onCancelRegistration: { cancel in
                        cancelHolder.withLock { $0 = cancel }
                        if cancelled.load(ordering: .acquiring) { cancel() }
                    }
                ) { result in continuation.resume(returning: result) }
            }
        } onCancel: {
            cancelled.store(true, ordering: .releasing)
            cancelHolder.withLock { $0 }?()
        }
    }

    // MARK: - Request preparation

    /// Checks and encodes a request into the transport's form.
    static func prepare(_ request: JSON) -> Result<JSON, ProviderFailure> {
        guard case .object = request else { return .failure(invalid("the request must be a JSON object")) }
        guard let urlText = request["url"]?.stringValue, let url = ParsedURL(urlText),
            url.scheme == "https" || url.scheme == "http"
        else { return .failure(invalid("the request needs an absolute http(s) \"url\"")) }
        guard url.isSecureTransport else {
            return .failure(
                ProviderFailure(
                    .configuration, reason: "insecureUrl",
                    message: "Refused to send a request to \(url.origin): https is required except for loopback IP addresses."))
        }
        let method = (request["method"]?.stringValue ?? "GET").uppercased()
        var headers: [String: JSON] = [:]
        for (name, value) in request["headers"]?.objectValue ?? [:] {
            guard let value = value.stringValue else { return .failure(invalid("header \"\(name)\" must be a string")) }
            guard !name.contains(where: { $0 == "\r" || $0 == "\n" || $0 == ":" }), !value.contains(where: { $0 == "\r" || $0 == "\n" }) else {
                return .failure(invalid("header \"\(name)\" contains a line break"))
            }
            headers[name] = .string(value)
        }
        func setDefault(_ name: String, _ value: String) {
            if !headers.keys.contains(where: { $0.lowercased() == name.lowercased() }) { headers[name] = .string(value) }
        }
        var body: String?
        if let form = request["form"] {
            guard case .object(let members) = form else { return .failure(invalid("\"form\" must be an object")) }
            var pairs: [(String, String)] = []
            for (key, value) in members.sorted(by: { $0.key < $1.key }) {
                switch value {
                case .string(let text): pairs.append((key, text))
                case .int(let number): pairs.append((key, String(number)))
                case .bool(let flag): pairs.append((key, flag ? "true" : "false"))
                case .null: continue
                case .array(let values):
                    // A repeated parameter (RFC 8707: one `resource` per protected resource).
                    for value in values {
                        guard let text = value.stringValue else { return .failure(invalid("form field \"\(key)\" must hold strings")) }
                        pairs.append((key, text))
                    }
                default: return .failure(invalid("form field \"\(key)\" must be a string"))
                }
            }
            body = FormEncoding.encode(pairs)
            setDefault("Content-Type", "application/x-www-form-urlencoded")
        } else if let json = request["json"] {
            body = json.serializedString()
            setDefault("Content-Type", "application/json")
        } else if let text = request["body"]?.stringValue {
            body = text
        }
        setDefault("Accept", "application/json")
        let timeout = max(1, min(request["timeoutMs"]?.intValue ?? defaultTimeoutMilliseconds, 300_000))
        return .success(
            .compactObject([
                "method": .string(method), "url": .string(urlText), "headers": .object(headers),
                "body": body.map(JSON.string), "timeoutMs": .int(timeout),
            ]))
    }

    private static func invalid(_ message: String) -> ProviderFailure {
        ProviderFailure(.internal, reason: "invalidRequest", message: "Invalid HTTP request: \(message).")
    }

    // MARK: - Transport

    private func start(
        _ request: JSON, onCancelRegistration: (@escaping @Sendable () -> Void) -> Void,
        completion: @escaping @Sendable (Result<JSON, ProviderFailure>) -> Void
    ) {
        let prepared: JSON
        switch Self.prepare(request) {
        case .failure(let failure):
            completion(.failure(failure))
            return
        case .success(let value): prepared = value
        }
        let library: TransportLibrary
        switch loadTransport() {
        case .failure(let failure):
            completion(.failure(failure))
            return
        case .success(let value): library = value
        }
        let flight = Flight(library: library, completion: completion)
        let context = Unmanaged.passRetained(flight).toOpaque()
        // The context's retain is balanced in `done`; keep our own until attached.
        let text = prepared.serialized()
        let handle = text.withUnsafeBufferPointer { buffer in
            library.perform(
                buffer.baseAddress!, buffer.count, context,
                { context, bytes, count in
                    let flight = Unmanaged<Flight>.fromOpaque(context!).takeRetainedValue()
                    let answer = bytes.flatMap { try? JSON.parse(UnsafeRawBufferPointer(start: $0, count: count)) }
                    flight.finish(answer)
                })
        }
        flight.attach(handle)
        onCancelRegistration { [flight] in flight.cancel() }
    }

    private func loadTransport() -> Result<TransportLibrary, ProviderFailure> {
        transport.load().mapError { ProviderFailure(.internal, reason: "noTransport", message: $0.notInstalledMessage) }
    }
}

/// The transport library's C entry points.
struct TransportLibrary: @unchecked Sendable {
    typealias Done = @convention(c) (UnsafeMutableRawPointer?, UnsafePointer<UInt8>?, Int) -> Void
    typealias Perform = @convention(c) (UnsafePointer<UInt8>, Int, UnsafeMutableRawPointer?, Done) -> UnsafeMutableRawPointer
    typealias Handle = @convention(c) (UnsafeMutableRawPointer) -> Void
    let perform: Perform
    let cancel: Handle
    let release: Handle
}

/// One request between `perform` and `done`. The transport's handle is
/// released only when the last reference to the flight (the completion
/// context, or a registered cancel handler) goes away, so `cancel` can never
/// reach a released handle.
private final class Flight: @unchecked Sendable {
    private let library: TransportLibrary
    private let completion: @Sendable (Result<JSON, ProviderFailure>) -> Void
    /// The transport's handle, as an address (raw pointers are not Sendable).
    private let handle = Mutex<UInt>(0)

    init(library: TransportLibrary, completion: @escaping @Sendable (Result<JSON, ProviderFailure>) -> Void) {
        self.library = library
        self.completion = completion
    }

    deinit {
        if let handle = UnsafeMutableRawPointer(bitPattern: handle.withLock({ $0 })) { library.release(handle) }
    }

    func attach(_ value: UnsafeMutableRawPointer) {
        let address = UInt(bitPattern: value)
        handle.withLock { $0 = address }
    }

    func cancel() {
        if let handle = UnsafeMutableRawPointer(bitPattern: handle.withLock({ $0 })) { library.cancel(handle) }
    }

    func finish(_ answer: JSON?) {
        guard let answer else {
            completion(.failure(ProviderFailure(.transient, reason: "network", message: "The HTTP transport gave no answer.")))
            return
        }
        if let error = answer["error"] {
            let reason = error["reason"]?.stringValue ?? "network"
            let kind: ProviderFailure.Kind = reason == "cancelled" ? .cancelled : .transient
            completion(.failure(ProviderFailure(kind, reason: reason, message: error["message"]?.stringValue ?? "The request failed.")))
        } else {
            completion(.success(answer))
        }
    }
}
