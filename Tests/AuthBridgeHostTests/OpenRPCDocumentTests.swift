import AuthBridgeJSON
@testable import AuthBridgeHost
import Testing

#if canImport(Glibc)
import Glibc
#endif

@Suite("OpenRPC document")
struct OpenRPCDocumentTests {
    /// Guards `make spec`: the embedded copy must equal bridge-spec/openrpc.json.
    @Test func theEmbeddedDocumentEqualsTheSpec() throws {
        var root = #filePath
        for _ in 0..<3 { root = String(root[..<root.lastIndex(of: "/")!]) }
        let spec = try #require(readAll(root + "/bridge-spec/openrpc.json"), "cannot read bridge-spec/openrpc.json")
        let expected = try JSON.parse(spec)
        let embedded = try JSON.parse(OpenRPCDocument.text)
        #expect(embedded == expected, "run `make spec` after editing bridge-spec/openrpc.json")
        #expect(embedded["info"]?["version"] == "1.0.0")
        let methods = embedded["methods"]?.arrayValue?.compactMap { $0["name"]?.stringValue } ?? []
        for name in ["initialize", "getAccessToken", "requestOAuthTokens", "signOut", "fetch"] {
            #expect(methods.contains(name), "\(name) is missing from the document")
        }
    }

    private func readAll(_ path: String) -> [UInt8]? {
        guard let file = fopen(path, "rb") else { return nil }
        defer { fclose(file) }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 1 << 16)
        while true {
            let count = fread(&chunk, 1, chunk.count, file)
            if count == 0 { return ferror(file) == 0 ? bytes : nil }
            bytes += chunk[0..<count]
        }
    }
}
