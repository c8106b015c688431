/// Text from outside (a provider's `error_description`, a plugin's message) as it may be shown to
/// people: on a terminal by the command line, in a frontend's dialog, on the loopback listener's page.
/// One rule for every place that shows it, so that what the host passes on and what the command
/// line prints are cleaned alike.
public enum PlainText {
    /// Text from a provider or plugin (or anywhere outside this program) made safe to show:
    /// escape sequences (CSI, OSC, DCS… up to their terminator), other C0 and C1 control
    /// characters and DEL removed; line breaks and tabs become spaces, so a message stays one
    /// line and cannot forge another. Such text could otherwise retitle the window, rewrite the
    /// screen, or hide what is printed (ECMA-48).
    public static func oneLine(_ text: String) -> String {
        var output = String.UnicodeScalarView()
        let scalars = Array(text.unicodeScalars)
        var index = 0
        while index < scalars.count {
            let scalar = scalars[index]
            switch scalar.value {
            case 0x1B: // ESC: skip the whole sequence
                index = endOfEscape(scalars, from: index + 1)
                continue
            case 0x9B, 0x90, 0x9D, 0x98, 0x9E, 0x9F: // C1 CSI, DCS, OSC, SOS, PM, APC
                index = endOfEscape(scalars, from: index, introducer: scalar.value)
                continue
            case 0x09, 0x0A, 0x0D: output.append(" ")
            case 0x00...0x1F, 0x7F...0x9F: break
            default: output.append(scalar)
            }
            index += 1
        }
        return String(output)
    }

    /// The index after an escape sequence whose introducer (ESC's next character, or a C1 one) is at `start`.
    private static func endOfEscape(_ scalars: [Unicode.Scalar], from start: Int, introducer c1: UInt32? = nil) -> Int {
        guard start < scalars.count else { return start }
        let kind: UInt32 = c1.map { $0 - 0x40 } ?? scalars[start].value // C1 0x9B ≙ ESC [
        var index = start + 1
        switch kind {
        case 0x5B: // CSI: parameters and intermediates, then one final byte 0x40–0x7E
            while index < scalars.count, (0x20...0x3F).contains(scalars[index].value) { index += 1 }
            return min(index + 1, scalars.count)
        case 0x5D, 0x50, 0x58, 0x5E, 0x5F: // OSC, DCS, SOS, PM, APC: a string up to BEL or ST
            while index < scalars.count {
                let value = scalars[index].value
                if value == 0x07 || value == 0x9C { return index + 1 }
                if value == 0x1B, index + 1 < scalars.count, scalars[index + 1] == "\\" { return index + 2 }
                index += 1
            }
            return index
        default: // a two-character sequence (ESC c, ESC 7…), with any intermediates
            var next = start
            while next < scalars.count, (0x20...0x2F).contains(scalars[next].value) { next += 1 }
            return min(next + 1, scalars.count)
        }
    }
}
