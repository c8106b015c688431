"""Examples/python_example.py end to end against django-oauth-toolkit, with its scripted user;
every frame it exchanges with the host is recorded by Tests/tools/frame_tap.py and validated."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys

from conftest import REPO, code_blocks, from_python_section

EXAMPLE = REPO / "Examples" / "python_example.py"
TIMEOUT = 120

DOT_TOKEN = re.compile(r"(?<![A-Za-z0-9])[A-Za-z0-9]{30}(?![A-Za-z0-9])")   # DOT's tokens and codes
JWT = re.compile(r"eyJ[\w-]+\.[\w-]+\.")
QUERY_SECRET = re.compile(r"[?&](code|state|nonce|code_challenge|access_token|refresh_token)=")


def test_the_readme_runs_the_example_with_options_it_has():
    """The root README's way to try the example (`make dev-server`'s exports, then this command line)."""
    shell = "".join(code_blocks(from_python_section(), "sh"))
    [line] = [line for line in shell.splitlines() if "Examples/python_example.py" in line]
    words = shlex.split(line)
    assert words == ["python3", "Examples/python_example.py", "--issuer", "$ISSUER", "--client-id", "$CLIENT_ID"], words
    assert "make dev-server" in from_python_section()
    usage = subprocess.run([sys.executable, str(EXAMPLE), "--help"], capture_output=True, text=True, timeout=TIMEOUT)
    assert usage.returncode == 0, usage.stderr
    assert "--issuer ISSUER" in usage.stdout and "--client-id CLIENT_ID" in usage.stdout


def test_the_example_signs_in_fetches_userinfo_and_signs_out(tmp_path, plugin_dir, dot, frame_tap):
    env = dict(os.environ, **frame_tap.env, XDG_CONFIG_HOME=str(tmp_path / "config"),
               XDG_DATA_HOME=str(tmp_path / "data"), HOME=str(tmp_path))
    env.pop("DBUS_SESSION_BUS_ADDRESS", None)
    env.pop("AUTHBRIDGE_VAULT_KEY", None)
    argv = [sys.executable, str(EXAMPLE), "--issuer", f"{dot.base}/o", "--client-id", "authbridge-test",
            "--scope", "openid", "--scope", "read", "--plugins", str(plugin_dir), "--scripted"]
    done = subprocess.run(argv, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=TIMEOUT)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    for line in ("status: notSignedIn (reason noTokens)",
                 "scripted user signed in as ada",
                 "event: session/changed signedIn (reason signedIn)",
                 "status: signedIn (reason valid)",
                 "userinfo 127.0.0.1:",
                 "HTTP 200, sub '",
                 "event: session/changed signedOut (reason userSignedOut)",
                 "revoked: refresh_token, access_token",
                 "the host exited with status 0"):
        assert line in done.stdout, f"{line!r} is missing:\n{done.stdout}"
    assert done.stdout.index("event: session/changed signedIn") < done.stdout.index("[4]"), \
        "the event is printed before the sign-in's answer"
    assert not DOT_TOKEN.search(output), "a token-looking value in the output"
    assert not JWT.search(output), "a JWT in the output"
    assert not QUERY_SECRET.search(output), "a URL with secret query values in the output"
    methods = frame_tap.sent_methods()
    assert methods[:2] == ["initialize", "initialized"] and methods[-2:] == ["shutdown", "exit"], methods
    assert frame_tap.check() > 10
