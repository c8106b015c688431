"""The distributions in dist/ (`make dist`), installed and used as a user of each would, on what
looks like a machine without Swift: `make test-dist` runs this suite through
scripts/hide-toolchain.sh, which binds an empty folder over the Swift toolchain and over the build
products, so nothing can load from either. The session refuses to start otherwise.

    make dist && scripts/hide-toolchain.sh .venv/bin/python -m pytest -q Tests/dist

The authorization server is the suite's django-oauth-toolkit (Tests/support/dot_server.py, through
Tests/contract/dot_auth.py); the user in the browser is dot_auth's scripted one.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DIST = REPO / "dist"
sys.path.insert(0, str(REPO / "Tests" / "support"))    # the test kit, signing_in

from authbridge_testkit.dot_auth import DotAuthServer, dot_fixture  # noqa: E402

#: Bound on one command or wait.
TIMEOUT = 120
#: The plugins every distribution bundles.
BUNDLED_PLUGINS = {"oidc", "salesforce", "tableau", "marketsharp", "duke"}

#: The host's version (`hostVersion`, written once in Sources), which names every distribution.
VERSION = next(match.group(1) for source in sorted((REPO / "Sources").rglob("*.swift"))
               if (match := re.search(r'^public let hostVersion = "([^"]+)"', source.read_text(), re.M)))


def artifact(pattern: str) -> Path:
    found = sorted(DIST.glob(pattern))
    assert len(found) == 1, f"dist/ should hold one {pattern} (run make dist): {found}"
    return found[0]


def pytest_configure(config):
    hidden = os.environ.get("AUTHBRIDGE_HIDDEN", "").split()
    if len(hidden) != 2:
        raise pytest.UsageError("run this suite through scripts/hide-toolchain.sh (make test-dist)")
    for folder in hidden:
        if not Path(folder).is_dir() or any(Path(folder).iterdir()):
            raise pytest.UsageError(f"{folder} is not hidden: run through scripts/hide-toolchain.sh")
    if not DIST.is_dir():
        raise pytest.UsageError("no dist/: run make dist")


def run(argv, *, timeout: float = TIMEOUT, check: bool = True, **kwargs) -> subprocess.CompletedProcess:
    done = subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL, **kwargs)
    if check:
        assert done.returncode == 0, f"{argv} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done


def clean_env(home: Path, path: str) -> dict[str, str]:
    """A new user's environment: a fresh HOME and XDG folders, the given PATH, no AUTHBRIDGE, no
    keyring bus, no vault key."""
    home.mkdir(parents=True, exist_ok=True)
    return {"HOME": str(home), "PATH": path, "LANG": "C.UTF-8",
            "XDG_CONFIG_HOME": str(home / ".config"), "XDG_DATA_HOME": str(home / ".local" / "share")}


SYSTEM_PATH = "/usr/local/bin:/usr/bin:/bin"


def extract_tarball(target: Path) -> Path:
    """The tarball extracted as `tar xzf` would, into target; its top folder."""
    with tarfile.open(artifact("authbridge-*-linux-x86_64.tar.gz")) as archive:
        archive.extractall(target, filter="tar")
    [top] = list(target.iterdir())
    return top


# ── The provider and the user ─────────────────────────────────────────────────

dot = dot_fixture("session")


def dot_exports(dot: DotAuthServer) -> dict[str, str]:
    """What `make dev-server` tells a user to export, for this DOT."""
    issuer = f"{dot.base}/o"
    return {"ISSUER": issuer, "CLIENT_ID": "authbridge-test", "USERINFO_URL": f"{issuer}/userinfo/"}


#: The user in a browser: signs in at DOT, then follows the redirect to the host's listener.
play_user = DotAuthServer.play_user


#: A stand-in `xdg-open` that plays the user, for the terminal quick start.
FAKE_BROWSER = """#!{python}
import sys, urllib.request
sys.path.insert(0, {support!r})
from authbridge_testkit.dot_auth import DotAuthServer
urllib.request.urlopen(DotAuthServer.browse(None, sys.argv[1]), timeout=30).read()
"""


def fake_browser(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    browser = folder / "xdg-open"
    browser.write_text(FAKE_BROWSER.format(python=sys.executable, support=str(REPO / "Tests" / "support")))
    browser.chmod(0o755)
    return folder


def handed_out_secrets(dot: DotAuthServer) -> list[str]:
    return [secret for secret in dot.handed_out() if len(secret) >= 12]


# ── The READMEs, as a reader copies from them ─────────────────────────────────

README = (REPO / "README.md").read_text(encoding="utf-8")


def section(title: str, text: str = README) -> str:
    marker = f"\n{title}\n"
    assert marker in text, f"the README has no {title!r}"
    return re.split(r"\n#{2,3} ", text.split(marker, 1)[1], maxsplit=1)[0]


def code_blocks(text: str, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", text, re.S)


def no_toolchain_paths(root: Path) -> list[str]:
    """Files under root that name the hidden toolchain or the build folder."""
    needles = [os.fsencode(folder) for folder in os.environ["AUTHBRIDGE_HIDDEN"].split()]
    needles.append(os.fsencode(str(REPO / ".build")))
    return [str(path.relative_to(root)) for path in sorted(root.rglob("*"))
            if path.is_file() and not path.is_symlink() and any(n in path.read_bytes() for n in needles)]


def elf_files(root: Path) -> list[Path]:
    found = []
    for path in sorted(root.rglob("*")):
        if path.is_file() and not path.is_symlink():
            with path.open("rb") as file:
                if file.read(4) == b"\x7fELF":
                    found.append(path)
    return found


def runpath_problems(root: Path) -> list[str]:
    """`readelf -d` of every ELF file under root: a RUNPATH (never an RPATH), $ORIGIN-relative."""
    problems = []
    for path in elf_files(root):
        dynamic = run(["readelf", "-d", "-W", path]).stdout
        if "(RPATH)" in dynamic:
            problems.append(f"{path.relative_to(root)}: has an RPATH")
        runpaths = re.findall(r"\(RUNPATH\)\s+Library runpath: \[([^\]]*)\]", dynamic)
        if len(runpaths) != 1 or any(not entry.startswith("$ORIGIN") for entry in runpaths[0].split(":")):
            problems.append(f"{path.relative_to(root)}: RUNPATH {runpaths}")
    return problems


@pytest.fixture
def unpacked(tmp_path):
    """A folder the test may unpack into, removed afterwards even when read-only parts exist."""
    folder = tmp_path / "unpacked"
    folder.mkdir()
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def loaded_plugins(listing: str) -> set[str]:
    """The ids `authbridge plugins` lists as loaded ("loaded   ID VERSION  PATH")."""
    return set(re.findall(r"^loaded\s+(\S+)\s", listing, re.M))


def refused_plugins(listing: str) -> list[str]:
    return re.findall(r"^refused.*$", listing, re.M)


def serve_providers(host: Path, env: dict[str, str]) -> list[dict]:
    """initialize's providers from `host serve` (the host process itself, not authbridge-cli): what
    it loaded and refused from the folders it searched. At the end of its input the host exits."""
    frame = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "1.0"}}
    done = subprocess.run([str(host), "serve"], input=json.dumps(frame) + "\n", capture_output=True, text=True,
                          env=env, timeout=TIMEOUT)
    answer = json.loads(done.stdout.splitlines()[0])
    assert answer.get("id") == 1 and "result" in answer, done.stdout + done.stderr
    return answer["result"]["providers"]


def plugin_folder_problems(host: Path, bundled: Path, env: dict[str, str]) -> list[str]:
    """The host's plugins searched where the distribution put them and nowhere else in its tree: a
    stray manifest in bin/plugins (the folder the wheel's host once searched) must not be seen, and
    every bundled plugin loads from `bundled`. [] when all is well."""
    stray = host.parent / "plugins"
    stray.mkdir()
    try:
        (stray / "stray.json").write_text(json.dumps({"id": "stray", "version": "1", "abi": "1.0",
                                                      "library": "libstray.so"}))
        providers = serve_providers(host, env)
    finally:
        shutil.rmtree(stray)
    problems = [f"searched {stray}: {p}" for p in providers if p["id"] == "stray"]
    loaded = {p["id"]: p.get("path", "") for p in providers if p["status"] == "loaded"}
    if set(loaded) != BUNDLED_PLUGINS:
        problems.append(f"loaded {sorted(loaded)}, not the bundled {sorted(BUNDLED_PLUGINS)}")
    problems += [f"{id} from {path}" for id, path in loaded.items() if Path(path).parent != bundled.resolve()]
    return problems
