"""Several host processes sharing one encrypted-file vault, against an authorization server that
rotates refresh tokens with reuse protection (simulators/rotating_server.py, modelled on django-oauth-toolkit).

* Shared vault: four hosts on one XDG_DATA_HOME call getAccessToken in a loop on 1-second access
  tokens. The per-profile flock and the re-read under it (SessionEngine.refreshLocked) must make
  them refresh once per expiry, never replaying a rotated refresh token (a replay revokes the
  whole grant at a DOT-like server and signs every process out).
* Crash safety: hosts are SIGKILLed at random moments while every call refreshes; the next host
  must still refresh without a new sign-in, and the vault must never hold a torn record.

Figures are printed (visible with -s). With AUTHBRIDGE_VAULT_BENCH_OUT set, the shared-vault test
also writes its figures as one JSON line to that file (`make bench` reads it).
AUTHBRIDGE_VAULT_KILL_SEED changes the seed of the kill moments (printed by the crash test).
"""

from __future__ import annotations

import http.client
import json
import os
import random
import select
import shutil
import subprocess
import threading
import time
import urllib.parse
from pathlib import Path
from typing import Any

import pytest

from conftest import BUILD_DIR, TIMEOUT, Host, host_command, session_records, short, sign_in_external, stop_cleanly
from authbridge_testkit.dot_auth import DotAuthServer
from simulators.rotating_server import RotatingAuthServer

PROFILE = "r"

#: Shared vault: processes, access-token lifetime (s), how long and how many calls per process.
PROCESSES = 4
SHARED_LIFETIME = 1
SHARED_SECONDS = 7.0
SHARED_MAX_CALLS = 3000

#: Crash test: kills wanted, the least accepted, the time budget of the kill loop (s), the
#: longest random delay before a kill (s), and the server's grace period (s).
KILLS = 30
MIN_KILLS = 20
KILL_BUDGET = 35.0
KILL_MAX_DELAY = 0.3
GRACE_SECONDS = 5.0


# ── Fixtures and helpers ─────────────────────────────────────────────────────


@pytest.fixture(params=["rotating-fake", "django-oauth-toolkit"])
def rotating_server(request, tmp_path):
    """Factory: rotating_server(access_lifetime=…, grace_period=…) → a started server, stopped at
    teardown: the small fake (fast, exact counters) and the real django-oauth-toolkit with
    ROTATE_REFRESH_TOKEN, REFRESH_TOKEN_REUSE_PROTECTION and the same lifetimes."""
    servers: list[Any] = []

    def start(**options: Any):
        if request.param == "django-oauth-toolkit":
            server = DotAuthServer(tmp_path / f"dot{len(servers)}", **options).start()
        else:
            server = RotatingAuthServer(**options).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


class Fleet:
    """Starts hosts that share one XDG_DATA_HOME (each with its own workdir, config, HOME and
    XDG_CONFIG_HOME) and makes sure every one of them is reaped."""

    def __init__(self, root: Path, plugin_dir: Path, server: RotatingAuthServer) -> None:
        self.root = root
        self.plugin_dir = plugin_dir
        self.data_home = root / "shared-data"
        self.profiles = {PROFILE: {"plugin": "oidc", "settings": server.settings()}}
        self.hosts: list[Host] = []
        self.stopped: set[int] = set()
        self.extra_args: list[str] = []
        self.raw_hosts: list[RawHost] = []

    @property
    def vault(self) -> Path:
        return self.data_home / "authbridge" / "vault"

    def command(self, name: str) -> tuple[list[str], dict[str, str], Path]:
        workdir = self.root / name
        argv, env = host_command(workdir, [self.plugin_dir], profiles=self.profiles, log_level="notice",
                                 extra_args=self.extra_args)
        env["XDG_DATA_HOME"] = str(self.data_home)
        # The default vault with its key file: no service secret, no keyring of the caller's session.
        for name_ in ("AUTHBRIDGE_VAULT_KEY", "DBUS_SESSION_BUS_ADDRESS"):
            env.pop(name_, None)
        return argv, env, workdir

    def spawn(self, name: str) -> Host:
        argv, env, workdir = self.command(name)
        host = Host(argv, env, workdir)
        self.hosts.append(host)
        return host

    def raw(self, name: str) -> "RawHost":
        """A host driven through bare pipes (see RawHost), reaped by kill_all too."""
        argv, env, workdir = self.command(name)
        host = RawHost(argv, env, workdir)
        self.raw_hosts.append(host)
        return host

    def start(self, name: str) -> Host:
        host = self.spawn(name)
        host.initialize()
        return host

    def stop(self, host: Host) -> None:
        self.stopped.add(id(host))
        stop_cleanly(host)

    def kill_all(self) -> None:
        for raw in self.raw_hosts:
            raw.stop()
        for host in self.hosts:
            if host.proc.poll() is None:
                host.proc.kill()
            if id(host) in self.stopped:
                continue
            self.stopped.add(id(host))
            try:
                host.stop()
            except Exception:  # noqa: BLE001 - best effort while failing
                pass

    def violations(self) -> list[str]:
        return [f"{host.workdir.name}: {v.splitlines()[0]}" for host in self.hosts for v in host.violations]


class RawHost:
    """A host on bare pipes for timing: lines written as they are, answers found by id with
    json.loads only. The suite's Host validates every frame against bridge-spec in Python, which
    on a 2-core machine costs more than the host's own work and would be measured with it."""

    def __init__(self, argv: list[str], env: dict[str, str], workdir: Path) -> None:
        self.stderr = open(workdir / "stderr.log", "wb")
        self.proc = subprocess.Popen(argv, env=env, cwd=workdir, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.stderr, bufsize=0)
        self.buffer = b""
        self.next_id = 0
        #: The notifications read while waiting for answers (method, params), in arrival order.
        self.notifications: list[tuple[str, Any]] = []

    def send(self, method: str, params: Any) -> int:
        self.next_id += 1
        self.proc.stdin.write(json.dumps({"jsonrpc": "2.0", "id": self.next_id, "method": method,
                                          "params": params}).encode() + b"\n")
        return self.next_id

    def answers(self, ids: list[int], deadline: float) -> dict[int, tuple[float, dict[str, Any]]]:
        """Each id's answer and when it arrived (time.monotonic()); notifications are kept aside."""
        wanted, found = set(ids), {}
        while wanted:
            assert time.monotonic() < deadline, f"no answer to {len(wanted)} requests in time"
            ready, _, _ = select.select([self.proc.stdout], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                continue
            chunk = os.read(self.proc.stdout.fileno(), 1 << 20)
            assert chunk, f"the host closed its output (exit {self.proc.poll()})"
            now = time.monotonic()
            self.buffer += chunk
            *lines, self.buffer = self.buffer.split(b"\n")
            for line in lines:
                message = json.loads(line)
                if "method" in message:
                    self.notifications.append((message["method"], message.get("params")))
                elif message.get("id") in wanted:
                    wanted.discard(message["id"])
                    found[message["id"]] = (now, message)
        return found

    def call(self, method: str, params: Any) -> dict[str, Any]:
        id_ = self.send(method, params)
        return self.answers([id_], time.monotonic() + TIMEOUT)[id_][1]

    def stop(self) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.stdin.close()
                self.proc.wait(timeout=TIMEOUT)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()
        self.stderr.close()


def vault_files(vault: Path) -> dict[str, list[str]]:
    quarantine = vault / "quarantine"
    return {
        "records": [p.name for p in session_records(vault)],
        "temporary": sorted(p.name for p in vault.glob("*.tmp")),
        "quarantine": sorted(p.name for p in quarantine.iterdir()) if quarantine.exists() else [],
    }


def report_bench(figures: dict[str, Any], key: str = "shared") -> None:
    """Adds the figures under `key` to the JSON object in $AUTHBRIDGE_VAULT_BENCH_OUT (if set)."""
    out = os.environ.get("AUTHBRIDGE_VAULT_BENCH_OUT")
    if out:
        path = Path(out)
        try:
            known = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
        except ValueError:
            known = {}
        known[key] = figures
        path.write_text(json.dumps(known, sort_keys=True) + "\n", encoding="utf-8")


# ── 1. Four processes, one vault ─────────────────────────────────────────────


def test_shared_vault_processes_refresh_once_per_expiry(tmp_path, oidc_plugin_dir, rotating_server):
    # Reuse protection on, no grace period: any replay of a rotated refresh token by one of the
    # processes revokes the grant (and would end every process's session).
    server = rotating_server(access_lifetime=SHARED_LIFETIME, grace_period=0)
    fleet = Fleet(tmp_path, oidc_plugin_dir, server)
    try:
        first = fleet.start("signin")
        sign_in_external(first, server, PROFILE)
        fleet.stop(first)

        hosts = [fleet.spawn(f"p{i}") for i in range(PROCESSES)]   # start together, then initialize
        for host in hosts:
            host.initialize()

        barrier = threading.Barrier(PROCESSES, timeout=TIMEOUT)
        results: list[dict[str, Any]] = [{"calls": 0, "ok": 0, "errors": [], "tokens": set(), "exception": None}
                                         for _ in hosts]

        def drive(host: Host, result: dict[str, Any]) -> None:
            try:
                barrier.wait()
                result["start"] = time.monotonic()
                deadline = result["start"] + SHARED_SECONDS
                while time.monotonic() < deadline and result["calls"] < SHARED_MAX_CALLS:
                    answer = host.request("getAccessToken", {"provider": PROFILE, "minValidityMs": 0}, timeout=TIMEOUT)
                    result["calls"] += 1
                    if "result" in answer:
                        result["ok"] += 1
                        result["tokens"].add(answer["result"]["accessToken"])
                    else:
                        result["errors"].append(answer["error"])
            except BaseException as error:  # noqa: BLE001 - reported by the main thread
                result["exception"] = error
            finally:
                result["end"] = time.monotonic()

        before = server.snapshot()
        threads = [threading.Thread(target=drive, args=(host, result), name=f"drive-{i}", daemon=True)
                   for i, (host, result) in enumerate(zip(hosts, results))]
        for thread in threads:
            thread.start()
        join_deadline = time.monotonic() + SHARED_SECONDS + 3 * TIMEOUT
        for thread in threads:
            thread.join(max(0.0, join_deadline - time.monotonic()))
        assert not any(thread.is_alive() for thread in threads), "a driver thread did not finish in time"
        after = server.snapshot()

        for index, result in enumerate(results):
            assert result["exception"] is None, f"p{index}: {result['exception']}"
        starts = [r["start"] for r in results if "start" in r]
        elapsed = max(r["end"] for r in results) - min(starts)
        calls = sum(r["calls"] for r in results)
        errors = [e for r in results for e in r["errors"]]
        refreshes = after["refreshes"] - before["refreshes"]
        revocations = after["revocations"] - before["revocations"]
        # A refresh happens only once the stored access token is 3/4 through its life (refresh
        # ahead) and the token it brings lives SHARED_LIFETIME s from its arrival: refreshes are
        # ≥ 3/4 of a lifetime apart; a duplicate from a race between processes breaks the bound.
        expiries = int(elapsed // (SHARED_LIFETIME * 0.75)) + 1
        tokens = set().union(*(r["tokens"] for r in results))
        figures = {
            "test": "shared_vault", "processes": PROCESSES, "calls": calls, "ok": calls - len(errors),
            "errors": len(errors), "refreshes": refreshes, "max_refreshes": expiries, "revocations": revocations,
            "rejected_refreshes": after["rejected_refreshes"] - before["rejected_refreshes"],
            "elapsed_s": round(elapsed, 3), "access_lifetime_s": SHARED_LIFETIME,
            "calls_per_s": round(calls / elapsed, 1) if elapsed > 0 else None,
            "calls_per_process": [r["calls"] for r in results], "distinct_access_tokens": len(tokens),
        }
        print(f"\nshared vault: processes={PROCESSES} calls={calls} refreshes={refreshes} (≤ {expiries} expiries "
              f"in {elapsed:.2f} s) revocations={revocations} errors={len(errors)} "
              f"calls/s={figures['calls_per_s']} per process={figures['calls_per_process']}")
        report_bench(figures)

        assert not errors, f"{len(errors)} getAccessToken calls failed, e.g. {short(errors[0])}"
        assert calls >= PROCESSES, "the drivers made no calls"
        assert revocations == 0, f"the server saw {revocations} refresh-token replays (grant revoked)"
        assert after["rejected_refreshes"] == before["rejected_refreshes"], "a refresh was refused"
        assert 2 <= refreshes <= expiries, \
            f"{refreshes} refreshes for at most {expiries} expiries in {elapsed:.2f} s: duplicate refreshes across processes"
        assert all(server.is_issued(token) for token in tokens), "a host handed out a token the server never issued"

        for host in hosts:
            fleet.stop(host)
        fresh = fleet.start("fresh")
        token = fresh.result("getAccessToken", {"provider": PROFILE, "minValidityMs": 0})
        assert server.is_issued(token["accessToken"])
        fleet.stop(fresh)
        assert server.snapshot()["revocations"] == 0
        files = vault_files(fleet.vault)
        assert not files["quarantine"], f"records were quarantined: {files['quarantine']}"
        assert len(files["records"]) == 1
    finally:
        fleet.kill_all()
    assert not fleet.violations(), fleet.violations()


# ── 1b. An expired token in four processes at once ───────────────────────────

def signed_in_fleet(tmp_path: Path, plugin_dir: Path, rotating_server: Any) -> tuple[Any, Fleet, float]:
    """A server with hour-long access tokens, a fleet whose hosts take --test-clock, and the
    profile signed in (by a host that is stopped again); with the sign-in's time (seconds)."""
    server = rotating_server(access_lifetime=3600, grace_period=0)
    fleet = Fleet(tmp_path, plugin_dir, server)
    fleet.extra_args = ["--test-clock"]
    first = fleet.start("signin")
    started = time.monotonic()
    sign_in_external(first, server, PROFILE)
    sign_in = time.monotonic() - started
    fleet.stop(first)
    return server, fleet, sign_in


#: Hosts and getAccessToken calls each, all written at once on a token every host sees expired.
EXPIRED_PROCESSES = 4
EXPIRED_CALLS = 50


def test_an_expired_token_in_four_processes_costs_one_refresh(tmp_path, oidc_plugin_dir, rotating_server):
    # Issue 15: correct (one grant) but 1.2-1.5 s to answer 4 x 50 calls, though one refresh
    # takes ~15 ms. Correctness is asserted here; the times are figures (`make bench` prints
    # them), taken on bare pipes (RawHost).
    server, fleet, _ = signed_in_fleet(tmp_path, oidc_plugin_dir, rotating_server)
    try:
        hosts = [fleet.raw(f"e{i}") for i in range(EXPIRED_PROCESSES + 1)]
        for host in hosts:   # each host's clock an hour on: the stored access token has expired
            assert "result" in host.call("initialize", {"protocolVersion": "1.0"})
            host.call("$/test/advanceClock", {"milliseconds": 3_600_000})
        # One refresh on its own, for scale (the last host; the others then see an expired token again).
        timer, refresher = time.monotonic(), hosts.pop()
        assert "result" in refresher.call("getAccessToken", {"provider": PROFILE, "forceRefresh": True})
        one_refresh = time.monotonic() - timer
        for host in hosts:
            host.call("$/test/advanceClock", {"milliseconds": 3_600_000})
        before = server.snapshot()
        start = time.monotonic()
        sent = [[host.send("getAccessToken", {"provider": PROFILE}) for _ in range(EXPIRED_CALLS)] for host in hosts]
        found = [host.answers(ids, start + 3 * TIMEOUT) for host, ids in zip(hosts, sent)]
        after = server.snapshot()
        answers = [message for answers in found for _, message in answers.values()]
        errors = [answer["error"] for answer in answers if "error" in answer]
        assert not errors, f"{len(errors)} calls failed, e.g. {short(errors[0])}"
        tokens = {answer["result"]["accessToken"] for answer in answers}
        figures = {
            "test": "expired_token", "processes": EXPIRED_PROCESSES, "calls": len(answers),
            "refreshes": after["refreshes"] - before["refreshes"], "one_refresh_ms": round(one_refresh * 1000, 1),
            "all_answered_ms": round((max(t for answers in found for t, _ in answers.values()) - start) * 1000, 1),
            "first_answer_ms": [round((min(t for t, _ in answers.values()) - start) * 1000, 1) for answers in found],
        }
        print(f"\nexpired token: {EXPIRED_PROCESSES} processes x {EXPIRED_CALLS} calls, refreshes={figures['refreshes']}, "
              f"all answered in {figures['all_answered_ms']} ms (one refresh {figures['one_refresh_ms']} ms), "
              f"first answer per process {figures['first_answer_ms']} ms")
        report_bench(figures, key="expired")
        assert figures["refreshes"] == 1, f"{figures['refreshes']} refreshes for one expiry"
        assert after["revocations"] == before["revocations"] and after["rejected_refreshes"] == before["rejected_refreshes"]
        assert len(tokens) == 1 and server.is_issued(tokens.pop())
    finally:
        fleet.kill_all()
    assert not fleet.violations(), fleet.violations()


def test_sign_in_refresh_and_a_storm_of_callers_stay_as_fast(tmp_path, oidc_plugin_dir, rotating_server):
    # Issue 15's "nothing else gets slower": a sign-in, one refresh, and 200 callers at once on an
    # expired token (one grant). Correctness asserted; the times are figures for `make bench`.
    server, fleet, sign_in = signed_in_fleet(tmp_path, oidc_plugin_dir, rotating_server)
    try:
        host = fleet.raw("storm")
        assert "result" in host.call("initialize", {"protocolVersion": "1.0"})
        refreshes = []
        for _ in range(5):
            started = time.monotonic()
            assert "result" in host.call("getAccessToken", {"provider": PROFILE, "forceRefresh": True})
            refreshes.append(time.monotonic() - started)
        host.call("$/test/advanceClock", {"milliseconds": 3_600_000})
        before = server.snapshot()
        started = time.monotonic()
        ids = [host.send("getAccessToken", {"provider": PROFILE}) for _ in range(200)]
        found = host.answers(ids, started + 3 * TIMEOUT)
        storm = max(t for t, _ in found.values()) - started
        after = server.snapshot()
        tokens = {message["result"]["accessToken"] for _, message in found.values()}
        figures = {"test": "storm", "sign_in_ms": round(sign_in * 1000, 1),
                   "refresh_ms": round(sorted(refreshes)[2] * 1000, 1), "storm_200_ms": round(storm * 1000, 1),
                   "storm_refreshes": after["refreshes"] - before["refreshes"]}
        print(f"\nsign-in {figures['sign_in_ms']} ms (through the suite's client), one refresh {figures['refresh_ms']} ms "
              f"(median of 5), 200 callers on an expired token {figures['storm_200_ms']} ms with "
              f"{figures['storm_refreshes']} refresh(es) -- processes=1")
        report_bench(figures, key="storm")
        assert figures["storm_refreshes"] == 1 and len(tokens) == 1 and server.is_issued(tokens.pop())
    finally:
        fleet.kill_all()
    assert not fleet.violations(), fleet.violations()


# ── 2. SIGKILL in the middle of refreshes ────────────────────────────────────


class Stream(threading.Thread):
    """getAccessToken calls one after the other, each forcing a refresh (forceRefresh), until the host dies."""

    def __init__(self, host: Host) -> None:
        super().__init__(name="refresh-stream", daemon=True)
        self.host = host
        self.calls = 0
        self.ok = 0
        self.errors: list[dict[str, Any]] = []
        self.ended_by: BaseException | None = None
        self.stop_requested = threading.Event()

    def run(self) -> None:
        try:
            while not self.stop_requested.is_set():
                answer = self.host.request("getAccessToken",
                                           {"provider": PROFILE, "forceRefresh": True}, timeout=TIMEOUT)
                self.calls += 1
                if "result" in answer:
                    self.ok += 1
                else:
                    self.errors.append(answer["error"])
        except BaseException as error:  # noqa: BLE001 - the kill ends the stream with a HostError
            self.ended_by = error


def test_sigkill_during_refreshes_keeps_the_session(tmp_path, oidc_plugin_dir, rotating_server):
    # Reuse protection on AND a grace period, as a real deployment configures it. A SIGKILL can
    # land after the server rotated the refresh token (its old one is now "used") but before the
    # host made the new pair durable in the vault (temporary file, fsync, rename): the new refresh
    # token is lost with the process, and the vault still holds the old one. Without a grace
    # period the next process's refresh with that old token is a replay and revokes the whole
    # grant; within the grace period (DOT: REFRESH_TOKEN_GRACE_PERIOD_SECONDS) the server answers
    # the same new pair once more, so the session survives the crash. The grace period only has
    # to cover the time from the kill to the next host's first refresh (well under a second here).
    server = rotating_server(access_lifetime=1, grace_period=GRACE_SECONDS)
    seed = int(os.environ.get("AUTHBRIDGE_VAULT_KILL_SEED") or 20250611)
    rng = random.Random(seed)
    fleet = Fleet(tmp_path, oidc_plugin_dir, server)
    kills = 0
    stream_calls = 0
    failures: list[str] = []
    try:
        first = fleet.start("signin")
        sign_in_external(first, server, PROFILE)
        fleet.stop(first)

        budget_end = time.monotonic() + KILL_BUDGET
        while kills < KILLS and time.monotonic() < budget_end:
            host = fleet.start(f"k{kills}")
            # After the previous kill (or the sign-in): the session still refreshes, no new sign-in.
            answer = host.request("getAccessToken", {"provider": PROFILE, "forceRefresh": True})
            if "result" not in answer:
                failures.append(f"host k{kills} (after {kills} kills): getAccessToken failed: {short(answer['error'])}")
                break
            stream = Stream(host)
            stream.start()
            # The fault being injected: a SIGKILL at a random moment of the refresh stream. This
            # sleep is the kill time, not a wait for anything.
            time.sleep(rng.uniform(0.0, KILL_MAX_DELAY))
            host.proc.kill()
            host.proc.wait(TIMEOUT)
            stream.stop_requested.set()
            stream.join(TIMEOUT)
            assert not stream.is_alive(), "the refresh stream did not end after the kill"
            kills += 1
            stream_calls += stream.calls
            fleet.stop(host)
            if stream.errors:
                failures.append(f"host k{kills - 1}: {len(stream.errors)} getAccessToken errors before the kill, "
                                f"e.g. {short(stream.errors[0])}")
                break
            files = vault_files(fleet.vault)
            if files["quarantine"]:
                failures.append(f"after kill {kills}: a torn record was quarantined: {files['quarantine']}")
                break
            if len(files["records"]) != 1:
                failures.append(f"after kill {kills}: vault records {files['records']}")
                break

        if not failures:
            final = fleet.start("final")
            answer = final.request("getAccessToken", {"provider": PROFILE, "forceRefresh": True})
            if "result" not in answer:
                failures.append(f"final host: getAccessToken failed: {short(answer['error'])}")
            else:
                status = final.result("checkSignInStatus", {"provider": PROFILE})
                assert status["state"] == "signedIn", status
            fleet.stop(final)
    finally:
        fleet.kill_all()

    figures = server.snapshot()
    files = vault_files(fleet.vault)
    print(f"\ncrash safety: seed={seed} kills={kills} stream calls={stream_calls} refreshes={figures['refreshes']} "
          f"reuse within grace={figures['reuse_within_grace']} revocations={figures['revocations']} "
          f"rejected={figures['rejected_refreshes']} quarantined={len(files['quarantine'])} "
          f"leftover temporary files={len(files['temporary'])}")
    assert not failures, "\n".join(failures) + f"\n(seed {seed}; AUTHBRIDGE_VAULT_KILL_SEED={seed} reproduces the kill times)"
    assert kills >= MIN_KILLS, f"only {kills} kills in {KILL_BUDGET} s"
    assert figures["revocations"] == 0, f"{figures['revocations']} token families revoked (replays outside the grace period)"
    assert figures["rejected_refreshes"] == 0
    assert not files["quarantine"], f"torn records were quarantined: {files['quarantine']}"
    assert not fleet.violations(), fleet.violations()
