"""An installed tree: plugins found relative to the executable and in the XDG data folder.

The tree is laid out as `make install PREFIX=…` lays it out (bin/, lib/authbridge/plugins/),
from the debug build, so the test needs no release build.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from conftest import BUILD_DIR, HOST_BIN, Host, TEST_PLUGINS_DIR, host_command


def make_prefix(root: Path) -> Path:
    prefix = root / "prefix"
    (prefix / "bin").mkdir(parents=True)
    plugins = prefix / "lib" / "authbridge" / "plugins"
    plugins.mkdir(parents=True)
    for folder in (prefix, prefix / "bin", prefix / "lib", prefix / "lib" / "authbridge", plugins):
        folder.chmod(0o755)
    shutil.copy2(HOST_BIN, prefix / "bin" / "authbridge")
    shutil.copy2(BUILD_DIR / "authbridge-cli", prefix / "lib" / "authbridge")
    shutil.copy2(BUILD_DIR / "authbridge-host", prefix / "lib" / "authbridge")
    for name in ("libAuthBridgeHTTP.so", "libAuthBridgeSwiftCrypto.so", "libAuthBridgeNettle.so"):
        shutil.copy2(BUILD_DIR / name, prefix / "lib" / "authbridge")
    for name in ("oidc.json", "libauthbridge-oidc.so"):
        shutil.copy2(BUILD_DIR / "plugins" / name, plugins / name)
        (plugins / name).chmod(0o644)
    return prefix


def start_installed(tmp_path: Path, prefix: Path, data_home: Path) -> Host:
    argv, env = host_command(tmp_path / "run")
    argv = [str(prefix / "bin" / "authbridge")] + [a for a in argv[1:] if a != "--no-default-plugins"]
    env["XDG_DATA_HOME"] = str(data_home)
    host = Host(argv, env, tmp_path / "run")
    host.initialize()
    return host


def providers(host: Host) -> dict[str, dict]:
    return {p.get("id"): p for p in host.result("listProviders", {})["plugins"]}


def test_installed_host_searches_no_plugin_folder_in_bin(tmp_path):
    """An install tree's plugins are in lib/authbridge/plugins: the host also searched bin/plugins
    (the wheel's …/_host/bin/plugins, issue 27), a folder no install makes."""
    prefix = make_prefix(tmp_path)
    stray = prefix / "bin" / "plugins"
    stray.mkdir(mode=0o755)
    for name in ("ctest.json", "libauthbridge-ctest.so"):
        shutil.copy2(TEST_PLUGINS_DIR / name, stray / name)
        (stray / name).chmod(0o644)
    host = start_installed(tmp_path, prefix, tmp_path / "data-home")
    try:
        found = providers(host)
    finally:
        host.stop()
    assert set(found) == {"oidc"}, found


def test_installed_host_finds_bundled_and_user_plugins(tmp_path):
    prefix = make_prefix(tmp_path)
    data_home = tmp_path / "data-home"
    user_plugins = data_home / "authbridge" / "plugins"

    host = start_installed(tmp_path, prefix, data_home)
    try:
        found = providers(host)
        assert found["oidc"]["status"] == "loaded"
        assert found["oidc"]["path"].startswith(str(prefix.resolve()))
        assert "ctest" not in found
    finally:
        host.stop()
    assert not host.violations, host.violations

    # Dropping a plugin (.so + manifest) into the XDG data folder makes it appear at the next
    # start, without rebuilding anything; broken ones are refused with reasons.
    user_plugins.mkdir(parents=True)
    for folder in (data_home, user_plugins.parent, user_plugins):
        folder.chmod(0o755)
    for name in ("ctest.json", "libauthbridge-ctest.so"):
        shutil.copy2(TEST_PLUGINS_DIR / name, user_plugins / name)
        (user_plugins / name).chmod(0o644)
    # truncated library
    data = (TEST_PLUGINS_DIR / "libauthbridge-ctest.so").read_bytes()
    (user_plugins / "libtruncated.so").write_bytes(data[:4096])
    (user_plugins / "truncated.json").write_text(json.dumps(
        {"id": "truncated", "version": "1", "abi": "1.0", "library": "libtruncated.so"}))
    # ABI mismatch declared by the manifest
    shutil.copy2(TEST_PLUGINS_DIR / "libauthbridge-ctest.so", user_plugins / "libfuture.so")
    (user_plugins / "future.json").write_text(json.dumps(
        {"id": "future", "version": "1", "abi": "2.0", "library": "libfuture.so"}))
    # group-writable library
    shutil.copy2(TEST_PLUGINS_DIR / "libauthbridge-ctest.so", user_plugins / "libloose.so")
    (user_plugins / "loose.json").write_text(json.dumps(
        {"id": "loose", "version": "1", "abi": "1.0", "library": "libloose.so"}))
    for path in user_plugins.iterdir():
        path.chmod(0o644)
    (user_plugins / "libloose.so").chmod(0o664)

    host = start_installed(tmp_path / "second", prefix, data_home)
    try:
        found = providers(host)
        assert found["oidc"]["status"] == "loaded"
        assert found["ctest"]["status"] == "loaded"
        assert found["truncated"]["status"] == "refused" and found["truncated"]["reason"] == "loadFailed"
        assert found["future"]["status"] == "refused" and found["future"]["reason"] == "abiMismatch"
        assert found["loose"]["status"] == "refused" and found["loose"]["reason"] == "insecurePermissions"
        for plugin_id in ("truncated", "future", "loose"):
            assert found[plugin_id]["message"]
        # ... and the host keeps answering.
        response = host.request("listAccounts", {})
        assert response["result"] == {"accounts": []}
    finally:
        host.stop()
    assert not host.violations, host.violations


DROP_IN = {
    "salesforce": {"clientId": "3MVG9-demo", "loginHost": "production"},
    "tableau": {"server": "https://tableau.example.com", "site": "finance"},
    "marketsharp": {"clientId": "ms-demo"},
    "duke": {"clientName": "myapp", "environment": "test"},
}


def test_each_provider_plugin_is_a_drop_in(tmp_path):
    """The seed providers' plugins, copied (.so + manifest) into the user's plugin folder of an
    installed tree that was built without them, load at the next start and take profiles."""
    prefix = make_prefix(tmp_path)
    data_home = tmp_path / "data-home"
    user_plugins = data_home / "authbridge" / "plugins"
    user_plugins.mkdir(parents=True)
    for folder in (data_home, user_plugins.parent, user_plugins):
        folder.chmod(0o755)
    for plugin_id in DROP_IN:
        for name in (f"{plugin_id}.json", f"libauthbridge-{plugin_id}.so"):
            shutil.copyfile(BUILD_DIR / "plugins" / name, user_plugins / name)
            (user_plugins / name).chmod(0o644)
    assert not (prefix / "lib" / "authbridge" / "plugins" / "salesforce.json").exists()

    host = start_installed(tmp_path, prefix, data_home)
    try:
        found = providers(host)
        for plugin_id, settings in DROP_IN.items():
            assert found[plugin_id]["status"] == "loaded", found[plugin_id]
            assert found[plugin_id]["path"].startswith(str(user_plugins.resolve()))
            profile = host.result("configureProfile", {"name": f"my-{plugin_id}", "plugin": plugin_id, "settings": settings})
            assert profile["status"] == "ready", profile
            status = host.result("checkSignInStatus", {"provider": f"my-{plugin_id}"})
            assert status["state"] == "notSignedIn" and status["reason"] == "noTokens"
    finally:
        host.stop()
    assert not host.violations, host.violations


def test_bundled_manifests_name_the_versions_their_libraries_report(start_host, bundled_plugin_dir):
    host = start_host([bundled_plugin_dir])
    loaded = {p["id"]: p for p in host.result("listProviders", {})["plugins"]}
    manifests = sorted(bundled_plugin_dir.glob("*.json"))
    assert manifests
    for manifest in manifests:
        declared = json.loads(manifest.read_text())
        plugin = loaded[declared["id"]]
        assert plugin["status"] == "loaded", plugin
        assert plugin["version"] == declared["version"], f"{manifest.name} says {declared['version']}, the library {plugin['version']}"


def test_the_installed_command_line_tool_finds_the_same_tree(tmp_path):
    """`authbridge plugins` runs lib/authbridge/authbridge-cli, which finds the bundled plugins
    relative to itself exactly as bin/authbridge does."""
    import subprocess
    prefix = make_prefix(tmp_path)
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path / "home"), "XDG_DATA_HOME": str(tmp_path / "data-home"),
           "XDG_CONFIG_HOME": str(tmp_path / "config"), "XDG_RUNTIME_DIR": str(tmp_path)}
    done = subprocess.run([str(prefix / "bin" / "authbridge"), "plugins", "--json", "--no-agent"], capture_output=True,
                          text=True, env=env, timeout=30)
    assert done.returncode == 0, done.stderr
    listed = {p["id"]: p for p in json.loads(done.stdout)}
    assert listed["oidc"]["status"] == "loaded", listed
    assert listed["oidc"]["path"].startswith(str((prefix / "lib" / "authbridge" / "plugins").resolve())), listed
    assert len([p for p in listed.values() if p["id"] == "oidc"]) == 1

