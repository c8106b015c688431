"""ARCHITECTURE.md draws the modules and their arrows; this holds the drawing to Package.swift.

The ```arrows block of ARCHITECTURE.md lists, for every library and executable target, the targets
and products it depends on. `swift package dump-package` says what Package.swift declares; the two
must agree, so the page a newcomer reads first cannot drift from the build.
"""

from __future__ import annotations

import json
import re
import subprocess

from conftest import REPO


def declared(scratch) -> dict[str, set[str]]:
    # Its own scratch folder: never waits for a build that holds .build's lock.
    dump = subprocess.run(["swift", "package", "--scratch-path", str(scratch), "dump-package"], cwd=REPO,
                          capture_output=True, text=True, timeout=120, check=True)
    targets = {}
    for target in json.loads(dump.stdout)["targets"]:
        if target["type"] == "test":
            continue
        names = set()
        for dependency in target["dependencies"]:
            (kind, value), = dependency.items()
            names.add(value[0] if kind in ("byName", "target", "product") else value)
        targets[target["name"]] = names
    return targets


def drawn() -> dict[str, set[str]]:
    text = (REPO / "ARCHITECTURE.md").read_text()
    block = re.search(r"```arrows\n(.*?)```", text, re.S).group(1)
    targets = {}
    for line in block.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        name, _, dependencies = line.partition("→")
        targets[name.strip()] = {item.strip() for item in dependencies.split(",") if item.strip()}
    return targets


def test_the_arrows_drawn_are_the_arrows_declared(tmp_path):
    actual, claimed = declared(tmp_path), drawn()
    assert sorted(claimed) == sorted(actual), "every target drawn once, and only targets that exist"
    wrong = {name: (sorted(claimed[name]), sorted(actual[name])) for name in actual if claimed[name] != actual[name]}
    assert not wrong, f"drawn vs declared: {wrong}"



def test_the_repository_cites_only_itself_and_public_sources():
    """Issue 25 §2.7: RunnerProtocol.swift pointed at a design note on one machine
    (/work/notes/…), which nobody with a clone can read. What the code and docs cite is the
    repository's own files or public sources: no absolute path of a work machine, no sibling folder."""
    tracked = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout.split()
    pattern = re.compile(r"/work/|\.\./shared/|/notes/issue")
    found = []
    for name in tracked:
        path = REPO / name
        if path.suffix not in {".swift", ".c", ".h", ".md", ".py", ".mjs", ".js", ".ts", ".json", ".sh", ".txt"} \
                or name.endswith("test_architecture.py"):
            continue
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if pattern.search(line):
                found.append(f"{name}:{number}")
    assert not found, "citations outside the repository: " + ", ".join(found)
