"""The README's Install section names exactly the files `make dist` writes (so its commands can
be pasted as they are), one command per way; its tarball lines work as written for a new user; it
names the .deb's real dependencies and the wheel's extras."""

from __future__ import annotations

import re
import subprocess
import tomllib
import zipfile

from conftest import DIST, REPO, SYSTEM_PATH, TIMEOUT, VERSION, artifact, clean_env, code_blocks, run, section

INSTALL = section("## Install")
[BLOCK] = code_blocks(INSTALL, "sh")
COMMANDS = [line for line in BLOCK.splitlines() if line and not line.startswith("#")]
TARBALL_LINES = [c for c in COMMANDS if c.split()[0] in ("mkdir", "tar", "export")]


def test_the_install_commands_name_the_files_in_dist():
    installs = [c for c in COMMANDS if c not in TARBALL_LINES]
    assert [c.split()[0:2] for c in installs] == [["pip", "install"], ["sudo", "apt"], ["npm", "install"]]
    named = {re.sub(r"^\./", "", word) for command in COMMANDS for word in command.split()
             if re.search(r"\.(tar\.gz|whl|deb|tgz)$", word)}
    assert named == {path.name for path in DIST.iterdir() if path.name != "SHA256SUMS"}


def test_the_tarball_lines_work_as_written(tmp_path):
    """Pasted in a new user's shell (no ~/.local/opt yet: `tar -C` alone failed there), in the folder
    holding the download: the PATH line then finds the host (the tree unpacks into a folder named
    after the version, whose bin/ the line names)."""
    assert [c.split()[0] for c in TARBALL_LINES] == ["mkdir", "tar", "export"], TARBALL_LINES
    home = tmp_path / "home"
    env = clean_env(home, SYSTEM_PATH)
    assert not (home / ".local").exists()
    script = "\n".join([*TARBALL_LINES, "command -v authbridge", "authbridge --version"])
    done = subprocess.run(["/bin/sh", "-e", "-c", script], cwd=artifact("authbridge-*-linux-x86_64.tar.gz").parent,
                          env=env, capture_output=True, text=True, timeout=TIMEOUT, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stdout + done.stderr
    found, version = done.stdout.splitlines()
    assert found == str(home / ".local" / "opt" / f"authbridge-{VERSION}-linux-x86_64" / "bin" / "authbridge")
    assert version == VERSION


def test_the_deb_dependencies_are_the_packages():
    """The .deb row names every library package dpkg-shlibdeps put in Depends (beyond the C and C++
    runtimes every system has)."""
    fields = dict(re.findall(r"^ ?(\w[\w-]*): (.*)$", run(["dpkg-deb", "-f", artifact("authbridge_*_amd64.deb")]).stdout, re.M))
    depends = {part.split()[0] for part in fields["Depends"].split(", ")} - {"libc6", "libgcc-s1", "libstdc++6"}
    [row] = [line for line in INSTALL.splitlines() if line.startswith("| `.deb`")]
    assert {name for name in depends if f"`{name}`" not in row} == set(), row


def test_the_http_library_extras_are_named():
    """`import authbridge.httpx` needs httpx (No module named 'httpx'): the Install section and the
    client README name the wheel's extras, which its metadata has."""
    extras = set(tomllib.loads((REPO / "clients" / "python" / "pyproject.toml").read_text())["project"]["optional-dependencies"])
    assert {"requests", "httpx"} <= extras
    client_readme = (REPO / "clients" / "python" / "README.md").read_text()
    for text in (INSTALL, section("## requests and httpx", client_readme)):
        assert "[requests]" in text or "[requests,httpx]" in text, text
        assert "[httpx]" in text or "[requests,httpx]" in text, text
    with zipfile.ZipFile(artifact("authbridge-*.whl")) as wheel:
        metadata = wheel.read(f"authbridge-{VERSION}.dist-info/METADATA").decode()
    assert "Provides-Extra: requests" in metadata and "Provides-Extra: httpx" in metadata
