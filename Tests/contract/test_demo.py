"""`make demo` end to end: Examples/demo.py with its scripted user against django-oauth-toolkit.

The demo is what a new user runs first; this keeps it working and keeps it from ever showing a
secret: DOT's tokens are 30 alphanumeric characters, ID tokens are JWTs, and the redirect carries
`code` and `state` values. None of them may reach its output.
"""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from conftest import BUILD_DIR, HOST_BIN, REPO

DEMO = REPO / "Examples" / "demo.py"
DEMO_TIMEOUT = 240  # DOT's set-up (2–5 s, more on a busy machine) + one 6 s token lifetime + margins

DOT_TOKEN = re.compile(r"(?<![A-Za-z0-9])[A-Za-z0-9]{30}(?![A-Za-z0-9])")
JWT = re.compile(r"eyJ[\w-]+\.[\w-]+\.")
QUERY_SECRET = re.compile(r"[?&](code|state|nonce|code_challenge|code_verifier|access_token|refresh_token)=[^&\s…]")


def run_demo() -> subprocess.CompletedProcess:
    """The demo's exit status and output; past the timeout it gets SIGTERM, on which it stops
    DOT and the host itself, before a kill."""
    argv = [sys.executable, str(DEMO), "--host", str(HOST_BIN), "--plugins", str(BUILD_DIR / "plugins")]
    demo = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
    try:
        stdout, stderr = demo.communicate(timeout=DEMO_TIMEOUT)
    except subprocess.TimeoutExpired:
        demo.terminate()
        try:
            stdout, stderr = demo.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            demo.kill()
            stdout, stderr = demo.communicate()
        pytest.fail(f"the demo took longer than {DEMO_TIMEOUT} s:\n{(stdout + stderr)[-4000:]}")
    return subprocess.CompletedProcess(argv, demo.returncode, stdout, stderr)


def test_demo_signs_in_refreshes_and_signs_out_without_showing_a_secret():
    done = run_demo()
    output = done.stdout + done.stderr
    assert done.returncode == 0, f"the demo failed (status {done.returncode}):\n{output[-4000:]}"
    for line in ("→ notSignedIn (reason noTokens)",
                 "session/changed state=signedIn reason=signedIn",
                 "→ signedIn (reason valid)",
                 "→ HTTP 200, sub",
                 "session/changed state=refreshed reason=refreshed",
                 "checkSignInStatus → signedIn (reason refreshed)",
                 "revoked: refresh_token, access_token; failures: none",
                 "session/changed state=signedOut reason=userSignedOut",
                 "the renewed access token",
                 "authbridge exited with status 0",
                 "demo complete"):
        assert line in done.stdout, f"{line!r} is missing from the demo's output:\n{done.stdout}"
    counts = re.search(r"DOT's refresh count (\d+) → (\d+)", done.stdout)
    assert counts and int(counts[2]) == int(counts[1]) + 1, "one silent refresh, counted at DOT"
    assert "the access token's bytes are not in it" in done.stdout
    assert not DOT_TOKEN.search(output), f"a token-looking value in the output: {DOT_TOKEN.search(output).group()[:4]}…"
    assert not JWT.search(output), "a JWT (an ID token?) in the output"
    assert not QUERY_SECRET.search(output), f"a secret query value in the output: {QUERY_SECRET.search(output).group(1)}"
