"""The npm package: `npm install --offline <tgz>` in an empty folder gives @authbridge/client with the
linux-x64 host inside, which `AuthBridge.start()` runs when no AUTHBRIDGE and no hostPath say
otherwise — the README's Node quick start, with no authbridge on PATH."""

from __future__ import annotations

import json
import re
import subprocess
import threading

import pytest
from conftest import (BUNDLED_PLUGINS, SYSTEM_PATH, TIMEOUT, VERSION, artifact, clean_env, code_blocks, dot_exports,
                      handed_out_secrets, loaded_plugins, no_toolchain_paths, play_user, plugin_folder_problems, run,
                      runpath_problems, section)


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    """An empty folder with the package installed offline; (folder, environment)."""
    folder = tmp_path_factory.mktemp("node-app")
    env = clean_env(folder / "home", SYSTEM_PATH) | {"npm_config_cache": str(folder / "npm-cache"),
                                                     "npm_config_update_notifier": "false",
                                                     "npm_config_audit": "false", "npm_config_fund": "false"}
    done = run(["npm", "install", "--offline", artifact("authbridge-client-*.tgz")], cwd=folder, env=env,
               timeout=300)
    assert "added 1 package" in done.stdout, done.stdout + done.stderr
    return folder, env


def test_the_package_carries_the_host(app):
    folder, env = app
    package = folder / "node_modules" / "@authbridge" / "client"
    assert json.loads((package / "package.json").read_text())["version"] == VERSION
    tree = package / "host" / "linux-x64"
    host = tree / "bin" / "authbridge"
    assert run([host, "--version"], env=env).stdout.strip() == VERSION
    assert loaded_plugins(run([host, "plugins"], env=env).stdout) == BUNDLED_PLUGINS
    assert runpath_problems(tree) == []
    assert no_toolchain_paths(tree) == []
    resolved = run(["node", "--input-type=module", "-e",
                    "import { resolveHostPath } from '@authbridge/client'; console.log(resolveHostPath())"],
                   cwd=folder, env=env).stdout.strip()
    assert resolved == str(host.resolve())


def test_the_package_bin_is_the_bundled_host(app):
    """`npx authbridge` (issue 27: ENOTCACHED, the package had no bin) and node_modules/.bin/authbridge
    run the host the package carries, with its exit status."""
    folder, env = app
    host = folder / "node_modules" / "@authbridge" / "client" / "host" / "linux-x64" / "bin" / "authbridge"
    assert run(["npx", "--offline", "authbridge", "--version"], cwd=folder, env=env).stdout.strip() == VERSION
    linked = folder / "node_modules" / ".bin" / "authbridge"
    assert linked.resolve() == host.resolve()
    assert loaded_plugins(run([linked, "plugins"], env=env).stdout) == BUNDLED_PLUGINS
    assert run([linked, "no-such-command"], env=env, check=False).returncode == 64


def test_the_host_searches_its_bundled_plugins_where_they_are(app):
    folder, env = app
    tree = folder / "node_modules" / "@authbridge" / "client" / "host" / "linux-x64"
    assert plugin_folder_problems(tree / "bin" / "authbridge", tree / "lib" / "authbridge" / "plugins", env) == []


def test_the_node_quick_start_with_the_bundled_host(app, dot):
    folder, env = app
    env = env | dot_exports(dot)
    assert run(["sh", "-c", "command -v authbridge"], env=env, check=False).returncode != 0
    [program] = code_blocks(section("### From Node"), "js")
    (folder / "app.mjs").write_text(program)

    process = subprocess.Popen(["node", "app.mjs"], cwd=folder, env=env, text=True, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    lines: list[str] = []
    signed_in: list[int] = []

    def read() -> None:
        for line in process.stdout:
            lines.append(line)
            match = re.match(r"Open this page to sign in: (\S+)$", line.strip())
            if match:   # no desktop here (xdg-open is absent): the user opens it in a browser elsewhere
                signed_in.append(play_user(dot, match.group(1)))
    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert process.wait(TIMEOUT) == 0, "".join(lines) + process.stderr.read()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    reader.join(TIMEOUT)
    text = "".join(lines)
    assert signed_in == [200], text
    assert re.search(r"^corp: signedIn \(signedIn\)\nsigned in as Ada Lovelace\nuserinfo: HTTP 200\n$", text, re.M), text

    again = run(["node", "app.mjs"], cwd=folder, env=env)
    assert re.fullmatch(r"signed in as Ada Lovelace\nuserinfo: HTTP 200\n", again.stdout), again.stdout
    assert not [s for s in handed_out_secrets(dot) if s in text + again.stdout + again.stderr]
