import ArgumentParser
import AuthBridgeLaunch
import Testing

@testable import authbridge_cli

@Suite("git-credential-authbridge: the git helper by its name")
struct GitCredentialHelperNameTests {
    @Test("Started under git's name, every command line goes to the CLI's helper, even one serve would take")
    func helperNameIsNeverServe() {
        for program in ["git-credential-authbridge", "/usr/bin/git-credential-authbridge", "./bin/git-credential-authbridge"] {
            #expect(FastCommandLine.isGitCredentialHelper(program))
            for arguments in [[], ["--vault", "memory"], ["get"], ["--profile", "corp", "get"]] {
                #expect(FastCommandLine.command(program: program, arguments, standardInputIsTerminal: false) == nil)
            }
        }
        #expect(FastCommandLine.command(program: "/usr/bin/authbridge", [], standardInputIsTerminal: false) == .serve(ServeSettings()))
        #expect(!FastCommandLine.isGitCredentialHelper("/opt/git-credential-authbridge/bin/authbridge"))
    }

    @Test("git's usual form and the old `git-credential` word parse to the same helper; errors name the helper's form")
    func helperParses() throws {
        let helper = try GitCredentialHelper.parse(["--profile", "corp", "get"])
        #expect(helper.helper.profile == "corp" && helper.helper.operation == "get")
        #expect(GitCredentialHelper.usageString().hasPrefix("git-credential-authbridge [--profile <PROFILE>]"))
        #expect(throws: (any Error).self) { try GitCredentialHelper.parse(["--profil", "corp", "get"]) }
    }
}
