"""Test harness of the Python client: the real host, the bundled `oidc` plugin and
django-oauth-toolkit (Tests/support/dot_server.py, the suite's authorization server).

    AUTHBRIDGE=/path/to/authbridge AUTHBRIDGE_PLUGINS=/path/to/plugins \\
        .venv/bin/python -m pytest -q clients/python/tests

AUTHBRIDGE (the host; default .build/debug/authbridge) and AUTHBRIDGE_PLUGINS (a folder holding
oidc.json and libauthbridge-oidc.so; default .build/debug/plugins). The venv needs jsonschema
and DOT (requirements-test.txt); the client itself needs nothing.

Every frame the client sends and receives passes through its `on_frame` hook into
`FrameValidator`, which checks what the host wrote against bridge-spec/openrpc.json as
Tests/contract/conftest.py does; a violation fails the test at teardown. Every log record of
the `authbridge` loggers (the client's, and the host's stderr it forwards at debug level) is
scanned for the codes and tokens DOT handed out.

Async tests are plain `async def` functions, run here with `asyncio.run` under a deadline (no
pytest-asyncio needed).
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import os
import re
import shutil
import sys
import threading
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[3]
CLIENT_DIR = REPO / "clients" / "python"
sys.path.insert(0, str(CLIENT_DIR))                    # the client from this checkout
sys.path.insert(0, str(REPO / "Tests" / "contract"))   # dot_auth, leak_scan

import leak_scan  # noqa: E402
from dot_auth import DotAuthServer  # noqa: E402
from jsonschema import Draft202012Validator  # noqa: E402
from jsonschema.exceptions import best_match  # noqa: E402
from referencing import Registry  # noqa: E402
from referencing.jsonschema import DRAFT202012  # noqa: E402

import authbridge  # noqa: E402

HOST_BIN = Path(os.environ.get("AUTHBRIDGE") or REPO / ".build" / "debug" / "authbridge").resolve()
PLUGINS_SOURCE = Path(os.environ.get("AUTHBRIDGE_PLUGINS") or REPO / ".build" / "debug" / "plugins").resolve()
SPEC_PATH = REPO / "bridge-spec" / "openrpc.json"
SPEC_URI = "urn:authbridge:bridge-spec:openrpc.json"
OIDC_FILES = ("oidc.json", "libauthbridge-oidc.so")

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

class Spec:
    def __init__(self) -> None:
        self.document = json.loads(SPEC_PATH.read_text(encoding="utf-8"))
        self.registry = Registry().with_resource(SPEC_URI, DRAFT202012.create_resource(self.document))
        self.kinds = {kind: self.validator(f"#/components/schemas/Envelope/$defs/{kind}")
                      for kind in ("Response", "ErrorResponse", "Notification")}
        self.results: dict[str, Draft202012Validator] = {}
        self.notifications: dict[str, Draft202012Validator] = {}
        for index, method in enumerate(self.document["methods"]):
            if "result" in method:
                self.results[method["name"]] = self.validator(f"#/methods/{index}/result/schema")
            if method.get("x-notification") and method.get("x-direction") == "server-to-client":
                self.notifications[method["name"]] = self.validator(f"#/methods/{index}/x-params")

    def validator(self, pointer: str) -> Draft202012Validator:
        return Draft202012Validator({"$ref": SPEC_URI + pointer}, registry=self.registry)


_SPEC: Spec | None = None


def problems(validator: Draft202012Validator, instance: Any) -> list[str]:
    found = []
    for error in validator.iter_errors(instance):
        best = best_match([error])
        where = "/".join(str(p) for p in best.absolute_path) or "(root)"
        found.append(f"at {where}: {best.message}")
    return found


def _no_duplicate_keys(pairs):
    seen = {}
    for key, value in pairs:
        if key in seen:
            raise ValueError(f"duplicate key {key!r}")
        seen[key] = value
    return seen


class FrameValidator:
    """The client's `on_frame` hook in the tests: validates what the host writes, remembers every
    frame, and lets a test wait for one. Called on the bridge's event-loop thread."""

    def __init__(self) -> None:
        global _SPEC
        if _SPEC is None:
            _SPEC = Spec()
        self.spec = _SPEC
        self.sent: dict[Any, str] = {}            # request id → method (ids restart with each host)
        self.received: list[dict[str, Any]] = []
        self.violations: list[str] = []
        self.cond = threading.Condition()
        self._waiters: list[tuple[Callable[[dict], bool], asyncio.AbstractEventLoop, asyncio.Future]] = []

    def __call__(self, direction: str, raw: bytes, frame: Any) -> None:
        if direction == "send":
            if isinstance(frame, dict) and "id" in frame and "method" in frame:
                self.sent[frame["id"]] = frame["method"]
            return
        with self.cond:
            self._check(raw)
            if isinstance(frame, dict):
                self.received.append(frame)
                for waiter in list(self._waiters):
                    predicate, loop, future = waiter
                    if predicate(frame):
                        self._waiters.remove(waiter)
                        loop.call_soon_threadsafe(lambda f=future, v=frame: f.done() or f.set_result(v))
            self.cond.notify_all()

    def _check(self, raw: bytes) -> None:
        text = raw.decode("utf-8", errors="replace")[:300]
        if not raw.endswith(b"\n") or raw.endswith(b"\r\n"):
            self.violations.append(f"frame not terminated by a bare \\n: {text}")
        try:
            frame = json.loads(raw.decode("utf-8"), object_pairs_hook=_no_duplicate_keys)
        except ValueError as error:
            self.violations.append(f"not a JSON frame ({error}): {text}")
            return
        if not isinstance(frame, dict):
            self.violations.append(f"not a JSON object: {text}")
            return
        kind = "Notification" if "method" in frame else "ErrorResponse" if "error" in frame else "Response"
        for problem in problems(self.spec.kinds[kind], frame):
            self.violations.append(f"breaks Envelope/{kind} {problem}: {text}")
        if kind == "Notification":
            validator = self.spec.notifications.get(frame.get("method"))
            if validator is None:
                self.violations.append(f"unknown notification: {text}")
            else:
                self.violations += [f"{frame['method']} params {p}: {text}" for p in problems(validator, frame.get("params"))]
        elif kind == "Response":
            method = self.sent.get(frame.get("id"))
            if method is None:
                self.violations.append(f"answer to an id never sent: {text}")
            elif method in self.spec.results:
                found = problems(self.spec.results[method], frame["result"])
                self.violations += [f"result of {method} {p}: {text}" for p in found]

    def frames(self) -> list[dict[str, Any]]:
        with self.cond:
            return list(self.received)

    async def wait_for(self, predicate: Callable[[dict], bool], timeout: float = WAIT) -> dict[str, Any]:
        """The first received frame (already here or still to come) matching `predicate`."""
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        with self.cond:
            for frame in self.received:
                if predicate(frame):
                    return frame
            self._waiters.append((predicate, loop, future))
        return await asyncio.wait_for(future, timeout)

    def wait_for_blocking(self, predicate: Callable[[dict], bool], timeout: float = WAIT) -> dict[str, Any]:
        with self.cond:
            found = self.cond.wait_for(lambda: next((f for f in self.received if predicate(f)), None), timeout)
        assert found, "no such frame arrived in time"
        return found


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
    return text.split("\n### From Python\n", 1)[1].split("\n#", 1)[0]


def root_quick_start() -> str:
    """The Python program of the root README's quick start, verbatim."""
    [program] = code_blocks(from_python_section(), "python")
    return program


# ── The host, its plugins and DOT ──────────────────────────────────────────────

@pytest.fixture
def plugin_dir(tmp_path) -> Path:
    """A private copy (folder 0755, files 0644) of the bundled oidc plugin: the host refuses
    plugin files others can write."""
    folder = tmp_path / "plugins"
    folder.mkdir()
    os.chmod(folder, 0o755)
    for name in OIDC_FILES:
        shutil.copyfile(PLUGINS_SOURCE / name, folder / name)
        os.chmod(folder / name, 0o644)
    return folder


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
