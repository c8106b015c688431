"""The human commands on the same binary (like `gh auth`): login, status, token, logout.

Each command is its own process sharing the profiles and the default encrypted-file vault, as a
person would run them one after another. The browser is a stand-in `xdg-open` on PATH that plays
the user at django-oauth-toolkit; the device flow's user approves on DOT's pages.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import leak_scan
from conftest import HOST_BIN, TIMEOUT
from dot_auth import DotAuthServer

NOT_SIGNED_IN, UNAVAILABLE = 2, 3

FAKE_BROWSER = """#!{python}
import sys, urllib.request
sys.path.insert(0, {contract!r})
from dot_auth import DotAuthServer
urllib.request.urlopen(DotAuthServer.browse(None, sys.argv[1]), timeout=30).read()
"""


@pytest.fixture(scope="module")
def dot(tmp_path_factory):
    server = DotAuthServer(tmp_path_factory.mktemp("dot-cli"), access_lifetime=3600).start()
    yield server
    server.stop()


class CLI:
    """Runs `authbridge …` in one isolated home (config, data, PATH with the stand-in browser)."""

    def __init__(self, root: Path, oidc_plugin_dir: Path, dot: DotAuthServer) -> None:
        for name in ("config", "data", "home", "bin"):
            (root / name).mkdir()
        browser = root / "bin" / "xdg-open"
        browser.write_text(FAKE_BROWSER.format(python=sys.executable, contract=str(Path(__file__).parent)))
        browser.chmod(0o755)
        profiles = {"dot": {"plugin": "oidc", "settings": {"issuer": f"{dot.base}/o", "clientId": "authbridge-test",
                                                           "scopes": ["openid", "read"]}},
                    "tv": {"plugin": "oidc", "settings": {"issuer": f"{dot.base}/o", "clientId": "authbridge-device",
                                                          "scopes": ["openid", "read"],
                                                          "deviceAuthorizationEndpoint": f"{dot.base}/o/device-authorization/"}},
                    # Nothing listens on port 9: the provider cannot be reached.
                    "down": {"plugin": "oidc", "settings": {"issuer": "http://127.0.0.1:9/o", "clientId": "x"}}}
        (root / "config" / "authbridge").mkdir()
        (root / "config" / "authbridge" / "config.json").write_text(json.dumps({"profiles": profiles}))
        self.env = {k: v for k, v in os.environ.items() if k not in ("DBUS_SESSION_BUS_ADDRESS", "AUTHBRIDGE_VAULT_KEY", "NO_COLOR")}
        self.env.update(XDG_CONFIG_HOME=str(root / "config"), XDG_DATA_HOME=str(root / "data"), HOME=str(root / "home"),
                        PATH=f"{root / 'bin'}:{os.environ['PATH']}")
        self.common = ["--no-default-plugins", "--plugins", str(oidc_plugin_dir)]
        self.outputs: list[str] = []   # everything printed, but `token`'s stdout (the one place a token belongs)

    def run(self, *args: str) -> subprocess.CompletedProcess:
        command, rest = args[0], list(args[1:])
        done = subprocess.run([str(HOST_BIN), command, *self.common, *rest], env=self.env, capture_output=True,
                              text=True, timeout=TIMEOUT * 6, stdin=subprocess.DEVNULL)
        self.outputs += [done.stderr] if command == "token" else [done.stdout, done.stderr]
        return done

    def start(self, *args: str) -> subprocess.Popen:
        command, rest = args[0], list(args[1:])
        return subprocess.Popen([str(HOST_BIN), command, *self.common, *rest], env=self.env, text=True,
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


@pytest.fixture
def cli(tmp_path, oidc_plugin_dir, dot):
    runner = CLI(tmp_path, oidc_plugin_dir, dot)
    yield runner
    # Tokens only where a person asked for one: `token`'s stdout.
    places = leak_scan.leaks("\n".join(runner.outputs), [])
    assert not places, f"a token was printed outside `authbridge token`: {places}"


def test_login_status_token_logout(cli, dot):
    assert cli.run("status", "dot").returncode == NOT_SIGNED_IN
    login = cli.run("login", "dot")
    assert login.returncode == 0, login.stderr
    assert "Open this URL in a browser to sign in:" in login.stderr and f"{dot.base}/o/authorize/" in login.stderr
    sub = dot._get_json("/test/user?name=ada")["sub"]
    assert login.stdout.strip() == f"✓ Signed in to dot as {sub}"
    assert "\x1b[" not in login.stdout + login.stderr, "no colours when not on a terminal"

    status = cli.run("status")
    assert status.returncode == 0, status.stderr
    header, *rows = status.stdout.splitlines()
    assert header.split() == ["PROFILE", "ACCOUNT", "STATE", "EXPIRES", "STORAGE"]
    dot_row = next(row for row in rows if row.startswith("dot "))
    assert sub in dot_row and "signedIn" in dot_row and re.search(r"in \d+ min", dot_row)
    assert "encrypted-file (encrypted)" in dot_row
    assert any(row.startswith("tv ") and "notSignedIn" in row for row in rows)
    as_json = json.loads(cli.run("status", "--json", "dot").stdout)
    assert [entry["state"] for entry in as_json] == ["signedIn"]

    token = cli.run("token", "dot")
    assert token.returncode == 0 and token.stderr == ""
    assert dot.is_issued(token.stdout.strip()), "a token DOT issued, alone on stdout"

    logout = cli.run("logout", "dot")
    assert logout.returncode == 0, logout.stderr
    assert logout.stdout.startswith("✓ Signed out of dot") and "refresh_token" in logout.stdout
    again = cli.run("token", "dot")
    assert again.returncode == NOT_SIGNED_IN and again.stdout == ""
    assert "not signed in" in again.stderr


def test_login_with_a_device_code(cli, dot):
    login = cli.start("login", "tv", "--device")
    lines: list[str] = []
    code = uri = None
    for line in login.stderr:            # bounded: the process ends on its own timeout at worst
        lines.append(line)
        if match := re.search(r"one-time code: (\S+)", line):
            code = match.group(1)
        if match := re.search(r"Then open (\S+) on any device", line):
            uri = match.group(1)
        if code and uri:
            break
    assert code and uri, "".join(lines)
    dot.approve_device(code, uri)
    out, _ = login.communicate(timeout=TIMEOUT * 3)
    assert login.returncode == 0 and out.startswith("✓ Signed in to tv")


def test_errors_have_exit_codes_and_one_line_messages(cli):
    unknown = cli.run("login", "nope", "--no-browser")
    assert unknown.returncode == 1 and 'No profile is named "nope"' in unknown.stderr
    unreachable = cli.run("status", "down")
    assert unreachable.returncode == UNAVAILABLE, unreachable.stderr
    assert unreachable.stderr.startswith("error: ") and len(unreachable.stderr.splitlines()) == 1


def test_bare_authbridge_on_a_terminal_prints_help_but_serves_a_pipe(tmp_path):
    # Without a terminal on stdin it is the bridge: an initialize on stdin gets a frame back.
    done = subprocess.run([str(HOST_BIN), "--no-default-plugins"], input='{"jsonrpc":"2.0","id":1,"method":"initialize",'
                          '"params":{"protocolVersion":"1.0"}}\n', capture_output=True, text=True, timeout=TIMEOUT,
                          env={**os.environ, "XDG_DATA_HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path)})
    assert json.loads(done.stdout.splitlines()[0])["id"] == 1
    for command in ("login", "status", "token", "logout", "serve", "plugins"):
        helped = subprocess.run([str(HOST_BIN), command, "--help"], capture_output=True, text=True, timeout=TIMEOUT)
        assert helped.returncode == 0 and "USAGE: authbridge " + command in helped.stdout
