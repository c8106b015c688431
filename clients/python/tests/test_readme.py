"""The README's Python quick start as a new user meets it: a fresh venv, `pip install
./clients/python` typed in the checkout, then the root README's program verbatim, with the
environment `make dev-server` gives (ISSUER, CLIENT_ID, USERINFO_URL for django-oauth-toolkit). The host comes from
$AUTHBRIDGE and finds its bundled plugins next to itself (nothing is copied anywhere); the XDG
folders are new; a person signs in at the printed URL. A second run finds the session kept, and
the client README's blocking variant signs out. Every frame is recorded by frame_tap.py in front
of the host and validated."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from signing_in import run_signing_in
from conftest import (CLIENT_DIR, CLIENT_README, HOST_BIN, PIP_TIMEOUT, REPO, check_installed, code_blocks,
                      fresh_venv, from_python_section, no_package_index, play_user, root_quick_start)

RUN_TIMEOUT = 60
#: What setuptools leaves in the source folder it builds in (git-ignored by clients/python/.gitignore).
BUILD_LEFTOVERS = ("build", "authbridge.egg-info")


def dot_exports(dot) -> dict[str, str]:
    """What `make dev-server` tells the user to export, for this test's django-oauth-toolkit."""
    issuer = f"{dot.base}/o"
    return {"ISSUER": issuer, "CLIENT_ID": "authbridge-test", "USERINFO_URL": f"{issuer}/userinfo/"}


def pip_command() -> str:
    """The install line of the root README's From Python section, without its comment."""
    shell = "".join(code_blocks(from_python_section(), "sh"))
    [line] = [line for line in shell.splitlines() if line.startswith("pip install")]
    return line.split("#", 1)[0].strip()


def install_as_the_readme_says(venv: Path, env: dict[str, str]) -> None:
    """Runs the README's pip line with the venv activated, in the checkout's root, and removes
    the build folders setuptools leaves there (those that were not there before)."""
    command = pip_command()
    assert command == "pip install ./clients/python"
    leftovers = [CLIENT_DIR / name for name in BUILD_LEFTOVERS if not (CLIENT_DIR / name).exists()]
    try:
        done = subprocess.run(["bash", "-c", command], cwd=REPO, env=env, capture_output=True, text=True,
                              timeout=PIP_TIMEOUT)
    finally:
        for path in leftovers:
            shutil.rmtree(path, ignore_errors=True)
    output = done.stdout + done.stderr
    # `make test` itself needs PyPI (its venv), so an unreachable index fails here too, clearly.
    assert not (done.returncode != 0 and no_package_index(output)), \
        "pip could not reach a package index for its isolated build (setuptools): " + output[-500:]
    assert done.returncode == 0, output
    assert "Successfully installed authbridge-" in done.stdout, output


def test_a_new_user_installs_the_client_and_runs_the_quick_start_twice(tmp_path, dot, frame_tap):
    venv = tmp_path / "venv"
    python = fresh_venv(venv)
    home = tmp_path / "home"
    env = {name: value for name, value in os.environ.items()
           if name not in ("PYTHONPATH", "PYTHONHOME", "DBUS_SESSION_BUS_ADDRESS", "AUTHBRIDGE_VAULT_KEY",
                           "AUTHBRIDGE", "AUTHBRIDGE_PLUGINS")}
    env.update(PATH=f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}", VIRTUAL_ENV=str(venv), HOME=str(home),
               XDG_DATA_HOME=str(home / ".local" / "share"), XDG_CONFIG_HOME=str(home / ".config"),
               PIP_DISABLE_PIP_VERSION_CHECK="1")
    install_as_the_readme_says(venv, env)
    check_installed(python, tmp_path)

    # The user's program: the README's, with their provider's URLs. AUTHBRIDGE is the host of the
    # build (through the frame tap): its plugins are the bundled ones in .build/debug/plugins.
    env.update(frame_tap.env)
    assert frame_tap.env["AUTHBRIDGE_TAP_TARGET"] == str(HOST_BIN) and (HOST_BIN.parent / "plugins" / "oidc.json").is_file()
    env.update(dot_exports(dot))
    program = root_quick_start()
    work = tmp_path / "app"
    work.mkdir()
    (work / "quick_start.py").write_text(program)

    # First run: it prints the sign-in URL; the person opens it and signs in.
    text = run_signing_in([python, "quick_start.py"], cwd=work, env=env, sign_in=lambda url: play_user(dot, url),
                          timeout=RUN_TIMEOUT)
    sub = dot._get_json("/test/user?name=ada")["sub"]
    assert "session: signedIn signedIn" in text, text
    assert "signed in as Ada Lovelace" in text and f"userinfo: 200 {sub}" in text, text

    # Second run: the session was kept (the encrypted vault in the new XDG data folder), no sign-in.
    again = subprocess.run([str(python), "quick_start.py"], cwd=work, env=env, text=True,
                           capture_output=True, timeout=RUN_TIMEOUT)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "Open this page" not in again.stdout and "session:" not in again.stdout
    assert "signed in as Ada Lovelace" in again.stdout and f"userinfo: 200 {sub}" in again.stdout
    assert (home / ".local" / "share" / "authbridge").is_dir(), "the session lives in the user's data folder"

    # The client README's blocking variant: still signed in; signs out.
    blocks = code_blocks(CLIENT_README.read_text(encoding="utf-8"), "python")
    assert len(blocks) == 4, ("the async quick start, the blocking one, requests and httpx (test_http_auth.py runs it), "
                              "MCP (test_mcp_example.py runs it)")
    (work / "blocking.py").write_text(blocks[1])
    done = subprocess.run([str(python), "blocking.py"], cwd=work, env=env, text=True,
                          capture_output=True, timeout=RUN_TIMEOUT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines() == ["signedIn", "revoked: ['refresh_token', 'access_token']",
                                        "signed out: noTokens"], done.stdout

    methods = frame_tap.sent_methods()
    assert methods.count("initialize") == 3 and methods.count("requestOAuthTokens") == 1
    assert methods.count("exit") == 3 and methods[-1] == "exit"


def test_the_root_readme_shows_the_client_readmes_quick_start():
    """README.md's Python quick start is the client README's, character for character."""
    assert root_quick_start() == code_blocks(CLIENT_README.read_text(encoding="utf-8"), "python")[0]
