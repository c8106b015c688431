/// Tells an absolute URL from a path, without Foundation: for `authorize_request` hooks that
/// resolve paths against an API base and must send credentials to nowhere else.
public enum URLText {
    /// Whether `url` begins with a scheme (RFC 3986 §3.1: a letter, then letters, digits, `+`,
    /// `-` or `.`, then `:`), i.e. is absolute. A path whose query holds a URL
    /// (`/query?q=… Website='https://acme.com'`, `/x?next=https://y`) is not.
    public static func hasScheme(_ url: String) -> Bool {
        guard let colon = url.firstIndex(of: ":"), let first = url.first, first.isASCII, first.isLetter else { return false }
        return url[..<colon].allSatisfy { $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "+" || $0 == "-" || $0 == ".") }
    }
}
