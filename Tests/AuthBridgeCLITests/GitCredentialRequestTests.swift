import AuthBridgeSession
import Testing

@testable import authbridge_cli

/// What `authbridge git-credential` reads from git: `key=value` lines up to a blank line.
@Suite("git-credential's request")
struct GitCredentialRequestTests {
    private let expected = GitCredentialRoutes.Request(scheme: "https", host: "git.example.com", path: "team/app.git")

    /// In a Swift String "\r\n" is one Character: split at "\n", a Windows-style request was one
    /// line and named no protocol and host (issue 26).
    @Test(arguments: ["\n", "\r\n"])
    func linesEndWithLFOrCRLF(newline: String) {
        let text = ["protocol=https", "host=git.example.com", "path=team/app.git", "username=ada", "", "password=after-the-end", ""]
            .joined(separator: newline)
        let request = GitCredentialRequest(text: text)
        #expect(request.target == expected)
        #expect(request.username == "ada")
        #expect(request.password == nil, "the blank line ends the request")
        #expect(GitCredentialRequest(text: "url=https://ada@git.example.com/team/app.git" + newline + newline).target == expected)
    }

    /// git (or a caller) may keep its end open after the request: the blank line is the end.
    @Test func theBlankLineEndsTheRead() {
        for ended in ["\n", "\r\n", "host=h\n\n", "host=h\r\n\r\n", "host=h\n\r\n"] {
            #expect(GitCredentialRequest.endsWithBlankLine(Array(ended.utf8)), "\(ended.debugDescription)")
        }
        for open in ["", "host=h\n", "host=h\r\n", "host=h\r", "host=h\n\r"] {
            #expect(!GitCredentialRequest.endsWithBlankLine(Array(open.utf8)), "\(open.debugDescription)")
        }
    }

    @Test func anIPv6URLKeepsItsBrackets() {
        let request = GitCredentialRequest(text: "url=https://[::1]:8443/x.git\n\n")
        #expect(request.target == GitCredentialRoutes.Request(scheme: "https", host: "[::1]:8443", path: "x.git"))
        #expect(request.target?.isWellFormed == true)
    }
}
