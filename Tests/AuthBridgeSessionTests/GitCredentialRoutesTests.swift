import AuthBridgeJSON
import Testing

@testable import AuthBridgeSession

@Suite("git credential routes")
struct GitCredentialRoutesTests {
    private let routes: GitCredentialRoutes = {
        let json: JSON = [
            "profiles": ["corp": ["plugin": "oidc", "gitUsername": "corp-bot"], "team": ["plugin": "oidc"]],
            "gitCredential": [
                "https://git.example.com": "corp", "https://git.example.com/team/": "team", "https://git.example.com/team/app": "app",
                "http://127.0.0.1:8080": "local",
            ],
        ]
        return try! GitCredentialRoutes.read(from: json)
    }()

    private func match(_ scheme: String, _ host: String, _ path: String? = nil) -> GitCredentialRoutes.Match {
        routes.match(GitCredentialRoutes.Request(scheme: scheme, host: host, path: path))
    }

    @Test func theLongestMatchingPrefixWins() {
        #expect(match("https", "git.example.com", "team/app.git") == .profile("team"), "app.git is not the segment app")
        #expect(match("https", "git.example.com", "team/app/sub.git") == .profile("app"))
        #expect(match("https", "git.example.com", "team/app") == .profile("app"))
        #expect(match("https", "git.example.com", "team") == .profile("team"))
        #expect(match("https", "git.example.com", "other/x.git") == .profile("corp"))
    }

    @Test func pathsMatchWholeSegmentsOnly() {
        #expect(match("https", "git.example.com", "teamwork/x.git") == .profile("corp"))
    }

    @Test func schemeHostAndPortMustBeTheSame() {
        #expect(match("http", "git.example.com") == .none(needsPath: false))
        #expect(match("https", "git.example.com.evil.test") == .none(needsPath: false))
        #expect(match("https", "GIT.EXAMPLE.COM") == .profile("corp"), "host names are case-insensitive")
        #expect(match("https", "git.example.com:443") == .profile("corp"), "the default port is the same origin")
        #expect(match("https", "git.example.com:8443") == .none(needsPath: false))
        #expect(match("http", "127.0.0.1:8080", "x.git") == .profile("local"))
        #expect(match("http", "127.0.0.1:8081") == .none(needsPath: false))
    }

    /// git decodes %-escapes in a URL's host (`https://git.example.com%2f%40evil.example/x.git`
    /// reaches the helper as host `git.example.com/@evil.example`): joined into a URL, each of
    /// these parsed as git.example.com and got its profile (issue 26).
    @Test(arguments: [
        "git.example.com/@evil.example", "git.example.com#.evil.example", "git.example.com?.evil.example",
        "evil.example@git.example.com", "git.example.com/x", "git.example.com:443/x", "git.example.com:", "git.example.com:0",
        "git.example.com:65536", "git.example.com.", "git example.com", "git.example.com\\x", "[::1", "[::1]x", "[::g]",
        "ｇｉｔ.example.com", "",
    ])
    func aHostThatIsNotAHostNameMatchesNothing(host: String) {
        let request = GitCredentialRoutes.Request(scheme: "https", host: host, path: nil)
        #expect(!request.isWellFormed)
        #expect(routes.match(request) == .none(needsPath: false))
        #expect(routes.match(.init(scheme: "https", host: host, path: "x.git")) == .none(needsPath: false))
    }

    @Test(arguments: ["git.example.com", "git.example.com:8443", "127.0.0.1:8080", "[::1]", "[::1]:8080", "xn--bcher-kva.example", "my_host"])
    func hostNamesAndIPLiteralsWithAPortAreWellFormed(host: String) {
        #expect(GitCredentialRoutes.Request(scheme: "https", host: host, path: nil).isWellFormed)
    }

    @Test func aProtocolThatIsNotASchemeMatchesNothing() {
        // Joined, "https://git.example.com/#" + "://evil.example/" would parse as git.example.com.
        #expect(match("https://git.example.com/#", "evil.example") == .none(needsPath: false))
    }

    @Test func withoutAPathOnlyTheHostsPrefixMatches() {
        #expect(match("https", "git.example.com") == .profile("corp"))
        let onlyPaths = try! GitCredentialRoutes.read(from: ["gitCredential": ["https://git.example.com/team": "team"]])
        #expect(onlyPaths.match(.init(scheme: "https", host: "git.example.com", path: nil)) == .none(needsPath: true))
        #expect(onlyPaths.match(.init(scheme: "https", host: "git.example.com", path: "team/a.git")) == .profile("team"))
    }

    @Test func userNamesArePerProfileWithADefault() {
        #expect(routes.username(of: "corp") == "corp-bot")
        #expect(routes.username(of: "team") == "oauth2")
    }

    @Test(
        arguments: [
            (["gitCredential": ["git.example.com": "corp"]], "\"gitCredential\" \"git.example.com\": not a URL prefix"),
            (["gitCredential": ["https://h/x?y=1": "corp"]], "not a URL prefix"),
            (["gitCredential": ["https://u@h": "corp"]], "not a URL prefix"),
            (["gitCredential": ["https://h": 7]], "the value must be a profile name"),
            (["gitCredential": ["https://h": "corp", "https://h/": "other"]], "are the same URL prefix"),
            (["gitCredential": ["https://h"]], "\"gitCredential\" must be an object"),
            (["profiles": ["corp": ["plugin": "oidc", "gitUsername": 1]]], "\"gitUsername\" must be a user name"),
            (["profiles": ["corp": ["plugin": "oidc", "gitUsername": "a\nb"]]], "\"gitUsername\" must be a user name"),
        ] as [(JSON, String)])
    func aBadEntryIsAnErrorThatNamesIt(json: JSON, message: String) {
        #expect(throws: ConfigurationError.self) { try GitCredentialRoutes.read(from: json) }
        do {
            _ = try GitCredentialRoutes.read(from: json)
        } catch {
            #expect(error.message.contains(message), "\(error.message)")
        }
    }
}
