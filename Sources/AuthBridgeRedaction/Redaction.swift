/// Masks what looks like a credential in text that is about to be logged or
/// shown (plugin logs and errors, a provider's `error_description`).
///
/// What it recognises:
/// - the value after any secret-looking name, whatever its length, in every
///   way names and values are written: `name=value`, `name: value`,
///   `"name":"value"` (compact or spaced JSON), `name%3Dvalue` (percent-encoded),
///   cookies separated by `;`; names such as `access_token`, `clientSecret`,
///   `codeVerifier`, `device_code`, `id_token_hint`, `sid`,
///   `workgroup_session_id`, `X-Tableau-Auth`, `Authorization`;
/// - an authorization scheme and its credential (`Bearer x`, `Basic x`,
///   `OAuth x`, `DPoP x`, `Negotiate x`), also as the value of a name
///   (`Authorization=Bearer x`, `"Authorization":"Bearer x"`);
/// - JWTs and Salesforce session ids (`00D…!…`) anywhere, even inside a word.
///
/// A safety net only: code must not put tokens into messages in the first
/// place, and an opaque token standing alone in prose is not recognised (the
/// host also scrubs the exact values it holds).
public enum Redaction {
    public static let mask = "[REDACTED]"

    public static func redact(_ text: String) -> String {
        guard text.utf8.count < 64 << 10 else { return "[\(text.utf8.count) bytes withheld]" }
        var output = ""
        output.reserveCapacity(text.utf8.count)
        var maskNext = false
        for piece in pieces(Substring(text)) {
            switch piece {
            case .separator(let separator):
                output += separator
            case .word(let word):
                let (text, next) = redactWord(word, valueExpected: maskNext)
                output += text
                maskNext = next
            }
        }
        return output
    }

    /// Whether a name (a header, parameter, JSON member or cookie) says its value is a secret.
    public static func isSecretName(_ name: String) -> Bool {
        let key = String(name.lowercased().filter { $0 != "_" && $0 != "-" && $0 != "." && $0 != " " })
        return key.hasSuffix("token") || key.hasSuffix("secret") || key.hasSuffix("password") || secretNames.contains(key)
    }

    /// Names (lowercased, without `_`, `-`, `.`) whose values are secrets, beyond `…token`,
    /// `…secret` and `…password`.
    private static let secretNames: Set<String> = [
        "code", "codeverifier", "devicecode", "idtokenhint", "authorization", "proxyauthorization", "xtableauauth",
        "sessionid", "sid", "workgroupsessionid", "cookie", "setcookie", "apikey", "xapikey", "assertion",
        "clientassertion", "passwd", "pwd", "credentials", "privatekey",
    ]

    /// Authorization schemes whose credential is the next word (RFC 9110 §11.4 and common ones).
    private static let schemes: Set<String> = ["bearer", "basic", "oauth", "dpop", "negotiate", "token"]

    private enum Piece { case word(Substring), separator(Substring) }

    /// Separators: white space, `,` `&` `?` `;`, and their percent-encoded forms (`%20` `%2C`
    /// `%26` `%3F` `%3B`), so a URL inside a parameter is read like any other.
    private static func pieces(_ text: Substring) -> [Piece] {
        var result: [Piece] = []
        var wordStart = text.startIndex
        var index = text.startIndex
        while index < text.endIndex {
            let character = text[index]
            var length = 0
            if character == " " || character == "\n" || character == "\t" || character == "\r" || character == ","
                || character == "&" || character == "?" || character == ";"
            {
                length = 1
            } else if character == "%", let code = percentCode(text, at: index), ["20", "2c", "26", "3f", "3b"].contains(code) {
                length = 3
            }
            guard length > 0 else {
                index = text.index(after: index)
                continue
            }
            if wordStart < index { result.append(.word(text[wordStart..<index])) }
            let end = text.index(index, offsetBy: length)
            result.append(.separator(text[index..<end]))
            index = end
            wordStart = end
        }
        if wordStart < text.endIndex { result.append(.word(text[wordStart...])) }
        return result
    }

    /// The two lowercased hex digits after a `%`, if there are two.
    private static func percentCode(_ text: Substring, at index: String.Index) -> String? {
        guard let first = text.index(index, offsetBy: 1, limitedBy: text.endIndex), first < text.endIndex,
            let second = text.index(first, offsetBy: 1, limitedBy: text.endIndex), second < text.endIndex
        else { return nil }
        return String(text[first...second]).lowercased()
    }

    /// The word with any secret in it masked, and whether the next word is a
    /// secret value (a name stood alone: `"token":`, `password:`; or a scheme: `Bearer`).
    ///
    /// A value that is not a secret's may hold more names (`{"a":{"clientSecret":"x"}}`, a URN),
    /// each read in turn: in one pass over the word, however deep they nest (read again for each
    /// name, a word of 64 KiB of `a:a:…` took a second and overflowed a thread's stack).
    private static func redactWord(_ word: Substring, valueExpected: Bool) -> (String, Bool) {
        // The closing brackets and quotes are the word's, whichever name inside it is read.
        var closeStart = word.endIndex
        while closeStart > word.startIndex, trail.contains(word[word.index(before: closeStart)]) {
            closeStart = word.index(before: closeStart)
        }
        var done = "" // the names (and their separators) read so far, kept
        var rest = word
        if valueExpected {
            let (open, core, close) = punctuated(rest, closeStart: closeStart)
            // `Authorization: Bearer x`: the scheme stays, its credential goes.
            if schemes.contains(core.lowercased()) && !close.hasSuffix("\"") { return (String(word), true) }
            return (core.isEmpty ? String(word) : open + mask + close, false)
        }
        while true {
            let (open, core, close) = punctuated(rest, closeStart: closeStart)
            guard let (name, separator, value) = nameAndValue(core) else { break }
            let key = name.trimmingCharacters(in: "\"'")
            if isSecretName(key) {
                let bare = value.trimmingCharacters(in: "\"'")
                if bare.isEmpty { return (String(word), true) }
                // `Authorization=Bearer x`, `"Authorization":"Bearer x"`: the credential is the next word.
                if schemes.contains(bare.lowercased()) && !close.hasSuffix("\"") { return (String(word), true) }
                let quote = value.hasPrefix("\"") ? "\"" : value.hasPrefix("'") ? "'" : ""
                return (done + open + name + separator + quote + mask + close, false)
            }
            // Not a secret's name: its value may hold more names.
            guard separator.endIndex < rest.endIndex else { break }
            done += open + name + separator
            rest = rest[separator.endIndex...]
        }
        let (_, core, close) = punctuated(rest, closeStart: closeStart)
        if schemes.contains(core.lowercased()) && core.lowercased() != "token" && close.isEmpty { return (done + rest, true) }
        return (done + maskPatterns(String(rest)), false)
    }

    private static let lead: Set<Character> = ["{", "[", "(", "\"", "'", "<"]
    private static let trail: Set<Character> = ["}", "]", ")", "\"", "'", ">", "."]

    /// `{"name` → (`{"`, `name`, ``): leading brackets and quotes, the core, and the closing ones
    /// (from `closeStart`, where the word's closing run begins, at the earliest).
    private static func punctuated(_ word: Substring, closeStart: String.Index) -> (Substring, Substring, Substring) {
        var coreStart = word.startIndex
        while coreStart < word.endIndex, lead.contains(word[coreStart]) { coreStart = word.index(after: coreStart) }
        let coreEnd = max(coreStart, closeStart)
        return (word[..<coreStart], word[coreStart..<coreEnd], word[coreEnd...])
    }

    /// `name=value`, `name:value`, `name%3Dvalue`, `name%3Avalue`: the first separator wins.
    private static func nameAndValue(_ core: Substring) -> (Substring, Substring, Substring)? {
        var index = core.startIndex
        while index < core.endIndex {
            let character = core[index]
            if character == "=" || character == ":" {
                let end = core.index(after: index)
                return (core[..<index], core[index..<end], core[end...])
            }
            if character == "%", let code = percentCode(core, at: index), code == "3d" || code == "3a" {
                let end = core.index(index, offsetBy: 3)
                return (core[..<index], core[index..<end], core[end...])
            }
            index = core.index(after: index)
        }
        return nil
    }

    /// JWTs (`eyJ….….`) and Salesforce session ids (`00D` + org id + `!` + secret) anywhere in a word.
    private static func maskPatterns(_ word: String) -> String {
        var characters = Array(word.unicodeScalars)
        var output = String.UnicodeScalarView()
        var index = 0
        while index < characters.count {
            if let end = jwtEnd(characters, from: index) ?? salesforceSessionEnd(characters, from: index) {
                output.append(contentsOf: mask.unicodeScalars)
                index = end
            } else {
                output.append(characters[index])
                index += 1
            }
        }
        characters.removeAll()
        return String(output)
    }

    private static func isBase64URL(_ scalar: Unicode.Scalar) -> Bool {
        scalar.isASCII && (scalar.properties.isAlphabetic || ("0"..."9").contains(scalar) || scalar == "-" || scalar == "_")
    }

    /// Where a JWT (JWS or JWE compact form) starting at `start` ends.
    private static func jwtEnd(_ scalars: [Unicode.Scalar], from start: Int) -> Int? {
        guard start + 3 <= scalars.count, scalars[start] == "e", scalars[start + 1] == "y", scalars[start + 2] == "J",
            start == 0 || !isBase64URL(scalars[start - 1])
        else { return nil }
        var index = start
        var dots = 0
        while index < scalars.count, isBase64URL(scalars[index]) || scalars[index] == "." {
            if scalars[index] == "." { dots += 1 }
            index += 1
        }
        return dots >= 2 ? index : nil
    }

    /// Where a Salesforce session id (`00D` + 12 or 15 characters + `!` + at least 20) ends.
    private static func salesforceSessionEnd(_ scalars: [Unicode.Scalar], from start: Int) -> Int? {
        guard start + 3 <= scalars.count, scalars[start] == "0", scalars[start + 1] == "0", scalars[start + 2] == "D",
            start == 0 || !isBase64URL(scalars[start - 1])
        else { return nil }
        var index = start + 3
        while index < scalars.count, scalars[index].isASCII, scalars[index].properties.isAlphabetic || ("0"..."9").contains(scalars[index]) {
            index += 1
        }
        guard [15, 18].contains(index - start), index < scalars.count, scalars[index] == "!" else { return nil }
        index += 1
        let secretStart = index
        while index < scalars.count, isBase64URL(scalars[index]) || scalars[index] == "." { index += 1 }
        return index - secretStart >= 20 ? index : nil
    }
}

private extension StringProtocol {
    func trimmingCharacters(in set: String) -> String {
        var slice = Substring(self)
        while let first = slice.first, set.contains(first) { slice = slice.dropFirst() }
        while let last = slice.last, set.contains(last) { slice = slice.dropLast() }
        return String(slice)
    }
}
