"""Swift plugins and the Swift runtime (plugins/README.md; bridge-spec/README.md, "Loader refusal
reasons": swiftRuntimeMismatch).

Swift on Linux has no stable ABI: a Swift plugin runs only on the Swift runtime it was built for,
and `dlopen` already runs its Swift code. Every plugin built with AuthBridgePluginSDK carries an
ELF note (owner "AuthBridge") naming the Swift that built it; the host reads it from the file
before `dlopen` and refuses a Swift plugin (one that needs libswiftCore.so) whose note names
another Swift than its own, or that has none. These tests use the real built plugins: copies with
the note rewritten, and a Swift library compiled here without it.
"""

from __future__ import annotations

import re
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import BUILD_DIR, DEFAULT_PROFILES, REPO, TEST_PLUGINS_DIR, make_plugin_dir, sign_in_session
from test_plugins import assert_refused, entry_for, new_folder, write_manifest

SWIFT_FILES = ("swifttest.json", "libauthbridge-testplugin-swift.so")
C_FILES = ("ctest.json", "libauthbridge-ctest.so")
SWIFT_LIBRARY = "libauthbridge-testplugin-swift.so"

# The note's header as Sources/AuthBridgePluginABI/SwiftRuntimeNote.swift lays it out:
# namesz, descsz, type, then the owner name padded to 4 bytes; the descriptor follows.
OWNER = b"AuthBridge\0"
NOTE_TYPE = 0x4142_0001
NOTE_HEADER = struct.pack("<III", len(OWNER), 16, NOTE_TYPE) + OWNER + b"\0" * (-len(OWNER) % 4)


def descriptor_offsets(data: bytes) -> list[int]:
    """Where the Swift runtime note's descriptor starts, for every such note in `data`."""
    return [match.end() for match in re.finditer(re.escape(NOTE_HEADER), data)]


def note_version(path: Path) -> tuple[int, int, int, int]:
    data = path.read_bytes()
    offsets = descriptor_offsets(data)
    assert len(offsets) == 1, f"{path.name}: {len(offsets)} Swift runtime notes"
    return struct.unpack_from("<IIII", data, offsets[0])


def toolchain_version() -> str:
    """The Swift that built the host and the plugins (the one on the PATH), as "6.3.1"."""
    text = subprocess.run(["swiftc", "--version"], capture_output=True, text=True, check=True).stdout
    found = re.search(r"Swift version (\d+)\.(\d+)(?:\.(\d+))?", text)
    assert found, text
    return f"{found[1]}.{found[2]}.{found[3] or 0}"


def rewritten_swift_plugin(folder: Path, at: int, layout: str, *values: int) -> Path:
    """A copy of the Swift test plugin (0644, with its manifest) with `values` packed as `layout`
    at `at` bytes from its note's descriptor."""
    make_plugin_dir(folder, SWIFT_FILES)
    library = folder / SWIFT_LIBRARY
    data = bytearray(library.read_bytes())
    (offset,) = descriptor_offsets(data)
    struct.pack_into(layout, data, offset + at, *values)
    library.write_bytes(data)
    return folder / "swifttest.json"


def with_version(folder: Path, version: tuple[int, int, int, int]) -> Path:
    """A copy of the Swift test plugin whose note names `version` (major, minor, patch, flags)."""
    return rewritten_swift_plugin(folder, 0, "<IIII", *version)


def assert_serving(host) -> None:
    """The host goes on answering: the C plugin signs in, the unmodified Swift plugin answers."""
    assert host.result("checkSignInStatus", {"provider": "c"})["state"] == "notSignedIn"
    assert sign_in_session(host, "c", "still-serving")["state"] == "signedIn"
    assert host.result("checkSignInStatus", {"provider": "s"})["state"] == "notSignedIn"
    assert {p.get("id") for p in host.result("listProviders", {})["plugins"] if p["status"] == "loaded"} \
        == {"ctest", "swifttest"}


def test_every_swift_plugin_built_here_names_the_toolchain_in_an_elf_note():
    expected = tuple(int(part) for part in toolchain_version().split(".")) + (0,)
    libraries = [TEST_PLUGINS_DIR / SWIFT_LIBRARY] + sorted((BUILD_DIR / "plugins").glob("libauthbridge-*.so"))
    swift = [library for library in libraries if library.name != "libauthbridge-duke.so"]
    assert len(swift) == 5, libraries
    for library in swift:
        assert note_version(library) == expected, library.name
        # A real note in a PT_NOTE segment, as readelf shows it.
        shown = subprocess.run(["readelf", "--notes", "--wide", str(library)], capture_output=True, text=True,
                               check=True).stdout
        assert re.search(r"AuthBridge\s+0x00000010\s+Unknown note type: \(0x41420001\)", shown), shown
    # C plugins have none.
    assert descriptor_offsets((TEST_PLUGINS_DIR / "libauthbridge-ctest.so").read_bytes()) == []


def test_a_plugin_built_for_another_swift_is_refused_before_it_runs(start_host, tmp_path):
    host_swift = toolchain_version()
    foreign = new_folder(tmp_path / "foreign")
    make_plugin_dir(foreign, C_FILES)
    manifest = with_version(foreign, (6, 2, 0, 0))
    unmodified = make_plugin_dir(tmp_path / "unmodified", SWIFT_FILES)

    # The foreign copy comes first: refused, it leaves the id to the unmodified copy.
    host = start_host([foreign, unmodified], profiles=DEFAULT_PROFILES)
    entry = entry_for(host, manifest)
    assert entry["status"] == "refused" and entry["reason"] == "swiftRuntimeMismatch", entry
    assert entry["id"] == "swifttest"
    assert (f"was built for the Swift 6.2.0 runtime; this host bundles Swift {host_swift}: "
            f"rebuild the plugin with Swift {host_swift}") in entry["message"], entry
    assert entry_for(host, foreign / "libauthbridge-ctest.so")["status"] == "loaded"
    assert entry_for(host, unmodified / SWIFT_LIBRARY)["status"] == "loaded"
    assert_serving(host)


@pytest.mark.parametrize("version, named", [
    ((6, 3, 99, 0), "the Swift 6.3.99 runtime"),
    ((6, 9, 9, 1), "the runtime of a Swift newer than 6.9.9"),
], ids=["other-patch", "newer-than-the-ladder"])
def test_a_version_the_host_does_not_bundle_is_refused(start_host, plugin_dir, tmp_path, version, named):
    manifest = with_version(new_folder(tmp_path / "foreign"), version)
    host = start_host([manifest.parent, plugin_dir], profiles=DEFAULT_PROFILES)
    entry = assert_refused(host, manifest, "swiftRuntimeMismatch", "swifttest", check_others=False)
    assert f"was built for {named}; this host bundles Swift {toolchain_version()}" in entry["message"], entry
    assert_serving(host)


def test_a_swift_library_without_the_marker_is_refused(start_host, plugin_dir, tmp_path):
    """Swift, but not built with the SDK: it exports the entry point and nothing else."""
    source = tmp_path / "nomarker.swift"
    source.write_text('@_cdecl("authbridge_plugin_v1")\n'
                      "public func authbridgePluginEntry() -> UnsafeRawPointer? { nil }\n")
    folder = new_folder(tmp_path / "nomarker")
    library = folder / "libnomarker.so"
    subprocess.run(["swiftc", "-emit-library", "-module-name", "NoMarker", str(source), "-o", str(library)],
                   cwd=tmp_path, check=True, capture_output=True, timeout=300)
    library.chmod(0o644)
    needed = subprocess.run(["readelf", "--dynamic", str(library)], capture_output=True, text=True, check=True).stdout
    assert "[libswiftCore.so]" in needed and descriptor_offsets(library.read_bytes()) == []
    manifest = write_manifest(folder, "nomarker", "libnomarker.so")

    host = start_host([plugin_dir, folder], profiles=DEFAULT_PROFILES)
    entry = assert_refused(host, manifest, "swiftRuntimeMismatch", "nomarker", check_others=False)
    assert ("was built without AuthBridge's Swift runtime marker (an SDK older than this host, or not built with "
            f"AuthBridgePluginSDK); rebuild it with Swift {toolchain_version()} and the SDK of this host") \
        in entry["message"], entry
    assert_serving(host)


@pytest.mark.parametrize("field, value", [(0, 0xFFFF_FFF0), (4, 0x7FFF_FFFF)], ids=["name-size", "descriptor-size"])
def test_a_note_that_lies_about_its_size_is_a_clean_refusal(start_host, plugin_dir, tmp_path, field, value):
    manifest = rewritten_swift_plugin(new_folder(tmp_path / "hostile"), field - len(NOTE_HEADER), "<I", value)
    host = start_host([manifest.parent, plugin_dir], profiles=DEFAULT_PROFILES)
    entry = assert_refused(host, manifest, "loadFailed", "swifttest", check_others=False)
    assert "runs past the end of its segment" in entry["message"], entry
    assert_serving(host)


def test_the_ladder_is_what_its_script_generates():
    done = subprocess.run([sys.executable, str(REPO / "scripts" / "swift-runtime-ladder.py"), "--check"],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
