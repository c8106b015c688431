"""The Debian package: its files under /usr, its dependencies, lintian, and the host it carries
(unpacked with dpkg-deb -x into a temporary root: plugins found, `initialize` answered)."""

from __future__ import annotations

import json
import os
import re
import subprocess

from conftest import (BUNDLED_PLUGINS, SYSTEM_PATH, TIMEOUT, VERSION, artifact, clean_env, loaded_plugins,
                      no_toolchain_paths, refused_plugins, run, runpath_problems)


def unpack(target):
    run(["dpkg-deb", "-x", artifact("authbridge_*_amd64.deb"), target])
    return target


def test_control_names_its_dependencies():
    deb = artifact("authbridge_*_amd64.deb")
    assert deb.name == f"authbridge_{VERSION}_amd64.deb"
    fields = dict(re.findall(r"^ ?(\w[\w-]*): (.*)$", run(["dpkg-deb", "-f", deb]).stdout, re.M))
    assert fields["Package"] == "authbridge" and fields["Version"] == VERSION and fields["Architecture"] == "amd64"
    depends = {part.split()[0] for part in fields["Depends"].split(", ")}
    # From dpkg-shlibdeps: the system's jansson, libcurl and libpq; the Swift runtime is inside.
    assert {"libc6", "libcurl4", "libjansson4", "libpq5", "libstdc++6", "libgcc-s1"} <= depends, fields["Depends"]
    assert not [name for name in depends if "swift" in name]
    assert fields["Recommends"] == "libsecret-1-0"


def test_files_under_usr(unpacked):
    root = unpack(unpacked)
    listing = run(["dpkg-deb", "-c", artifact("authbridge_*_amd64.deb")]).stdout
    assert all(" root/root " in line for line in listing.splitlines()), "owned by root"
    for name in ("usr/bin/authbridge", "usr/include/authbridge/plugin.h", "usr/include/authbridge/plugin_jansson.h", "usr/share/authbridge/openrpc.json",
                 "usr/share/man/man1/authbridge.1.gz", "usr/share/bash-completion/completions/authbridge",
                 "usr/share/zsh/vendor-completions/_authbridge", "usr/share/fish/vendor_completions.d/authbridge.fish",
                 "usr/share/doc/authbridge/copyright", "usr/lib/authbridge/libswiftCore.so", "usr/lib/authbridge/authbridge-cli", "usr/lib/authbridge/authbridge-host"):
        assert (root / name).is_file(), name
    for plugin in BUNDLED_PLUGINS:
        assert (root / "usr/lib/authbridge/plugins" / f"{plugin}.json").is_file()
    assert os.readlink(root / "usr/bin/git-credential-authbridge") == "authbridge", "git's name for the helper"
    assert not list((root / "usr/lib/authbridge").glob("libcurl*")), "the system's libcurl, not a copy"
    assert not list((root / "usr/lib/authbridge").glob("libpq*")), "the system's libpq, not a copy"
    # The agent's systemd user units, where `systemctl --user` finds a package's.
    units = root / "usr/lib/systemd/user"
    assert "ListenStream=%t/authbridge/agent.sock" in (units / "authbridge.socket").read_text()
    assert "ExecStart=/usr/bin/authbridge agent" in (units / "authbridge.service").read_text()
    assert runpath_problems(root) == []
    assert no_toolchain_paths(root) == []


def test_the_unpacked_host_finds_its_plugins_and_answers_initialize(unpacked, tmp_path):
    host = unpack(unpacked) / "usr" / "bin" / "authbridge"
    env = clean_env(tmp_path / "home", SYSTEM_PATH)
    assert run([host, "--version"], env=env).stdout.strip() == VERSION
    listing = run([host, "plugins"], env=env).stdout
    assert loaded_plugins(listing) == BUNDLED_PLUGINS and refused_plugins(listing) == [], listing

    initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
                  "params": {"protocolVersion": "1.0", "clientInfo": {"name": "deb-test", "version": "1"}}}
    process = subprocess.Popen([str(host), "serve"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=subprocess.DEVNULL, env=env, text=True)
    try:
        process.stdin.write(json.dumps(initialize) + "\n")
        process.stdin.flush()
        answer = json.loads(process.stdout.readline())     # bounded: the host answers or exits
        process.stdin.write('{"jsonrpc":"2.0","id":2,"method":"shutdown"}\n')
        process.stdin.flush()
        assert json.loads(process.stdout.readline()) == {"jsonrpc": "2.0", "id": 2, "result": None}
        process.stdin.write('{"jsonrpc":"2.0","method":"exit"}\n')
        process.stdin.close()
        assert process.wait(TIMEOUT) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert answer["id"] == 1 and answer["result"]["serverInfo"]["version"] == VERSION, answer
    assert {p["id"] for p in answer["result"]["providers"] if p["status"] == "loaded"} == BUNDLED_PLUGINS

def test_lintian_reports_no_errors():
    done = run(["lintian", "--tag-display-limit", "0", artifact("authbridge_*_amd64.deb")], check=False)
    errors = [line for line in done.stdout.splitlines() if line.startswith("E:")]
    assert errors == [], done.stdout
