"""Plugin loading and vetting (bridge-spec/README.md, "Loader refusal reasons", §1 stdout discipline).

Each test starts a host with the good test plugins (folder `plugin_dir`) plus a folder holding
one broken plugin, and checks the refusal reported in `initialize` and `listProviders`, and
that the good plugins still work in the same host.
"""

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import DEFAULT_PROFILES, TEST_PLUGINS_DIR, make_plugin_dir, sign_in_session


def write_manifest(folder: Path, plugin_id: str, library: str, abi: str = "1.0", name: str | None = None,
                   mode: int = 0o644) -> Path:
    path = folder / (name or f"{plugin_id}.json")
    path.write_text(json.dumps({"id": plugin_id, "version": "1.0.0", "abi": abi, "library": library}))
    os.chmod(path, mode)
    return path


def new_folder(path: Path, mode: int = 0o755) -> Path:
    path.mkdir(parents=True)
    os.chmod(path, mode)
    return path


def start(start_host, plugin_dir, *folders, profiles=None):
    return start_host([plugin_dir, *folders], profiles=profiles or DEFAULT_PROFILES)


def entry_for(host, manifest: Path) -> dict:
    """The provider entry of `manifest` as listProviders gives it, which must be initialize's plus
    the settings schema (initialize leaves it out unless asked)."""
    target = os.path.realpath(manifest)
    found = [p for p in host.init_result["providers"] if os.path.realpath(p["path"]) == target]
    assert len(found) == 1, f"no single provider entry for {target}: {host.init_result['providers']}"
    listed = [p for p in host.result("listProviders", {})["plugins"] if os.path.realpath(p["path"]) == target]
    assert [{k: v for k, v in p.items() if k != "settings"} for p in listed] == found, "listProviders and initialize disagree"
    return listed[0]


def assert_refused(host, manifest: Path, reason: str, plugin_id: str | None = None, check_others: bool = True) -> dict:
    entry = entry_for(host, manifest)
    assert entry["status"] == "refused", entry
    assert entry["reason"] == reason, entry
    assert isinstance(entry["message"], str) and entry["message"].strip(), entry
    if plugin_id is not None:
        assert entry.get("id") == plugin_id, entry
    if check_others:
        assert_good_plugins_work(host)
    return entry


def assert_good_plugins_work(host):
    loaded = {p["id"] for p in host.init_result["providers"] if p["status"] == "loaded"}
    assert {"ctest", "swifttest"} <= loaded, host.init_result["providers"]
    assert host.result("checkSignInStatus", {"provider": "c"})["state"] == "notSignedIn"
    assert sign_in_session(host, "c", "still-works")["state"] == "signedIn"
    assert host.result("checkSignInStatus", {"provider": "s"})["state"] == "notSignedIn"


# ── Refusals ─────────────────────────────────────────────────────────────────


@pytest.mark.parametrize("size", [200, 1000, 8192])
def test_truncated_library_is_load_failed(start_host, plugin_dir, tmp_path, size):
    # 200 bytes: not even an ELF header. 1000 / 8192 bytes: a valid header whose segments lie
    # beyond the end of the file. Either way dlopen must fail, not take the host down.
    folder = new_folder(tmp_path / "broken")
    library = folder / "libtrunc.so"
    shutil.copyfile(TEST_PLUGINS_DIR / "libauthbridge-ctest.so", library)
    os.truncate(library, size)
    os.chmod(library, 0o644)
    manifest = write_manifest(folder, "trunc", "libtrunc.so")
    host = start(start_host, plugin_dir, folder)
    assert_refused(host, manifest, "loadFailed", "trunc")


def test_missing_library_is_load_failed(start_host, plugin_dir, tmp_path):
    folder = new_folder(tmp_path / "broken")
    manifest = write_manifest(folder, "ghost", "libghost.so")
    host = start(start_host, plugin_dir, folder)
    assert_refused(host, manifest, "loadFailed", "ghost")


def test_library_built_for_abi_2_is_abi_mismatch(start_host, plugin_dir, tmp_path, ctest_variants):
    manifest = ctest_variants.install(new_folder(tmp_path / "broken"), "cabi2", "-DCTEST_ABI_MAJOR_2")
    host = start(start_host, plugin_dir, manifest.parent)
    assert_refused(host, manifest, "abiMismatch", "cabi2")


@pytest.mark.parametrize("abi", ["2.0", "1.9", "0.1"])
def test_manifest_abi_the_host_does_not_speak_is_abi_mismatch(start_host, plugin_dir, tmp_path, ctest_variants, abi):
    manifest = ctest_variants.install(new_folder(tmp_path / "broken"), "cmabi", abi=abi)
    host = start(start_host, plugin_dir, manifest.parent)
    assert_refused(host, manifest, "abiMismatch", "cmabi")


def test_a_plugin_rebuilt_with_a_newer_minor_header_keeps_its_manifest(start_host, plugin_dir, tmp_path, ctest_variants):
    """Issue 25 §2.5: a C plugin whose manifest says "abi": "1.0", rebuilt against today's plugin.h
    (1.1), was refused abiMismatch ("library reports ABI 1.1 but its manifest says 1.0"). The
    manifest's minor is the least the plugin needs; the major must match and the minor be at most
    the host's (as GStreamer's plugin versions)."""
    manifest = ctest_variants.install(new_folder(tmp_path / "older"), "cold", abi="1.0")
    host = start(start_host, plugin_dir, manifest.parent,
                 profiles={"old": {"plugin": "cold", "settings": {"server": "http://127.0.0.1:9"}}})
    entry = entry_for(host, manifest.parent / "libauthbridge-cold.so")
    assert entry["status"] == "loaded", entry
    assert host.result("checkSignInStatus", {"provider": "old"})["state"] == "notSignedIn"


def test_group_writable_library_is_insecure(start_host, plugin_dir, tmp_path, ctest_variants):
    manifest = ctest_variants.install(new_folder(tmp_path / "broken"), "cgw")
    os.chmod(manifest.parent / "libauthbridge-cgw.so", 0o664)
    host = start(start_host, plugin_dir, manifest.parent)
    assert_refused(host, manifest, "insecurePermissions", "cgw")


def test_world_writable_manifest_is_insecure(start_host, plugin_dir, tmp_path, ctest_variants):
    manifest = ctest_variants.install(new_folder(tmp_path / "broken"), "cww")
    os.chmod(manifest, 0o646)
    host = start(start_host, plugin_dir, manifest.parent)
    assert_refused(host, manifest, "insecurePermissions")


def test_group_writable_folder_refuses_everything_in_it(start_host, plugin_dir, tmp_path, ctest_variants):
    folder = new_folder(tmp_path / "broken")
    first = ctest_variants.install(folder, "cfa")
    second = ctest_variants.install(folder, "cfb")
    os.chmod(folder, 0o775)
    host = start(start_host, plugin_dir, folder)
    assert_refused(host, first, "insecurePermissions", "cfa", check_others=False)
    assert_refused(host, second, "insecurePermissions", "cfb")


def test_a_parent_folder_others_can_write_refuses_its_plugins(start_host, plugin_dir, tmp_path, ctest_variants):
    """Anyone who can write to a folder above the plugin folder can rename the plugin folder
    away and put their own in its place, as sshd's StrictModes knows: refused, naming the folder."""
    shared = new_folder(tmp_path / "open", 0o777)
    manifest = ctest_variants.install(new_folder(shared / "plugins"), "cpw")
    host = start(start_host, plugin_dir, manifest.parent)
    entry = assert_refused(host, manifest, "insecurePermissions", "cpw")
    assert str(shared) in entry["message"]


def test_a_sticky_parent_folder_is_accepted(start_host, plugin_dir, tmp_path, ctest_variants):
    """A sticky folder such as /tmp: others may write to it but cannot rename what they do not own."""
    shared = new_folder(tmp_path / "sticky", 0o1777)
    manifest = ctest_variants.install(new_folder(shared / "plugins"), "cst")
    host = start(start_host, plugin_dir, manifest.parent)
    entry = entry_for(host, manifest.parent / "libauthbridge-cst.so")
    assert entry["status"] == "loaded" and entry["isolation"] == "process", entry


def test_a_private_library_found_through_origin_is_explained(start_host, plugin_dir, tmp_path, ctest_variants):
    """A plugin that finds a library of its own through $ORIGIN cannot, since it is loaded from the
    descriptor it was vetted through (/proc/self/fd/N): the refusal says why, and what to do."""
    private = new_folder(tmp_path / "private")
    (private / "private.c").write_text("int authbridge_private_answer(void) { return 42; }\n")
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(private / "libabprivate.so"), str(private / "private.c")],
                   check=True, timeout=60)
    manifest = ctest_variants.install(new_folder(tmp_path / "broken"), "corigin", f"-L{private}",
                                      "-Wl,--no-as-needed", "-labprivate", "-Wl,-rpath,$ORIGIN")
    shutil.copy(private / "libabprivate.so", manifest.parent / "libabprivate.so")
    os.chmod(manifest.parent / "libabprivate.so", 0o644)
    host = start(start_host, plugin_dir, manifest.parent)
    entry = assert_refused(host, manifest, "loadFailed", "corigin")
    assert "libabprivate.so" in entry["message"] and "$ORIGIN" in entry["message"], entry


def test_library_symlink_leaving_the_folder_is_refused(start_host, plugin_dir, tmp_path, ctest_variants):
    outside = ctest_variants.install(new_folder(tmp_path / "outside"), "cesc")
    folder = new_folder(tmp_path / "broken")
    os.symlink(outside.parent / "libauthbridge-cesc.so", folder / "libauthbridge-cesc.so")
    manifest = write_manifest(folder, "cesc", "libauthbridge-cesc.so")
    host = start(start_host, plugin_dir, folder)
    assert_refused(host, manifest, "symlinkEscapes", "cesc")


def test_manifest_symlink_leaving_the_folder_is_refused(start_host, plugin_dir, tmp_path, ctest_variants):
    outside = ctest_variants.install(new_folder(tmp_path / "outside"), "cmesc")
    folder = new_folder(tmp_path / "broken")
    shutil.copyfile(outside.parent / "libauthbridge-cmesc.so", folder / "libauthbridge-cmesc.so")
    os.chmod(folder / "libauthbridge-cmesc.so", 0o644)
    link = folder / "cmesc.json"
    os.symlink(outside, link)
    host = start(start_host, plugin_dir, folder)
    providers = host.init_result["providers"]
    entry = [p for p in providers if p.get("id") == "cmesc"]
    assert len(entry) == 1, providers
    assert entry[0]["status"] == "refused" and entry[0]["reason"] == "symlinkEscapes", entry[0]
    assert entry[0]["message"].strip()
    assert_good_plugins_work(host)


def test_same_id_in_a_later_folder_is_duplicate_id(start_host, plugin_dir, tmp_path):
    second = make_plugin_dir(tmp_path / "second", ["ctest.json", "libauthbridge-ctest.so"])
    host = start(start_host, plugin_dir, second)
    entry = assert_refused(host, second / "ctest.json", "duplicateId", "ctest")
    assert entry["id"] == "ctest"
    first = entry_for(host, plugin_dir / "libauthbridge-ctest.so")
    assert first["status"] == "loaded"


def test_library_without_entry_symbol_is_missing_symbol(start_host, plugin_dir, tmp_path, ctest_variants):
    manifest = ctest_variants.install(new_folder(tmp_path / "broken"), "cnoentry", "-DCTEST_NO_ENTRY")
    host = start(start_host, plugin_dir, manifest.parent)
    assert_refused(host, manifest, "missingSymbol", "cnoentry")


def test_library_reporting_another_id_is_bad_entry(start_host, plugin_dir, tmp_path, ctest_variants):
    manifest = ctest_variants.install(new_folder(tmp_path / "broken"), "cwrong", "-DCTEST_WRONG_ID")
    host = start(start_host, plugin_dir, manifest.parent)
    assert_refused(host, manifest, "badEntry", "cwrong")


def test_a_version_other_than_the_manifests_is_metadata_mismatch(start_host, plugin_dir, tmp_path, ctest_variants):
    # The manifest states id and version once; a library that says otherwise is refused, naming
    # the field (before, the loader silently preferred one).
    manifest = ctest_variants.install(new_folder(tmp_path / "broken"), "cmeta", "-DCTEST_VERSION=9.9.9")
    host = start(start_host, plugin_dir, manifest.parent)
    entry = assert_refused(host, manifest, "metadataMismatch", "cmeta")
    assert "version" in entry["message"] and "manifest" in entry["message"], entry


def test_another_description_in_describe_is_a_warning_not_a_refusal(start_host, plugin_dir, tmp_path, ctest_variants):
    """Issue 25 §2.5: a plugin whose describe words its description differently from its manifest
    was refused metadataMismatch. Words are cosmetic: the plugin loads, the manifest's text is
    shown, and a warning names both texts (in its PluginStatus and on stderr)."""
    manifest = ctest_variants.install(new_folder(tmp_path / "reworded"), "cdesc", "-DCTEST_DESCRIBE_DESCRIPTION")
    host = start(start_host, plugin_dir, manifest.parent,
                 profiles={"d": {"plugin": "cdesc", "settings": {"server": "http://127.0.0.1:9"}}})
    entry = entry_for(host, manifest.parent / "libauthbridge-cdesc.so")
    stated = json.loads(manifest.read_text())["description"]
    assert entry["status"] == "loaded" and entry["description"] == stated, entry
    (warning,) = entry["warnings"]
    assert "cdesc" in warning and json.dumps(stated) in warning and "describe" in warning, warning
    assert warning.split("describe gives the description ")[1].split(" but")[0] != json.dumps(stated)
    assert "cdesc: describe gives the description" in host.stderr_text()
    assert host.result("checkSignInStatus", {"provider": "d"})["state"] == "notSignedIn"


def test_the_manifest_fills_describe(start_host, plugin_dir):
    host = start(start_host, plugin_dir)
    entry = entry_for(host, plugin_dir / "libauthbridge-ctest.so")
    manifest = json.loads((plugin_dir / "ctest.json").read_text())
    assert (entry["status"], entry["version"], entry["description"]) == ("loaded", manifest["version"], manifest["description"])


ABI_1_0_PLUGIN = r"""
/* A plugin built for ABI 1.0: it declares minor 0 and uses only 1.0's host services. */
#include <authbridge/plugin.h>
#include <string.h>
static ab_status describe(ab_plugin *p, ab_call *call, ab_json in)
{
    (void)p; (void)in;
    extern const ab_host_api *old_host;
    static const char d[] = "{\"displayName\":\"Old\",\"flows\":[\"session\"],\"capabilities\":[]}";
    return old_host->set_result(call, (ab_json){ d, sizeof d - 1 });
}
const ab_host_api *old_host;
static ab_status init(const ab_host_api *host, ab_plugin **plugin, const char **error)
{
    (void)error;
    old_host = host;
    *plugin = NULL;
    return AB_OK;
}
static ab_status complete(ab_plugin *p, ab_call *call, ab_json in)
{
    (void)p; (void)in;
    static const char r[] = "{\"tokens\":{\"accessToken\":\"old-access-token\",\"expiresAt\":null}}";
    return old_host->set_result(call, (ab_json){ r, sizeof r - 1 });
}
static const ab_plugin_vtable vt = { .size = sizeof vt, .init = init, .describe = describe, .complete_sign_in = complete };
__attribute__((visibility("default"))) const ab_plugin_info *authbridge_plugin_v1(void)
{
    static const ab_plugin_info info = { AB_PLUGIN_MAGIC, 1, 0, "oldabi", "0.9.0", &vt };
    return &info;
}
"""


def test_a_plugin_built_for_abi_1_0_loads_and_works(start_host, plugin_dir, tmp_path):
    folder = new_folder(tmp_path / "old")
    source = tmp_path / "oldabi.c"
    source.write_text(ABI_1_0_PLUGIN)
    include = Path(__file__).resolve().parents[2] / "Sources" / "CAuthBridgePlugin" / "include"
    subprocess.run(["gcc", "-shared", "-fPIC", "-fvisibility=hidden", "-I", str(include), "-o",
                    str(folder / "liboldabi.so"), str(source)], check=True, capture_output=True, timeout=120)
    os.chmod(folder / "liboldabi.so", 0o644)
    manifest = folder / "oldabi.json"
    manifest.write_text(json.dumps({"id": "oldabi", "version": "0.9.0", "abi": "1.0", "library": "liboldabi.so"}))
    os.chmod(manifest, 0o644)
    host = start(start_host, plugin_dir, folder, profiles={**DEFAULT_PROFILES, "old": {"plugin": "oldabi", "settings": {}}})
    entry = entry_for(host, folder / "liboldabi.so")
    assert (entry["status"], entry["version"], entry["displayName"]) == ("loaded", "0.9.0", "Old"), entry
    assert sign_in_session(host, "old", "any")["state"] == "signedIn"
    assert_good_plugins_work(host)


def test_init_failure_is_init_failed(start_host, plugin_dir, tmp_path, ctest_variants):
    manifest = ctest_variants.install(new_folder(tmp_path / "broken"), "cinit", "-DCTEST_INIT_FAILS")
    host = start(start_host, plugin_dir, manifest.parent)
    entry = assert_refused(host, manifest, "initFailed", "cinit")
    assert "init refused by test" in entry["message"]


@pytest.mark.parametrize("text", [
    "{not json",
    "[1, 2]",
    '{"version": "1.0.0", "abi": "1.0", "library": "libx.so"}',
    '{"id": "has/slash", "version": "1.0.0", "abi": "1.0", "library": "libx.so"}',
    '{"id": "badlib", "version": "1.0.0", "abi": "1.0", "library": "../libx.so"}',
    '{"id": "badabi", "version": "1.0.0", "abi": "one", "library": "libx.so"}',
    '{"id": "nover", "abi": "1.0", "library": "libx.so"}',
], ids=["not-json", "not-object", "no-id", "bad-id", "library-path", "abi-format", "no-version"])
def test_invalid_manifest(start_host, plugin_dir, tmp_path, text):
    folder = new_folder(tmp_path / "broken")
    manifest = folder / "broken.json"
    manifest.write_text(text)
    os.chmod(manifest, 0o644)
    host = start(start_host, plugin_dir, folder)
    entry = assert_refused(host, manifest, "invalidManifest")
    # id: the manifest's id when it could be read, else the file name without .json
    # (a malformed id is not "read": PluginId forbids "/").
    try:
        declared = json.loads(text).get("id")
    except (ValueError, AttributeError):
        declared = None
    assert entry.get("id") in ("broken", declared if declared != "has/slash" else "broken"), entry


# ── stdout discipline ────────────────────────────────────────────────────────


def test_plugin_printing_to_stdout_cannot_corrupt_the_stream(start_host, tmp_path, ctest_variants):
    manifest = ctest_variants.install(new_folder(tmp_path / "noisy"), "cnoise", "-DCTEST_PRINT_STDOUT")
    host = start_host([manifest.parent], profiles={"n": {"plugin": "cnoise", "settings": {"server": "https://n.example"}}})
    assert [p["status"] for p in host.init_result["providers"]] == ["loaded"]
    assert sign_in_session(host, "n", "noisy")["state"] == "signedIn"
    assert host.result("checkSignInStatus", {"provider": "n"})["state"] == "signedIn"
    token = host.result("getAccessToken", {"provider": "n"})
    assert token["headers"]["X-CTest"] == "1"
    host.result("signOut", {"provider": "n"})
    host.close_stdin()
    assert host.wait_exit() == 0
    # Every stdout line was a valid frame (the harness validated each one) …
    assert all(line.startswith(b"{") for line in host.lines)
    assert b"stdout noise" not in b"".join(host.lines)
    # … and the plugin's prints went to stderr instead.
    stderr = host.stderr_text()
    for hook in ("init", "describe", "configure", "complete_sign_in", "check_session", "authorize_request",
                 "revoke", "shutdown"):
        assert f"ctest stdout noise: {hook}" in stderr, hook


def test_settings_nothing_reads_are_warned_about_not_refused(start_host, oidc_plugin_dir):
    """Issue 25 §2.4: configureProfile with settings.dpop (then a key no plugin read) answered ready in
    silence, so a typo went unnoticed. Such settings are ignored and named — in the result's
    warnings, on stderr, and for the configuration file's profiles in initialize's warnings — with
    the profile, the key and the closest known key."""
    endpoints = {"clientId": "app", "authorizationEndpoint": "https://idp.example/authorize",
                 "tokenEndpoint": "https://idp.example/token"}
    host = start_host([oidc_plugin_dir], profiles={"filed": {"plugin": "oidc", "settings": {**endpoints, "scope": ["openid"]}}})
    filed = [w for w in host.init_result["warnings"] if '"filed"' in w]
    assert len(filed) == 1 and '"scope"' in filed[0] and 'did you mean "scopes"' in filed[0], host.init_result["warnings"]

    info = host.result("configureProfile", {"name": "dev", "plugin": "oidc",
                                            "settings": {**endpoints, "mtlsBinding": True, "clientID": "app", "loopbackPort": 4596}})
    assert info["status"] == "ready"
    assert len(info["warnings"]) == 2, info
    client, unknown = info["warnings"]
    assert '"dev"' in client and '"clientID"' in client and 'did you mean "clientId"' in client
    assert '"dev"' in unknown and '"mtlsBinding"' in unknown and "did you mean" not in unknown
    assert '"mtlsBinding"' in host.stderr_text() and '"dev"' in host.stderr_text()
    # Settings the plugin and the host read carry no warnings.
    clean = host.result("configureProfile", {"name": "clean", "plugin": "oidc", "settings": {**endpoints, "loopbackPort": 4596}})
    assert clean["status"] == "ready" and "warnings" not in clean
