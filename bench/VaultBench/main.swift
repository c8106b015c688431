// Vault latency: save (durable: fsync + rename + fsync of the folder) and load,
// per backend. Prints a table and one `BENCH_JSON` line. Run by `make bench`;
// the secret-service row needs a session bus with an unlocked keyring.
//
//   authbridge-vault-bench [--rounds N] [--keyring-lib PATH] [--secret-service]

import AuthBridgeJSON
import AuthBridgeVault

#if canImport(Glibc)
import Glibc
#endif

func nowNanoseconds() -> UInt64 {
    var spec = timespec()
    clock_gettime(CLOCK_MONOTONIC, &spec)
    return UInt64(spec.tv_sec) * 1_000_000_000 + UInt64(spec.tv_nsec)
}

func percentile(_ values: [Double], _ p: Double) -> Double {
    let sorted = values.sorted()
    return sorted[min(sorted.count - 1, Int(Double(sorted.count - 1) * p))]
}

let arguments = CommandLine.arguments
func option(_ name: String) -> String? {
    guard let index = arguments.firstIndex(of: name), index + 1 < arguments.count else { return nil }
    return arguments[index + 1]
}
let rounds = Int(option("--rounds") ?? "") ?? 200
var template = Array("/tmp/authbridge-vault-bench-XXXXXX".utf8CString)
let scratch = template.withUnsafeMutableBufferPointer { String(cString: mkdtemp($0.baseAddress!)!) }
defer { _ = system("rm -rf '\(scratch)'") }

var backends: [(String, any Vault)] = [
    ("memory", MemoryVault()),
    ("encrypted-file", EncryptedFileVault(folder: scratch + "/vault", keySource: .keyFile(scratch + "/keys/vault.key"))),
]
if arguments.contains("--secret-service"), let library = option("--keyring-lib") {
    backends.append(("secret-service", SecretServiceVault(keyring: Keyring(libraryPaths: [library]), lockFolder: scratch + "/locks")))
}

// A realistic record: access + refresh token, expiry, provider extras.
let secret: JSON = [
    "tokens": [
        "accessToken": .string(String(repeating: "a", count: 800)),
        "refreshToken": .string(String(repeating: "r", count: 64)),
        "tokenType": "Bearer", "expiresAt": 1_900_000_000_000,
        "extras": ["instance_url": "https://example.my.salesforce.com", "issued_at": "1700000000000"],
    ],
    "account": ["id": "005xx000001Sv6AAAS", "name": "Ada Lovelace"],
]

print("AuthBridge vault bench (\(rounds) rounds per backend; microseconds)")
print("backend           save p50   save p90   load p50   load p90")
var figures: [String: JSON] = [:]
for (name, vault) in backends {
    var saves: [Double] = [], loads: [Double] = []
    do {
        try await vault.save(VaultRecord(profile: "warm-up", account: "x", secret: secret))
        for index in 0..<rounds {
            let record = VaultRecord(profile: "profile-\(index % 8)", account: "ada", secret: secret)
            let start = nowNanoseconds()
            try await vault.save(record)
            let saved = nowNanoseconds()
            _ = try await vault.load(record.profile)
            let loaded = nowNanoseconds()
            saves.append(Double(saved - start) / 1000)
            loads.append(Double(loaded - saved) / 1000)
        }
    } catch {
        print("\(name): failed: \(error)")
        exit(1)
    }
    let row = [percentile(saves, 0.5), percentile(saves, 0.9), percentile(loads, 0.5), percentile(loads, 0.9)]
    print(name + String(repeating: " ", count: max(1, 16 - name.count)) + row.map { String(Int($0.rounded())).leftPad(11) }.joined())
    figures[name] = [
        "save_p50_us": .double(row[0]), "save_p90_us": .double(row[1]),
        "load_p50_us": .double(row[2]), "load_p90_us": .double(row[3]),
    ]
}
print("BENCH_JSON " + JSON.object(["vault": .object(figures), "rounds": .int(Int64(rounds))]).serializedString(sortKeys: true))

extension String {
    func leftPad(_ width: Int) -> String { count >= width ? self : String(repeating: " ", count: width - count) + self }
}
