#!/usr/bin/env python3
"""AuthBridge PostgreSQL vault bench: what `--vault postgresql` costs next to the encrypted-file vault.

Usage:
  .venv/bin/python bench/postgres.py --host PATH --plugins DIR --config FILE
                                     [--round-trips 5000] [--changes 200] [--refreshes 300] [--cold-runs 20]

A private PostgreSQL server (Tests/support/authbridge_testkit/postgres.py) with the README's grants,
the bench profile (the test plugin ctest: a session-flow sign-in and an instant refresh, so that
only the host and its vault are measured), and for each figure a host on each vault, taking turns:

  (g) start-up: spawn to the `initialize` reply, and spawn to the first `getAccessToken` answer (a
      stored session: the vault opened on first use; for PostgreSQL, libpq loaded and connected);
      and loading libAuthBridgePostgres.so with libpq (what linking libpq would add to every start);
  (h) `getAccessToken` round trip with a warm cache (answered from what the host read);
  (i) `getAccessToken` just after another host changed the record (a refresh there): the NOTIFY
      dropped the kept answer, so the record is read from the database and opened again; with the
      time from the other host's answer to the relayed `session/changed` here;
  (j) a refresh (`forceRefresh`) round trip: under the advisory lock, with the re-read, the save
      and the NOTIFY, next to the encrypted-file vault's flock;
  and VmRSS of each host after (h).

Prints a table and one line "POSTGRES_JSON {...}"; exits 1 if something failed.
"""

import argparse
import base64
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "Tests", "support"))
import bench  # noqa: E402  (process handling, handshake and round trips)
from hot_path import rss_mb  # noqa: E402
from authbridge_testkit.postgres import PostgresCluster  # noqa: E402


def token_line(i, force=False):
    params = '{"provider":"bench","forceRefresh":true}' if force else '{"provider":"bench"}'
    return b'{"jsonrpc":"2.0","id":%d,"method":"getAccessToken","params":%s}\n' % (i, params.encode())


def percentile(values, p):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100.0 * (len(ordered) - 1))))]


def summary(values):
    return {"p50": round(statistics.median(values), 1), "p90": round(percentile(values, 90), 1),
            "p99": round(percentile(values, 99), 1), "n": len(values)}


class Hosts:
    """argv and environments of the two kinds of host; each gets a data folder of its own."""

    def __init__(self, args, url, root):
        self.args, self.url, self.root = args, url, root
        self.key = base64.b64encode(os.urandom(32)).decode()
        self.count = 0

    def spec(self, vault, shared_data=None):
        self.count += 1
        home = os.path.join(self.root, "h%d" % self.count)
        for sub in ("config", "data", "home"):
            os.makedirs(os.path.join(home, sub))
        env = dict(os.environ, XDG_CONFIG_HOME=os.path.join(home, "config"), HOME=os.path.join(home, "home"),
                   XDG_DATA_HOME=shared_data or os.path.join(home, "data"), AUTHBRIDGE_VAULT_KEY=self.key)
        env.pop("DBUS_SESSION_BUS_ADDRESS", None)
        argv = [self.args.host, "serve", "--no-default-plugins", "--plugins", self.args.plugins, "--config", self.args.config,
                "--log-level", "warning", "--plugin-isolation", "none", "--vault", vault]
        if vault == "postgresql":
            env["AUTHBRIDGE_VAULT_URL"] = self.url
        return argv, env


def start(spec, sign_in=False):
    proc = bench.Proc(*spec)
    with proc.killed_on_error():
        if sign_in:
            bench.handshake(proc)
        else:
            proc.write(bench.INIT_LINE)
            msg, line = proc.read_reply(0, bench.REPLY_TIMEOUT_S)
            if "result" not in msg:
                raise bench.BenchError("initialize failed: %s" % bench.short(line))
    return proc


def call(proc, i, force=False):
    t0 = time.perf_counter()
    proc.write(token_line(i, force))
    msg, line = proc.read_reply(i, bench.REPLY_TIMEOUT_S)
    if "result" not in msg:
        raise bench.BenchError("getAccessToken failed: %s" % bench.short(line))
    return (time.perf_counter() - t0) * 1e6


def startup(hosts, data, runs):
    """(g) spawn → initialize reply, and spawn → first getAccessToken answer, per vault."""
    result = {}
    for vault in ("encrypted-file", "postgresql"):
        result[vault] = {"initialize_ms": [], "first_token_ms": []}
    for _ in range(runs):
        for vault in ("encrypted-file", "postgresql"):
            t0 = time.perf_counter()
            proc = start(hosts.spec(vault, shared_data=data[vault]))
            t1 = time.perf_counter()
            with proc.killed_on_error():
                call(proc, 1)
            t2 = time.perf_counter()
            proc.close()
            result[vault]["initialize_ms"].append((t1 - t0) * 1000)
            result[vault]["first_token_ms"].append((t2 - t0) * 1000)
    return {vault: {k: round(statistics.median(v), 1) for k, v in figures.items()} for vault, figures in result.items()}


def dlopen_ms(host, library, runs=15):
    """Loading libAuthBridgePostgres.so (libpq, and the TLS, Kerberos and LDAP libraries libpq
    needs) into a fresh process that already holds what the host links (the Swift runtime…):
    what the host would pay at every start if it linked libpq. Median ms."""
    linked = [line.split("=>")[1].split("(")[0].strip() for line in
              subprocess.run(["ldd", host], capture_output=True, text=True, check=True).stdout.splitlines()
              if "=>" in line and "/" in line.split("=>")[1]]
    code = ("import ctypes,sys,time\nfor path in sys.argv[2:]: ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)\n"
            "t=time.perf_counter(); ctypes.CDLL(sys.argv[1]); print(time.perf_counter()-t)")
    times = [float(subprocess.run([sys.executable, "-c", code, library, *linked], capture_output=True, text=True,
                                  check=True).stdout) for _ in range(runs)]
    return round(statistics.median(times) * 1000, 2)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", required=True)
    parser.add_argument("--plugins", required=True, help="a folder with the test plugin ctest")
    parser.add_argument("--config", required=True, help="bench/bench-config.json")
    parser.add_argument("--round-trips", type=int, default=5000)
    parser.add_argument("--changes", type=int, default=200)
    parser.add_argument("--refreshes", type=int, default=300)
    parser.add_argument("--cold-runs", type=int, default=20)
    args = parser.parse_args()
    root = tempfile.mkdtemp(prefix="authbridge-pg-bench-")
    library = os.path.join(os.path.dirname(os.path.abspath(args.host)), "libAuthBridgePostgres.so")
    figures = {}
    with PostgresCluster() as cluster:
        cluster.psql("CREATE ROLE fleet LOGIN")
        cluster.psql("CREATE DATABASE authbridge")
        cluster.psql("REVOKE ALL ON DATABASE authbridge FROM PUBLIC")
        cluster.psql("GRANT CONNECT ON DATABASE authbridge TO fleet")
        cluster.psql("CREATE SCHEMA authbridge", database="authbridge")
        cluster.psql("GRANT USAGE, CREATE ON SCHEMA authbridge TO fleet", database="authbridge")
        hosts = Hosts(args, cluster.url("fleet", "authbridge"), root)
        data = {"encrypted-file": os.path.join(root, "file-vault"), "postgresql": None}
        os.makedirs(data["encrypted-file"])
        # Each vault holds the bench profile's session (signed in once), then the figures.
        for vault in ("encrypted-file", "postgresql"):
            start(hosts.spec(vault, shared_data=data[vault]), sign_in=True).close()

        figures["startup"] = startup(hosts, data, args.cold_runs)
        figures["dlopen_ms"] = dlopen_ms(args.host, library)

        # (h) warm round trips and (j) refreshes, the two hosts taking turns.
        procs = {vault: start(hosts.spec(vault, shared_data=data[vault])) for vault in ("encrypted-file", "postgresql")}
        warm = {vault: [] for vault in procs}
        refresh = {vault: [] for vault in procs}
        for i in range(1, 200 + args.round_trips + 1):
            for vault, proc in procs.items():
                elapsed = call(proc, i)
                if i > 200:
                    warm[vault].append(elapsed)
        figures["rss_mb"] = {vault: round(rss_mb(proc.p.pid), 1) for vault, proc in procs.items()}
        for i in range(1, args.refreshes + 1):
            for vault, proc in procs.items():
                refresh[vault].append(call(proc, 100000 + i, force=True))
        figures["warm_us"] = {vault: summary(values) for vault, values in warm.items()}
        figures["refresh_us"] = {vault: summary(values) for vault, values in refresh.items()}

        # (i) after another host's change: B refreshes, A hears of it, then A's next getAccessToken.
        reader, writer = procs["postgresql"], start(hosts.spec("postgresql"))
        after, heard = [], []
        for i in range(1, args.changes + 1):
            call(reader, 200000 + i)   # warm: answered from what it read
            call(writer, 300000 + i, force=True)
            t_changed = time.perf_counter()
            deadline = t_changed + bench.REPLY_TIMEOUT_S
            while True:
                message = json.loads(reader.read_line(deadline))
                if message.get("method") == "session/changed" and message["params"].get("state") == "refreshed":
                    break
            heard.append((time.perf_counter() - t_changed) * 1e6)
            after.append(call(reader, 400000 + i))
        figures["after_change_us"] = summary(after)
        figures["notification_us"] = summary(heard)
        for proc in (*procs.values(), writer):
            proc.close()

    s, w, r, a, n = figures["startup"], figures["warm_us"], figures["refresh_us"], figures["after_change_us"], figures["notification_us"]
    print("PostgreSQL vault bench (round trips in µs: p50 / p90 / p99)")
    print("                                   encrypted-file          postgresql")
    print("start-up to initialize (median)    %6.1f ms               %6.1f ms" % (s["encrypted-file"]["initialize_ms"], s["postgresql"]["initialize_ms"]))
    print("start-up to first token (median)   %6.1f ms               %6.1f ms" % (s["encrypted-file"]["first_token_ms"], s["postgresql"]["first_token_ms"]))
    print("getAccessToken, warm cache         %s   %s" % (fmt(w["encrypted-file"]), fmt(w["postgresql"])))
    print("refresh (forceRefresh)             %s   %s" % (fmt(r["encrypted-file"]), fmt(r["postgresql"])))
    print("getAccessToken after a change      %-22s %s" % ("", fmt(a)))
    print("change heard (relayed event)       %-22s %s" % ("", fmt(n)))
    print("VmRSS after the warm calls         %6.1f MB               %6.1f MB" % (figures["rss_mb"]["encrypted-file"], figures["rss_mb"]["postgresql"]))
    print("loading libAuthBridgePostgres.so + libpq: %.2f ms (median; never done by hosts on another vault)" % figures["dlopen_ms"])
    print("POSTGRES_JSON " + json.dumps(figures, sort_keys=True))


def fmt(d):
    return "%7.0f / %7.0f / %7.0f" % (d["p50"], d["p90"], d["p99"])


if __name__ == "__main__":
    try:
        main()
    except bench.BenchError as error:
        print("postgres bench failed: %s" % error, file=sys.stderr)
        sys.exit(1)
