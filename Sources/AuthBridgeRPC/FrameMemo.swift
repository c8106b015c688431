import AuthBridgeJSON

/// Decodes frames that repeat an earlier request but for its id without
/// parsing them again.
///
/// A frontend asks `getAccessToken` before every API call and
/// `checkSignInStatus` on every screen: the same bytes each time but for the
/// id. After a request is decoded in full, its frame is split around the
/// top-level `"id"` value (a scan that follows JSON's strings and nesting,
/// so a nested or escaped `"id"` is never taken for it); a later frame made
/// of the same bytes before and after, with a plain integer or string id
/// between them, is the same request with that id. Replacing one scalar
/// token by another changes nothing else in a JSON text, so the answer is
/// exactly what a full parse would give — without the parse and the JSON
/// values it allocates.
///
/// Threading: owned by one reader loop; not shared.
struct FrameMemo {
    /// A frame split around its top-level id value.
    private struct Template {
        var prefix: [UInt8]
        var suffix: [UInt8]
        var method: String
        var params: JSON?
    }

    /// The shapes remembered, most recently used first: a frontend
    /// interleaves a few (a token, a status).
    private var templates: [Template] = []
    static let capacity = 4
    /// Frames longer than this are always parsed (a template is a copy).
    static let maximumFrame = 1024
    /// Integer ids of at most this many digits (they fit an `Int64`).
    private static let maximumDigits = 18

    /// The frame's message: from a template when one matches, else parsed.
    mutating func decode(_ frame: UnsafeRawBufferPointer) -> IncomingMessage {
        if let request = recall(frame) { return .request(request) }
        let message = IncomingMessage.decode(frame)
        if case .request(let request) = message { remember(frame, request) }
        return message
    }

    /// The request a template gives for `frame`, nil when none matches.
    private mutating func recall(_ frame: UnsafeRawBufferPointer) -> Request? {
        for (index, template) in templates.enumerated() {
            let middle = frame.count - template.prefix.count - template.suffix.count
            guard middle > 0, frame.starts(with: template.prefix),
                frame[(frame.count - template.suffix.count)...].elementsEqual(template.suffix),
                let id = Self.plainID(UnsafeRawBufferPointer(rebasing: frame[template.prefix.count..<(template.prefix.count + middle)]))
            else { continue }
            if index != 0 { templates.insert(templates.remove(at: index), at: 0) }
            return Request(id: id, method: template.method, params: template.params)
        }
        return nil
    }

    /// Keeps `frame`'s shape when its top-level id can be found exactly. A
    /// frame with a backslash is never kept: an escaped key (`"\u0069d"`) is
    /// an `"id"` the scan would not see.
    private mutating func remember(_ frame: UnsafeRawBufferPointer, _ request: Request) {
        guard frame.count <= Self.maximumFrame, !frame.contains(UInt8(ascii: "\\")), let span = Self.topLevelIDSpan(frame),
            Self.plainID(UnsafeRawBufferPointer(rebasing: frame[span])) == request.id
        else { return }
        let template = Template(
            prefix: Array(frame[..<span.lowerBound]), suffix: Array(frame[span.upperBound...]), method: request.method, params: request.params)
        templates.insert(template, at: 0)
        if templates.count > Self.capacity { templates.removeLast() }
    }

    /// An id written plainly: an integer (`-?(0|[1-9][0-9]*)`, at most 18
    /// digits) or a string of printable ASCII without escapes. Anything else
    /// (escapes, non-ASCII, fractions, exponents) is left to the parser.
    static func plainID(_ token: UnsafeRawBufferPointer) -> RequestID? {
        guard let first = token.first else { return nil }
        if first == UInt8(ascii: "\"") {
            guard token.count >= 2, token.last == UInt8(ascii: "\"") else { return nil }
            let body = token[1..<(token.count - 1)]
            guard body.allSatisfy({ $0 >= 0x20 && $0 < 0x7F && $0 != UInt8(ascii: "\"") && $0 != UInt8(ascii: "\\") }) else { return nil }
            return .string(String(decoding: body, as: UTF8.self))
        }
        let negative = first == UInt8(ascii: "-")
        let digits = token[(negative ? 1 : 0)...]
        guard let lead = digits.first, digits.count <= maximumDigits, digits.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }),
            lead != UInt8(ascii: "0") || digits.count == 1
        else { return nil }
        var value: Int64 = 0
        for digit in digits { value = value * 10 + Int64(digit - 0x30) }
        return .int(negative ? -value : value)
    }

    /// Where the value of the top-level object's one `"id"` member lies in a
    /// frame that parsed: nil when the frame is not an object, has no such
    /// member or more than one. (A key written with escapes is not seen:
    /// callers keep no frame with a backslash.)
    static func topLevelIDSpan(_ frame: UnsafeRawBufferPointer) -> Range<Int>? {
        var depth = 0
        var index = 0
        var found: Range<Int>?
        // After a string at depth 1: whether it is a key (an object member's name) is told by the colon after it.
        while index < frame.count {
            let byte = frame[index]
            switch byte {
            case UInt8(ascii: "{"), UInt8(ascii: "["):
                depth += 1
                index += 1
            case UInt8(ascii: "}"), UInt8(ascii: "]"):
                depth -= 1
                index += 1
            case UInt8(ascii: "\""):
                let start = index
                index += 1
                while index < frame.count && frame[index] != UInt8(ascii: "\"") {
                    index += frame[index] == UInt8(ascii: "\\") ? 2 : 1
                }
                index += 1
                guard depth == 1, index - start == 4, frame[start + 1] == UInt8(ascii: "i"), frame[start + 2] == UInt8(ascii: "d") else {
                    continue
                }
                var colon = index
                while colon < frame.count && isSpace(frame[colon]) { colon += 1 }
                guard colon < frame.count, frame[colon] == UInt8(ascii: ":") else { continue }
                var valueStart = colon + 1
                while valueStart < frame.count && isSpace(frame[valueStart]) { valueStart += 1 }
                var valueEnd = valueStart
                if valueStart < frame.count && frame[valueStart] == UInt8(ascii: "\"") {
                    valueEnd += 1
                    while valueEnd < frame.count && frame[valueEnd] != UInt8(ascii: "\"") {
                        valueEnd += frame[valueEnd] == UInt8(ascii: "\\") ? 2 : 1
                    }
                    valueEnd += 1
                } else {
                    while valueEnd < frame.count && !isSpace(frame[valueEnd]) && frame[valueEnd] != UInt8(ascii: ",")
                        && frame[valueEnd] != UInt8(ascii: "}")
                    {
                        valueEnd += 1
                    }
                }
                guard found == nil, valueEnd > valueStart, valueEnd <= frame.count else { return nil }
                found = valueStart..<valueEnd
                index = valueEnd
            default:
                index += 1
            }
        }
        return found
    }

    private static func isSpace(_ byte: UInt8) -> Bool {
        byte == 0x20 || byte == 0x09 || byte == 0x0A || byte == 0x0D
    }
}
