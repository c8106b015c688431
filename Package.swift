// swift-tools-version: 6.1
import PackageDescription

/// AuthBridge: a token broker host that loads OAuth provider plugins and
/// speaks JSON-RPC 2.0 on stdio. Modules depend one way, top to bottom:
///
///   CAuthBridgePlugin (C ABI header)   CJansson (system library)      AuthBridgeURL
///            │                              │                        (URLs, query and form encoding, base64url)
///   AuthBridgePluginABI ───────────── AuthBridgeJSON      (Swift side of the ABI: hooks, failures, the Swift runtime note │ JSON over jansson)
///            │                         │          │
///            │                  AuthBridgeRPC     │       (JSON-RPC 2.0 framing, connection)
///            │                         │          │
///            ├──── AuthBridgeRedaction ──────────┤       (secret hygiene: masking, the known secrets)
///            └──────── AuthBridgePluginHost ──────┘       (manifests, loader, host services, plugin runner)
///                              │  └── CAuthBridgeProcess  (posix_spawn of the runner, prctl)
///                              │
///                      AuthBridgeSession ── AuthBridgeVault  (profiles, sessions, flows │ token storage)
///                              ├── AuthBridgeNetwork      (the HTTP service: libAuthBridgeHTTP.so, dlopen'ed; the loopback listener)
///                              ├── AuthBridgeIDToken      (ID tokens: JWS, JWKS, OIDC claims; no Foundation)
///                              └──────┬──────────┘
///                              AuthBridgeCrypto  (hashes, AES-GCM, HKDF, JWS signatures: libAuthBridgeNettle.so, signing keys:
///                                                 libAuthBridgeSwiftCrypto.so, each dlopen'ed)
///                              │
///                       AuthBridgeHost  ── AuthBridgeRPC  (bridge methods, lifecycle)
///                              │
///                      AuthBridgeLaunch                   (host settings, serve, agent, plugin-runner: no ArgumentParser)
///                         │          │
///               authbridge-host   authbridge-cli          (the host: serve, agent, plugin-runner │ the CLI: ArgumentParser)
///                         ┆          ┆
///                    authbridge  (C, built by the Makefile, not a target: the Swift driver would link the Swift
///                                 runtime into it; it execs one or the other, and answers token,
///                                 exec-credential and git's get from the agent itself: Sources/authbridge/front_door.h)
///
/// authbridge-cli also imports the session, plugin host, RPC, JSON, Crypto and System modules itself (declared below:
/// Tests/contract/test_architecture.py holds every target's imports to its declared dependencies).
/// The vault dlopens libAuthBridgePostgres.so (HelperPostgres over CLibPQ) for `--vault postgresql`.
/// The helper libraries opened with dlopen on first use are the `Helper*` targets, in Sources/Helpers/;
/// a `C*` target is a C shim or a system library, linked at build time.
/// AuthBridgeURL depends on nothing; the plugin host, the session, the ID-token check and the SDK use it.
/// AuthBridgeSystem (threads, ConditionLock, the dlopen'ed helper libraries, POSIX file reading)
/// depends on nothing; the RPC, plugin host, vault, session and host modules and the plugin SDK use it.
/// Plugin authors use AuthBridgePluginSDK (Swift, over AuthBridgePluginABI and AuthBridgeURL) or the
/// C header directly. A Swift plugin is two targets: its provider logic (unit-tested) and its entry
/// point (`Entry/`), the one `authbridge_plugin_v1` of its library.

/// AuthBridgePluginABI writes its Swift runtime note with `@section`/`@used`, spelled
/// `@_section`/`@_used` behind an experimental feature before Swift 6.3.
#if compiler(>=6.3)
let symbolLinkageMarkers: [SwiftSetting] = []
#else
let symbolLinkageMarkers: [SwiftSetting] = [.enableExperimentalFeature("SymbolLinkageMarkers")]
#endif

/// The bundled Swift plugins: `plugins/ID/` (logic) and `plugins/ID/Entry/` (entry point) make the
/// library `libauthbridge-ID.so`.
let bundledSwiftPlugins: [(id: String, target: String)] = [
    ("oidc", "OIDCPlugin"), ("salesforce", "SalesforcePlugin"), ("tableau", "TableauPlugin"), ("marketsharp", "MarketSharpPlugin"),
]

/// Tests may use Swift's string algorithms (`contains("…")` on strings): the Makefile compiles
/// everything without the implicit import of _StringProcessing, which the product does without.
let testSwiftSettings: [SwiftSetting] = [.unsafeFlags(["-Xfrontend", "-import-module", "-Xfrontend", "_StringProcessing"])]

let package = Package(
    name: "AuthBridge",
    platforms: [.macOS(.v15)],
    products: [
        // The host frontends run (`serve`, `agent`, and the isolated plugins' `plugin-runner`), and the
        // command-line tool it hands every other command line to (installed in lib/authbridge).
        .executable(name: "authbridge-host", targets: ["authbridge-host"]),
        .executable(name: "authbridge-cli", targets: ["authbridge-cli"]),
        .library(name: "AuthBridgePluginSDK", targets: ["AuthBridgePluginSDK"]),
        // The HTTP transport (libcurl), dlopen'ed by the host on the first request, so that
        // libcurl and TLS stay off the start-up path.
        .library(name: "AuthBridgeHTTP", type: .dynamic, targets: ["HelperHTTP"]),
        // swift-crypto: the host's AES-GCM and HKDF (AuthBridgeCrypto calls them), for the host to
        // dlopen on first use, so that neither it nor the FoundationEssentials it needs weighs on
        // the host's start-up.
        .library(name: "AuthBridgeSwiftCrypto", type: .dynamic, targets: ["HelperSwiftCrypto"]),
        // GNU Nettle: the vault's AES-GCM and HKDF, HMAC, and the signatures of ID tokens (AuthBridgeIDToken).
        .library(name: "AuthBridgeNettle", type: .dynamic, targets: ["HelperNettle"]),
        // Likewise for the Secret Service (glib, gio, D-Bus): dlopen'ed on first use.
        .library(name: "AuthBridgeKeyring", type: .dynamic, targets: ["HelperKeyring"]),
        // And for the PostgreSQL vault (libpq): dlopen'ed the first time a `--vault postgresql` host uses it.
        .library(name: "AuthBridgePostgres", type: .dynamic, targets: ["HelperPostgres"]),
        // Bundled provider plugins (installed into lib/authbridge/plugins).
    ] + bundledSwiftPlugins.map { Product.library(name: "authbridge-\($0.id)", type: .dynamic, targets: [$0.target + "Entry"]) } + [
        // Test plugins: built for the test suites, never installed.
        .library(name: "authbridge-testplugin-swift", type: .dynamic, targets: ["SwiftTestPlugin"])
    ],
    // Exact versions: a release is built from exactly these (Package.resolved is not committed,
    // because this machine's package mirror has other commit ids than the upstream repositories).
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", exact: "1.8.2"),
        .package(url: "https://github.com/apple/swift-log", exact: "1.16.2"),
        // jwt-kit 5.7.1/5.8.0 needs swift-crypto >= 4.1.
        .package(url: "https://github.com/apple/swift-crypto", exact: "4.5.2"),
        // TEST-ONLY: jwt-kit signs the ID tokens AuthBridgeIDTokenTests verifies (a signer independent
        // of the verifier). Nothing in Sources uses it, nor swift-certificates, swift-asn1 or
        // swift-extras-base64 (jwt-kit's own, no longer pinned here), since issue 32.
        .package(url: "https://github.com/vapor/jwt-kit", exact: "5.8.0"),
    ],
    targets: [
        .systemLibrary(
            name: "CJansson", pkgConfig: "jansson",
            providers: [.apt(["libjansson-dev"])]),
        .target(name: "CAuthBridgePlugin"),
        // The Swift side of the plugin ABI, shared by the host and the Swift SDK: the hooks, the
        // failure type, and the Swift runtime note (which Swift a plugin was built for).
        .target(name: "AuthBridgePluginABI", dependencies: ["CAuthBridgePlugin", "AuthBridgeJSON"], swiftSettings: symbolLinkageMarkers),
        // The URL and text toolkit of the host and the Swift SDK (no dependencies, no Foundation).
        .target(name: "AuthBridgeURL"),
        // The low-level parts (no Foundation): the thread spawner and ConditionLock (AuthBridgeThreads,
        // re-exported), the dlopen'ed helper-library loader, POSIX files, Unix sockets; the locking primitives.
        .target(name: "AuthBridgeSystem", dependencies: ["AuthBridgeThreads"]),
        // The one thread spawner and blocking between threads (ConditionLock, Handoff): AuthBridgeSystem
        // re-exports it; the plugin SDK uses it alone (it is linked into every Swift plugin).
        .target(name: "AuthBridgeThreads"),
        // Opens libsecret-1.so.0 with dlopen itself: the keyring is optional at run time.
        .target(name: "HelperKeyring", path: "Sources/Helpers/Keyring", linkerSettings: soname("libAuthBridgeKeyring.so")),

        .target(name: "AuthBridgeJSON", dependencies: ["CJansson"]),
        .target(
            name: "AuthBridgeRPC",
            dependencies: [
                "AuthBridgeJSON", "AuthBridgeSystem",
                .product(name: "Logging", package: "swift-log"),
            ]),
        // The bridge's messages as Swift types (one per method's params and result, per notification, per
        // word set; the error codes), written by scripts/spec.py from bridge-spec/openrpc.json.
        .target(name: "AuthBridgeProtocol", dependencies: ["AuthBridgeJSON"]),
        // Secret hygiene: the patterns that mask what looks like a credential (Redaction) and the exact
        // values this process holds (KnownSecrets); the plugin host, the session and the host's log use them.
        .target(name: "AuthBridgeRedaction", dependencies: ["AuthBridgePluginABI", "AuthBridgeJSON", "AuthBridgeURL"]),
        .target(
            name: "AuthBridgePluginHost",
            dependencies: [
                "CAuthBridgePlugin", "AuthBridgePluginABI", "AuthBridgeJSON", "AuthBridgeURL", "AuthBridgeSystem", "AuthBridgeRedaction",
                // The plugin runner: its channel's framing (RPC), posix_spawn and prctl (Process).
                "AuthBridgeRPC", "CAuthBridgeProcess",
                .product(name: "Logging", package: "swift-log"),
            ]),
        // The host's cryptography (hashes, AES-GCM, HKDF, HMAC, signing keys): libAuthBridgeNettle.so
        // and libAuthBridgeSwiftCrypto.so, each opened on first use.
        .target(name: "AuthBridgeCrypto", dependencies: ["AuthBridgeSystem"]),
        // … AES-GCM, HKDF and HMAC (what seals vault records) over GNU Nettle: 0.45 MB resident
        // where swift-crypto's took 5.1 MB (bench/README, "The agent's memory"); and the JWS signatures
        // of ID tokens over its hogweed and GMP, where jwt-kit and its Foundation took 7 MiB (bench/README,
        // "ID tokens by GNU Nettle").
        .systemLibrary(name: "CNettle", pkgConfig: "nettle", providers: [.apt(["nettle-dev"])]),
        .target(
            name: "HelperNettle", dependencies: ["CNettle"], path: "Sources/Helpers/Nettle", exclude: ["exports.map"],
            linkerSettings: soname("libAuthBridgeNettle.so") + exportsOnly("Sources/Helpers/Nettle/exports.map") + [
                // hogweed (RSA, ECDSA, Ed25519) and the GMP it needs: pkg-config's nettle names neither.
                .linkedLibrary("hogweed"), .linkedLibrary("gmp"),
            ]),
        // … the signing keys (DPoP, private_key_jwt) over swift-crypto.
        .target(
            name: "HelperSwiftCrypto",
            dependencies: [.product(name: "Crypto", package: "swift-crypto"), .product(name: "CryptoExtras", package: "swift-crypto")],
            path: "Sources/Helpers/SwiftCrypto",
            exclude: ["exports.map"], linkerSettings: soname("libAuthBridgeSwiftCrypto.so") + exportsOnly("Sources/Helpers/SwiftCrypto/exports.map")),
        // The host's network ends: the HTTP service of plugins and standard steps (over
        // libAuthBridgeHTTP.so, dlopen'ed) and the browser flow's loopback redirect listener.
        .target(
            name: "AuthBridgeNetwork",
            dependencies: ["AuthBridgePluginABI", "AuthBridgeJSON", "AuthBridgeURL", "AuthBridgeSystem", "AuthBridgeCrypto"]),
        .target(name: "AuthBridgeVault", dependencies: ["AuthBridgeJSON", "AuthBridgeSystem", "AuthBridgeCrypto", "AuthBridgeURL"]),
        // OpenID Connect ID-token verification (OIDC Core 3.1.3.7): the compact JWS, the JWKS key, the
        // claims, without Foundation; the signature is Nettle's (AuthBridgeCrypto's JWSSignature).
        .target(name: "AuthBridgeIDToken", dependencies: ["AuthBridgeJSON", "AuthBridgeURL", "AuthBridgeCrypto"]),
        .target(
            name: "AuthBridgeSession",
            dependencies: [
                "AuthBridgeProtocol", "AuthBridgePluginHost", "AuthBridgeRedaction", "AuthBridgeNetwork", "AuthBridgeJSON", "AuthBridgeURL",
                "AuthBridgeVault", "AuthBridgeSystem", "AuthBridgeCrypto", "AuthBridgeIDToken", .product(name: "Logging", package: "swift-log"),
            ]),
        .target(
            name: "AuthBridgeHost",
            dependencies: [
                "AuthBridgeRPC", "AuthBridgeProtocol", "AuthBridgeSession", "AuthBridgePluginHost", "AuthBridgeRedaction", "AuthBridgeJSON",
                "AuthBridgeSystem", "AuthBridgeURL", .product(name: "Logging", package: "swift-log"),
            ]),
        // Process hardening the executable does first, and the plugin runner's spawn
        // (prctl is variadic, posix_spawn attributes are clumsy in Swift: C).
        .target(name: "CAuthBridgeProcess"),
        // What `serve`, `agent`, `plugin-runner` and `token` without an agent need from the command
        // line, without ArgumentParser: the host settings, the vault they choose, process hardening,
        // the bridge on stdio or a socket.
        .target(
            name: "AuthBridgeLaunch",
            dependencies: [
                "AuthBridgeHost", "AuthBridgeSession", "AuthBridgePluginHost", "AuthBridgeVault", "AuthBridgeRPC", "AuthBridgeURL",
                "AuthBridgeProtocol",
                "AuthBridgeJSON", "AuthBridgeSystem", "CAuthBridgeProcess",
                .product(name: "Logging", package: "swift-log"),
            ]),
        .executableTarget(name: "authbridge-host", dependencies: ["AuthBridgeLaunch", "AuthBridgeSystem"]),
        .executableTarget(
            name: "authbridge-cli",
            dependencies: [
                "AuthBridgeLaunch", "AuthBridgeHost", "AuthBridgeProtocol", "AuthBridgeSession", "AuthBridgePluginHost", "AuthBridgeRPC",
                "AuthBridgeJSON",
                "AuthBridgeURL", "AuthBridgeSystem", "AuthBridgeCrypto", "CAuthBridgeProcess",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
            ]),
        .systemLibrary(name: "CCurl", pkgConfig: "libcurl", providers: [.apt(["libcurl4-openssl-dev"])]),
        .target(
            name: "HelperHTTP", dependencies: ["CCurl", "CJansson"], path: "Sources/Helpers/HTTP",
            linkerSettings: soname("libAuthBridgeHTTP.so")),
        .systemLibrary(name: "CLibPQ", pkgConfig: "libpq", providers: [.apt(["libpq-dev"])]),
        .target(
            name: "HelperPostgres", dependencies: ["CLibPQ"], path: "Sources/Helpers/Postgres",
            linkerSettings: soname("libAuthBridgePostgres.so")),
        .executableTarget(name: "authbridge-vault-bench", dependencies: ["AuthBridgeVault", "AuthBridgeJSON"], path: "bench/VaultBench"),

        .target(
            name: "AuthBridgePluginSDK",
            dependencies: [
                // AuthBridgeThreads: threads are started in one place (http(concurrently:)); like the
                // other modules here it is linked into each Swift plugin's library (so: it alone, not
                // all of AuthBridgeSystem).
                "CAuthBridgePlugin", "AuthBridgePluginABI", "AuthBridgeJSON", "AuthBridgeURL", "AuthBridgeThreads",
            ]),
    ]
        + bundledSwiftPlugins.flatMap { plugin -> [Target] in
            [
                // The provider logic (what the unit tests import) …
                .target(
                    name: plugin.target, dependencies: ["AuthBridgePluginSDK"], path: "plugins/\(plugin.id)",
                    exclude: ["\(plugin.id).json", "README.md", "Entry"]),
                // … and the library's entry point (one per library: tests link several plugins at once).
                .target(
                    name: plugin.target + "Entry", dependencies: [.target(name: plugin.target)],
                    path: "plugins/\(plugin.id)/Entry", linkerSettings: soname("libauthbridge-\(plugin.id).so")),
            ]
        } + [
            .target(
                name: "SwiftTestPlugin", dependencies: ["AuthBridgePluginSDK"],
                path: "Tests/Plugins/SwiftTestPlugin", exclude: ["swifttest.json"],
                linkerSettings: soname("libauthbridge-testplugin-swift.so")),

            .testTarget(name: "AuthBridgeJSONTests", dependencies: ["AuthBridgeJSON"], swiftSettings: testSwiftSettings),
            .testTarget(name: "AuthBridgeProtocolTests", dependencies: ["AuthBridgeProtocol", "AuthBridgeJSON"], swiftSettings: testSwiftSettings),
            .testTarget(
                name: "AuthBridgeRPCTests", dependencies: ["AuthBridgeRPC", "AuthBridgeJSON", .product(name: "Logging", package: "swift-log")],
                swiftSettings: testSwiftSettings),
            .testTarget(
                name: "AuthBridgeRedactionTests", dependencies: ["AuthBridgeRedaction", "AuthBridgeJSON", "AuthBridgeURL"],
                swiftSettings: testSwiftSettings),
            .testTarget(name: "AuthBridgePluginABITests", dependencies: ["AuthBridgePluginABI"], swiftSettings: testSwiftSettings),
            // The Swift test kit (temporary folders, files, the test plugins), shared by the test targets.
            .target(name: "TestSupport", path: "Tests/TestSupport", swiftSettings: testSwiftSettings),
            // A bridge served in-process over a socketpair (memory vault, the Swift test plugin), for tests
            // of bridge methods without spawning `authbridge`; apart from TestSupport, so that only the
            // test targets that drive a bridge link the host.
            .target(
                name: "BridgeTestSupport",
                dependencies: [
                    "AuthBridgeHost", "AuthBridgeRPC", "AuthBridgeSession", "AuthBridgePluginHost", "AuthBridgeJSON", "TestSupport",
                    .product(name: "Logging", package: "swift-log"),
                ],
                path: "Tests/BridgeTestSupport", swiftSettings: testSwiftSettings),
            .testTarget(
                name: "AuthBridgePluginHostTests",
                dependencies: [
                    "AuthBridgePluginHost", "AuthBridgePluginABI", "AuthBridgeRedaction", "AuthBridgeJSON", "AuthBridgeURL", "AuthBridgeSystem",
                    "CAuthBridgePlugin", "CAuthBridgeProcess", "TestSupport", .product(name: "Logging", package: "swift-log"),
                ],
                swiftSettings: testSwiftSettings),
            .testTarget(name: "AuthBridgePluginSDKTests", dependencies: ["AuthBridgePluginSDK"], swiftSettings: testSwiftSettings),
            .testTarget(name: "AuthBridgeURLTests", dependencies: ["AuthBridgeURL"], swiftSettings: testSwiftSettings),
            .testTarget(
                name: "AuthBridgeCryptoTests",
                dependencies: [
                    "AuthBridgeCrypto", .product(name: "Crypto", package: "swift-crypto"), .product(name: "CryptoExtras", package: "swift-crypto"),
                ],
                swiftSettings: testSwiftSettings),
            // The bundled plugins' pure functions (failure mapping, URL rules, license mapping).
            .testTarget(
                name: "BundledPluginsTests", dependencies: ["SalesforcePlugin", "TableauPlugin", "MarketSharpPlugin", "AuthBridgePluginSDK"],
                swiftSettings: testSwiftSettings),
            .testTarget(
                name: "AuthBridgeSessionTests",
                dependencies: [
                    "AuthBridgeSession", "AuthBridgeProtocol", "AuthBridgePluginHost", "AuthBridgeRedaction", "AuthBridgeVault", "AuthBridgeJSON",
                    "AuthBridgeURL",
                    "AuthBridgeSystem", "AuthBridgeCrypto", "TestSupport", .product(name: "Logging", package: "swift-log"),
                ],
                swiftSettings: testSwiftSettings),
            .testTarget(
                name: "AuthBridgeNetworkTests", dependencies: ["AuthBridgeNetwork", "AuthBridgePluginABI", "AuthBridgeJSON", "AuthBridgeSystem"],
                swiftSettings: testSwiftSettings),
            .testTarget(
                name: "AuthBridgeVaultTests", dependencies: ["AuthBridgeVault", "AuthBridgeJSON", "TestSupport"], swiftSettings: testSwiftSettings),
            .testTarget(
                name: "AuthBridgeHostTests",
                dependencies: [
                    "AuthBridgeHost", "AuthBridgeProtocol", "AuthBridgeSession", "AuthBridgeRPC", "AuthBridgeJSON", "BridgeTestSupport",
                    "TestSupport", .product(name: "Logging", package: "swift-log"),
                ],
                swiftSettings: testSwiftSettings),
            // The fast start's command line against the CLI's ArgumentParser declarations.
            .testTarget(
                name: "AuthBridgeCLITests",
                dependencies: [
                    "authbridge-cli", "AuthBridgeLaunch", "AuthBridgeSession", "AuthBridgeProtocol", "AuthBridgeJSON",
                    .product(name: "ArgumentParser", package: "swift-argument-parser"),
                ], swiftSettings: testSwiftSettings),
            .testTarget(
                name: "AuthBridgeSystemTests", dependencies: ["AuthBridgeSystem", "AuthBridgeThreads", "TestSupport"],
                swiftSettings: testSwiftSettings),
            // ID tokens signed by jwt-kit and swift-crypto, verified by AuthBridgeIDToken over Nettle.
            .testTarget(
                name: "AuthBridgeIDTokenTests",
                dependencies: [
                    "AuthBridgeIDToken", "AuthBridgeCrypto", "AuthBridgeJSON",
                    .product(name: "JWTKit", package: "jwt-kit"),
                    .product(name: "Crypto", package: "swift-crypto"),
                    .product(name: "CryptoExtras", package: "swift-crypto"),
                ], swiftSettings: testSwiftSettings),
        ]
)

/// A dynamic library's file name as its SONAME. Without one the linker (gold) writes the
/// library's path in the build folder into it, and a shipped binary must not name the build
/// folder (`make dist` checks that none does).
func soname(_ file: String) -> [LinkerSetting] {
    [.unsafeFlags(["-Xlinker", "-soname=\(file)"])]
}

/// A helper library's exports limited to its entry points (a linker version script): the rest —
/// swift-crypto, BoringSSL — stays hidden, and what nothing reaches is dropped. Opening
/// libAuthBridgeSwiftCrypto.so costs 0.5 MB and 1 ms less (bench/README, "Start-up").
func exportsOnly(_ script: String) -> [LinkerSetting] {
    [.unsafeFlags(["-Xlinker", "--version-script=\(Context.packageDirectory)/\(script)"])]
}
