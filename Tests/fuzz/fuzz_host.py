#!/usr/bin/env python3
"""A seeded fuzzer of the bridge: valid, hostile and broken frames against the real host.

Each *episode* is one `authbridge serve` lifetime (the two test plugins, a memory vault). A
seeded generator writes frames — valid requests of every method, hostile params (numbers beyond
64 bits or a double, wrong types, nulls, empty strings, unknown members, deep nesting), broken
frames (invalid JSON or UTF-8, duplicate keys, bad ids, batches, frames nested deeper than the
parser goes, over-long lines), duplicate ids, cancellations of finished, running and waiting
requests, `initialize`/`shutdown`/`exit` in odd places — and ends with end of input or `exit`.

An oracle written from bridge-spec (not from the host's code) says what each frame must get:
  * every request whose id can be read is answered exactly once (a duplicate id too: its
    refusal), with that id; every frame the host refuses without a readable id gets exactly one
    answer with `id: null`; notifications, responses and frames after `exit` get none;
  * every frame the host writes validates against bridge-spec (the contract suite's validators);
  * a request's params that break the method's `x-params` schema get -32602, valid ones never
    do (but for the two checks the schema cannot express): host and spec agree;
  * the host exits with the status the spec gives (0 after end of input or shutdown + exit,
    1 for exit without shutdown), without a signal, within a bound; its peak RSS stays bounded.

With --agent, one `authbridge agent` serves the whole run and each episode is one connection to
it (`exit` and end of input end the connection only): its RSS over the run is one long-lived
process's, and a connection it did not close within the bound is a hang.

Besides the failures it counts, it reports the latency of every answer (from the write that
carried the request to the read that carried its answer: a frontend's view, queueing behind a
pipelined flood included), as percentiles, with and without `requestOAuthTokens` (which waits
for a user, a callback or a cancel); and RSS over the run: each host's peak (VmHWM), or with
--agent the agent's VmRSS after each connection, at tenths of the run.

Usage: fuzz_host.py --frames N [--seed S] [--max-rss-mib M] [--agent]   (prints the figures;
exit 1 on a failure). Tests/contract/test_fuzz.py runs it at a bounded size in `make test`;
`make fuzz N=…` runs it long.
"""

from __future__ import annotations

import argparse
import collections
import decimal
import json
import math
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "support"))

from authbridge_testkit import copy_plugins, frame_problems, host_command, spec  # noqa: E402  (the test kit)
from authbridge_testkit.agent import end_input  # noqa: E402
from authbridge_testkit.agent import Agent  # noqa: E402
from authbridge_testkit.host import DEFAULT_PROFILES  # noqa: E402
from authbridge_testkit.paths import TEST_PLUGIN_FILES, TEST_PLUGINS_DIR  # noqa: E402

sys.setrecursionlimit(max(sys.getrecursionlimit(), 20_000))  # the oracle parses frames deeper than 2048 levels

MAX_DEPTH = 2048                  # jansson's JSON_PARSER_MAX_DEPTH
MAX_FRAME = 64 << 20              # bridge-spec §1
INT64 = (-(1 << 63), (1 << 63) - 1)
EXIT_BOUND_S = 60.0               # an episode's host must have exited this long after its input ended
METHODS = ["listProviders", "configureProfile", "removeProfile", "listAccounts", "checkSignInStatus",
           "requestOAuthTokens", "completeSignIn", "signOut", "getAccessToken", "fetch", "rpc.discover", "shutdown"]
PROFILES = ["c", "s"]

# Big and odd numbers, as JSON text.
WIDE_NUMBERS = ["9223372036854775808", "-9223372036854775809", "18446744073709551616", "1" + "0" * 40,
                "1e999", "-1e999", "1.7976931348623157e309", "123456789012345678901234567890.5e10"]
ODD_NUMBERS = ["1000.0", "1e3", "6E4", "-0", "0.0", "1e-999", "1.5", "-1", "2147483648", "86400001", "3600000.0"]


# ── The oracle ────────────────────────────────────────────────────────────────


def _no_duplicates(pairs):
    seen = {}
    for key, value in pairs:
        if key in seen:
            raise ValueError("duplicate key")
        seen[key] = value
    return seen


def _reject_constant(name):
    raise ValueError(f"{name} is not JSON")


def _has_lone_surrogate(value) -> bool:
    if isinstance(value, str):
        try:
            value.encode("utf-8")
            return False
        except UnicodeEncodeError:
            return True
    if isinstance(value, list):
        return any(_has_lone_surrogate(v) for v in value)
    if isinstance(value, dict):
        return any(_has_lone_surrogate(k) or _has_lone_surrogate(v) for k, v in value.items())
    return False


def _depth(value) -> int:
    depth, stack = 0, [(value, 1)]
    while stack:
        node, level = stack.pop()
        if isinstance(node, (list, dict)):
            depth = max(depth, level)
            stack.extend((child, level + 1) for child in (node.values() if isinstance(node, dict) else node))
    return depth


def _has_non_finite(value) -> bool:
    if isinstance(value, float):
        return not math.isfinite(value)
    if isinstance(value, list):
        return any(_has_non_finite(v) for v in value)
    if isinstance(value, dict):
        return any(_has_non_finite(v) for v in value.values())
    return False


def readable_id(value) -> tuple[str, Any] | None:
    """The key of an id the host can echo (bridge-spec §3), or None."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, str):
        return ("str", value)
    if isinstance(value, int):
        return ("int", value) if INT64[0] <= value <= INT64[1] else None
    if isinstance(value, decimal.Decimal):
        # A number written with a fraction or an exponent, read exactly from its text: an id when
        # it is an integer within 64 bits (7.0, 1e3), never when a fraction (1e-999, 1.5).
        exact = value.is_finite() and value == value.to_integral_value() and INT64[0] <= value <= INT64[1]
        return ("int", int(value)) if exact else None
    return None


@dataclass
class Expectation:
    kind: str                          # "none", "null", "answer", "exit"
    key: tuple[str, Any] | None = None
    method: str | None = None
    params: Any = None
    is_request: bool = False


def expect(line: bytes) -> Expectation:
    """What the spec says one line (without its newline) must get."""
    body = line[:-1] if line.endswith(b"\r") else line
    if not body.strip(b" \t"):
        return Expectation("none")
    if len(body) > MAX_FRAME:
        return Expectation("null")
    try:
        text = body.decode("utf-8")
        value = json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_reject_constant)
    except (UnicodeDecodeError, ValueError):
        return Expectation("null")
    if _has_lone_surrogate(value):
        return Expectation("null")
    if not isinstance(value, dict):
        return Expectation("null")
    too_deep = _depth(value) > MAX_DEPTH
    if isinstance(value.get("id"), float):
        # A double cannot tell 1e-999 from 0: the id as its text says (bridge-spec §3, Ids).
        value["id"] = json.loads(text, parse_float=decimal.Decimal, parse_constant=_reject_constant)["id"]
    key = readable_id(value["id"]) if "id" in value else None
    if "id" in value and key is None:
        return Expectation("null")
    if value.get("jsonrpc") != "2.0":
        return Expectation("answer", key) if key else Expectation("null")
    if "method" not in value:
        if key and ("result" in value or "error" in value):
            return Expectation("none")
        return Expectation("answer", key) if key else Expectation("null")
    method = value["method"]
    if not isinstance(method, str):
        return Expectation("answer", key) if key else Expectation("null")
    params = value.get("params")
    if "params" in value and not isinstance(params, (dict, list)):
        return Expectation("answer", key) if key else Expectation("null")
    if too_deep:
        return Expectation("answer", key) if key else Expectation("null")
    if key is None:
        if method == "exit":
            return Expectation("exit")
        return Expectation("none", method=method, params=params)
    return Expectation("answer", key, method, params, is_request=True)


# ── The generator ─────────────────────────────────────────────────────────────


class Generator:
    """Frames for one episode, from a seeded random source."""

    def __init__(self, rng: random.Random):
        self.rng = rng
        self.counter = 0
        self.recent_ids: collections.deque = collections.deque(maxlen=64)

    def fresh_id(self) -> Any:
        self.counter += 1
        choice = self.rng.random()
        if choice < 0.6:
            return self.counter
        if choice < 0.95:
            return f"r{self.counter}"
        return float(self.counter)  # an integer written 7.0: answered as 7

    @staticmethod
    def dumps(value: Any) -> bytes:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8")

    def request(self, method: str, params: Any, request_id: Any = None) -> bytes:
        if request_id is None:
            request_id = self.fresh_id()
        self.recent_ids.append(request_id)
        frame: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params is not None:
            frame["params"] = params
        return self.dumps(frame)

    def profile(self) -> str:
        return self.rng.choice(PROFILES + ["f1", "f2", "zz"])

    def valid_params(self, method: str) -> Any:
        r = self.rng
        provider = self.profile()
        if method == "configureProfile":
            plugin = r.choice(["ctest", "swifttest", "nope"])
            settings = {"server": "https://ctest.example"} if plugin != "swifttest" else {"clientId": "c1"}
            if r.random() < 0.2:
                settings["extra"] = {"nested": [1, 2.5, "x", None, True]}
            return {"name": r.choice(["f1", "f2", "c", "s"]), "plugin": plugin, "settings": settings}
        if method == "removeProfile":
            return {"name": r.choice(["f1", "f2", "gone"])}
        if method == "listAccounts":
            return r.choice([{}, {"provider": provider}])
        if method in ("checkSignInStatus", "signOut"):
            params = {"provider": provider}
            if r.random() < 0.2:
                params["account"] = r.choice(["ok-1", "nobody"])
            return params
        if method == "requestOAuthTokens":
            if r.random() < 0.7:
                session = r.choice(["ok-1", "ok-2", "bad", "bad-reason", "no-message", "expired"] + ["slow"] * (r.random() < 0.05))
                return {"provider": provider, "flow": "session", "sessionId": session}
            params = {"provider": provider, "flow": "external", "timeoutMs": r.choice([1000, 1500, 2000])}
            if r.random() < 0.3:
                params["scopes"] = ["openid", "email"]
            return params
        if method == "completeSignIn":
            return {"provider": provider, "callbackUrl": r.choice([
                "https://ctest.example/done?access_token=A&session_token=S",
                "https://swifttest.example/done?session_token=S&access_token=A", "https://elsewhere.example/cb"])}
        if method == "getAccessToken":
            params = {"provider": provider}
            if r.random() < 0.3:
                params["minValidityMs"] = r.choice([0, 1000, 86_400_000])
            if r.random() < 0.1:
                params["forceRefresh"] = r.random() < 0.5
            return params
        if method == "fetch":
            # Loopback only: the discard port refuses at once.
            return {"provider": provider, "url": "http://127.0.0.1:9/" + r.choice(["x", "y?z=1"]), "timeoutMs": 1000,
                    "method": r.choice(["GET", "POST"]), "headers": {"X-Test": "1"}}
        return r.choice([None, {}])

    def hostile_params(self, method: str) -> Any:
        """Valid params with one member made wrong (or an extra one added)."""
        r = self.rng
        params = self.valid_params(method)
        if not isinstance(params, dict):
            params = {}
        keys = list(params) or ["provider"]
        target = r.choice(keys + ["bogus"])
        params[target] = r.choice([None, "", 5, -1, 1.5, True, [], {}, ["x"], "x" * r.choice([1, 300]),
                                   {"deep": self.nested(r.randrange(2, 60))}, "\u0000\u001f\u2028", "ключ"])
        return params

    def nested(self, depth: int) -> Any:
        value: Any = 1
        for _ in range(depth):
            value = [value] if self.rng.random() < 0.5 else {"k": value}
        return value

    def wide_number_frame(self) -> bytes:
        """A request with a number beyond 64 bits or a double in its params (text-level)."""
        r = self.rng
        request_id = self.fresh_id()
        self.recent_ids.append(request_id)
        number = r.choice(WIDE_NUMBERS + ODD_NUMBERS)
        method, member = r.choice([("getAccessToken", "minValidityMs"), ("requestOAuthTokens", "timeoutMs"),
                                   ("fetch", "timeoutMs"), ("checkSignInStatus", "bogus"), ("configureProfile", "settings")])
        base = {"getAccessToken": '"provider":"c"', "requestOAuthTokens": '"provider":"c","flow":"session","sessionId":"ok-3"',
                "fetch": '"provider":"c","url":"http://127.0.0.1:9/n"', "checkSignInStatus": '"provider":"s"',
                "configureProfile": '"name":"f2","plugin":"ctest"'}[method]
        value = number if member != "settings" else '{"server":"https://ctest.example","n":[%s]}' % number
        text = '{"jsonrpc":"2.0","id":%s,"method":"%s","params":{%s,"%s":%s}}' % (
            json.dumps(request_id), method, base, member, value)
        return text.encode()

    def broken_frame(self) -> bytes:
        r = self.rng
        kind = r.randrange(22)
        valid = self.request(r.choice(METHODS), self.valid_params("listAccounts"))
        if kind == 0:
            return valid[:r.randrange(1, len(valid))]                     # truncated
        if kind == 1:
            return b'{"jsonrpc":"2.0","id":"u%d","method":"listProviders","params":{"x":"\xff\xfe"}}' % self.counter
        if kind == 2:
            return b'{"jsonrpc":"2.0","id":1,"id":2,"method":"listProviders"}'  # duplicate keys
        if kind == 3:
            return self.dumps([json.loads(valid)] * r.randrange(0, 3))        # batch
        if kind == 4:
            return r.choice([b"null", b"42", b'"text"', b"true", b"[]", b"{}"])
        if kind == 5:
            return self.dumps({"jsonrpc": r.choice(["1.0", 2.0, None]), "id": self.fresh_id(), "method": "listProviders"})
        if kind == 6:
            return self.dumps({"jsonrpc": "2.0", "id": self.fresh_id(), "params": {}})          # no method
        if kind == 7:
            return self.dumps({"jsonrpc": "2.0", "id": r.choice([None, 1.5, True, [1], {"a": 1}, -0.5]),
                               "method": "listProviders"})
        if kind == 8:
            return b'{"jsonrpc":"2.0","id":%s,"method":"listProviders"}' % r.choice(
                [b"9223372036854775808", b"1e999", b"-1e400", b"1e300", b"18446744073709551616",
                 b"1e-999", b"-1e-400", b"1.0000000000000000001"])   # fractions a double reads as 0 or 1
        if kind == 9:
            depth = r.randrange(2100, 3000)
            request_id = self.fresh_id()
            self.recent_ids.append(request_id)
            return (b'{"jsonrpc":"2.0","id":' + self.dumps(request_id) + b',"method":"configureProfile","params":{"name":"f1",'
                    b'"plugin":"ctest","settings":{"x":' + b"[" * depth + b"]" * depth + b"}}}")
        if kind == 10:
            return b'{"jsonrpc":"2.0","method":"listProviders","params":{"x":' + b"[" * 2500 + b"]" * 2500 + b"}}"
        if kind == 11:
            return self.dumps({"jsonrpc": "2.0", "id": self.fresh_id(), "method": r.choice([7, None, ["m"]])})
        if kind == 12:
            return self.dumps({"jsonrpc": "2.0", "id": self.fresh_id(), "method": "listProviders",
                               "params": r.choice(["text", 5, True, None])})
        if kind == 13:
            return b'{"jsonrpc":"2.0","id":"s%d","method":"listProviders","params":{"x":"\\ud800"}}' % self.counter
        if kind == 14:
            return b'{"jsonrpc":"2.0","id":"n%d","method":"getAccessToken","params":{"provider":"c","minValidityMs":NaN}}' % self.counter
        if kind == 15:
            return valid + b" trailing"
        if kind == 16:
            return valid + b"\r"                                                 # CRLF: tolerated
        if kind == 17:
            return r.choice([b"", b"   ", b"\t \t"])                              # blank: ignored
        if kind == 18:
            return self.dumps({"jsonrpc": "2.0", "id": self.fresh_id(), "result": {"ok": True}})   # a client response
        if kind == 19:
            return self.dumps({"jsonrpc": "2.0", "method": r.choice(["no/such", "$/unknown", "initialized", "getAccessToken"]),
                               "params": r.choice([{}, {"provider": "c"}, ["x"]])})
        if kind == 20:
            return self.dumps({"jsonrpc": "2.0", "id": self.fresh_id(), "method": r.choice(["getTokens", "exit", "initialized",
                                                                                             "$/cancelRequest", "session/changed"])})
        return bytes(r.randrange(256) for _ in range(r.randrange(1, 40))).replace(b"\n", b" ")

    def cancel(self) -> bytes:
        r = self.rng
        target = r.choice(list(self.recent_ids)) if self.recent_ids and r.random() < 0.85 else r.choice([424242, "nobody", None, 1.5])
        return self.dumps({"jsonrpc": "2.0", "method": "$/cancelRequest", "params": {"id": target}})

    def duplicate(self) -> bytes:
        request_id = self.rng.choice(list(self.recent_ids)) if self.recent_ids else 1
        # Not shutdown or initialize: whether a duplicate runs depends on timing, and those two change the phase.
        method = self.rng.choice(["listProviders", "requestOAuthTokens", "checkSignInStatus", "getAccessToken"])
        return self.request(method, self.valid_params(method), request_id)

    def episode(self, size: int) -> tuple[list[bytes], str]:
        """The lines of one host lifetime and how it ends ("eof", "exit", "shutdown-exit")."""
        r = self.rng
        lines: list[bytes] = []
        if r.random() < 0.9:
            lines.append(self.request("initialize", {"protocolVersion": "1.0", "clientInfo": {"name": "fuzz"}}))
            lines.append(self.dumps({"jsonrpc": "2.0", "method": "initialized", "params": {}}))
        while len(lines) < size:
            kind = r.random()
            if kind < 0.40:
                method = r.choice(METHODS[:-1] if r.random() < 0.995 else METHODS)
                lines.append(self.request(method, self.valid_params(method)))
            elif kind < 0.58:
                method = r.choice(METHODS[:-1])
                lines.append(self.request(method, self.hostile_params(method)))
            elif kind < 0.63:
                lines.append(self.wide_number_frame())
            elif kind < 0.83:
                lines.append(self.broken_frame())
            elif kind < 0.91:
                lines.append(self.cancel())
            elif kind < 0.96:
                lines.append(self.duplicate())
            elif kind < 0.985:
                lines.append(self.request("initialize", {"protocolVersion": r.choice(["1.0", "2.0", "1.9", "x"])}))
            else:
                lines.append(self.request("rpc.discover", None))
        ending = r.choices(["eof", "shutdown-exit", "exit", "exit-midway"], [0.6, 0.25, 0.1, 0.05])[0]
        if ending == "shutdown-exit":
            lines.append(self.request("shutdown", None))
            lines.append(self.dumps({"jsonrpc": "2.0", "method": "exit"}))
        elif ending == "exit":
            lines.append(self.dumps({"jsonrpc": "2.0", "method": "exit"}))
        elif ending == "exit-midway":
            lines.insert(r.randrange(1, len(lines)), self.dumps({"jsonrpc": "2.0", "method": "exit"}))
            ending = "exit"
        return lines, ending


# ── Running one episode ──────────────────────────────────────────────────────


@dataclass
class Figures:
    frames: int = 0
    requests: int = 0
    episodes: int = 0
    crashes: int = 0
    hangs: int = 0
    lost_answers: int = 0
    extra_answers: int = 0
    null_id_mismatches: int = 0
    invalid_frames: int = 0
    params_disagreements: int = 0
    wrong_exit_codes: int = 0
    rss_over_bound: int = 0
    max_rss_kib: int = 0
    max_rss_episode: str = ""
    seconds: float = 0.0
    problems: list[str] = field(default_factory=list)
    # Milliseconds from the write of a request to the read of its answer, and whether it was a sign-in.
    latencies_ms: list[float] = field(default_factory=list)
    sign_in_latencies_ms: list[float] = field(default_factory=list)
    # (frames so far, KiB): each host's peak, or the agent's resident set after each connection.
    rss_timeline: list[tuple[int, int]] = field(default_factory=list)
    agent: bool = False

    def problem(self, text: str) -> None:
        if len(self.problems) < 40:
            self.problems.append(text)

    @property
    def failed(self) -> bool:
        return any((self.crashes, self.hangs, self.lost_answers, self.extra_answers, self.null_id_mismatches,
                    self.invalid_frames, self.params_disagreements, self.wrong_exit_codes, self.rss_over_bound))

    def report(self) -> str:
        return (f"frames {self.frames}, requests {self.requests}, "
                f"{'connections to one agent' if self.agent else 'host lifetimes'} {self.episodes}, "
                f"crashes {self.crashes}, hangs {self.hangs}, lost answers {self.lost_answers}, "
                f"extra answers {self.extra_answers}, null-id answer mismatches {self.null_id_mismatches}, "
                f"frames breaking bridge-spec {self.invalid_frames}, params disagreements {self.params_disagreements}, "
                f"wrong exit codes {self.wrong_exit_codes}, max RSS {self.max_rss_kib / 1024:.1f} MiB "
                f"({self.max_rss_episode}), {self.seconds:.0f} s")

    def latency_report(self) -> str:
        def percentiles(values: list[float]) -> str:
            if not values:
                return "none"
            ordered = sorted(values)
            pick = [ordered[min(len(ordered) - 1, int(q * len(ordered)))] for q in (0.5, 0.9, 0.99, 0.999)]
            return (f"p50 {pick[0]:.2f}, p90 {pick[1]:.2f}, p99 {pick[2]:.1f}, p99.9 {pick[3]:.1f}, "
                    f"max {ordered[-1]:.0f} ms ({len(ordered)} answers)")
        return (f"latency, write of a request to read of its answer: {percentiles(self.latencies_ms)}; "
                f"requestOAuthTokens (waits for a user, a callback or a cancel): {percentiles(self.sign_in_latencies_ms)}")

    def rss_report(self) -> str:
        if not self.rss_timeline:
            return "RSS over the run: none"
        what = "agent VmRSS after each connection" if self.agent else "each host's peak VmHWM"
        marks = []
        total = self.rss_timeline[-1][0]
        for tenth in range(1, 11):
            upto = [kib for frames, kib in self.rss_timeline if frames <= total * tenth / 10] or [self.rss_timeline[0][1]]
            window = [kib for frames, kib in self.rss_timeline if total * (tenth - 1) / 10 < frames <= total * tenth / 10]
            marks.append(f"{max(window or upto[-1:]) / 1024:.1f}")
        return f"RSS over the run ({what}, MiB, the largest in each tenth of the frames): " + " ".join(marks)


class Validator:
    """bridge-spec validation of host frames, cached by shape (the id normalised)."""

    def __init__(self):
        self.spec = spec()
        self.cache: dict[str, list[str]] = {}

    def problems(self, frame: dict, method: str | None) -> list[str]:
        shape = dict(frame)
        if "id" in shape and shape["id"] is not None:
            shape["id"] = 0 if isinstance(shape["id"], int) else "x"
        key = (method or "") + json.dumps(shape, sort_keys=True)
        found = self.cache.get(key)
        if found is None:
            found = frame_problems(self.spec, frame, method)
            if len(self.cache) < 200_000:
                self.cache[key] = found
        return found


class PeakRSS:
    """The host's peak resident set (VmHWM), read from /proc while it runs. Not wait4's
    ru_maxrss: for a child started by vfork it also counts the parent's (this fuzzer's) memory."""

    def __init__(self, pid: int):
        self.path = f"/proc/{pid}/status"
        self.peak_kib = 0
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._sample, daemon=True)
        self.thread.start()

    def read(self) -> None:
        try:
            with open(self.path) as status:
                for line in status:
                    if line.startswith("VmHWM:"):
                        self.peak_kib = max(self.peak_kib, int(line.split()[1]))
        except (OSError, ValueError):
            pass

    def _sample(self) -> None:
        while not self.stopped.wait(0.05):
            self.read()

    def stop(self) -> int:
        self.stopped.set()
        self.thread.join()
        return self.peak_kib


def params_valid(spec, method: str, params: Any) -> bool | None:
    """Whether `params` satisfy the method's x-params schema (None: not a request method)."""
    validator = spec.request_params.get(method)
    if validator is None or method in spec.client_notifications:
        return None
    instance = {} if params is None else params
    if isinstance(instance, list):
        return False
    if _has_non_finite(instance):
        return False
    return not any(True for _ in validator.iter_errors(instance))


class ServeHosts:
    """One `authbridge serve` per episode: the default."""

    agent = False

    def __init__(self, plugin_dir: Path):
        self.plugin_dir = plugin_dir

    def open(self, workdir: Path) -> ServeLink:
        return ServeLink(self.plugin_dir, workdir)

    def close(self) -> None:
        pass


class ServeLink:
    """One episode's host: frames in on its stdin, out on its stdout."""

    def __init__(self, plugin_dir: Path, workdir: Path):
        argv, env = host_command(workdir, [plugin_dir], profiles=DEFAULT_PROFILES, log_level="warning",
                                 extra_args=["--vault", "memory"])
        self.workdir = workdir
        self.stderr = open(workdir / "stderr.log", "wb")
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr, env=env, bufsize=0)
        self.peak = PeakRSS(self.proc.pid)
        self.read_fd = self.proc.stdout.fileno()

    def write(self, data: bytes) -> None:
        self.proc.stdin.write(data)

    def end_input(self) -> None:
        self.proc.stdin.close()

    def finish(self, bound: float) -> tuple[bool, int | None, int | None]:
        """(ended within `bound`, exit status or -signal, peak RSS KiB)."""
        box: dict[str, Any] = {}

        def reap():
            _, status, _ = os.wait4(self.proc.pid, 0)
            box["status"] = status
            box["rss"] = self.peak.stop()

        reaper = threading.Thread(target=reap, daemon=True)
        reaper.start()
        reaper.join(bound)
        if reaper.is_alive():
            self.proc.kill()
            reaper.join(10)
            return False, None, None
        self.proc.returncode = os.waitstatus_to_exitcode(box["status"])
        return True, self.proc.returncode, box["rss"]

    def close(self) -> None:
        self.stderr.close()

    def stderr_tail(self) -> str:
        return (self.workdir / "stderr.log").read_bytes()[-3000:].decode("utf-8", "replace")


class AgentHost:
    """One `authbridge agent` for the whole run; each episode is one connection to it."""

    agent = True

    def __init__(self, plugin_dir: Path, workdir: Path):
        self.process = Agent(workdir, [plugin_dir], DEFAULT_PROFILES, extra_args=["--vault", "memory"], log_level="warning")

    def open(self, workdir: Path) -> AgentLink:
        return AgentLink(self.process)

    def close(self) -> None:
        if self.process.proc.poll() is None:
            self.process.stop()


class AgentLink:
    """One episode: one connection to the agent; `exit` and end of input end it, not the agent."""

    def __init__(self, agent: Agent):
        self.agent = agent
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(str(agent.socket))
        self.read_fd = self.sock.fileno()

    def write(self, data: bytes) -> None:
        self.sock.sendall(data)

    def end_input(self) -> None:
        end_input(self.sock)

    def finish(self, bound: float) -> tuple[bool, int | None, int | None]:
        """(the agent closed the connection: the reader's end; exit status -signal if the agent died, else None;
        the agent's VmRSS KiB now)."""
        alive = self.agent.proc.poll() is None
        code = None if alive else self.agent.proc.returncode
        return True, code, self.agent.rss_kib() if alive else None

    def close(self) -> None:
        self.sock.close()

    def stderr_tail(self) -> str:
        return self.agent.stderr_tail(40)


def run_episode(lines: list[bytes], ending: str, hosts: ServeHosts | AgentHost, workdir: Path, validator: Validator,
                figures: Figures, max_rss_kib: int) -> None:
    workdir.mkdir(parents=True, exist_ok=True) if hosts.agent else None
    link = hosts.open(workdir)
    answers: collections.Counter = collections.Counter()
    answer_frames: dict[tuple, list[dict]] = collections.defaultdict(list)
    null_answers = 0
    bad_lines: list[bytes] = []
    frames_out: list[dict] = []

    # (when it was read, the bytes): the time of each answer is that of the read that ended its line.
    raw_chunks: list[tuple[int, bytes]] = []
    reader_done = threading.Event()

    def read():
        # Only collects: a reader that keeps up is what the host expects of a frontend.
        while True:
            try:
                chunk = os.read(link.read_fd, 1 << 20)
            except OSError:
                break
            if not chunk:
                break
            raw_chunks.append((time.monotonic_ns(), chunk))
        reader_done.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()

    # The oracle, in arrival order (before writing: the writer notes when each line leaves).
    outcomes = []
    for line in lines:
        outcome = expect(line)
        outcomes.append(outcome)
        if outcome.kind == "exit":
            break
    sent_at: list[int] = [0] * len(lines)

    def write():
        try:
            start = 0
            size = 0
            for index, line in enumerate(lines):
                size += len(line) + 1
                if size > 1 << 16 or index == len(lines) - 1:
                    now = time.monotonic_ns()
                    for at in range(start, index + 1):
                        sent_at[at] = now
                    link.write(b"".join(line + b"\n" for line in lines[start:index + 1]))
                    start, size = index + 1, 0
            link.end_input()
        except (BrokenPipeError, ConnectionResetError, OSError):
            pass   # the host stopped reading (after exit): expected

    writer = threading.Thread(target=write, daemon=True)
    writer.start()

    expected: collections.Counter = collections.Counter()
    methods: dict[tuple, str] = {}
    first_line: dict[tuple, int] = {}
    params_of: dict[tuple, tuple[str, Any, bool]] = {}
    null_expected = 0
    phase = "uninitialized"
    shutdown_seen = False
    for index, outcome in enumerate(outcomes):
        if outcome.kind == "exit":
            break
        if outcome.kind == "null":
            null_expected += 1
        elif outcome.kind == "answer":
            expected[outcome.key] += 1
            first_line.setdefault(outcome.key, index)
            if outcome.is_request:
                figures.requests += 1
                methods.setdefault(outcome.key, outcome.method)
                valid = params_valid(validator.spec, outcome.method, outcome.params)
                if outcome.method == "initialize" and phase == "uninitialized" and valid and expected[outcome.key] == 1:
                    version = outcome.params.get("protocolVersion") if isinstance(outcome.params, dict) else None
                    if isinstance(version, str) and version.split(".")[0] == "1":
                        phase = "initialized"
                elif outcome.method == "shutdown" and phase == "initialized" and valid and expected[outcome.key] == 1:
                    phase = "shuttingDown"
                    shutdown_seen = True
                elif phase == "initialized" and valid is not None and outcome.method != "initialize":
                    params_of[outcome.key] = (outcome.method, outcome.params, valid)
    figures.frames += len(lines)

    writer.join(EXIT_BOUND_S)
    ended, code, rss = link.finish(EXIT_BOUND_S)
    if hosts.agent:
        ended = reader_done.wait(EXIT_BOUND_S)
        if not ended:
            figures.hangs += 1
            figures.problem(f"{workdir.name}: the agent did not close the connection within {EXIT_BOUND_S:.0f} s of its input's end")
            link.close()
    elif not ended:
        figures.hangs += 1
        figures.problem(f"{workdir.name}: the host did not exit within {EXIT_BOUND_S:.0f} s")
    if rss is not None:
        figures.rss_timeline.append((figures.frames, rss))
        if rss > figures.max_rss_kib:
            figures.max_rss_kib = rss
            longest = max(len(line) for line in lines)
            figures.max_rss_episode = f"{workdir.name}: {len(lines)} frames, ending {ending}, longest line {longest} bytes"
        if rss > max_rss_kib:
            figures.rss_over_bound += 1
            figures.problem(f"{workdir.name}: {'agent RSS' if hosts.agent else 'peak RSS'} {rss // 1024} MiB")
    reader.join(EXIT_BOUND_S)
    link.close()
    figures.episodes += 1

    lines_out: list[tuple[int, bytes]] = []   # (when its newline was read, the line)
    pending = b""
    for at, chunk in raw_chunks:
        parts = (pending + chunk).split(b"\n")
        pending = parts.pop()
        lines_out.extend((at, part) for part in parts)
    if pending:
        bad_lines.append(b"(no newline at the end) " + pending[:200])
    answered_at: dict[tuple, int] = {}
    for at, raw in lines_out:
        try:
            frame = json.loads(raw, object_pairs_hook=_no_duplicates)
        except ValueError:
            bad_lines.append(raw)
            continue
        frames_out.append(frame)
        if "method" in frame:
            continue
        if frame.get("id") is None:
            null_answers += 1
        else:
            key = readable_id(frame["id"])
            answers[key] += 1
            answer_frames[key].append(frame)
            answered_at.setdefault(key, at)

    # Latency of each request sent once (a duplicate's refusal and its first's answer are two answers).
    for key, at in answered_at.items():
        if expected.get(key) == 1 and key in first_line and sent_at[first_line[key]]:
            milliseconds = (at - sent_at[first_line[key]]) / 1e6
            (figures.sign_in_latencies_ms if methods.get(key) == "requestOAuthTokens" else figures.latencies_ms).append(milliseconds)

    if code is not None and code < 0:
        figures.crashes += 1
        figures.problem(f"{workdir.name}: killed by signal {-code}\n{link.stderr_tail()}")
    elif code is not None and hosts.agent:
        figures.crashes += 1
        figures.problem(f"{workdir.name}: the agent exited with status {code}\n{link.stderr_tail()}")
    elif code is not None:
        wanted = 0 if ending == "eof" or shutdown_seen else 1
        if code != wanted:
            figures.wrong_exit_codes += 1
            figures.problem(f"{workdir.name}: exit status {code}, the spec says {wanted} (ending {ending})")

    for raw in bad_lines:
        figures.invalid_frames += 1
        figures.problem(f"{workdir.name}: a line that is not JSON: {raw[:200]!r}")
    for frame in frames_out:
        key = readable_id(frame.get("id")) if "method" not in frame else None
        # A result is checked against its method's schema when the id was sent once (a duplicate may have run too).
        problems = validator.problems(frame, methods.get(key) if key and expected.get(key) == 1 else None)
        if problems:
            figures.invalid_frames += 1
            figures.problem(f"{workdir.name}: frame breaks bridge-spec: {problems[0]}\n    {json.dumps(frame)[:400]}")

    for key, count in expected.items():
        got = answers.get(key, 0)
        if got < count:
            figures.lost_answers += count - got
            figures.problem(f"{workdir.name}: id {key[1]!r} ({methods.get(key)}) sent {count}×, answered {got}×")
        elif got > count:
            figures.extra_answers += got - count
            figures.problem(f"{workdir.name}: id {key[1]!r} sent {count}×, answered {got}×")
    for key, got in answers.items():
        if key not in expected:
            figures.extra_answers += got
            figures.problem(f"{workdir.name}: an answer to id {key!r}, which was never sent as a request")
    if null_answers != null_expected:
        figures.null_id_mismatches += abs(null_answers - null_expected)
        figures.problem(f"{workdir.name}: {null_answers} answers with id null, the spec says {null_expected}")

    # Host and spec agree on params: invalid → -32602; valid → never -32602 (but for the checks
    # the schema cannot express: a profile name with control characters, a foreign callback URL).
    for key, (method, params, valid) in params_of.items():
        if expected[key] != 1 or len(answer_frames.get(key, [])) != 1:
            continue
        error = answer_frames[key][0].get("error") or {}
        code_32602 = error.get("code") == -32602
        # -32800: cancelled (by the fuzzer, or by exit) before it was checked.
        if not valid and not code_32602 and error.get("code") not in (-32002, -32600, -32800):
            figures.params_disagreements += 1
            figures.problem(f"{workdir.name}: {method} {json.dumps(params)[:200]} breaks x-params but was answered "
                            f"{json.dumps(answer_frames[key][0])[:200]}")
        elif valid and code_32602 and (method, error.get("data", {}).get("field")) not in (
                ("configureProfile", "name"), ("completeSignIn", "callbackUrl")):
            figures.params_disagreements += 1
            figures.problem(f"{workdir.name}: {method} {json.dumps(params)[:200]} is valid per x-params but was answered "
                            f"{json.dumps(error)[:200]}")


def fuzz(total_frames: int, seed: int, max_rss_mib: int = 400, progress: bool = False, agent: bool = False) -> Figures:
    rng = random.Random(seed)
    figures = Figures(agent=agent)
    started = time.monotonic()
    validator = Validator()
    root = Path(tempfile.mkdtemp(prefix="authbridge-fuzz-"))
    hosts: ServeHosts | AgentHost | None = None
    try:
        plugin_dir = copy_plugins(root / "plugins", TEST_PLUGIN_FILES, TEST_PLUGINS_DIR)
        hosts = AgentHost(plugin_dir, root / "agent") if agent else ServeHosts(plugin_dir)
        generator = Generator(rng)
        next_report = 50_000
        episode = 0
        while figures.frames < total_frames:
            size = min(total_frames - figures.frames, rng.choice([50, 300, 1000, 3000, 6000]))
            lines, ending = generator.episode(max(size, 3))
            if rng.random() < 0.0005:
                lines.insert(rng.randrange(1, len(lines)), b"x" * (MAX_FRAME + 10))   # over-long: one -32600 id null
            workdir = root / f"host{episode}"
            run_episode(lines, ending, hosts, workdir, validator, figures, max_rss_mib * 1024)
            if not figures.failed:
                shutil.rmtree(workdir, ignore_errors=True)
            episode += 1
            if progress and figures.frames >= next_report:
                print(f"… {figures.report()}", flush=True)
                next_report += 50_000
    finally:
        if hosts is not None:
            hosts.close()
        figures.seconds = time.monotonic() - started
        if not figures.failed:
            shutil.rmtree(root, ignore_errors=True)
        else:
            figures.problem(f"host folders (stderr.log each) kept in {root}")
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=20_000)
    parser.add_argument("--seed", type=int, default=int(os.environ.get("FUZZ_SEED", "12")))
    parser.add_argument("--max-rss-mib", type=int, default=400)
    parser.add_argument("--agent", action="store_true", help="one agent for the run, one connection per episode")
    args = parser.parse_args()
    figures = fuzz(args.frames, args.seed, args.max_rss_mib, progress=True, agent=args.agent)
    print(f"seed {args.seed}: {figures.report()}")
    print(figures.latency_report())
    print(figures.rss_report())
    for problem in figures.problems:
        print("  - " + problem)
    return 1 if figures.failed else 0


if __name__ == "__main__":
    sys.exit(main())
