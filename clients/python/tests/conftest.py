"""Test harness of the Python client, over the Python test kit (Tests/support/authbridge_testkit):
the real host, the bundled `oidc` plugin and django-oauth-toolkit (the kit's dot_auth, the
suites' authorization server); the `tableau` and `marketsharp` plugins against their simulators
(Tests/contract/simulators/sim_*.py).

    AUTHBRIDGE_BIN=/path/to/authbridge AUTHBRIDGE_BUILD_DIR=/path/to/.build/debug \\
        .venv/bin/python -m pytest -q clients/python/tests

The test targets' variables (Makefile header): AUTHBRIDGE_BIN (the host; default
.build/debug/authbridge) and AUTHBRIDGE_BUILD_DIR (its build folder, whose plugins/ holds the
bundled plugins; default .build/debug). The venv needs requirements-test.txt (jsonschema, DOT,
mypy…); the client itself needs nothing.

Every frame the client sends and receives passes through its `on_frame` hook into
`FrameValidator`, which checks both directions against bridge-spec/openrpc.json with the kit's
validators (those of every suite); a violation fails the test at teardown. Programs run as child processes (the example, the README's quick start)
get Tests/tools/frame_tap.py in front of the host (the `frame_tap` fixture), and their recorded
frames are validated the same way. Every log record of the `authbridge` loggers (the client's,
and the host's stderr it forwards at debug level) is scanned for the codes and tokens DOT handed out.

Async tests are plain `async def` functions, run here with `asyncio.run` under a deadline (no
pytest-asyncio needed).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import inspect
import json
import logging
import re
import subprocess
import sys
import textwrap
import threading
import venv
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[3]
CLIENT_DIR = REPO / "clients" / "python"
sys.path.insert(0, str(CLIENT_DIR))                    # the client from this checkout
sys.path.insert(0, str(REPO / "Tests" / "support"))    # the test kit, signing_in

from authbridge_testkit import copy_plugins, isolated_environment, leak_scan  # noqa: E402
from authbridge_testkit.dot_auth import DotAuthServer, dot_fixture  # noqa: E402
from authbridge_testkit.paths import HOST_BIN, PLUGINS_DIR, SPEC_PATH  # noqa: E402,F401 - SPEC_PATH: for the tests
from authbridge_testkit.recorded import validate as validate_recorded  # noqa: E402
from authbridge_testkit.spec import frame_problems, no_duplicate_keys, sent_frame_problems, spec  # noqa: E402

import authbridge  # noqa: E402

PLUGINS_SOURCE = PLUGINS_DIR

#: Bound on a whole async test; every wait inside has its own, smaller bound.
TEST_TIMEOUT = 90.0
#: Bound on one wait for the host or DOT.
WAIT = 15.0


def pytest_configure(config):
    if not HOST_BIN.is_file():
        raise pytest.UsageError(f"host {HOST_BIN} not found: set AUTHBRIDGE_BIN or run `make build`")
    if not (PLUGINS_SOURCE / "oidc.json").is_file():
        raise pytest.UsageError(f"no oidc.json in {PLUGINS_SOURCE}: set AUTHBRIDGE_BUILD_DIR or run `make build`")


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
        method, found = sent_frame_problems(self.spec, frame)
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
            frame = json.loads(raw.decode("utf-8"), object_pairs_hook=no_duplicate_keys)
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
        self.violations += [f"{p}: {text}" for p in frame_problems(self.spec, frame, method)]

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
    validates every recorded frame, both ways, with the kit's recorded.validate."""

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
        checked, found = validate_recorded([self.path])
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
    return copy_plugins(folder, files, PLUGINS_SOURCE)


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
        env = isolated_environment(home, data_home)
        config = home / "config.json"
        config.write_text(json.dumps({"profiles": profiles or {}}))
        options: dict[str, Any] = dict(
            executable=str(HOST_BIN), plugins=[plugin_dir], no_default_plugins=True, config=config,
            args=["--log-level", "debug"], env=env, cwd=str(home), on_frame=frames,
            start_timeout=WAIT, shutdown_timeout=5.0, client_name="authbridge-python-tests")
        options.update(overrides)
        return options
    return make


dot = dot_fixture("session")


def dot_settings(dot: DotAuthServer) -> dict[str, Any]:
    """An `oidc` profile for DOT: the endpoints come from the issuer's discovery document."""
    return {"issuer": f"{dot.base}/o", "clientId": "authbridge-test", "scopes": ["openid", "read"]}


def dot_profiles(dot: DotAuthServer) -> dict[str, Any]:
    return {"dot": {"plugin": "oidc", "settings": dot_settings(dot)}}


#: The user in a browser (blocking): play_user(dot, url, user=…, password=…) → the listener's status.
play_user = DotAuthServer.play_user


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


def sign_in_blocking(bridge: authbridge.sync.SyncAuthBridge, dot: DotAuthServer, provider: str = "dot") -> authbridge.SignInStatus:
    """The browser flow through a blocking bridge, the scripted user acting on the openUrl event."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        users: list[concurrent.futures.Future[int]] = []

        def on_progress(event: authbridge.SignInProgress) -> None:
            if event.stage == "openUrl":
                users.append(pool.submit(play_user, dot, event.url))

        status = bridge.request_oauth_tokens(provider, flow="browser", on_progress=on_progress, timeout=WAIT * 2)
        assert [user.result(WAIT) for user in users] == [200]
    assert status.signed_in
    return status


def sign_in_external_blocking(bridge: authbridge.sync.SyncAuthBridge, provider: str,
                              browse: Callable[[str], str]) -> authbridge.SignInStatus:
    """The external flow through a blocking bridge: the app's web view opens the page, `browse(url)`
    signs the user in there and gives the redirect it caught, which the app hands over."""
    with bridge.events("signIn/progress") as progress, concurrent.futures.ThreadPoolExecutor(1) as pool:
        signing_in = pool.submit(bridge.request_oauth_tokens, provider, flow="external")
        opened = progress.get(timeout=WAIT)
        assert opened.stage == "openUrl" and opened.url
        assert bridge.complete_sign_in(provider, browse(opened.url))
        status = signing_in.result(WAIT)
    assert status.signed_in
    return status
