import AuthBridgeSystem

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// The Secret Service (desktop keyring), through `libAuthBridgeKeyring.so`,
/// which the host dlopens on first use so that glib, gio and D-Bus never
/// load for hosts that do not use the keyring.
///
/// Threading: every call blocks on D-Bus, so each runs on a thread of its
/// own and is awaited; callers never block an executor.
public final class Keyring: Sendable {
    /// Candidate paths of libAuthBridgeKeyring.so, in order.
    public let libraryPaths: [String]
    /// Opened once; a host without it stays without it (the failure is remembered).
    private let library: HelperLibrary<Functions>

    public init(libraryPaths: [String]) {
        self.libraryPaths = libraryPaths
        library = HelperLibrary("The keyring helper libAuthBridgeKeyring.so", candidates: libraryPaths, remembersFailure: true) { symbols in
            guard let store = symbols.function("ab_keyring_store", as: Functions.Store.self),
                let lookup = symbols.function("ab_keyring_lookup", as: Functions.Lookup.self),
                let clear = symbols.function("ab_keyring_clear", as: Functions.Clear.self),
                let list = symbols.function("ab_keyring_list", as: Functions.List.self),
                let free = symbols.function("ab_keyring_free", as: Functions.Free.self)
            else { return nil }
            return Functions(store: store, lookup: lookup, clear: clear, list: list, free: free)
        }
    }

    struct Functions: @unchecked Sendable {
        typealias Store =
            @convention(c) (
                UnsafePointer<CChar>, UnsafePointer<CChar>, UnsafePointer<CChar>, UnsafePointer<CChar>,
                UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>
            ) -> Int32
        typealias Lookup =
            @convention(c) (
                UnsafePointer<CChar>, UnsafePointer<CChar>, UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>,
                UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>
            ) -> Int32
        typealias Clear = @convention(c) (UnsafePointer<CChar>, UnsafePointer<CChar>, UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>) -> Int32
        typealias List =
            @convention(c) (
                UnsafePointer<CChar>, UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>, UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>
            ) -> Int32
        typealias Free = @convention(c) (UnsafeMutablePointer<CChar>?) -> Void
        let store: Store, lookup: Lookup, clear: Clear, list: List, free: Free
    }

    public func store(kind: String, key: String, label: String, secret: String) async throws(VaultError) {
        let functions = try load()
        try await offload { () throws(VaultError) in
            var error: UnsafeMutablePointer<CChar>?
            let status = functions.store(kind, key, label, secret, &error)
            try Self.check(status, error, functions)
        }
    }

    public func lookup(kind: String, key: String) async throws(VaultError) -> String? {
        let functions = try load()
        return try await offload { () throws(VaultError) -> String? in
            var error: UnsafeMutablePointer<CChar>?
            var secret: UnsafeMutablePointer<CChar>?
            let status = functions.lookup(kind, key, &secret, &error)
            try Self.check(status, error, functions)
            defer { functions.free(secret) }
            return secret.map { String(cString: $0) }
        }
    }

    public func clear(kind: String, key: String) async throws(VaultError) {
        let functions = try load()
        try await offload { () throws(VaultError) in
            var error: UnsafeMutablePointer<CChar>?
            try Self.check(functions.clear(kind, key, &error), error, functions)
        }
    }

    public func list(kind: String) async throws(VaultError) -> [String] {
        let functions = try load()
        let text = try await offload { () throws(VaultError) -> String in
            var error: UnsafeMutablePointer<CChar>?
            var keys: UnsafeMutablePointer<CChar>?
            try Self.check(functions.list(kind, &keys, &error), error, functions)
            defer { functions.free(keys) }
            return keys.map { String(cString: $0) } ?? "[]"
        }
        guard let array = (try? JSON.parse(text))?.arrayValue else { return [] }
        return array.compactMap(\.stringValue)
    }

    private static func check(_ status: Int32, _ error: UnsafeMutablePointer<CChar>?, _ functions: Functions) throws(VaultError) {
        guard status != 0 else { return }
        let message = error.map { String(cString: $0) } ?? "unknown error"
        functions.free(error)
        throw VaultError(.keyringUnavailable, "The Secret Service (keyring) is not usable: \(message).")
    }

    private func load() throws(VaultError) -> Functions {
        try library.load().mapError { failure in
            VaultError(.keyringUnavailable, failure.loadError.map { "Cannot load the keyring helper: \($0)." } ?? failure.notInstalledMessage)
        }.get()
    }
}

/// Runs a blocking `body` on a thread of its own and awaits it.
func offload<T: Sendable>(_ body: @escaping @Sendable () throws(VaultError) -> T) async throws(VaultError) -> T {
    let result: Result<T, VaultError> = await withCheckedContinuation { continuation in
        detachThread { continuation.resume(returning: Result { () throws(VaultError) -> T in try body() }) }
    }
    return try result.get()
}
