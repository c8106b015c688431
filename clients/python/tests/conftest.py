"""Test harness of the Python client: the real host, the bundled `oidc` plugin and
django-oauth-toolkit (Tests/support/dot_server.py, the suite's authorization server); the
`tableau` and `marketsharp` plugins against their simulators (Tests/contract/sim_*.py).

    AUTHBRIDGE=/path/to/authbridge AUTHBRIDGE_PLUGINS=/path/to/plugins \\
        .venv/bin/python -m pytest -q clients/python/tests

AUTHBRIDGE (the host; default .build/debug/authbridge) and AUTHBRIDGE_PLUGINS (the folder of
the bundled plugins, as `make build` stages them; default .build/debug/plugins). The venv needs
requirements-test.txt (jsonschema, DOT, mypy…); the client itself needs nothing.

Every frame the client sends and receives passes through its `on_frame` hook into
`FrameValidator`, which checks both directions against bridge-spec/openrpc.json with
Tests/tools/validate_frames.py (the validators of Tests/contract/conftest.py); a violation fails
the test at teardown. Programs run as child processes (the example, the README's quick start)
get Tests/tools/frame_tap.py in front of the host (the `frame_tap` fixture), and their recorded
frames are validated the same way. Every log record of the `authbridge` loggers (the client's,
and the host's stderr it forwards at debug level) is scanned for the codes and tokens DOT handed out.

Async tests are plain `async def` functions, run here with `asyncio.run` under a deadline (no
pytest-asyncio needed).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import inspect
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import textwrap
import threading
import urllib.request
import venv
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[3]
CLIENT_DIR = REPO / "clients" / "python"
sys.path.insert(0, str(CLIENT_DIR))                    # the client from this checkout
sys.path.insert(0, str(REPO / "Tests" / "contract"))   # dot_auth, leak_scan
sys.path.insert(0, str(REPO / "Tests" / "support"))    # signing_in

import leak_scan  # noqa: E402
from dot_auth import DotAuthServer  # noqa: E402

import authbridge  # noqa: E402

HOST_BIN = Path(os.environ.get("AUTHBRIDGE") or REPO / ".build" / "debug" / "authbridge").resolve()
PLUGINS_SOURCE = Path(os.environ.get("AUTHBRIDGE_PLUGINS") or REPO / ".build" / "debug" / "plugins").resolve()

#: Bound on a whole async test; every wait inside has its own, smaller bound.
TEST_TIMEOUT = 90.0
#: Bound on one wait for the host or DOT.
WAIT = 15.0


def pytest_configure(config):
    if not HOST_BIN.is_file():
        raise pytest.UsageError(f"host {HOST_BIN} not found: set AUTHBRIDGE or run `make build`")
    if not (PLUGINS_SOURCE / "oidc.json").is_file():
        raise pytest.UsageError(f"no oidc.json in {PLUGINS_SOURCE}: set AUTHBRIDGE_PLUGINS or run `make build`")


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem):
    """Runs `async def` tests on a fresh event loop, bounded by TEST_TIMEOUT."""
    if not inspect.iscoroutinefunction(pyfuncitem.obj):
        return None
    arguments = {name: pyfuncitem.funcargs[name] for name in pyfuncitem._fixtureinfo.argnames}

    async def bounded():
        try:
            await asyncio.wait_for(pyfuncitem.obj(**arguments), TEST_TIMEOUT)
        except asyncio.TimeoutError:
            pytest.fail(f"the test did not finish within {TEST_TIMEOUT} s")
    asyncio.run(bounded())
    return True


# ── Every frame against bridge-spec/openrpc.json ──────────────────────────────

def _load(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


_CONTRACT_CONFTEST = _load("contract_conftest", REPO / "Tests" / "contract" / "conftest.py")


def contract_module(path: Path, name: str) -> ModuleType:
    """A module written for Tests/contract, loaded as `name`. Such modules import that folder's
    conftest.py as `conftest`, which here is this file: the contract's stands in while it loads."""
    ours = sys.modules.get("conftest")
    sys.modules["conftest"] = _CONTRACT_CONFTEST
    try:
        return _load(name, path)
    finally:
        if ours is not None:
            sys.modules["conftest"] = ours


#: The validators every frontend's frames are checked with (those of Tests/contract/conftest.py).
validate_frames = contract_module(REPO / "Tests" / "tools" / "validate_frames.py", "validate_frames")
SPEC_PATH = validate_frames.SPEC_PATH
_SPEC: Any = None


def spec() -> Any:
    global _SPEC
    if _SPEC is None:
        _SPEC = validate_frames.Spec(SPEC_PATH)
    return _SPEC


class FrameValidator:
    """The client's `on_frame` hook in the tests: validates every frame both ways with
    validate_frames (what the client sends: a request or client notification the spec lists,
    params that fit; what the host writes: envelope, result of the method asked, notification
    params, each id answered once), remembers every frame, and lets a test wait for one.
    Called on the bridge's event-loop thread; ids restart with each host (a restart says so
    with its `initialize`, id 1)."""

    def __init__(self) -> None:
        self.spec = spec()
        self.sent: dict[Any, str] = {}            # request id → method, of the current host
        self.sent_frames: list[dict[str, Any]] = []
        self.received: list[dict[str, Any]] = []
        self.answered: set[Any] = set()
        self.violations: list[str] = []
        self.breaking_on_purpose = False
        self.cond = threading.Condition()
        self._waiters: list[tuple[str, Callable[[dict], bool], asyncio.AbstractEventLoop, asyncio.Future]] = []

    def __call__(self, direction: str, raw: bytes, frame: Any) -> None:
        with self.cond:
            if direction == "send":
                self._check_sent(raw, frame)
            else:
                self._check_received(raw)
                if isinstance(frame, dict):
                    self.received.append(frame)
            if isinstance(frame, dict):
                for waiter in list(self._waiters):
                    wanted, predicate, loop, future = waiter
                    if wanted == direction and predicate(frame):
                        self._waiters.remove(waiter)
                        loop.call_soon_threadsafe(lambda f=future, v=frame: f.done() or f.set_result(v))
            self.cond.notify_all()

    def _check_sent(self, raw: bytes, frame: Any) -> None:
        text = raw.decode("utf-8", errors="replace")[:300]
        if not raw.endswith(b"\n") or raw.count(b"\n") != 1:
            self.violations.append(f"sent frame is not one \\n-terminated line: {text}")
        method, found = validate_frames.sent_frame_problems(self.spec, frame)
        if found and not self.breaking_on_purpose:
            self.violations += [f"{p}: {text}" for p in found]
        if not isinstance(frame, dict):
            return
        if method == "initialize" and frame.get("id") == 1:   # a new host: ids start again
            self.sent.clear()
            self.answered.clear()
        self.sent_frames.append(frame)
        if "id" in frame and method is not None:
            self.sent[frame["id"]] = method

    @contextlib.contextmanager
    def off_spec(self) -> Iterator[None]:
        """Frames sent inside break the spec on purpose (a test of how the host refuses them)."""
        self.breaking_on_purpose = True
        try:
            yield
        finally:
            self.breaking_on_purpose = False

    def _check_received(self, raw: bytes) -> None:
        text = raw.decode("utf-8", errors="replace")[:300]
        if not raw.endswith(b"\n") or raw.endswith(b"\r\n"):
            self.violations.append(f"frame not terminated by a bare \\n: {text}")
        try:
            frame = json.loads(raw.decode("utf-8"), object_pairs_hook=validate_frames._no_duplicate_keys)
        except ValueError as error:
            self.violations.append(f"not a JSON frame ({error}): {text}")
            return
        method = None
        if isinstance(frame, dict) and "method" not in frame and ("result" in frame or "error" in frame):
            key = frame.get("id")
            if key is not None:
                method = self.sent.get(key)
                if method is None:
                    self.violations.append(f"answer to an id never sent: {text}")
                elif key in self.answered:
                    self.violations.append(f"request id {key!r} answered again: {text}")
                self.answered.add(key)
        self.violations += [f"{p}: {text}" for p in validate_frames.frame_problems(self.spec, frame, method)]

    def frames(self) -> list[dict[str, Any]]:
        with self.cond:
            return list(self.received)

    async def wait_for(self, predicate: Callable[[dict], bool], timeout: float = WAIT,
                       direction: str = "receive") -> dict[str, Any]:
        """The first frame received (direction "send": sent) matching `predicate`, already there
        or still to come."""
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        with self.cond:
            for frame in self.received if direction == "receive" else self.sent_frames:
                if predicate(frame):
                    return frame
            self._waiters.append((direction, predicate, loop, future))
        return await asyncio.wait_for(future, timeout)

    def wait_for_blocking(self, predicate: Callable[[dict], bool], timeout: float = WAIT) -> dict[str, Any]:
        with self.cond:
            found = self.cond.wait_for(lambda: next((f for f in self.received if predicate(f)), None), timeout)
        assert found, "no such frame arrived in time"
        return found


class TapLog:
    """Tests/tools/frame_tap.py in front of the host, for a frontend run as a child process: put
    `env` into its environment (AUTHBRIDGE is then the tap, which starts `host`). `check()`
    validates every recorded frame, both ways, with validate_frames.validate."""

    TAP = REPO / "Tests" / "tools" / "frame_tap.py"

    def __init__(self, path: Path, host: Path = HOST_BIN) -> None:
        self.path = path
        self.env = {"AUTHBRIDGE": str(self.TAP), "AUTHBRIDGE_TAP_TARGET": str(host), "AUTHBRIDGE_TAP_LOG": str(path)}

    def records(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        return [json.loads(line) for line in self.path.read_text(encoding="utf-8").splitlines() if line.strip()]

    def sent_methods(self) -> list[str]:
        """The methods of the frames the frontend sent, in order, over every host it started."""
        return [json.loads(r["line"]).get("method") for r in self.records() if r["dir"] == "out"]

    def check(self) -> int:
        checked, found = validate_frames.validate([self.path])
        assert not found, "frames that break bridge-spec:\n" + "\n".join(found[:20])
        return checked


@pytest.fixture
def frame_tap(tmp_path) -> TapLog:
    """A TapLog in tmp_path (the log holds tokens); its frames are validated again at teardown."""
    tap = TapLog(tmp_path / "frames.jsonl")
    yield tap
    assert tap.check() > 0, "the tap recorded no frame: was AUTHBRIDGE pointed at it?"


class LogCapture(logging.Handler):
    """Every record of the `authbridge` loggers, down to debug (the host's stderr included)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def text(self, logger: str | None = None) -> str:
        return "\n".join(r.getMessage() for r in self.records if logger is None or r.name == logger)


@pytest.fixture
def frames() -> FrameValidator:
    validator = FrameValidator()
    yield validator
    assert not validator.violations, "the host broke the bridge contract:\n- " + "\n- ".join(validator.violations[:20])


@pytest.fixture
def logs(frames) -> LogCapture:
    """Captures the client's logs and the host's forwarded stderr; at teardown, fails the test if a
    code or token DOT handed out, or an access token the host returned, appears in them or in any
    frame that does not carry tokens by contract."""
    capture = LogCapture()
    logger = logging.getLogger("authbridge")
    previous = logger.level
    logger.setLevel(logging.DEBUG)
    logger.addHandler(capture)
    yield capture
    logger.removeHandler(capture)
    logger.setLevel(previous)
    places = leak_scan.leaks(capture.text(), frames.frames())
    assert not places, f"a code or token appeared in {', '.join(places)} (log lines count from the first record)"


# ── The READMEs' code, as a reader copies it ─────────────────────────────────

ROOT_README = REPO / "README.md"
CLIENT_README = CLIENT_DIR / "README.md"


def code_blocks(text: str, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", text, re.S)


def from_python_section() -> str:
    """The root README's "From Python" quick start (up to the next heading)."""
    text = ROOT_README.read_text(encoding="utf-8")
    assert "\n### From Python\n" in text, "the root README has no From Python section"
    return re.split(r"\n#{2,3} ", text.split("\n### From Python\n", 1)[1], maxsplit=1)[0]


def root_quick_start() -> str:
    """The Python program of the root README's quick start, verbatim."""
    [program] = code_blocks(from_python_section(), "python")
    return program


# ── Fresh virtual environments (a new user's machine) ──────────────────────────

PIP_TIMEOUT = 300


def fresh_venv(path: Path) -> Path:
    """A new venv (with pip, nothing else); returns its python."""
    venv.EnvBuilder(with_pip=True, clear=True).create(path)
    return path / "bin" / "python"


_INSTALLED = textwrap.dedent("""
    import importlib.resources, sys
    import authbridge, authbridge.sync
    assert authbridge.__file__.startswith(sys.prefix), authbridge.__file__
    assert importlib.resources.files("authbridge").joinpath("py.typed").is_file()
    assert issubclass(authbridge.NotSignedIn, authbridge.AuthBridgeError) and authbridge.NotSignedIn.code == -32001
    print("imported", authbridge.__version__)
""")


def check_installed(python: Path, cwd: Path) -> None:
    """The venv of `python` imports its own installed copy of the package (run from `cwd`, not
    the checkout), typed, and nothing but the package came along."""
    done = subprocess.run([str(python), "-c", _INSTALLED], cwd=cwd, capture_output=True, text=True, timeout=PIP_TIMEOUT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip() == f"imported {authbridge.__version__}"
    listed = subprocess.run([str(python), "-m", "pip", "list", "--format=freeze"], capture_output=True, text=True,
                            timeout=PIP_TIMEOUT)
    packages = {line.split("==")[0].lower() for line in listed.stdout.split()}
    assert packages - {"pip", "setuptools"} == {"authbridge"}, "no runtime dependency came along"


def no_package_index(pip_output: str) -> bool:
    """pip failed because no package index could be reached for the build backend (setuptools)."""
    return ("No matching distribution found for setuptools" in pip_output
            or "Could not find a version that satisfies" in pip_output)


# ── The host, its plugins and DOT ──────────────────────────────────────────────

def plugin_folder(folder: Path, *plugins: str) -> Path:
    """A private copy (folder 0755, files 0644) of bundled plugins (manifest and library): the
    host refuses plugin files others can write."""
    files = [name for plugin in plugins for name in (f"{plugin}.json", f"libauthbridge-{plugin}.so")]
    return _CONTRACT_CONFTEST.make_plugin_dir(folder, files, PLUGINS_SOURCE)


@pytest.fixture
def plugin_dir(tmp_path) -> Path:
    """The bundled oidc plugin, in a folder of its own."""
    return plugin_folder(tmp_path / "plugins", "oidc")


@pytest.fixture
def host_options(tmp_path, plugin_dir, frames, logs) -> Callable[..., dict[str, Any]]:
    """Factory: the options of `authbridge.connect` for a host isolated in tmp_path/NAME (its own
    config file, XDG folders and HOME, only the private plugin folder), with the frame validator
    plugged in. `profiles` go to the config file; other keywords override options."""
    def make(name: str = "host", profiles: dict | None = None, data_home: Path | None = None,
             **overrides: Any) -> dict[str, Any]:
        home = tmp_path / name
        for sub in ("xdg-config", "xdg-data", "home"):
            (home / sub).mkdir(parents=True, exist_ok=True)
        config = home / "config.json"
        config.write_text(json.dumps({"profiles": profiles or {}}))
        env = dict(os.environ, XDG_CONFIG_HOME=str(home / "xdg-config"),
                   XDG_DATA_HOME=str(data_home or home / "xdg-data"), HOME=str(home / "home"))
        env.pop("DBUS_SESSION_BUS_ADDRESS", None)   # never the developer's keyring
        env.pop("AUTHBRIDGE_VAULT_KEY", None)
        options: dict[str, Any] = dict(
            executable=str(HOST_BIN), plugins=[plugin_dir], no_default_plugins=True, config=config,
            args=["--log-level", "debug"], env=env, cwd=str(home), on_frame=frames,
            start_timeout=WAIT, shutdown_timeout=5.0, client_name="authbridge-python-tests")
        options.update(overrides)
        return options
    return make


@pytest.fixture(scope="session")
def dot(tmp_path_factory) -> DotAuthServer:
    server = DotAuthServer(tmp_path_factory.mktemp("dot"), access_lifetime=3600).start()
    yield server
    server.stop()


def dot_settings(dot: DotAuthServer) -> dict[str, Any]:
    """An `oidc` profile for DOT: the endpoints come from the issuer's discovery document."""
    return {"issuer": f"{dot.base}/o", "clientId": "authbridge-test", "scopes": ["openid", "read"]}


def dot_profiles(dot: DotAuthServer) -> dict[str, Any]:
    return {"dot": {"plugin": "oidc", "settings": dot_settings(dot)}}


def play_user(dot: DotAuthServer, url: str, user: str = "ada", password: str = "lovelace-test") -> int:
    """The user in a browser: signs in at DOT's login page, then follows the redirect to the
    host's loopback listener, which holds the request until the session is stored. Blocking."""
    callback = dot.browse(url, user=user, password=password)
    with urllib.request.urlopen(callback, timeout=WAIT) as response:
        return response.status


async def sign_in(bridge: authbridge.AuthBridge, dot: DotAuthServer, provider: str = "dot",
                  **user: str) -> authbridge.SignInStatus:
    """The browser flow with the scripted user, who acts on the openUrl progress event."""
    users: list[asyncio.Task] = []

    def on_progress(event: authbridge.SignInProgress) -> None:
        if event.stage == "openUrl":
            users.append(asyncio.ensure_future(asyncio.to_thread(play_user, dot, event.url, **user)))

    status = await bridge.request_oauth_tokens(provider, flow="browser", on_progress=on_progress, timeout=WAIT * 2)
    assert len(users) == 1, "one openUrl event"
    assert await asyncio.wait_for(users[0], WAIT) == 200
    return status
