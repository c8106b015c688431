import ArgumentParser
import AuthBridgeJSON
import AuthBridgeProtocol
import Testing

@testable import authbridge_cli

@Suite("--scope and --resource (issue 30): what token, exec, exec-credential, git-credential and exchange ask for")
struct TokenPurposeTests {
    @Test("token: repeatable --scope and --resource; one resource as a string, several as an array; none: the session's own")
    func tokenParses() throws {
        let token = try Token.parse(["work", "--scope", "read", "--scope", "write", "--resource", "https://api.example.com/"])
        #expect(token.purpose.tokenFor == TokenFor(scopes: ["read", "write"], resource: .string("https://api.example.com/")))
        let two = try Token.parse(["work", "--resource", "https://a.example/", "--resource", "https://b.example/"])
        #expect(two.purpose.tokenFor == TokenFor(resource: .array([.string("https://a.example/"), .string("https://b.example/")])))
        #expect(try Token.parse(["work"]).purpose.tokenFor == .session)
        let header = try Token.parse(["work", "--header", "GET", "https://a.example/x", "--scope", "read"])
        #expect(header.request == ["GET", "https://a.example/x"] && header.purpose.scopes == ["read"])
    }

    @Test("A scope with a space, an empty one, or a resource that is no absolute URI is a usage error")
    func refused() {
        for arguments in [
            ["work", "--scope", "read write"], ["work", "--scope", ""], ["work", "--resource", "api.example.com"],
            ["work", "--resource", "https://a.example/#x"],
        ] {
            #expect(throws: (any Error).self) { try Token.parse(arguments) }
        }
    }

    @Test("exec, exec-credential and the git helper take them too")
    func credentialCommands() throws {
        let exec = try Exec.parse(["work", "--scope", "read", "--", "true"])
        #expect(exec.purpose.tokenFor == TokenFor(scopes: ["read"]))
        let kube = try ExecCredential.parse(["work", "--resource", "https://k8s.example/"])
        #expect(kube.purpose.tokenFor == TokenFor(resource: .string("https://k8s.example/")))
        let git = try GitCredentialHelper.parse(["--profile", "corp", "--scope", "repo", "get"])
        #expect(git.helper.purpose.tokenFor == TokenFor(scopes: ["repo"]) && git.helper.operation == "get")
    }

    @Test("login --client-credentials, --scope, --resource; not with --device")
    func login() throws {
        let login = try Login.parse(["fleet", "--client-credentials", "--scope", "jobs", "--resource", "https://api.example.com/"])
        #expect(login.clientCredentials && login.scopes == ["jobs"] && login.resources == ["https://api.example.com/"])
        #expect(throws: (any Error).self) { try Login.parse(["fleet", "--client-credentials", "--device"]) }
    }

    @Test("exchange: its options, and the subject token types the spec has")
    func exchange() throws {
        let exchange = try Exchange.parse([
            "work", "--audience", "billing", "--resource", "https://a.example/", "--scope", "read", "--requested-token-type", "jwt",
            "--subject-token-type", "idToken", "--json",
        ])
        #expect(exchange.audience == "billing" && exchange.resources == ["https://a.example/"] && exchange.scopes == ["read"])
        #expect(exchange.requestedTokenType == "jwt" && exchange.subjectTokenType == "idToken" && exchange.json)
        #expect(throws: (any Error).self) { try Exchange.parse(["work", "--subject-token-type", "refreshToken"]) }
        #expect(AuthBridgeCommand.commandNames.contains("exchange"))
    }
}
