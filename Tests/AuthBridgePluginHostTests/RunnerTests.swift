import AuthBridgeJSON
@testable import AuthBridgePluginHost
import AuthBridgeSystem
import Dispatch
import Logging
import Synchronization
import TestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

// The plugin runner over a socketpair, without a process: `PluginRunnerServer` on a thread of the
// test (with the Swift test plugin), or a fake runner the test drives frame by frame, against a
// `RunnerBackend` whose `launch` hands it the other end. Waits are bounded (30 s).

private let bound = 30

/// One value a callback delivers, waited for with a bound.
final class Delivered<Value: Sendable>: @unchecked Sendable {
    private let semaphore = DispatchSemaphore(value: 0)
    private let value = Mutex<[Value]>([])

    func put(_ value: Value) {
        self.value.withLock { $0.append(value) }
        semaphore.signal()
    }

    func take() -> Value? {
        guard semaphore.wait(timeout: .now() + .seconds(bound)) == .success else { return nil }
        return value.withLock { $0.removeFirst() }
    }
}

/// Values recorded from other threads.
final class Recorded<Value: Sendable>: Sendable {
    let values = Mutex<[Value]>([])
}

/// Host services that record what the runner asked for.
final class RecordingEnvironment: HookEnvironment, @unchecked Sendable {
    let events = Mutex<[JSON]>([])
    let requests = Mutex<[JSON]>([])
    /// Closed until `open()`: `http` blocks on it when `gated` (the concurrency test).
    let gated: Bool
    private let gate = DispatchSemaphore(value: 0)
    let entered = Atomic<Int>(0)

    init(gated: Bool = false) { self.gated = gated }

    func open(_ count: Int) { for _ in 0..<count { gate.signal() } }

    func emit(_ event: JSON, from call: HookCall) { events.withLock { $0.append(event) } }

    func http(_ request: JSON, call: HookCall) -> Result<JSON, ProviderFailure> {
        requests.withLock { $0.append(request) }
        entered.add(1, ordering: .acquiringAndReleasing)
        if gated { _ = gate.wait(timeout: .now() + .seconds(bound)) }
        return .success(["status": 204, "headers": [:], "body": ""])
    }

    func standard(_ hook: PluginHook, input: JSON, call: HookCall) -> Result<JSON, ProviderFailure> {
        hook == .configure ? .success(input["settings"] ?? [:]) : .failure(ProviderFailure(.internal, reason: "unavailable", message: "-"))
    }
}

/// Collects log records (the redaction test).
final class LogRecords: @unchecked Sendable {
    let lines = Mutex<[String]>([])

    var logger: Logger {
        Logger(label: "authbridge.tests.runner") { _ in RecordingHandler(records: self) }
    }

    struct RecordingHandler: LogHandler {
        let records: LogRecords
        var logLevel: Logger.Level = .trace
        var metadata: Logger.Metadata = [:]
        subscript(metadataKey key: String) -> Logger.Metadata.Value? {
            get { metadata[key] }
            set { metadata[key] = newValue }
        }
        func log(event: LogEvent) { records.lines.withLock { $0.append("\(event.level) \(event.message)") } }
    }
}

/// A socketpair: `host` for the backend, `runner` for the server or the fake.
private func channelPair() throws -> (host: Int32, runner: Int32) {
    var fds: [Int32] = [-1, -1]
    guard socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &fds) == 0 else {
        throw TestSupportError("socketpair failed (errno \(errno))")
    }
    return (fds[0], fds[1])
}

/// The Swift test plugin, vetted as the loader would hand it to a backend (opened once; the
/// descriptor stays open, as the design keeps it for the process's life).
private func vettedSwiftTestPlugin() throws -> VettedLibrary {
    let path = try #require(swiftTestPluginLibrary(), "run `make build` first")
    let manifestPath = repositoryRoot() + "/Tests/Plugins/SwiftTestPlugin/swifttest.json"
    let manifest = try PluginManifest(json: JSON.parse(try #require(readFileBytes(manifestPath))))
    let fd = open(path, O_RDONLY | O_CLOEXEC)
    guard fd >= 0 else { throw TestSupportError("cannot open \(path)") }
    return VettedLibrary(fd: fd, path: path, manifest: manifest, elf: try ELFCheck.validate(path))
}

/// A backend whose runner is `PluginRunnerServer` on a thread of this process.
private func threadRunnerBackend(logger: Logger = quietLogger, clockOffsets: Recorded<Int64>? = nil) throws -> RunnerBackend {
    let library = try vettedSwiftTestPlugin()
    return RunnerBackend(library: library, logger: logger) { library throws(PluginLoadError) in
        guard let pair = try? channelPair() else { throw PluginLoadError(.loadFailed, "no socketpair") }
        let server = PluginRunnerServer(
            channelFD: pair.runner, libraryFD: library.fd, exitsProcess: false,
            setClockOffset: { offset in clockOffsets?.values.withLock { $0.append(offset) } })
        detachThread { server.run() }
        return RunnerHandle(channelFD: pair.host, waitForEnd: nil, kill: {})
    }
}

/// A `threadRunnerBackend`, loaded, for the length of `body`; shut down after it.
private func withLoadedThreadRunner(clockOffsets: Recorded<Int64>? = nil, _ body: (RunnerBackend) throws -> Void) throws {
    let backend = try threadRunnerBackend(clockOffsets: clockOffsets)
    defer { backend.shutdown(within: .seconds(5)) }
    try backend.load()
    try body(backend)
}

extension RunnerBackend {
    /// A call of `hook` as the host makes it (a pure hook may not block).
    func call(_ hook: PluginHook, environment: HookEnvironment) -> HookCall {
        HookCall(pluginID: library.manifest.id, hook: hook, logger: quietLogger, environment: environment, mayBlock: !hook.isPure)
    }

    /// Starts a call and waits (bounded) for its outcome.
    func run(_ hook: PluginHook, _ input: JSON, environment: HookEnvironment, call: HookCall? = nil) -> HookOutcome? {
        let call = call ?? self.call(hook, environment: environment)
        let outcome = Delivered<HookOutcome>()
        start(hook, input: input, call: call, inline: false) { outcome.put($0) }
        return outcome.take()
    }
}

/// A runner the test plays itself: it reads the host's frames and writes what it likes.
final class FakeRunner: @unchecked Sendable {
    let fd: Int32
    private var buffer: [UInt8] = []

    init(fd: Int32) { self.fd = fd }

    /// The next frame from the host (nil at end of input or after 30 s).
    func read() -> JSON? {
        while true {
            if let newline = buffer.firstIndex(of: 0x0A) {
                let line = Array(buffer[..<newline])
                buffer.removeFirst(newline + 1)
                return try? JSON.parse(line)
            }
            var poller = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            guard poll(&poller, 1, Int32(bound * 1000)) == 1 else { return nil }
            var chunk = [UInt8](repeating: 0, count: 65_536)
            let count = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            guard count > 0 else { return nil }
            buffer += chunk[..<count]
        }
    }

    func write(_ text: String) {
        let bytes = Array((text + "\n").utf8)
        _ = bytes.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
    }

    func write(_ value: JSON) { write(value.serializedString()) }

    /// Answers the host's `load` as the Swift test plugin would.
    func answerLoad() {
        guard let load = read(), load["method"] == "load", let id = load["id"] else { return }
        write(["jsonrpc": "2.0", "id": id, "result": ["protocol": 1, "implements": ["check_session", "complete_sign_in"], "pid": 1]])
    }

    func close() { _ = Glibc.close(fd) }
}

/// A backend over a fake runner, loaded.
private func fakeRunnerBackend(logger: Logger = quietLogger) throws -> (RunnerBackend, FakeRunner) {
    let pair = try channelPair()
    let fake = FakeRunner(fd: pair.runner)
    let backend = RunnerBackend(library: try vettedSwiftTestPlugin(), logger: logger) { _ in
        RunnerHandle(channelFD: pair.host, waitForEnd: nil, kill: {})
    }
    detachThread { fake.answerLoad() }
    try backend.load()
    return (backend, fake)
}

@Suite("Plugin runner over a socketpair")
struct RunnerTests {
    @Test func loadReportsTheHooksAndHooksAnswer() throws {
        try withLoadedThreadRunner { backend in
            #expect(PluginHook.allCases.allSatisfy(backend.implements))
            let now = HostClock.nowMilliseconds()
            let outcome = backend.run(.checkSession, ["tokens": ["expiresAt": .int(now + 86_400_000)]], environment: RecordingEnvironment())
            #expect(outcome?.result == ["state": "valid"])
            let failure = backend.run(.completeSignIn, ["flow": "session", "sessionId": "bad"], environment: RecordingEnvironment())?.failure
            #expect(failure?.kind == .definitive && failure?.reason == "invalid_grant" && failure?.message == "session id refused")
        }
    }

    @Test func httpGoesThroughTheHostsEnvironment() throws {
        try withLoadedThreadRunner { backend in
            let environment = RecordingEnvironment()
            let input: JSON = ["flow": "session", "sessionId": "http", "profile": ["config": ["probeUrl": "https://probe.example/x"]]]
            let outcome = backend.run(.completeSignIn, input, environment: environment)
            #expect(outcome?.result?["tokens"]?["extras"]?["probeStatus"] == 204)
            #expect(environment.requests.withLock { $0 } == [["method": "GET", "url": "https://probe.example/x"]])
        }
    }

    @Test func standardStepsRunInTheHost() throws {
        try withLoadedThreadRunner { backend in
            let outcome = backend.run(.configure, ["settings": ["clientId": "c1"]], environment: RecordingEnvironment())
            #expect(outcome?.result == ["clientId": "c1", "configuredBy": "swifttest"])
        }
    }

    @Test func anEventArrivesBeforeItsCallsAnswer() throws {
        try withLoadedThreadRunner { backend in
            let environment = RecordingEnvironment()
            let eventsAtAnswer = Delivered<[JSON]>()
            backend.start(.beginSignIn, input: ["state": "s1"], call: backend.call(.beginSignIn, environment: environment), inline: false) { _ in
                eventsAtAnswer.put(environment.events.withLock { $0 })
            }
            #expect(eventsAtAnswer.take() == [["stage": "plugin", "message": "Swift plugin began sign-in"]])
        }
    }

    @Test func cancellingTheHostsCallSetsIsCancelledInTheRunner() throws {
        try withLoadedThreadRunner { backend in
            let call = backend.call(.completeSignIn, environment: RecordingEnvironment())
            let outcome = Delivered<HookOutcome>()
            // "slow" polls is_cancelled every 10 ms for 30 s.
            backend.start(.completeSignIn, input: ["flow": "session", "sessionId": "slow"], call: call, inline: false) { outcome.put($0) }
            call.cancel()
            #expect(outcome.take()?.failure?.kind == .cancelled)
        }
    }

    @Test func everyHookCarriesTheHostClocksOffset() throws {
        let offsets = Recorded<Int64>()
        try withLoadedThreadRunner(clockOffsets: offsets) { backend in
            _ = backend.run(.checkSession, ["tokens": [:]], environment: RecordingEnvironment())
            let expected = HostClock.offsetMilliseconds
            #expect(offsets.values.withLock { $0 } == [expected, expected], "load's and the hook's")
        }
    }

    @Test func aRunnersLogGoesToTheCallsLoggerRedacted() throws {
        let records = LogRecords()
        let (backend, fake) = try fakeRunnerBackend()
        defer { fake.close() }
        let call = HookCall(pluginID: "swifttest", hook: .checkSession, logger: records.logger, environment: RecordingEnvironment())
        let outcome = Delivered<HookOutcome>()
        backend.start(.checkSession, input: [:], call: call, inline: false) { outcome.put($0) }
        let hook = try #require(fake.read())
        let number = try #require(hook["params"]?["call"])
        fake.write([
            "jsonrpc": "2.0", "method": "log",
            "params": ["call": number, "level": "warning", "message": "sent Bearer abc.def to access_token=xyz"],
        ])
        // The log is handled in stream order, before the answer that follows it.
        fake.write(["jsonrpc": "2.0", "id": hook["id"]!, "result": ["outcome": "default"]])
        guard case .useDefault = try #require(outcome.take()) else {
            Issue.record("not the runner's answer")
            return
        }
        let lines = records.lines.withLock { $0 }
        #expect(lines == ["warning sent Bearer [REDACTED] to access_token=[REDACTED]"])
    }

    @Test func aMalformedFrameAnswersTheCallsPluginCrashed() throws {
        let (backend, fake) = try fakeRunnerBackend()
        defer { fake.close() }
        let outcome = Delivered<HookOutcome>()
        let call = HookCall(pluginID: "swifttest", hook: .checkSession, logger: quietLogger, environment: RecordingEnvironment())
        backend.start(.checkSession, input: [:], call: call, inline: false) { outcome.put($0) }
        _ = fake.read()
        fake.write("this is not JSON")
        let failure = try #require(outcome.take()?.failure)
        #expect(failure.kind == .internal && failure.reason == "pluginCrashed")
        #expect(failure.message.contains("malformed message"))
    }

    @Test func endOfInputAnswersEveryCallInFlightPluginCrashed() throws {
        let (backend, fake) = try fakeRunnerBackend()
        let outcomes = Delivered<HookOutcome>()
        for hook in [PluginHook.checkSession, .completeSignIn] {
            let call = HookCall(pluginID: "swifttest", hook: hook, logger: quietLogger, environment: RecordingEnvironment())
            backend.start(hook, input: [:], call: call, inline: false) { outcomes.put($0) }
        }
        #expect(fake.read()?["method"] == "hook" && fake.read()?["method"] == "hook")
        fake.close()
        for _ in 0..<2 {
            let failure = try #require(outcomes.take()?.failure)
            #expect(failure.reason == "pluginCrashed" && failure.message.contains("closed its channel"))
        }
    }

    @Test func aCallLeftPastItsDeadlineGetsItsRunnerKilledAndTheOthersTimedOut() throws {
        let endings = Delivered<RunnerEnding>()
        let pair = try channelPair()
        let fake = FakeRunner(fd: pair.runner)
        defer { fake.close() }
        let backend = RunnerBackend(
            library: try vettedSwiftTestPlugin(), logger: quietLogger,
            launch: { _ in RunnerHandle(channelFD: pair.host, waitForEnd: nil, kill: {}) }, onEnding: { endings.put($0) })
        detachThread { fake.answerLoad() }
        try backend.load()
        let outcomes = Delivered<HookOutcome>()
        var calls: [HookCall] = []
        for hook in [PluginHook.checkSession, .refresh] {
            let call = HookCall(pluginID: "swifttest", hook: hook, logger: quietLogger, environment: RecordingEnvironment())
            calls.append(call)
            backend.start(hook, input: [:], call: call, inline: false) { outcomes.put($0) }
        }
        #expect(fake.read()?["method"] == "hook" && fake.read()?["method"] == "hook")
        // The runner never answers; the first call's deadline passes (its caller was answered).
        backend.abandon(calls[0], because: .deadline)
        #expect(endings.take() == .killedAfterTimeout(hook: .checkSession))
        for _ in 0..<2 { #expect(outcomes.take()?.failure?.reason == "pluginTimeout") }
    }

    @Test func theThirtyThirdConcurrentHTTPRequestIsRefused() throws {
        let (backend, fake) = try fakeRunnerBackend()
        defer { fake.close() }
        let environment = RecordingEnvironment(gated: true)
        let call = HookCall(pluginID: "swifttest", hook: .completeSignIn, logger: quietLogger, environment: environment)
        let outcome = Delivered<HookOutcome>()
        backend.start(.completeSignIn, input: [:], call: call, inline: false) { outcome.put($0) }
        let hook = try #require(fake.read())
        let number = try #require(hook["params"]?["call"])
        let limit = RunnerBackend.maxServicesInFlight
        for index in 1...limit {
            fake.write([
                "jsonrpc": "2.0", "id": .string("r\(index)"), "method": "http", "params": ["call": number, "request": ["url": "https://x.example"]],
            ])
        }
        // Bounded: all 32 are inside the host's http before the 33rd is sent.
        let deadline = DispatchTime.now() + .seconds(bound)
        while environment.entered.load(ordering: .acquiring) < limit && DispatchTime.now() < deadline { sched_yield() }
        #expect(environment.entered.load(ordering: .acquiring) == limit)
        fake.write(["jsonrpc": "2.0", "id": "r33", "method": "http", "params": ["call": number, "request": ["url": "https://x.example"]]])
        let refused = try #require(fake.read())
        #expect(refused["id"] == "r33")
        #expect(refused["result"]?["status"] == "error" && refused["result"]?["value"]?["reason"] == "tooManyRequests")
        environment.open(limit)
        var answered: Set<String> = []
        for _ in 0..<limit {
            let answer = try #require(fake.read())
            #expect(answer["result"]?["status"] == "ok")
            if let id = answer["id"]?.stringValue { answered.insert(id) }
        }
        #expect(answered.count == limit)
        fake.write(["jsonrpc": "2.0", "id": hook["id"]!, "result": ["outcome": "result", "value": ["ok": true]]])
        #expect(outcome.take()?.result == ["ok": true])
    }

    @Test func aRunnersEndNeverShutsDownTheNumberItsChannelClosed() throws {
        // The reaper (its `waitForEnd` returned) used to shut down the channel's descriptor after
        // the reader had closed it: by then the number may name another socket (a new runner's
        // channel; in the agent, an app's connection). Each round plays that order; a round whose
        // number another test took first proves nothing and is played again (bounded).
        for _ in 0..<5 {
            guard let socket = try endARunnerWhileAnotherSocketTakesItsNumber() else { continue }
            defer {
                _ = Glibc.close(socket.number)
                _ = Glibc.close(socket.peer)
            }
            // The socket that got the number still carries bytes both ways.
            #expect(send(socket.peer, "ping", 4, Int32(MSG_NOSIGNAL)) == 4, "the socket was shut down (errno \(errno))")
            var poller = pollfd(fd: socket.number, events: Int16(POLLIN), revents: 0)
            #expect(poll(&poller, 1, Int32(bound * 1000)) == 1)
            var bytes = [UInt8](repeating: 0, count: 8)
            let count = bytes.withUnsafeMutableBytes { recv(socket.number, $0.baseAddress, $0.count, Int32(MSG_DONTWAIT)) }
            #expect(count == 4 && Array(bytes.prefix(4)) == Array("ping".utf8), "the socket was shut down: read \(count)")
            #expect(send(socket.number, "pong", 4, Int32(MSG_NOSIGNAL)) == 4, "the socket was shut down (errno \(errno))")
            return
        }
        Issue.record("another thread took the closed channel's number in every round")
    }
}

/// A loaded backend whose runner (a fake) ends; between the channel's close and the reaper's
/// return, a new socket takes the channel's number, as a runner started meanwhile would. Returns
/// that socket (the number, its peer) once the runner's end is complete, or nil when another
/// thread took the number first.
private func endARunnerWhileAnotherSocketTakesItsNumber() throws -> (number: Int32, peer: Int32)? {
    let pair = try channelPair()
    let fake = FakeRunner(fd: pair.runner)
    let killed = Delivered<Bool>()
    let taken = Delivered<(number: Int32, peer: Int32)?>()
    let endings = Delivered<RunnerEnding>()
    let backend = RunnerBackend(
        library: try vettedSwiftTestPlugin(), logger: quietLogger,
        launch: { _ in
            RunnerHandle(
                channelFD: pair.host,
                waitForEnd: {
                    // The runner has ended once the host killed it (its channel saw the end)…
                    _ = killed.take()
                    // …and the reader closes the channel's descriptor (bounded wait)…
                    let deadline = DispatchTime.now() + .seconds(bound)
                    while fcntl(pair.host, F_GETFD) != -1 && DispatchTime.now() < deadline { sched_yield() }
                    // …whose number a new socket takes before the reaper goes on.
                    taken.put(takeNumber(pair.host))
                    return "exited with status 0"
                }, kill: { killed.put(true) })
        }, onEnding: { endings.put($0) })
    detachThread { fake.answerLoad() }
    try backend.load()
    fake.close()
    #expect(endings.take() == .crashed(detail: "exited with status 0"))
    return taken.take() ?? nil
}

/// A new connected socket placed at `number` (free), and its peer; nil when `number` was taken.
private func takeNumber(_ number: Int32) -> (number: Int32, peer: Int32)? {
    guard let pair = try? channelPair() else { return nil }
    // The lowest free number goes to a new descriptor: the pair may have taken it already.
    if pair.host == number { return (pair.host, pair.runner) }
    if pair.runner == number { return (pair.runner, pair.host) }
    let moved = fcntl(pair.host, F_DUPFD_CLOEXEC, number)
    _ = Glibc.close(pair.host)
    guard moved == number else {
        if moved >= 0 { _ = Glibc.close(moved) }
        _ = Glibc.close(pair.runner)
        return nil
    }
    return (moved, pair.runner)
}

@Suite("Child processes")
struct ChildProcessTests {
    @Test func theEnvironmentKeepsNoSecretsAndTheSessionBusOnlyWhenAsked() {
        let given = [
            "PATH=/usr/bin", "HOME=/home/u", "AUTHBRIDGE_VAULT_KEY=k", "GITHUB_TOKEN=t", "AWS_SECRET_ACCESS_KEY=s", "DB_PASSWORD=p",
            "DBUS_SESSION_BUS_ADDRESS=unix:path=/run/user/1/bus", "LANG=C.UTF-8",
        ]
        #expect(ChildProcess.environment(given, keepSessionBus: false) == ["PATH=/usr/bin", "HOME=/home/u", "LANG=C.UTF-8"])
        #expect(
            ChildProcess.environment(given, keepSessionBus: true) == [
                "PATH=/usr/bin", "HOME=/home/u", "DBUS_SESSION_BUS_ADDRESS=unix:path=/run/user/1/bus", "LANG=C.UTF-8",
            ])
    }

    @Test func waitStatusesInWords() {
        #expect(ChildProcess.failure(waitStatus: 0) == nil)
        #expect(ChildProcess.failure(waitStatus: 3 << 8) == "exited with status 3")
        #expect(ChildProcess.failure(waitStatus: SIGSEGV) == "killed by signal 11 (SIGSEGV)")
        #expect(ChildProcess.failure(waitStatus: SIGABRT | 0x80) == "killed by signal 6 (SIGABRT)", "a core dump flag changes nothing")
        #expect(ChildProcess.failure(waitStatus: 40) == "killed by signal 40")
    }
}

/// The authbridge binary SwiftPM built beside the tests.
private func authbridgeExecutable() -> String? {
    [repositoryRoot() + "/.build/debug/authbridge"].first { access($0, X_OK) == 0 }
}

private func processExists(_ pid: Int32) -> Bool { access("/proc/\(pid)", F_OK) == 0 }

@Suite("Plugin runner process")
struct RunnerProcessTests {
    @Test func aRealRunnerServesCrashesIsRestartedAndIsReapedAtShutdown() throws {
        let executable = try #require(authbridgeExecutable(), "run `make build` first")
        let endings = Delivered<RunnerEnding>()
        let backend = RunnerBackend(
            library: try vettedSwiftTestPlugin(), logger: quietLogger, launch: RunnerBackend.spawnLaunch(executable: executable),
            onEnding: { endings.put($0) })
        try backend.load()
        let first = try #require(backend.runnerProcessID)
        #expect(first != getpid() && processExists(first))
        #expect(backend.run(.checkSession, ["tokens": [:]], environment: RecordingEnvironment())?.result == ["state": "valid"])

        // A segfault under a call: the call is answered, with how the runner ended.
        let environment = RecordingEnvironment()
        let call = HookCall(pluginID: "swifttest", hook: .completeSignIn, logger: quietLogger, environment: environment)
        let outcome = Delivered<HookOutcome>()
        backend.start(.completeSignIn, input: ["flow": "session", "sessionId": "slow"], call: call, inline: false) { outcome.put($0) }
        kill(first, SIGSEGV)
        let failure = try #require(outcome.take()?.failure)
        #expect(failure.reason == "pluginCrashed" && failure.message.contains("killed by signal 11 (SIGSEGV)"), "\(failure.message)")
        #expect(endings.take() == .crashed(detail: "killed by signal 11 (SIGSEGV)"))
        #expect(!processExists(first), "reaped")

        // The next call starts another runner.
        #expect(backend.run(.checkSession, ["tokens": [:]], environment: RecordingEnvironment())?.result == ["state": "valid"])
        let second = try #require(backend.runnerProcessID)
        #expect(second != first)

        backend.shutdown(within: .seconds(5))
        #expect(!processExists(second), "shut down and reaped")
        #expect(endings.take() == .shutDown)
    }
}
