"""The Python platform wheel: `pip install --no-index` into a fresh venv gives the client and an
`authbridge` command, both running the host the wheel installed — with no AUTHBRIDGE and no
authbridge on PATH. The command is the host binary itself (the tree is the wheel's data: bin/,
lib/authbridge/ in the venv), so no Python starts when git or kubectl runs it."""

from __future__ import annotations

import re
import sys
import venv
import zipfile
from pathlib import Path

import pytest
from signing_in import run_signing_in
from conftest import (BUNDLED_PLUGINS, SYSTEM_PATH, TIMEOUT, VERSION, artifact, clean_env, code_blocks,
                      dot_exports, handed_out_secrets, loaded_plugins, no_toolchain_paths, play_user,
                      plugin_folder_problems, run, runpath_problems, section)

CLIENT_README = (Path(__file__).resolve().parents[2] / "clients" / "python" / "README.md").read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """A fresh venv with the wheel installed from the file alone (no index); its folder."""
    folder = tmp_path_factory.mktemp("wheel-venv") / "venv"
    venv.EnvBuilder(with_pip=True, clear=True).create(folder)
    done = run([folder / "bin" / "python", "-m", "pip", "install", "--no-index", "--disable-pip-version-check",
                artifact("authbridge-*.whl")], timeout=300)
    assert f"Successfully installed authbridge-{VERSION}" in done.stdout, done.stdout
    return folder


def test_the_platform_tag_is_what_auditwheel_finds():
    wheel = artifact("authbridge-*.whl")
    tag = re.fullmatch(rf"authbridge-{re.escape(VERSION)}-py3-none-(manylinux_\d+_\d+_x86_64)\.whl", wheel.name)
    assert tag, wheel.name
    report = run([Path(sys.executable).parent / "auditwheel", "show", wheel]).stdout
    assert f'is consistent with the following platform tag: "{tag.group(1)}"' in " ".join(report.split()), report
    with zipfile.ZipFile(wheel) as archive:
        assert f"Tag: py3-none-{tag.group(1)}" in archive.read(f"authbridge-{VERSION}.dist-info/WHEEL").decode()
        for name in (f"authbridge-{VERSION}.data/data/bin/authbridge", f"authbridge-{VERSION}.data/data/lib/authbridge/authbridge-cli",
                     f"authbridge-{VERSION}.data/data/lib/authbridge/authbridge-host"):
            assert archive.getinfo(name).external_attr >> 16 & 0o111, f"{name} is executable in the wheel"


def test_the_installed_host_is_relocatable_and_names_no_build_folder(installed):
    ours = ("authbridge", "git-credential-authbridge")    # bin/ holds the venv's own files too
    for tree, ours_only in ((installed / "bin", True), (installed / "lib" / "authbridge", False)):
        problems = runpath_problems(tree) + no_toolchain_paths(tree)
        assert [p for p in problems if not ours_only or re.split(r"[:/]", p)[0] in ours] == []


def test_the_command_runs_the_host_without_python(installed, tmp_path):
    """git and kubectl start `authbridge` on every credential: no interpreter may stand in front of
    the host (issue 27: the console script imported the whole asyncio client first, 138–340 ms).
    A package named authbridge that stops any Python importing it comes first on PYTHONPATH: the
    command and git's name for it still run the host, and the file is the host binary (ELF)."""
    poison = tmp_path / "poison" / "authbridge"
    poison.mkdir(parents=True)
    marker = tmp_path / "python-started"
    for module in ("__init__.py", "_bundled.py"):
        (poison / module).write_text(f"open({str(marker)!r}, 'w').close()\nraise SystemExit(99)\n")
    env = clean_env(tmp_path / "home", SYSTEM_PATH) | {"PYTHONPATH": str(poison.parent)}
    for name in ("authbridge", "git-credential-authbridge"):
        command = installed / "bin" / name
        assert run([command, "--version"], env=env).stdout.strip() == VERSION
        assert not marker.exists(), f"{name} started Python"
        assert command.read_bytes()[:4] == b"\x7fELF", f"{name} is not the host binary"
    assert loaded_plugins(run([installed / "bin" / "authbridge", "plugins"], env=env).stdout) == BUNDLED_PLUGINS
    # Started by git's name, the binary is git's helper (as the tarball's symlink is).
    usage = run([installed / "bin" / "git-credential-authbridge", "--no-such-option", "get"], env=env, check=False)
    assert usage.returncode == 64 and "Usage: git-credential-authbridge [--profile" in usage.stderr, usage.stderr


def test_the_host_searches_its_bundled_plugins_where_they_are(installed, tmp_path):
    """The wheel's host looked in an odd …/_host/bin/plugins (issue 27): now in lib/authbridge/plugins
    beside it, as the tarball's, and in no folder of bin/."""
    env = clean_env(tmp_path / "home", SYSTEM_PATH)
    assert plugin_folder_problems(installed / "bin" / "authbridge", installed / "lib" / "authbridge" / "plugins", env) == []


def test_the_client_finds_the_installed_host(installed, tmp_path):
    """The client's own lookup (no AUTHBRIDGE, nothing on PATH) and `python -m authbridge`."""
    env = clean_env(tmp_path / "home", SYSTEM_PATH)
    python = installed / "bin" / "python"
    found = run([python, "-c", "from authbridge._bundled import bundled_host; print(bundled_host())"], env=env)
    assert found.stdout.strip() == str(installed / "bin" / "authbridge")
    assert run([python, "-m", "authbridge", "--version"], env=env).stdout.strip() == VERSION


def test_the_venv_has_an_authbridge_command(installed, tmp_path):
    env = clean_env(tmp_path / "home", SYSTEM_PATH)
    command = installed / "bin" / "authbridge"
    assert run([command, "--version"], env=env).stdout.strip() == VERSION
    assert loaded_plugins(run([command, "plugins"], env=env).stdout) == BUNDLED_PLUGINS
    # Usage errors keep their exit status through the console script.
    assert run([command, "no-such-command"], env=env, check=False).returncode == 64
    # The name git runs for `credential.helper "authbridge git-credential …"` is the same command.
    helper = installed / "bin" / "git-credential-authbridge"
    assert run([helper, "--version"], env=env).stdout.strip() == VERSION


def test_the_python_quick_starts_with_the_bundled_host(installed, tmp_path, dot):
    """The root README's (async) quick start, twice, then the client README's blocking one — run by
    the venv's python with PATH holding no authbridge and no AUTHBRIDGE: the wheel's host."""
    python = installed / "bin" / "python"
    env = clean_env(tmp_path / "home", SYSTEM_PATH) | dot_exports(dot)
    assert run(["sh", "-c", "command -v authbridge"], env=env, check=False).returncode != 0
    [program] = code_blocks(section("### From Python"), "python")
    work = tmp_path / "app"
    work.mkdir()
    (work / "quick_start.py").write_text(program)

    text = run_signing_in([python, "quick_start.py"], cwd=work, env=env, sign_in=lambda url: play_user(dot, url),
                          timeout=TIMEOUT)
    assert "session: signedIn signedIn" in text and "userinfo: 200" in text, text

    again = run([python, "quick_start.py"], cwd=work, env=env)
    assert "Open this page" not in again.stdout and "userinfo: 200" in again.stdout, again.stdout

    blocks = code_blocks(CLIENT_README, "python")
    (work / "blocking.py").write_text(blocks[1])
    done = run([python, "blocking.py"], cwd=work, env=env)
    assert done.stdout.splitlines() == ["signedIn", "revoked: ['refresh_token', 'access_token']",
                                        "signed out: noTokens"], done.stdout
    secrets = handed_out_secrets(dot)
    assert not [s for s in secrets if s in text + again.stdout + again.stderr + done.stdout + done.stderr]

