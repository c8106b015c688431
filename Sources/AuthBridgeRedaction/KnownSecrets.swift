import AuthBridgeJSON
import AuthBridgePluginABI
import AuthBridgeURL
import Synchronization

/// The secrets this process holds or has sent — access, refresh and ID
/// tokens, PKCE verifiers, device codes, client secrets, session ids — so
/// that their exact values are scrubbed from every message, event and log
/// line, whatever `Redaction`'s patterns miss: a provider that echoes a
/// token in an `error_description` ("refresh token <RT> busy") must not put
/// it in front of the user or into the log.
///
/// Each value is matched as written, percent-encoded, and in base64 and
/// base64url. Values shorter than `minimumLength` are not remembered: they
/// would mask ordinary words by chance. The set is bounded: the oldest values
/// are forgotten first (tokens rotate; a long-lived host must not grow).
///
/// A scrub reads the text once, whatever the number of values held (a
/// `SubstringSet` of every form, made again on the first scrub after the values
/// changed): where any form occurs is masked, overlapping occurrences as one.
/// Looking for each form in turn cost seconds of CPU for a message of a few MiB
/// once a few hundred values were held (issue 26; bench/redaction.py).
///
/// Threading: any thread; one lock around a small table (and the making of the set).
public final class KnownSecrets: Sendable {
    /// The process's list. Made before the first secret is remembered, it installs itself as
    /// `ProviderFailure`'s message filter then, so that no failure made afterwards carries a
    /// secret it knows.
    public static let shared: KnownSecrets = {
        let secrets = KnownSecrets()
        ProviderFailure.filterMessages { secrets.scrub($0) }
        return secrets
    }()

    public static let minimumLength = 8
    public static let capacity = 512

    private struct Table {
        var forms: [String: [[UInt8]]] = [:] // value → the forms to look for
        var order: [String] = [] // oldest first
        /// Every form, made when a scrub needs it after a change.
        var search: SubstringSet?
    }

    private let table = Mutex(Table())

    public init() {}

    /// Remembers a secret value (and its encoded forms).
    public func remember(_ value: String?) {
        guard let value, value.utf8.count >= Self.minimumLength else { return }
        table.withLock { table in
            guard table.forms[value] == nil else { return }
            table.forms[value] = Self.forms(of: value).map { Array($0.utf8) }
            table.order.append(value)
            table.search = nil
            if table.order.count > Self.capacity {
                let excess = table.order.count - Self.capacity
                for old in table.order.prefix(excess) { table.forms[old] = nil }
                table.order.removeFirst(excess)
            }
        }
    }

    /// The text with every known secret replaced by `Redaction.mask` (a token containing another,
    /// or overlapping it, masked whole).
    public func scrub(_ text: String) -> String {
        var steps = 0
        return scrub(text, steps: &steps)
    }

    /// `scrub(_:)`, counting the search's steps (tests hold them to two per byte of `text`).
    func scrub(_ text: String, steps: inout Int) -> String {
        guard text.utf8.count >= Self.minimumLength else { return text }
        let search = table.withLock { table in
            if let search = table.search { return search }
            let forms = table.forms
            let search = SubstringSet(table.order.lazy.flatMap { forms[$0] ?? [] })
            table.search = search
            return search
        }
        return search.replacingCovered(in: text, with: Redaction.mask, steps: &steps)
    }

    /// The strings of a JSON value with every known secret scrubbed.
    public func scrub(_ value: JSON) -> JSON {
        switch value {
        case .string(let text): .string(scrub(text))
        case .array(let elements): .array(elements.map(scrub))
        case .object(let members): .object(members.mapValues(scrub))
        default: value
        }
    }

    /// The number of values remembered (for tests).
    public var count: Int { table.withLock { $0.order.count } }

    private static func forms(of value: String) -> [String] {
        var forms = [value]
        let percent = FormEncoding.percentEncode(value)
        if percent != value { forms.append(percent) }
        let base64 = Base64.encode(value.utf8)
        forms.append(base64)
        // Base64 is ASCII: bytes, not Characters (grapheme breaking made this a tenth of a
        // `token` command's time, an ID token being a kilobyte).
        var bytes = Array(base64.utf8)
        while bytes.last == UInt8(ascii: "=") { bytes.removeLast() }
        let trimmed = String(decoding: bytes, as: UTF8.self)
        if bytes.count != base64.utf8.count { forms.append(trimmed) }
        let url = bytes.map { $0 == UInt8(ascii: "+") ? UInt8(ascii: "-") : $0 == UInt8(ascii: "/") ? UInt8(ascii: "_") : $0 }
        if url != bytes { forms.append(String(decoding: url, as: UTF8.self)) }
        return forms.filter { $0.utf8.count >= minimumLength }
    }
}
