// Reloading the configuration file (the agent re-reads it when it changes):
// what changed in the file since it was last read reaches the profiles, and
// nothing else — sessions of unchanged profiles, and profiles a frontend
// configured itself, stay as they are.

import AuthBridgeJSON

/// What a reload of the configuration file changed, by profile name (each list sorted):
/// `profiles/changed` on the wire (bridge-spec).
public struct ProfileChanges: Sendable, Equatable {
    public var added: [String]
    public var changed: [String]
    public var removed: [String]

    public init(added: [String] = [], changed: [String] = [], removed: [String] = []) {
        self.added = added
        self.changed = changed
        self.removed = removed
    }

    public var isEmpty: Bool { added.isEmpty && changed.isEmpty && removed.isEmpty }

    public var json: JSON {
        ["added": .array(added.map(JSON.string)), "changed": .array(changed.map(JSON.string)), "removed": .array(removed.map(JSON.string))]
    }

    /// How the file's profiles as read now differ from what was read before: a profile is
    /// changed when its plugin or any of its settings differ (as `configureProfile` judges).
    static func between(_ before: [String: Profile], _ now: [String: Profile]) -> ProfileChanges {
        ProfileChanges(
            added: now.keys.filter { before[$0] == nil }.sorted(),
            changed: now.keys.filter { name in before[name].map { !$0.sameDefinition(as: now[name]!) } ?? false }.sorted(),
            removed: before.keys.filter { now[$0] == nil }.sorted())
    }
}

extension Profile {
    /// The same plugin and settings: a session made under one is a session of the other.
    func sameDefinition(as other: Profile) -> Bool { plugin == other.plugin && settings == other.settings }
}

extension SessionEngine {
    /// Makes the configuration file's profiles as read now (`file`) the engine's, and returns
    /// what that changed. Only what changed in the file since it was last read is applied:
    ///
    /// - a profile added to the file is added;
    /// - a changed one replaces the old definition, whose sessions and pending sign-in end
    ///   (`profileChanged`) as `configureProfile` ends them;
    /// - a removed one is removed with its sessions, as `removeProfile` does;
    /// - a profile a frontend configured at run time (`configureProfile`) is the frontend's:
    ///   a reload neither changes nor removes it, even when the file has one of that name.
    ///
    /// Reloads run one after the other, each after the profile changes already under way
    /// (a refresh or a sign-in in flight for a changed profile finds its session gone, as
    /// after `removeProfile`).
    public func reloadConfiguration(_ file: [Profile]) async -> ProfileChanges {
        let before = reloading
        let task = Task<ProfileChanges, Never> {
            await before?.value
            return await self.applyReload(file)
        }
        reloading = Task { _ = await task.value }
        return await task.value
    }

    private func applyReload(_ file: [Profile]) async -> ProfileChanges {
        let now = Dictionary(file.map { ($0.name, $0) }, uniquingKeysWith: { _, last in last })
        let changes = ProfileChanges.between(fileProfiles, now)
        fileProfiles = now
        var applied = ProfileChanges()
        for name in changes.removed where profiles[name]?.source == .config {
            do {
                if try await changingProfile(name, { engine async throws(SessionError) in try await engine.forgetProfile(name) }) {
                    applied.removed.append(name)
                }
            } catch {
                logger.warning(
                    "a profile removed from the configuration file could not be removed",
                    metadata: ["provider": "\(name)", "error": "\(error.message)"])
            }
        }
        for name in (changes.added + changes.changed).sorted() {
            guard let profile = now[name], profiles[name].map({ $0.source == .config }) ?? true else { continue }
            let existed = profiles[name] != nil
            do {
                try await changingProfile(name) { engine async throws(SessionError) in try await engine.adoptFileProfile(profile) }
                if existed { applied.changed.append(name) } else { applied.added.append(name) }
            } catch {
                logger.warning(
                    "a profile of the configuration file could not be changed", metadata: ["provider": "\(name)", "error": "\(error.message)"])
            }
        }
        return applied
    }

    /// Puts a profile read from the file in place of the one of its name (if any), ending the
    /// old one's sessions. Its configuration is resolved on first use, as at start.
    private func adoptFileProfile(_ profile: Profile) async throws(SessionError) {
        let name = profile.name
        let previous = profiles[name]
        let previousContext = resolvedContext(name)
        profiles[name] = profile
        configs[name] = nil
        fallbackConfigs[name] = nil
        for warning in settingsWarnings(profile) { logger.warning("configuration file \(warning)") }
        if let previous, !previous.sameDefinition(as: profile) { try await dropSession(name, context: previousContext) }
    }
}
