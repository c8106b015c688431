"""The quick start of clients/python/README.md, run as written (only the provider's URLs and
client id are swapped for django-oauth-toolkit's): a person signs in at the printed URL, a second
run finds the session kept, and the blocking variant signs out."""

from __future__ import annotations

import os
import queue
import re
import shutil
import subprocess
import sys
import threading

from conftest import CLIENT_DIR, HOST_BIN, OIDC_FILES, PLUGINS_SOURCE, WAIT, play_user

README = CLIENT_DIR / "README.md"
RUN_TIMEOUT = 60


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), re.S)


def for_dot(code: str, dot) -> str:
    """The README's placeholders → DOT (the only change made to the code)."""
    issuer = f"{dot.base}/o"
    replacements = {
        r'^ISSUER = ".*?"': f'ISSUER = "{issuer}"',
        r'^CLIENT_ID = ".*?"': 'CLIENT_ID = "authbridge-test"',
        r'^USERINFO = ".*?"': f'USERINFO = "{issuer}/userinfo/"',
        r'^ISSUER, CLIENT_ID = .*$': f'ISSUER, CLIENT_ID = "{issuer}", "authbridge-test"',
    }
    for pattern, value in replacements.items():
        code = re.sub(pattern, value, code, flags=re.M)
    return code


def lines_of(stream, into: queue.Queue) -> None:
    for line in stream:
        into.put(line)
    into.put(None)


def test_the_quick_start_as_written(tmp_path, dot):
    blocks = python_blocks()
    assert len(blocks) == 2, "the async quick start, then the blocking one"
    quick_start, blocking = (for_dot(block, dot) for block in blocks)
    assert quick_start.count(dot.base) == 2 and blocking.count(dot.base) == 1

    # A user's machine: the host from $AUTHBRIDGE, the oidc plugin in the user's plugin folder
    # (a default folder; the host's own bundled folder may hold it too).
    plugins = tmp_path / "data" / "authbridge" / "plugins"
    plugins.mkdir(parents=True)
    for folder in (tmp_path / "data", tmp_path / "data" / "authbridge", plugins):
        os.chmod(folder, 0o755)
    for name in OIDC_FILES:
        shutil.copyfile(PLUGINS_SOURCE / name, plugins / name)
        os.chmod(plugins / name, 0o644)
    env = dict(os.environ, AUTHBRIDGE=str(HOST_BIN), PYTHONPATH=str(CLIENT_DIR), HOME=str(tmp_path),
               XDG_DATA_HOME=str(tmp_path / "data"), XDG_CONFIG_HOME=str(tmp_path / "config"))
    env.pop("DBUS_SESSION_BUS_ADDRESS", None)
    env.pop("AUTHBRIDGE_VAULT_KEY", None)
    (tmp_path / "quick_start.py").write_text(quick_start)
    (tmp_path / "blocking.py").write_text(blocking)

    # First run: it prints the sign-in URL; the person opens it and signs in.
    program = subprocess.Popen([sys.executable, "quick_start.py"], cwd=tmp_path, env=env, text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        output: queue.Queue = queue.Queue()
        threading.Thread(target=lines_of, args=(program.stdout, output), daemon=True).start()
        seen = []
        while not any(line.startswith("Open this page to sign in: ") for line in seen):
            line = output.get(timeout=WAIT)
            assert line is not None, "".join(seen)
            seen.append(line)
        assert play_user(dot, seen[-1].split(": ", 1)[1].strip()) == 200
        assert program.wait(RUN_TIMEOUT) == 0
        while (line := output.get(timeout=WAIT)) is not None:
            seen.append(line)
    finally:
        if program.poll() is None:
            program.kill()
            program.wait()
    text = "".join(seen)
    sub = dot._get_json("/test/user?name=ada")["sub"]
    assert "session: signedIn signedIn" in text, text
    assert f"signed in as {sub}" in text and f"userinfo: 200 {sub}" in text, text

    # Second run: the session was kept (the encrypted vault), no sign-in.
    again = subprocess.run([sys.executable, "quick_start.py"], cwd=tmp_path, env=env, text=True,
                           capture_output=True, timeout=RUN_TIMEOUT)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "Open this page" not in again.stdout and "session:" not in again.stdout
    assert f"signed in as {sub}" in again.stdout and f"userinfo: 200 {sub}" in again.stdout

    # The blocking variant: still signed in; signs out.
    done = subprocess.run([sys.executable, "blocking.py"], cwd=tmp_path, env=env, text=True,
                          capture_output=True, timeout=RUN_TIMEOUT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines() == ["signedIn", "revoked: ['refresh_token', 'access_token']",
                                        "signed out: noTokens"], done.stdout


def test_the_root_readme_shows_the_same_quick_start():
    """README.md's Python quick start is this one, character for character (so it is tested too)."""
    root = (CLIENT_DIR.parent.parent / "README.md").read_text()
    assert "```python\n" + python_blocks()[0] + "```" in root
