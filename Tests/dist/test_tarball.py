"""The tarball, extracted anywhere and used by anyone: a self-contained, relocatable tree."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from conftest import (REPO, BUNDLED_PLUGINS, SYSTEM_PATH, TIMEOUT, VERSION, artifact, clean_env, code_blocks, dot_exports,
                      extract_tarball, fake_browser, handed_out_secrets, loaded_plugins, no_toolchain_paths,
                      plugin_folder_problems, refused_plugins, run, runpath_problems,
                      section)


def test_the_tree_holds_what_the_issue_lists(unpacked):
    top = extract_tarball(unpacked)
    assert top.name == f"authbridge-{VERSION}-linux-x86_64"
    expected = ["bin/authbridge", "include/authbridge/plugin.h", "include/authbridge/plugin_jansson.h", "share/authbridge/openrpc.json",
                "share/man/man1/authbridge.1.gz", "share/bash-completion/completions/authbridge",
                "share/zsh/site-functions/_authbridge", "share/fish/vendor_completions.d/authbridge.fish",
                "share/doc/authbridge/LICENSE", "share/doc/authbridge/THIRD-PARTY-NOTICES",
                "lib/authbridge/libAuthBridgeHTTP.so", "lib/authbridge/libAuthBridgeSwiftCrypto.so", "lib/authbridge/libAuthBridgeNettle.so",
                "lib/authbridge/libAuthBridgeKeyring.so", "lib/authbridge/libAuthBridgePostgres.so", "lib/authbridge/libpq.so.5",
                "lib/authbridge/libswiftCore.so", "lib/authbridge/authbridge-cli", "lib/authbridge/authbridge-host"]
    expected += [f"lib/authbridge/plugins/{p}.json" for p in BUNDLED_PLUGINS]
    assert [name for name in expected if not (top / name).is_file()] == []
    assert (top / "bin" / "authbridge").stat().st_mode & 0o777 == 0o755
    assert (top / "lib" / "authbridge" / "authbridge-cli").stat().st_mode & 0o777 == 0o755
    assert (top / "lib" / "authbridge" / "authbridge-host").stat().st_mode & 0o777 == 0o755
    assert os.readlink(top / "bin" / "git-credential-authbridge") == "authbridge", "git's name for the helper"
    assert (top / "share" / "authbridge" / "openrpc.json").read_bytes() == (REPO / "bridge-spec" / "openrpc.json").read_bytes()
    man = run(["sh", "-c", f"zcat '{top}/share/man/man1/authbridge.1.gz'"]).stdout
    assert ".Nm authbridge" in man and "login" in man and "logout" in man
    assert "complete -c 'authbridge'" in (top / "share/fish/vendor_completions.d/authbridge.fish").read_text()
    assert "#compdef authbridge" in (top / "share/zsh/site-functions/_authbridge").read_text()


def test_every_elf_file_is_relocatable_and_names_no_toolchain_or_build_folder(unpacked):
    top = extract_tarball(unpacked)
    assert runpath_problems(top) == []
    assert no_toolchain_paths(top) == []


def test_it_needs_nothing_beyond_glibc_and_libstdcxx(unpacked):
    """ldd (the real loader, with the toolchain hidden) finds every library, and each one it
    finds outside the tree is part of the base every glibc Linux has."""
    top = extract_tarball(unpacked)
    base = {"linux-vdso.so.1", "libc.so.6", "libm.so.6", "libstdc++.so.6", "libgcc_s.so.1", "libresolv.so.2",
            "ld-linux-x86-64.so.2", "libdl.so.2", "libpthread.so.0", "librt.so.1"}
    outside = {}
    for path in [top / "bin" / "authbridge", *sorted((top / "lib" / "authbridge").rglob("*.so*"))]:
        for line in run(["ldd", path]).stdout.splitlines():
            assert "not found" not in line, f"{path.name}: {line}"
            match = re.match(r"\s*(\S+) => (\S+)", line)
            if match and not match.group(2).startswith(str(top)):
                outside.setdefault(match.group(1), path.name)
    assert {name: by for name, by in outside.items() if name not in base} == {}


def test_version_and_plugins_from_anywhere_by_any_user(unpacked, tmp_path, request):
    top = extract_tarball(unpacked)
    # Somewhere every user can reach (pytest's own folders are private to the user running it).
    elsewhere = Path(tempfile.mkdtemp(prefix="authbridge-dist-"))
    elsewhere.chmod(0o755)
    request.addfinalizer(lambda: shutil.rmtree(elsewhere, ignore_errors=True))
    moved = elsewhere / "opt" / "ab"
    moved.parent.mkdir(parents=True)
    shutil.move(str(top), moved)          # relocatable: works wherever it ends up
    host = moved / "bin" / "authbridge"
    env = clean_env(tmp_path / "home", SYSTEM_PATH)
    assert run([host, "--version"], env=env).stdout.strip() == VERSION

    listed = run([host, "plugins"], env=env).stdout
    assert loaded_plugins(listed) == BUNDLED_PLUGINS and refused_plugins(listed) == [], listed

    if os.getuid() == 0:   # another user than the one who extracted it
        other = elsewhere / "other-home"
        other.mkdir()
        os.chown(other, 65534, 65534)
        done = run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", host, "plugins"],
                   env=clean_env(other, SYSTEM_PATH))
        assert loaded_plugins(done.stdout) == BUNDLED_PLUGINS, done.stdout


def test_the_host_searches_its_bundled_plugins_where_they_are(unpacked, tmp_path):
    """lib/authbridge/plugins, and no folder of bin/ (the host once also searched bin/plugins)."""
    top = extract_tarball(unpacked)
    env = clean_env(tmp_path / "home", SYSTEM_PATH)
    assert plugin_folder_problems(top / "bin" / "authbridge", top / "lib" / "authbridge" / "plugins", env) == []


def test_the_terminal_quick_start_as_written(unpacked, tmp_path, dot):
    """README "From a terminal": config, login (the browser plays the user), status, token with
    curl, logout — with the extracted bin/ on PATH and nothing else of AuthBridge around."""
    top = extract_tarball(unpacked)
    block = code_blocks(section("### From a terminal"), "sh")[0]
    browser = fake_browser(tmp_path / "browser")
    env = clean_env(tmp_path / "home", f"{top / 'bin'}:{browser}:{SYSTEM_PATH}") | dot_exports(dot)
    done = subprocess.run(["/bin/sh", "-e", "-c", block], env=env, cwd=tmp_path, capture_output=True, text=True,
                          timeout=TIMEOUT, stdin=subprocess.DEVNULL)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    lines = done.stdout.splitlines()
    assert lines[0].startswith("✓ Signed in to corp as "), done.stdout
    assert lines[1].split() == ["PROFILE", "ACCOUNT", "STATE", "EXPIRES", "STORAGE"]
    assert lines[2].startswith("corp ") and "signedIn" in lines[2]
    userinfo = re.search(r"^(\{.*\})✓ Signed out of corp", done.stdout, re.M)   # curl prints no newline
    assert userinfo and json.loads(userinfo.group(1))["sub"], "curl got the userinfo with the token"
    secrets = handed_out_secrets(dot)
    assert secrets and not [secret for secret in secrets if secret in output], "no code or token printed"


def test_the_terminal_quick_start_through_the_agent(unpacked, tmp_path, dot):
    """The same commands with `authbridge agent` running (the release build's agent: a miscompile
    once kept it from ever serving), and the token answered by bin/authbridge itself."""
    top = extract_tarball(unpacked)
    block = code_blocks(section("### From a terminal"), "sh")[0]
    browser = fake_browser(tmp_path / "browser")
    env = clean_env(tmp_path / "home", f"{top / 'bin'}:{browser}:{SYSTEM_PATH}") | dot_exports(dot)
    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700)
    env["XDG_RUNTIME_DIR"] = str(runtime)
    # The configuration first (the agent would read it when it appears, but not before the login runs).
    setup, commands = block.split("authbridge login", 1)
    subprocess.run(["/bin/sh", "-e", "-c", setup], env=env, cwd=tmp_path, check=True, timeout=TIMEOUT)
    agent = subprocess.Popen([str(top / "bin" / "authbridge"), "agent", "--log-level", "debug"], env=env, stdout=subprocess.PIPE,
                             stderr=open(tmp_path / "agent.log", "wb"), stdin=subprocess.DEVNULL)
    try:
        assert agent.stdout.readline().decode().strip() == str(runtime / "authbridge" / "agent.sock"), "the agent's ready line"
        token_too = "authbridge login" + commands.replace("authbridge logout", "authbridge token corp > token.txt\nauthbridge logout", 1)
        done = subprocess.run(["/bin/sh", "-e", "-c", token_too], env=env, cwd=tmp_path, capture_output=True, text=True,
                              timeout=TIMEOUT, stdin=subprocess.DEVNULL)
        assert done.returncode == 0, done.stdout + done.stderr
        assert done.stdout.splitlines()[0].startswith("✓ Signed in to corp as "), done.stdout
        assert (tmp_path / "token.txt").read_text().strip() in handed_out_secrets(dot)
    finally:
        agent.terminate()
        code = agent.wait(TIMEOUT)
    log = (tmp_path / "agent.log").read_text()
    assert code == 0, log
    assert "connection accepted" in log, "the commands went through the agent"


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_completion_scripts_name_the_commands(unpacked, shell):
    top = extract_tarball(unpacked)
    path = {"bash": "share/bash-completion/completions/authbridge", "zsh": "share/zsh/site-functions/_authbridge",
            "fish": "share/fish/vendor_completions.d/authbridge.fish"}[shell]
    script = (top / path).read_text()
    for command in ("login", "status", "token", "logout", "plugins", "serve"):
        assert command in script, (shell, command)
    if shell == "bash":
        run(["bash", "-n", top / path])


def test_sha256sums_cover_the_four_files():
    sums = artifact("SHA256SUMS")
    listed = [line.split("  ", 1)[1] for line in sums.read_text().splitlines()]
    assert sorted(listed) == sorted(p.name for p in sums.parent.iterdir() if p.name != "SHA256SUMS")
    assert len(listed) == 4
    run(["sha256sum", "-c", "--strict", sums.name], cwd=sums.parent)


def test_the_tarball_is_within_its_size_goal():
    assert artifact("authbridge-*-linux-x86_64.tar.gz").stat().st_size <= 25_000_000
