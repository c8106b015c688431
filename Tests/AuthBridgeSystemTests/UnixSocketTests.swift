import AuthBridgeSystem
import TestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

@Suite("Unix sockets", .serialized)
struct UnixSocketTests {
    @Test func aListenerIsPrivateAndNamesItsPeerWithoutReadingAnything() throws {
        let folder = try TemporaryFolder()
        defer { folder.remove() }
        let path = folder.path + "/agent.sock"
        let listener = try UnixSocket.listen(path: path)
        defer { close(listener) }
        var info = stat()
        #expect(lstat(path, &info) == 0 && info.st_mode & 0o777 == 0o600)
        #expect(UnixSocket.isListeningStream(listener) && UnixSocket.boundPath(listener) == path)
        #expect(fcntl(listener, F_GETFL) & O_NONBLOCK != 0, "accept never waits for a connection that vanished")
        #expect((try? UnixSocket.accept(listener).get()) == nil, "none waiting: EAGAIN")

        let client = try UnixSocket.connect(path: path)
        defer { close(client) }
        let accepted = try UnixSocket.accept(listener).get()
        defer { close(accepted) }
        let peer = UnixSocket.peerCredentials(accepted)
        #expect(peer?.pid == getpid() && peer?.uid == getuid() && peer?.gid == getgid())
        #expect(fcntl(accepted, F_GETFD) & FD_CLOEXEC != 0, "no child the host starts inherits a connection")
        #expect(fcntl(accepted, F_GETFL) & O_NONBLOCK == 0, "connections block: the reader and writer threads wait on them")
        #expect(!UnixSocket.isListeningStream(accepted))
    }

    @Test func connectingSaysWhyThereIsNoOneToTalkTo() throws {
        let folder = try TemporaryFolder()
        defer { folder.remove() }
        #expect(throws: UnixSocket.Failure("connect \(folder.path)/none.sock", errno: ENOENT)) {
            try UnixSocket.connect(path: folder.path + "/none.sock")
        }
        // A socket file whose listener is gone: refused.
        let path = folder.path + "/stale.sock"
        close(try UnixSocket.listen(path: path))
        #expect(throws: UnixSocket.Failure("connect \(path)", errno: ECONNREFUSED)) { try UnixSocket.connect(path: path) }
        let long = folder.path + "/" + String(repeating: "x", count: UnixSocket.maximumPathBytes)
        #expect(throws: UnixSocket.Failure.self) { try UnixSocket.listen(path: long) }
    }

    @Test func passedDescriptorsFollowSdListenFds() {
        setenv("LISTEN_PID", "\(getpid())", 1)
        setenv("LISTEN_FDS", "2", 1)
        setenv("LISTEN_FDNAMES", "a:b", 1)
        #expect(UnixSocket.passedDescriptors() == [3, 4])
        #expect(getenv("LISTEN_PID") == nil && getenv("LISTEN_FDS") == nil && getenv("LISTEN_FDNAMES") == nil, "no child inherits them")
        // Meant for another process (a parent's, inherited): none, and removed all the same.
        setenv("LISTEN_PID", "\(getpid() + 1)", 1)
        setenv("LISTEN_FDS", "1", 1)
        #expect(UnixSocket.passedDescriptors() == [])
        #expect(getenv("LISTEN_FDS") == nil)
        #expect(UnixSocket.passedDescriptors() == [], "none passed")
    }
}
