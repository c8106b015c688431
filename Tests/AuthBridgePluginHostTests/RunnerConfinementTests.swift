import AuthBridgeJSON
@testable import AuthBridgePluginHost
import CAuthBridgeProcess
import Testing

#if canImport(Glibc)
import Glibc
#endif

// What a runner says about its sandbox: the words for a part the kernel lacks, the JSON of
// PluginStatus `confinement`, and the first line of the channel that carries it. The sandbox
// itself is tested on real runners (Tests/contract/test_sandbox.py).

private func parts(namespaces: Int32 = 0, noNewPrivs: Int32 = 0, landlock: Int32 = 0, abi: Int32 = 7, seccomp: Int32 = 0) -> ab_confinement {
    ab_confinement(namespaces: namespaces, no_new_privs: noNewPrivs, landlock: landlock, landlock_abi: landlock == 0 ? abi : 0, seccomp: seccomp)
}

@Suite("Runner confinement")
struct RunnerConfinementTests {
    @Test func aCompleteSandboxHasNoWarnings() {
        let confinement = RunnerConfinement(parts())
        #expect(confinement == RunnerConfinement(noNewPrivileges: true, seccomp: true, landlock: 7, pidNamespace: true, warnings: []))
        #expect(confinement.json == ["noNewPrivileges": true, "seccomp": true, "landlock": 7, "pidNamespace": true])
    }

    @Test func eachMissingPartIsAWarningThatSaysWhatItLeavesOpen() {
        let confinement = RunnerConfinement(parts(namespaces: EPERM, landlock: EOPNOTSUPP, seccomp: EINVAL))
        #expect(!confinement.pidNamespace && confinement.landlock == 0 && !confinement.seccomp && confinement.noNewPrivileges)
        #expect(
            confinement.warnings == [
                "no PID namespace (Operation not permitted): what the plugin starts ends with the runner's process group, not whenever the runner ends",
                "no Landlock (this kernel has none enabled: Linux 5.13 or later): the plugin can read and write this user's files",
                "no seccomp filter (Invalid argument): the plugin can open sockets, trace this user's processes and run programs",
            ])
    }

    @Test func anOlderLandlockLeavesSignalsAndWithoutSeccompOtherSocketsOpen() {
        #expect(
            RunnerConfinement(parts(abi: 5)).warnings == [
                "Landlock ABI 5 (Linux 6.12 or later has 6): the plugin can signal this user's other processes"
            ])
        let noFilter = RunnerConfinement(parts(abi: 4, seccomp: ENOSYS))
        #expect(noFilter.landlock == 4)
        #expect(
            noFilter.warnings.last?.hasPrefix(
                "no seccomp filter (Function not implemented): the plugin can open no TCP (Landlock), but other sockets") == true)
    }

    @Test func itsJSONReadsBackAndAnythingElseIsNoConfinement() {
        let confinement = RunnerConfinement(parts(namespaces: EPERM, abi: 3))
        #expect(RunnerConfinement(json: confinement.json) == confinement)
        #expect(confinement.json["warnings"]?.arrayValue?.count == 2)
        #expect(RunnerConfinement(json: ["noNewPrivileges": true, "seccomp": true, "landlock": -1, "pidNamespace": true]) == nil)
        #expect(RunnerConfinement(json: ["noNewPrivileges": true, "seccomp": "yes", "landlock": 7, "pidNamespace": true]) == nil)
        #expect(RunnerConfinement(json: ["noNewPrivileges": true, "seccomp": true, "landlock": 7, "pidNamespace": true, "warnings": [1]]) == nil)
        #expect(RunnerConfinement(json: "confined") == nil)
    }

    @Test func theHostReadsItFromTheRunnersFirstLineAndNothingElse() throws {
        let confinement = RunnerConfinement(parts(abi: 6))
        try withSocketPair { runner, host in
            #expect(confinement.announce(on: runner))
            #expect(RunnerConfinement.read(from: host, within: .seconds(30)) == confinement)
        }
        // Another first line, an end before any line, or silence: no confinement.
        try withSocketPair { runner, host in
            let other = Array(#"{"jsonrpc":"2.0","method":"log","params":{"message":"confined"}}"#.utf8) + [10]
            #expect(write(runner, other, other.count) == other.count)
            #expect(RunnerConfinement.read(from: host, within: .seconds(30)) == nil)
        }
        try withSocketPair { runner, host in
            shutdown(runner, Int32(SHUT_WR))
            #expect(RunnerConfinement.read(from: host, within: .seconds(30)) == nil)
        }
        try withSocketPair { _, host in
            #expect(RunnerConfinement.read(from: host, within: .milliseconds(20)) == nil)
        }
    }
}

/// Runs `body` with both ends of a new socket pair, closed after it.
private func withSocketPair(_ body: (Int32, Int32) throws -> Void) throws {
    var pair: [Int32] = [-1, -1]
    try #require(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &pair) == 0)
    defer {
        close(pair[0])
        close(pair[1])
    }
    try body(pair[0], pair[1])
}
