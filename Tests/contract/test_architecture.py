"""ARCHITECTURE.md draws the modules and their arrows; this holds the drawing to Package.swift, and
Package.swift to the code's imports.

The ```arrows block of ARCHITECTURE.md lists, for every library and executable target, the targets
and products it depends on. `swift package dump-package` says what Package.swift declares; the two
must agree, so the page a newcomer reads first cannot drift from the build. And every module of the
package (or product) a target's Swift files import must be one of that target's DIRECT dependencies:
SwiftPM lets a target import what its dependencies depend on, so without this an arrow the code
follows could be missing from both Package.swift and the drawing (issue 28 §4).
"""

from __future__ import annotations

import json
import re
import subprocess

import pytest

from conftest import REPO


@pytest.fixture(scope="module")
def package(tmp_path_factory) -> dict:
    # Its own scratch folder: never waits for a build that holds .build's lock.
    scratch = tmp_path_factory.mktemp("scratch")
    dump = subprocess.run(["swift", "package", "--scratch-path", str(scratch), "dump-package"], cwd=REPO,
                          capture_output=True, text=True, timeout=120, check=True)
    return json.loads(dump.stdout)


def declared(package: dict, tests: bool = False) -> dict[str, set[str]]:
    targets = {}
    for target in package["targets"]:
        if target["type"] == "test" and not tests:
            continue
        names = set()
        for dependency in target["dependencies"]:
            (kind, value), = dependency.items()
            names.add(value[0] if kind in ("byName", "target", "product") else value)
        targets[target["name"]] = names
    return targets


# `import X`, `@testable import X`, `public import X`, `import struct X.Y`: the module is X.
IMPORT = re.compile(r"^\s*(?:@\w+(?:\([^)]*\))?\s+)*(?:(?:public|package|internal|fileprivate|private)\s+)?import\s+"
                    r"(?:(?:struct|class|enum|protocol|typealias|func|var|let)\s+)?(\w+)", re.M)


def imported(package: dict) -> dict[str, dict[str, list[str]]]:
    """For every target, the modules its Swift files import and the files that import each. A
    target's files are those under its folder, less its `exclude` and the folders of other targets
    (a plugin's Entry/ is a target of its own)."""
    def folder(target):
        default = "Tests" if target["type"] == "test" else "Sources"
        return REPO / (target.get("path") or f"{default}/{target['name']}")
    folders = {target["name"]: folder(target) for target in package["targets"]}
    targets = {}
    for target in package["targets"]:
        root = folders[target["name"]]
        others = [path for name, path in folders.items() if name != target["name"] and root in path.parents]
        excluded = [root / item for item in target.get("exclude", [])]
        modules: dict[str, list[str]] = {}
        for file in sorted(root.rglob("*.swift")):
            if any(file.is_relative_to(path) for path in others + excluded):
                continue
            for module in IMPORT.findall(file.read_text()):
                modules.setdefault(module, []).append(str(file.relative_to(REPO)))
        targets[target["name"]] = modules
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


def test_the_arrows_drawn_are_the_arrows_declared(package):
    actual, claimed = declared(package), drawn()
    assert sorted(claimed) == sorted(actual), "every target drawn once, and only targets that exist"
    wrong = {name: (sorted(claimed[name]), sorted(actual[name])) for name in actual if claimed[name] != actual[name]}
    assert not wrong, f"drawn vs declared: {wrong}"


def test_every_import_of_a_package_module_is_a_declared_arrow(package):
    """An import of one of the package's targets, or of a product some target declares (Logging,
    ArgumentParser, …), must be a direct dependency of the importing target: the arrows drawn above
    are then the arrows the code follows. System modules (Glibc, Synchronization, Testing) are not
    the package's and are not checked."""
    dependencies = declared(package, tests=True)
    ours = {target["name"] for target in package["targets"]} | set().union(*dependencies.values())
    undeclared = {}
    for target, modules in imported(package).items():
        missing = sorted(module for module in modules if module in ours and module != target
                         and module not in dependencies[target])
        if missing:
            undeclared[target] = {module: modules[module][:3] for module in missing}
    assert not undeclared, f"imported but not declared in Package.swift (target: module: files): {undeclared}"



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
