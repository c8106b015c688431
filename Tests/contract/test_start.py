"""The three executables: `authbridge` (C) hands `serve`, `agent` and the isolated plugins' runners
to `authbridge-host` and every other command line to `authbridge-cli`, with the same arguments and
environment (test_front_door.py: the commands it answers itself); the pieces the host loads on
first use are really off its start-up path."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

from authbridge_testkit.paths import BUILD_DIR, HOST_BIN
from conftest import TIMEOUT

INITIALIZE = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                         "params": {"protocolVersion": "1.0"}}) + "\n"


def run(argv: list[str], env: dict[str, str] | None = None, stdin: str = "") -> subprocess.CompletedProcess:
    return subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=TIMEOUT,
                          env={**os.environ, **(env or {})})


def lone_host(tmp_path: Path) -> Path:
    """Copies of `authbridge` and `authbridge-host` in a folder of their own: no authbridge-cli,
    no helper libraries."""
    folder = tmp_path / "lone" / "bin"
    folder.mkdir(parents=True)
    shutil.copy2(HOST_BIN, folder / "authbridge")
    shutil.copy2(HOST_EXE, folder / "authbridge-host")
    return folder / "authbridge"


# The Swift host the front door hands `serve`, `agent` and `plugin-runner` to.
HOST_EXE = BUILD_DIR / "authbridge-host"


def test_serve_needs_nothing_but_its_own_executable(tmp_path):
    host = lone_host(tmp_path)
    done = run([str(host), "serve", "--no-default-plugins", "--vault", "memory"], stdin=INITIALIZE)
    answer = json.loads(done.stdout.splitlines()[0])
    assert answer["id"] == 1 and answer["result"]["serverInfo"]["name"] == "authbridge", done.stderr


def test_another_command_without_authbridge_cli_says_what_is_missing(tmp_path):
    host = lone_host(tmp_path)
    done = run([str(host), "status"])
    assert done.returncode == 1
    assert "authbridge-cli" in done.stderr and "reinstall" in done.stderr, done.stderr
    assert done.stdout == ""


def test_the_cli_gets_the_arguments_and_the_environment_unchanged(tmp_path):
    # AUTHBRIDGE_VAULT_KEY is taken out of the environment by the process that serves; handed
    # over before that, the CLI still sees it (and opens its vault with it: this one is refused).
    done = run([str(HOST_BIN), "status", "--no-agent", "--no-default-plugins"],
               env={"AUTHBRIDGE_VAULT_KEY": "k" * 64, "XDG_RUNTIME_DIR": str(tmp_path), "HOME": str(tmp_path),
                    "XDG_CONFIG_HOME": str(tmp_path / "config"), "XDG_DATA_HOME": str(tmp_path / "data")})
    assert "The vault secret (AUTHBRIDGE_VAULT_KEY) must be a random 32-byte key" in done.stderr, done.stderr


def test_a_command_line_it_declines_reaches_the_cli_with_the_vault_url_still_in_the_environment(tmp_path):
    # Checking `--vault postgresql` reads AUTHBRIDGE_VAULT_URL; that must not take it out of the
    # environment the CLI gets, or the CLI would complain of the database instead of the level.
    done = run([str(HOST_BIN), "serve", "--vault", "postgresql", "--log-level", "loud"],
               env={"AUTHBRIDGE_VAULT_URL": "postgresql://nobody@127.0.0.1:9/none"})
    assert done.returncode == 64
    assert "--log-level must be one of" in done.stderr, done.stderr


def test_serve_options_it_cannot_read_get_argument_parsers_usage(tmp_path):
    done = run([str(HOST_BIN), "serve", "--vault", "nowhere"])
    assert done.returncode == 64
    assert "--vault must be encrypted-file, secret-service, postgresql or memory" in done.stderr
    assert "Usage: authbridge serve" in done.stderr
    help_text = run([str(HOST_BIN), "serve", "--help"]).stdout
    assert "--plugin-isolation" in help_text and "--vault-key-file" in help_text


def test_options_without_a_command_serve(tmp_path):
    done = run([str(HOST_BIN), "--no-default-plugins", "--vault", "memory"], stdin=INITIALIZE)
    assert json.loads(done.stdout.splitlines()[0])["result"]["serverInfo"]["name"] == "authbridge", done.stderr


def test_what_the_host_loads_at_start(tmp_path):
    """No ArgumentParser, Foundation, Dispatch overlay, _StringProcessing or swift-crypto in the
    host frontends start; the CLI keeps ArgumentParser (and with it FoundationEssentials); the
    front door (`authbridge`) needs no Swift at all: jansson and the C library."""
    assert sorted(needed_libraries(HOST_BIN)) == ["libc.so.6", "libjansson.so.4"]
    needed = needed_libraries(HOST_EXE)
    for library in ("libFoundationEssentials.so", "libswiftDispatch.so", "libswift_StringProcessing.so",
                    "libswift_RegexParser.so", "libFoundation.so"):
        assert library not in needed, needed
    symbols = subprocess.run(["nm", "-D", "--defined-only", str(HOST_EXE)], capture_output=True, text=True).stdout
    symbols += subprocess.run(["nm", str(HOST_EXE)], capture_output=True, text=True).stdout
    assert "ArgumentParser" not in symbols and "CCryptoBoringSSL" not in symbols
    assert "libFoundationEssentials.so" in needed_libraries(BUILD_DIR / "authbridge-cli")


def needed_libraries(path: Path) -> list[str]:
    dynamic = subprocess.run(["readelf", "-d", str(path)], capture_output=True, text=True, check=True).stdout
    return [line.split("[", 1)[1].rstrip("]") for line in dynamic.splitlines() if "(NEEDED)" in line]
