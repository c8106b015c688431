import CAuthBridgeProcess
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// What the process does before anything else: the vault key and tokens
/// live in its memory, so no core dump may write them out and no other
/// process of this user may read them (ptrace, /proc/<pid>/mem); and the
/// service secret and the vault's database URL leave the environment, so no
/// child (xdg-open, the browser it starts, a plugin runner) inherits them.
public enum ProcessHardening {
    /// `AUTHBRIDGE_VAULT_KEY` as found at start; the environment no longer holds it.
    public static let vaultSecret: String? = {
        guard let value = ab_process_take_variable("AUTHBRIDGE_VAULT_KEY") else { return nil }
        defer { free(value) }
        let text = String(cString: value)
        return text.isEmpty ? nil : text
    }()

    /// `AUTHBRIDGE_VAULT_URL` (the PostgreSQL vault's connection string, which may hold a
    /// password) as found at start; taken out of the environment like the vault key.
    public static let vaultURL: String? = {
        guard let value = ab_process_take_variable("AUTHBRIDGE_VAULT_URL") else { return nil }
        defer { free(value) }
        let text = String(cString: value)
        return text.isEmpty ? nil : text
    }()

    /// `AUTHBRIDGE_VAULT_URL` for checking the options: as `vaultURL` once `apply` has run; before,
    /// read without taking it, because `authbridge` checks a command line before it knows whether it
    /// will serve it or hand it, environment whole, to authbridge-cli.
    public static var vaultURLForChecks: String? {
        if applied.load(ordering: .acquiring) { return vaultURL }
        return getenv("AUTHBRIDGE_VAULT_URL").map { String(cString: $0) }.flatMap { $0.isEmpty ? nil : $0 }
    }

    private static let applied = Atomic<Bool>(false)

    public static func apply() {
        // First: what a command run by `authbridge exec` inherits is what this process was given.
        ab_process_note_start()
        _ = vaultSecret
        _ = vaultURL
        applied.store(true, ordering: .releasing)
        let status = ab_process_harden()
        if status != 0 {
            StandardError.write("warning: could not turn off core dumps for this process (\(String(cString: strerror(status))))")
        }
    }
}
