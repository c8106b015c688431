"""`Host`: one `authbridge serve` child process, driven over its stdin/stdout one JSON message per
line (bridge-spec/README.md), that validates EVERY frame the host writes as it arrives
(spec.frame_problems: the envelope, a result against its method's schema, a notification's params
against its x-params), and also that frames are UTF-8 JSON objects on `\\n`-terminated lines
without duplicate keys, that every answer refers to a request that was sent, and that no request
is answered twice. Violations are collected in `violations`; the suites fail the test that
caused them.

AUTHBRIDGE_CONTRACT_IGNORE, a debugging aid unset by default: a regular expression; violations
whose text matches it are not recorded (to look past one known host bug at the others). Never
set it in CI.
"""

from __future__ import annotations

import collections
import hashlib
import itertools
import json
import os
import re
import signal
import subprocess
import threading
import time
import urllib.parse
from pathlib import Path
from typing import Any, Callable, Iterable

from . import leak_scan
from .isolation import isolated_environment
from .paths import HOST_BIN
from .spec import frame_problems, id_key, no_duplicate_keys, short, spec

#: Default bound on every wait, in seconds. Nothing in the suites waits unbounded.
TIMEOUT = 10.0

#: Profiles of the two test plugins (TEST_PLUGIN_FILES): c → ctest, s → swifttest.
DEFAULT_PROFILES = {
    "c": {"plugin": "ctest", "settings": {"server": "https://ctest.example"}},
    "s": {"plugin": "swifttest", "settings": {"clientId": "c1"}},
}

_IGNORE = re.compile(os.environ["AUTHBRIDGE_CONTRACT_IGNORE"]) if os.environ.get("AUTHBRIDGE_CONTRACT_IGNORE") else None


class HostError(AssertionError):
    pass


class FrameLink:
    """One bridge session's frames, whatever carries them — a `serve` child's stdin/stdout
    (`Host`) or a connection to `authbridge agent` (`agent.AgentClient`): every frame validated
    as it arrives, requests tracked, every wait bounded. Subclasses say how bytes are written
    (`_write`) and what ended the session (`describe_exit`, `stderr_tail`)."""

    def __init__(self, workdir: Path):
        self.workdir = workdir
        self.spec = spec()
        self.cond = threading.Condition()
        self.frames: list[dict[str, Any]] = []       # every valid-JSON frame, in arrival order
        self.lines: list[bytes] = []                 # every raw line
        self.violations: list[str] = []
        self.sent: dict[tuple[str, Any], str] = {}   # id key → method of requests sent
        self.response_counts: collections.Counter = collections.Counter()
        self.expected_duplicate_ids: set[tuple[str, Any]] = set()
        self._consumed: set[int] = set()
        self._eof = False
        self._ids = itertools.count(1000)  # explicit small ids in tests never collide
        self._write_lock = threading.Lock()
        self.init_result: dict[str, Any] | None = None

    def _start_reading(self, stream: Any, name: str) -> None:
        self._reader = threading.Thread(target=self._read, args=(stream,), name=name, daemon=True)
        self._reader.start()

    def _write(self, data: bytes) -> None:
        raise NotImplementedError

    def describe_exit(self) -> str:
        raise NotImplementedError

    def stderr_tail(self, lines: int = 25) -> str:
        raise NotImplementedError

    # Reading and validation (reader thread)

    def _read(self, stream: Any) -> None:
        try:
            while True:
                line = stream.readline()
                if not line:
                    break
                self._ingest(line)
        finally:
            with self.cond:
                self._eof = True
                self.cond.notify_all()

    def _violation(self, text: str) -> None:
        # Called with self.cond held.
        if _IGNORE is None or not _IGNORE.search(text):
            self.violations.append(text)

    def _ingest(self, line: bytes) -> None:
        with self.cond:
            self.lines.append(line)
            if not line.endswith(b"\n"):
                self._violation(f"frame not terminated by \\n at end of output: {short(line)}")
            body = line[:-1] if line.endswith(b"\n") else line
            if body.endswith(b"\r"):
                self._violation(f"frame ends with \\r\\n (host frames end with a bare \\n): {short(body)}")
            try:
                text = body.decode("utf-8")
            except UnicodeDecodeError as error:
                self._violation(f"frame is not UTF-8 ({error}): {short(body)}")
                self.cond.notify_all()
                return
            try:
                frame = json.loads(text, object_pairs_hook=no_duplicate_keys)
            except ValueError as error:
                self._violation(f"stdout line is not a JSON frame ({error}): {short(text)}")
                self.cond.notify_all()
                return
            if not isinstance(frame, dict):
                self._violation(f"frame is not a JSON object: {short(text)}")
                self.cond.notify_all()
                return
            self._validate(frame, text)
            self.frames.append(frame)
            self.cond.notify_all()

    def _validate(self, frame: dict[str, Any], text: str) -> None:
        # The frame against the spec (an answer against the request it answers), and the id
        # bookkeeping: every answer refers to a request that was sent (stop() counts repeats).
        method = None
        key = id_key(frame.get("id")) if "method" not in frame else None
        if key is not None:
            self.response_counts[key] += 1
            if key not in self.sent:
                self._violation(f"answer to an id that was never sent: {short(text)}")
            method = self.sent.get(key) or None
        for problem in frame_problems(self.spec, frame, method):
            self._violation(f"{problem}\n    frame: {short(text)}")

    # Writing

    def next_id(self) -> int:
        return next(self._ids)

    def _register(self, frame: Any) -> None:
        """Remembers the id (and method) of anything that may be answered with that id."""
        if isinstance(frame, dict) and "id" in frame:
            key = id_key(frame["id"])
            if key is not None:
                method = frame.get("method")
                with self.cond:
                    self.sent[key] = method if isinstance(method, str) else ""

    def send_bytes(self, data: bytes) -> None:
        """Writes bytes exactly as given (no newline added)."""
        with self._write_lock:
            self._write(data)

    def send_line(self, line: bytes | str) -> None:
        """Writes one raw line (a newline is added). Requests in it are tracked."""
        self.send_lines([line])

    def send_lines(self, lines: Iterable[bytes | str]) -> None:
        """Writes several raw lines with a single write (requests in them are tracked)."""
        chunks = []
        for line in lines:
            data = line.encode("utf-8") if isinstance(line, str) else line
            try:
                self._register(json.loads(data))
            except (ValueError, UnicodeDecodeError):
                pass
            chunks.append(data + b"\n")
        self.send_bytes(b"".join(chunks))

    def send(self, frame: Any) -> None:
        """Writes one frame (any JSON value) as a line."""
        self._register(frame)
        self.send_bytes(json.dumps(frame, ensure_ascii=False).encode("utf-8") + b"\n")

    def send_request(self, method: str, params: Any = None, id: Any = None) -> Any:
        """Sends a request without waiting; returns its id."""
        if id is None:
            id = self.next_id()
        frame: dict[str, Any] = {"jsonrpc": "2.0", "id": id, "method": method}
        if params is not None:
            frame["params"] = params
        self.send(frame)
        return id

    def notify(self, method: str, params: Any = None) -> None:
        frame: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            frame["params"] = params
        self.send(frame)

    # Waiting (all bounded)

    def _wait(self, predicate: Callable[[], Any], timeout: float, what: str) -> Any:
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                value = predicate()
                if value is not None:
                    return value
                if self._eof:
                    raise HostError(f"host closed its stdout while waiting for {what} "
                                    f"({self.describe_exit()})\n{self.stderr_tail()}")
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise HostError(f"timed out after {timeout} s waiting for {what}\n{self.stderr_tail()}")
                self.cond.wait(remaining)

    def wait_response(self, id: Any, timeout: float = TIMEOUT) -> dict[str, Any]:
        """The next unconsumed answer carrying `id` (compared with its JSON type)."""
        key = id_key(id)

        def find():
            for index, frame in enumerate(self.frames):
                if index in self._consumed or "method" in frame:
                    continue
                if ("result" in frame or "error" in frame) and id_key(frame.get("id")) == key \
                        and frame.get("id") is not None:
                    self._consumed.add(index)
                    return frame
            return None

        return self._wait(find, timeout, f"the answer to id {id!r}")

    def wait_null_id_error(self, since: int = 0, timeout: float = TIMEOUT) -> dict[str, Any]:
        """The next unconsumed error answer with `id: null` among frames from index `since`."""
        def find():
            for index in range(since, len(self.frames)):
                frame = self.frames[index]
                if index not in self._consumed and "error" in frame and frame.get("id", 0) is None:
                    self._consumed.add(index)
                    return frame
            return None

        return self._wait(find, timeout, "an error answer with id null")

    def request(self, method: str, params: Any = None, id: Any = None, timeout: float = TIMEOUT) -> dict[str, Any]:
        """Sends a request and returns the whole response frame."""
        return self.wait_response(self.send_request(method, params, id=id), timeout)

    def result(self, method: str, params: Any = None, timeout: float = TIMEOUT) -> Any:
        """Sends a request and returns its result; an error answer fails the test."""
        response = self.request(method, params, timeout=timeout)
        if "result" not in response:
            raise HostError(f"{method} {short(params)} failed: {short(response.get('error'))}")
        return response["result"]

    def error(self, method: str, params: Any = None, timeout: float = TIMEOUT) -> dict[str, Any]:
        """Sends a request and returns its error object; a result fails the test."""
        response = self.request(method, params, timeout=timeout)
        if "error" not in response:
            raise HostError(f"{method} {short(params)} succeeded, an error was expected: {short(response)}")
        return response["error"]

    def mark(self) -> int:
        """The number of frames received so far (for `since=`)."""
        with self.cond:
            return len(self.frames)

    def frame_at(self, index: int, timeout: float = TIMEOUT) -> dict[str, Any]:
        """The frame at `index` in arrival order, waiting for it."""
        return self._wait(lambda: self.frames[index] if len(self.frames) > index else None,
                          timeout, f"frame #{index}")

    def notifications(self, method: str | None = None, since: int = 0) -> list[dict[str, Any]]:
        """Params of the notifications received (from frame index `since`)."""
        with self.cond:
            return [f.get("params") for f in self.frames[since:]
                    if "method" in f and (method is None or f["method"] == method)]

    def wait_for_notification(self, method: str, predicate: Callable[[dict], bool] | None = None,
                              timeout: float = TIMEOUT, since: int = 0) -> dict[str, Any]:
        """Params of the first notification `method` (from frame index `since`) matching `predicate`."""
        def find():
            for frame in self.frames[since:]:
                if frame.get("method") == method and "id" not in frame:
                    params = frame.get("params")
                    if predicate is None or (isinstance(params, dict) and predicate(params)):
                        return params
            return None

        return self._wait(find, timeout, f"a {method} notification")

    # Lifecycle

    def initialize(self, protocol_version: str = "1.0") -> dict[str, Any]:
        response = self.request("initialize", {"protocolVersion": protocol_version,
                                               "clientInfo": {"name": "contract-tests", "version": "1"}})
        if "result" not in response:
            raise HostError(f"initialize failed: {short(response)}\n{self.stderr_tail()}")
        self.init_result = response["result"]
        self.notify("initialized", {})
        return self.init_result

    def _count_answers(self) -> None:
        """At the end: an id answered more than once (unless a test expected it) is a violation."""
        with self.cond:
            for key, count in self.response_counts.items():
                if count > 1 and key not in self.expected_duplicate_ids:
                    self._violation(f"request id {key[1]!r} was answered {count} times")

    def all_output_text(self) -> str:
        with self.cond:
            return b"".join(self.lines).decode("utf-8", errors="replace")

    def profile_names(self) -> list[str]:
        return [p["name"] for p in self.result("listProviders", {})["profiles"]]


class Host(FrameLink):
    """One `authbridge serve` child process and the frames it wrote."""

    def __init__(self, argv: list[str], env: dict[str, str], workdir: Path):
        super().__init__(workdir)
        self.argv = argv
        self.stderr_path = workdir / "stderr.log"
        self._stderr_file = open(self.stderr_path, "wb")
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr_file,
            env=env, cwd=workdir, bufsize=0,
        )
        self._start_reading(self.proc.stdout, "host-stdout")

    def _write(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(data)
            self.proc.stdin.flush()
        except BrokenPipeError:
            raise HostError(f"the host stopped reading its stdin ({self.describe_exit()})\n"
                            f"{self.stderr_tail()}") from None

    def close_stdin(self) -> None:
        with self._write_lock:
            try:
                if self.proc.stdin and not self.proc.stdin.closed:
                    self.proc.stdin.close()
            except BrokenPipeError:
                pass

    def wait_exit(self, timeout: float = TIMEOUT) -> int:
        """The exit code; fails when the host has not ended within `timeout`."""
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise HostError(f"host still running {timeout} s later\n{self.stderr_tail()}") from None
        self._reader.join(timeout)
        return code

    def stop(self) -> None:
        """Ends the process (EOF first, then kill) and waits for the reader."""
        if self.proc.poll() is None:
            self.close_stdin()
            try:
                self.proc.wait(TIMEOUT)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(TIMEOUT)
        self.close_stdin()
        self._reader.join(TIMEOUT)
        if self.proc.stdout:
            self.proc.stdout.close()
        self._stderr_file.close()
        self._count_answers()

    def describe_exit(self) -> str:
        try:
            code = self.proc.wait(2)
        except subprocess.TimeoutExpired:
            return "still running"
        if code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = f"signal {-code}"
            return f"killed by {name}"
        return f"exit code {code}"

    def stderr_text(self) -> str:
        if not self._stderr_file.closed:
            self._stderr_file.flush()
        return self.stderr_path.read_bytes().decode("utf-8", errors="replace")

    def stderr_tail(self, lines: int = 25) -> str:
        try:
            text = self.stderr_text()
        except OSError:
            return ""
        crash = text.find("*** Program crashed")
        if crash >= 0:
            # The crash line and the crashed thread's frames (Swift runtime backtrace format).
            crash_lines = text[crash:].splitlines()
            tail = crash_lines[:1]
            start = next((i for i, line in enumerate(crash_lines) if line.rstrip().endswith("crashed:")), None)
            if start is not None:
                block = crash_lines[start:start + lines]
                end = next((i for i, line in enumerate(block) if i > 1 and not line.strip()), len(block))
                tail += block[:end]
        else:
            tail = text.splitlines()[-lines:]
        return "host stderr (tail):\n  " + "\n  ".join(tail)



#: Vault files that keep profiles' resolved configurations (bridge-spec, Storage: "Kept
#: configuration"), named like any record: the first 32 hex digits of SHA-256 of the key's profile
#: part (here U+001E "resolved"), a dash, and those of the profile's name.
KEPT_CONFIGURATION_PREFIX = hashlib.sha256("\x1eresolved".encode()).hexdigest()[:32] + "-"


def session_records(vault: Path) -> list[Path]:
    """The encrypted-file vault's session records: every `*.vault` file but the kept configurations."""
    if not vault.exists():
        return []
    return sorted(path for path in vault.glob("*.vault") if not path.name.startswith(KEPT_CONFIGURATION_PREFIX))


def host_command(workdir: Path, plugin_dirs: Iterable[Path] = (), profiles: dict | None = None,
                 config_text: str | None = None, log_level: str = "debug", test_clock: bool = False,
                 extra_args: Iterable[str] = (), default_plugins: bool = False) -> tuple[list[str], dict[str, str]]:
    """argv and environment of `authbridge serve` isolated in `workdir` (created): its own
    config file, XDG folders and HOME (isolation.py), and no default plugin folders unless
    `default_plugins` (then the build folder's plugins/ and $XDG_DATA_HOME/authbridge/plugins
    load too, as for a user)."""
    workdir.mkdir(parents=True)
    config = workdir / "config.json"
    config.write_text(config_text if config_text is not None else json.dumps({"profiles": profiles or {}}))
    argv = [str(HOST_BIN), "serve", *([] if default_plugins else ["--no-default-plugins"]),
            "--config", str(config), "--log-level", log_level]
    for folder in plugin_dirs:
        argv += ["--plugins", str(folder)]
    if test_clock:
        argv.append("--test-clock")
    argv += list(extra_args)
    return argv, isolated_environment(workdir)


# ── Helpers the suites share ──────────────────────────────────────────────────


def start_on_data_home(tmp_path: Path, plugin_dir: Path, name: str, data_home: Path, *extra: str,
                       env: dict | None = None) -> Host:
    """An initialized host whose vault lives under `data_home` (shared by the hosts of one test,
    like several runs of one user), with the default profiles and no vault secret from outside."""
    argv, environment = host_command(tmp_path / name, [plugin_dir], profiles=DEFAULT_PROFILES, extra_args=extra)
    environment["XDG_DATA_HOME"] = str(data_home)
    environment.update(env or {})
    host = Host(argv, environment, tmp_path / name)
    host.initialize()
    return host


def stop_cleanly(host: Host) -> None:
    """Stops a host started outside the fixtures and fails on any frame violation or leak."""
    host.stop()
    assert not host.violations, host.violations
    places = leak_scan.leaks(host.stderr_text(), host.frames)
    assert not places, f"a code or token appeared in {', '.join(places)}"


def sign_in_session(host: Host, provider: str, session_id: str) -> dict[str, Any]:
    """A session-flow sign-in that must succeed; returns its SignInStatus."""
    return host.result("requestOAuthTokens", {"provider": provider, "flow": "session", "sessionId": session_id})


def advance_clock(host: Host, milliseconds: int) -> None:
    response = host.request("$/test/advanceClock", {"milliseconds": milliseconds})
    assert "result" in response, response


def begin_sign_in(host: Host, provider: str, **params: Any) -> tuple[Any, dict[str, Any]]:
    """Sends requestOAuthTokens for `provider` (with `params`, e.g. flow="external") and waits for
    its openUrl progress; returns (the request's id, that progress event's params)."""
    request_id = host.send_request("requestOAuthTokens", {"provider": provider, **params})
    opened = host.wait_for_notification(
        "signIn/progress", lambda p: p.get("stage") == "openUrl" and p.get("requestId") == request_id)
    return request_id, opened


def sign_in_external(host: Host, server: Any, profile: str, params: dict[str, Any] | None = None, **user: str) -> dict[str, Any]:
    """The external flow: the test is the browser and hands the redirect over with completeSignIn.
    `user`/`password` choose who signs in, where the server knows several users; `params` are more
    of requestOAuthTokens's (scopes, resource…)."""
    request_id, progress = begin_sign_in(host, profile, flow="external", **(params or {}))
    url = progress["url"]
    assert url.startswith(server.authorize_prefix), "unexpected sign-in URL"
    query = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(url).query))
    if "request_uri" in query:   # pushed (RFC 9126): the parameters went by the back channel
        assert sorted(query) == ["client_id", "request_uri"], f"a pushed request's URL carries {sorted(query)}"
    else:
        assert query.get("code_challenge") and query.get("code_challenge_method") == "S256", "no PKCE S256"
    location = server.browse(url, **user)
    callback_prefix = progress.get("callbackPrefix") or server.redirect_uri
    assert location.startswith(callback_prefix)
    assert host.result("completeSignIn", {"provider": profile, "callbackUrl": location}) == {"accepted": True}
    answer = host.wait_response(request_id)
    assert "result" in answer, f"sign-in failed: {short(answer.get('error'))}"
    assert answer["result"]["state"] == "signedIn"
    return answer["result"]
