/// The command line's own words for what the bridge says in its terms: a bridge error names
/// `configureProfile` to an app; a person at a terminal needs the file, the names and the
/// command that helps.
enum CommandText {
    /// How to start an agent: by hand, or socket-activated by the user's systemd
    /// (scripts/dist/systemd, installed with the .deb and `make install`).
    static let startAgent =
        "Start one with: authbridge agent & (or, to have systemd start it on first use: systemctl --user enable --now authbridge.socket)"

    /// No profile is named `name`: where the profiles come from, which there are, and the
    /// closest one (at most 2 edits away, as for commands).
    static func unknownProfile(_ name: String, known: [String], source: String) -> String {
        var text = "No profile is named \"\(name)\" in \(source)."
        if let guess = closest(to: name, among: known) { text += " Did you mean \"\(guess)\"?" }
        text += known.isEmpty ? " It has no profiles." : " Its profiles: \(known.sorted().joined(separator: ", "))."
        return text
    }

    /// The word of `candidates` nearest to `word` (at most 2 edits away), if any.
    static func closest(to word: String, among candidates: [String]) -> String? {
        let scored = candidates.map { ($0, editDistance(word.lowercased(), $0.lowercased())) }
        guard let best = scored.min(by: { $0.1 < $1.1 }), best.1 <= 2 else { return nil }
        return best.0
    }

    /// The configuration file as a message names it.
    static func configurationFile(_ path: String?) -> String {
        path.map { "the configuration file \($0)" } ?? "the configuration (no configuration file: XDG_CONFIG_HOME and HOME are unset)"
    }
}
