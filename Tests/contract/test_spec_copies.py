"""bridge-spec/openrpc.json is the source of its copies (scripts/spec.py, `make spec`): each
method's `params` list, the embedded document, the host's message types and error codes, the error
tables of the Python and Node clients and the README, and the README's method table. These tests
fail when a copy was edited by hand or the spec without `make spec`; and when the host writes a
reason the spec does not name."""

from __future__ import annotations

import json
import re
import subprocess
import sys

from conftest import REPO, SPEC_PATH


def test_every_copy_is_what_make_spec_writes():
    done = subprocess.run([sys.executable, str(REPO / "scripts" / "spec.py"), "--check"], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def test_the_method_table_names_every_param_the_host_accepts():
    """The drift that started this: §4 left out `account` and `forceRefresh`."""
    readme = (REPO / "bridge-spec" / "README.md").read_text(encoding="utf-8")
    rows = {m.group(1): m.group(2) for m in re.finditer(r"^\| `([^`]+)`[^|]* \| ([^|]*) \|", readme, re.M)}
    for method in json.loads(SPEC_PATH.read_text(encoding="utf-8"))["methods"]:
        if method.get("x-direction") == "server-to-client":
            continue
        for param in method["params"]:
            assert f"`{param['name']}" in rows[method["name"]], (method["name"], param["name"])


def test_every_error_class_is_exported():
    catalogue = json.loads(SPEC_PATH.read_text(encoding="utf-8"))["components"]["errors"]
    python = (REPO / "clients" / "python" / "authbridge" / "errors.py").read_text(encoding="utf-8")
    exported = re.search(r"__all__ = \[(.*?)\]", python, re.S).group(1)
    node_index = (REPO / "clients" / "node" / "src" / "index.js").read_text(encoding="utf-8")
    for name in catalogue:
        assert f'"{name}"' in exported, f"errors.py's __all__ lacks {name}"
        node_name = name if name.endswith("Error") else name + "Error"
        assert re.search(rf"^\s+{node_name},$", node_index, re.M), f"clients/node/src/index.js does not export {node_name}"


def test_the_specs_hook_table_is_plugin_hs():
    """plugin.h defines the hooks (`ab_hook`, the function table's slots); bridge-spec's `x-plugin-abi`
    names and numbers them again for readers of the spec, and must say the same."""
    header = (REPO / "Sources" / "CAuthBridgePlugin" / "include" / "authbridge" / "plugin.h").read_text(encoding="utf-8")
    enum = re.search(r"typedef enum ab_hook \{(.*?)\} ab_hook;", header, re.S).group(1)
    numbers = {name.lower(): int(number) for name, number in re.findall(r"AB_HOOK_(\w+) = (\d+)", enum)}
    vtable = re.search(r"typedef struct ab_plugin_vtable \{(.*?)\} ab_plugin_vtable;", header, re.S).group(1)
    slots = re.findall(r"ab_hook_fn (\w+);", vtable)
    assert slots == sorted(numbers, key=numbers.get), "the function table's hooks are in ab_hook's order"
    hooks = json.loads(SPEC_PATH.read_text(encoding="utf-8"))["x-plugin-abi"]["hooks"]
    assert {name: hook["number"] for name, hook in hooks.items()} == numbers


# The host's own words that never reach a frontend as `data.reason`, and why.
HOST_INTERNAL_REASONS = {
    "unknownKey": "the ID-token helper's answer to the host (a key id the JWKS lacks: fetched again once)",
    "agentGone": "the command line's own failure when the agent goes away: printed, never sent",
}


def spec_reason_words(document: dict) -> set[str]:
    """Every word bridge-spec gives as an error's reason, or as a status or ending's reason."""
    words: set[str] = set()
    for entry in document["components"]["errors"].values():
        for quoted in re.findall(r"`([^`]+)`", entry.get("x-reasons", "") + " " + entry.get("x-summary", "")):
            words.update(quoted.split())
    schemas = document["components"]["schemas"]
    for name in ("SignInStatus", "SessionChangedParams"):
        for condition in schemas[name].get("allOf", []):
            reason = condition.get("then", {}).get("properties", {}).get("reason", {})
            words.update(reason.get("enum", []) + reason.get("examples", []) + [reason.get("const", "")])
    return words


def test_every_reason_the_host_gives_is_in_the_spec():
    """A frontend branches on `data.reason`; each word the host writes (Swift and the HTTP helper)
    is one bridge-spec names, so none is a surprise. Plugins' own words are open (-32008: "the
    reason of an internal Failure"), so the plugin SDK's are not held here."""
    documented = spec_reason_words(json.loads(SPEC_PATH.read_text(encoding="utf-8")))
    written: dict[str, list[str]] = {}
    sources = [p for p in (REPO / "Sources").rglob("*.swift") if "AuthBridgePluginSDK" not in p.parts]
    sources += [REPO / "Sources" / "Helpers" / "HTTP" / "http.c"]
    for path in sources:
        text = path.read_text(encoding="utf-8")
        for word in re.findall(r'\breason(?: =|:) "([A-Za-z_]+)"', text):
            written.setdefault(word, []).append(str(path.relative_to(REPO)))
    missing = {word: places for word, places in written.items() if word not in documented and word not in HOST_INTERNAL_REASONS}
    assert not missing, f"reasons the host writes that bridge-spec does not name: {missing}"
    assert len(written) > 40, "the scan found the host's reasons"
