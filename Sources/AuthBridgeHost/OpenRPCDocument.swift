// Placeholder until generated from bridge-spec/openrpc.json.
enum OpenRPCDocument {
    static let text = "{}"
}
