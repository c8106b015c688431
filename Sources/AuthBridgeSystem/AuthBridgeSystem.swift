// AuthBridgeSystem: the host's low-level parts, on Glibc and Synchronization
// only (no Foundation, no libdispatch on the start-up path), in the spirit of
// NIOConcurrencyHelpers / NIOPosix:
//
//   startThread, detachThread   (AuthBridgeThreads)    the one thread spawner
//   ConditionLock, Handoff      (AuthBridgeThreads)    blocking a thread until state changes
//   HelperLibrary               (HelperLibrary.swift)  a helper .so dlopen'ed once, on first use
//   POSIXFiles                  (POSIXFiles.swift)     listing a folder, reading a bounded file
//   UnixSocket                  (UnixSocket.swift)     the agent's socket: listen, accept, connect,
//                                                      the peer's credentials, sockets passed by systemd
//
// The locking primitives of AuthBridge, and when to use each (the rule is
// repeated where each is defined or first used):
//
//   actor                     state that async code awaits (SessionEngine, the vault's Opener,
//                             ProfileLocks); never held across a blocking call
//   Synchronization.Mutex     a short synchronous critical section that never waits
//                             (caches, flags with more than one field, a continuation's slot)
//   Synchronization.Atomic    one flag or counter read without a lock
//   ConditionLock (here)      a thread that must block until another changes state (the
//                             RPC reader and writer threads, the hook thread pool); Handoff
//                             for one value awaited by a blocked thread
//
// Nothing else: no NSLock, no DispatchSemaphore, no pthread mutex outside ConditionLock.
// (The vault's per-profile flock is between processes, not threads.)
//
// The threads and the blocking are a module of their own, AuthBridgeThreads, re-exported here:
// the Swift plugin SDK links it into every plugin, which needs nothing else of this module.

@_exported import AuthBridgeThreads
