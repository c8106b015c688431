@testable import AuthBridgeSession
import Testing

#if canImport(Glibc)
import Glibc
#endif

@Suite("Loopback listener")
struct LoopbackListenerTests {
    /// Whether a TCP connection to 127.0.0.1:`port` is accepted (by the kernel's backlog).
    private func connects(to port: UInt16) -> Bool {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = port.bigEndian
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        return withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        } == 0
    }

    /// Issue 12 §1: a cancelled browser sign-in was answered while its port still accepted
    /// connections (the socket closed only when the last reference went).
    @Test func theCallbackPortRefusesConnectionsOnceClosed() throws {
        let listener = try LoopbackListener()
        #expect(connects(to: listener.port))
        listener.close()
        #expect(!connects(to: listener.port), "the port still accepts connections after close()")
        withExtendedLifetime(listener) {}
    }
}
