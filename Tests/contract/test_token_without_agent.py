"""`authbridge token PROFILE` without an agent (`--no-agent`, or none running): authbridge-host
answers it from the vault itself, with the profile's plugin alone loaded and without the
command-line tool (Sources/AuthBridgeLaunch/TokenPrinting.swift; issue 32: at most 10 ms). Every
case with something to say — not signed in, a refresh due, a warning, an error, an option it
does not read — goes to authbridge-cli with the same words, which answers as it always did.

The profiles are the default configuration file's, the vault the default encrypted file; the C
test plugin's profile `bench` is signed in by the session flow (its access token is `at-s1`)."""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from authbridge_testkit.host import Host
from authbridge_testkit.isolation import copy_plugins, isolated_environment
from authbridge_testkit.paths import BUILD_DIR, HOST_BIN
# test_front_door's short `tmp_path` too: the agent's socket is looked for under it, and a path
# longer than a socket address takes is "an agent that cannot be reached" (the CLI says so).
from test_front_door import CLI_BIN, run, same_as_cli, tmp_path  # noqa: F401

PROFILES = {"bench": {"plugin": "ctest", "settings": {"server": "https://b.example"}},
            "idle": {"plugin": "ctest", "settings": {"server": "https://i.example"}},
            # A plugin nothing provides: a command for `bench` must not care.
            "ghost": {"plugin": "ghost"}}
#: What the stand-in authbridge-cli does: say it ran, with which words, and exit 97.
CLI_STAND_IN = "#!/bin/sh\nprintf '%s\\n' \"$*\" >> \"$0.ran\"\nexit 97\n"


def signed_in(env: dict[str, str], host: Path, workdir: Path) -> None:
    """Signs `bench` in through `host serve` (the same vault and configuration file)."""
    workdir.mkdir(parents=True, exist_ok=True)
    serving = Host([str(host), "serve"], env, workdir)
    try:
        serving.initialize()
        serving.result("requestOAuthTokens", {"provider": "bench", "flow": "session", "sessionId": "s1"})
    finally:
        serving.close_stdin()
        assert serving.wait_exit() == 0, serving.stderr_tail()


@pytest.fixture
def user(tmp_path) -> dict[str, str]:
    """A user without an agent: the profiles in the default configuration file."""
    env = isolated_environment(tmp_path / "user")
    config = Path(env["XDG_CONFIG_HOME"]) / "authbridge" / "config.json"
    config.parent.mkdir(parents=True)
    config.write_text(json.dumps({"profiles": PROFILES}))
    return env


@pytest.fixture
def lone_install(tmp_path, ctest_variants) -> Path:
    """An install without the command-line tool: the front door, the host, the vault's crypto
    helper and, as its bundled plugins (in-process), a ctest that prints to stdout at every
    step. authbridge-cli is a stand-in that says it ran; returns the front door."""
    folder = tmp_path / "lone"
    folder.mkdir()
    shutil.copy2(HOST_BIN, folder / "authbridge")
    shutil.copy2(BUILD_DIR / "authbridge-host", folder / "authbridge-host")
    (folder / "libAuthBridgeNettle.so").symlink_to(BUILD_DIR / "libAuthBridgeNettle.so")
    ctest_variants.install(folder / "plugins", "ctest", "-DCTEST_PRINT_STDOUT")
    cli = folder / "authbridge-cli"
    cli.write_text(CLI_STAND_IN)
    cli.chmod(0o755)
    return folder / "authbridge"


def test_a_token_without_an_agent_needs_neither_the_agent_nor_the_cli(tmp_path, user, lone_install):
    signed_in(user, lone_install, tmp_path / "serve")
    ran = lone_install.parent / "authbridge-cli.ran"
    for words in (["--no-agent", "bench"], ["bench"], ["bench", "--account", "s1", "--min-validity=60", "--no-agent"]):
        done = run([lone_install, "token", *words], user)
        # The plugin's noise went to stderr: stdout holds the token alone.
        assert (done.returncode, done.stdout) == (0, "at-s1\n"), done
        assert "ctest stdout noise" in done.stderr and "at-s1" not in done.stderr, done
        assert not ran.exists(), ran.read_text()
    # What it does not answer reaches the CLI, words unchanged (here: the stand-in).
    for words in (["--no-agent", "idle"], ["bench", "--json"], ["bench", "--agent"], ["--no-agent", "bench", "--min-validity", "86400"]):
        done = run([lone_install, "token", *words], user)
        assert done.returncode == 97 and done.stdout == "", done
        assert ran.read_text().splitlines()[-1] == " ".join(["token", *words])


def test_what_it_answers_and_what_it_leaves_are_the_clis_answers(tmp_path, user, plugin_dir):
    # The test plugins in the user's folder: a plugin from there runs isolated (its runner).
    copy_plugins(Path(user["XDG_DATA_HOME"]) / "authbridge" / "plugins", [p.name for p in plugin_dir.iterdir()], plugin_dir)
    signed_in(user, HOST_BIN, tmp_path / "serve")
    answered = same_as_cli([HOST_BIN, "token", "--no-agent", "bench"], ["token", "--no-agent", "bench"], user)
    assert (answered.returncode, answered.stdout, answered.stderr) == (0, "at-s1\n", "")
    assert run([HOST_BIN, "token", "bench"], user).stdout == "at-s1\n"
    # Not signed in, no such profile, a token valid for less than asked, other output, no agent for --agent.
    for words in (["idle"], ["--no-agent", "nosuch"], ["bench", "--min-validity", "86400"], ["bench", "--json"],
                  ["bench", "--agent"], ["ghost"]):
        done = same_as_cli([HOST_BIN, "token", *words], ["token", *words], user)
        assert done.returncode != 0 or done.stderr != "" or done.stdout != "at-s1\n", done
    # A configuration file with something to say: the CLI says it, then prints the token.
    config = Path(user["XDG_CONFIG_HOME"]) / "authbridge" / "config.json"
    config.write_text(json.dumps({"profiles": PROFILES, "colour": "blue"}))
    warned = same_as_cli([HOST_BIN, "token", "bench"], ["token", "bench"], user)
    assert warned.stdout == "at-s1\n" and "colour" in warned.stderr, warned


def test_the_vault_key_from_the_environment_reaches_the_cli_when_it_answers(tmp_path, user):
    """AUTHBRIDGE_VAULT_KEY leaves the host's environment when it opens the vault; a command it
    hands on after that must still find it (the CLI opens the same vault with it)."""
    keyed = {**user, "AUTHBRIDGE_VAULT_KEY": base64.b64encode(os.urandom(32)).decode()}
    plugins = Path(user["XDG_DATA_HOME"]) / "authbridge" / "plugins"
    copy_plugins(plugins, ["ctest.json", "libauthbridge-ctest.so"], BUILD_DIR / "test-plugins")
    signed_in(keyed, HOST_BIN, tmp_path / "serve")
    assert run([HOST_BIN, "token", "--no-agent", "bench"], keyed).stdout == "at-s1\n"
    # Valid for less than asked: the host read the vault with the key, then handed the command on.
    done = run([HOST_BIN, "token", "--no-agent", "bench", "--min-validity", "86400"], keyed)
    assert (done.returncode, done.stdout) == (0, "at-s1\n") and "less than the 86400 s asked" in done.stderr, done
    # Without the key, the vault does not open.
    assert run([HOST_BIN, "token", "--no-agent", "bench"], {**user}).returncode != 0
