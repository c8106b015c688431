/// Masks what looks like a credential in text that is about to be logged or
/// shown: JWTs, `Bearer …`, and `…token=…` / `"…token": "…"` values.
///
/// A safety net only: code must not put tokens into messages in the first
/// place. It cannot recognise an opaque token standing on its own.
public enum Redaction {
    public static let mask = "[REDACTED]"

    public static func redact(_ text: String) -> String {
        guard text.utf8.count < 64 << 10 else { return "[\(text.utf8.count) bytes withheld]" }
        var output = ""
        output.reserveCapacity(text.utf8.count)
        var words = Substring(text)
        var maskNext = false
        while !words.isEmpty {
            let separatorIndex = words.firstIndex(where: { $0 == " " || $0 == "\n" || $0 == "\t" || $0 == "," || $0 == "&" || $0 == "?" }) ?? words.endIndex
            let word = words[..<separatorIndex]
            if !word.isEmpty {
                let scheme = word.lowercased().trimmingQuotes()
                let (text, secretFollows) = redactWord(word)
                output += maskNext ? mask : text
                // "Bearer x", "Basic x", and a secret's name whose value is the next word
                // (`"refresh_token": "x"`, `password: x`, `Authorization: Basic x`).
                maskNext = scheme == "bearer" || scheme == "basic" || secretFollows
            }
            if separatorIndex < words.endIndex {
                output.append(words[separatorIndex])
                words = words[words.index(after: separatorIndex)...]
            } else {
                break
            }
        }
        return output
    }

    /// The word with a secret value masked, and whether the next word is a
    /// secret value (the key stood alone: `"token":`, `password:`).
    private static func redactWord(_ word: Substring) -> (String, Bool) {
        // key=value or key:value where the key names a secret
        if let equals = word.firstIndex(of: "=") ?? word.firstIndex(of: ":") {
            let key = word[..<equals].lowercased().trimmingQuotes()
            if isSecretName(key) {
                let value = word[word.index(after: equals)...].trimmingQuotes()
                return value.isEmpty ? (String(word), true) : (String(word[...equals]) + mask, false)
            }
        }
        if looksLikeJWT(word) { return (mask, false) }
        return (String(word), false)
    }

    public static func isSecretName(_ key: String) -> Bool {
        key.hasSuffix("token") || key.hasSuffix("_token") || key == "code" || key == "code_verifier"
            || key == "client_secret" || key == "password" || key == "secret" || key == "authorization"
            || key == "session_id" || key == "x-session-token" || key == "x-access-token"
    }

    private static func looksLikeJWT(_ word: Substring) -> Bool {
        let trimmed = word.trimmingCharacters(in: "\"'")
        guard trimmed.hasPrefix("eyJ") else { return false }
        return trimmed.split(separator: ".", omittingEmptySubsequences: false).count >= 3
    }
}

private extension StringProtocol {
    func trimmingQuotes() -> String { trimmingCharacters(in: "\"' ") }

    func trimmingCharacters(in set: String) -> String {
        var slice = Substring(self)
        while let first = slice.first, set.contains(first) { slice = slice.dropFirst() }
        while let last = slice.last, set.contains(last) { slice = slice.dropLast() }
        return String(slice)
    }
}
