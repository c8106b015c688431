#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// Starts `body` on a new detached OS thread (pthreads: no Foundation, no
/// libdispatch, whose pool adds threads for blocked work only slowly on Linux).
/// `stackSize` nil: the system's default. Returns false when the system has no
/// thread to give: `body` has not run and never will, and the caller decides
/// (stop, run it inline, leave the work queued).
public func startThread(stackSize: Int? = nil, _ body: @escaping @Sendable () -> Void) -> Bool {
    final class Box {
        let body: @Sendable () -> Void
        init(_ body: @escaping @Sendable () -> Void) { self.body = body }
    }
    var attributes = pthread_attr_t()
    pthread_attr_init(&attributes)
    defer { pthread_attr_destroy(&attributes) }
    if let stackSize { pthread_attr_setstacksize(&attributes, stackSize) }
    pthread_attr_setdetachstate(&attributes, Int32(PTHREAD_CREATE_DETACHED))
    let context = Unmanaged.passRetained(Box(body)).toOpaque()
    #if canImport(Darwin)
    var thread: pthread_t?
    #else
    var thread = pthread_t()
    #endif
    let result = pthread_create(
        &thread, &attributes,
        { raw in
            Unmanaged<Box>.fromOpaque(raw!).takeRetainedValue().body()
            return nil
        }, context)
    guard result == 0 else {
        Unmanaged<Box>.fromOpaque(context).release()
        return false
    }
    return true
}

/// Runs blocking `body` (flock, D-Bus, waitpid, sockets) on a new detached
/// thread, so that it never occupies an executor; on the calling thread when
/// no thread can be started (the work is done late rather than never).
public func detachThread(_ body: @escaping @Sendable () -> Void) {
    if !startThread(body) { body() }
}
