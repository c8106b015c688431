#!/usr/bin/env python3
"""AuthBridge agent under hostile connections: its memory, and what the apps that behave see.

Usage:
  .venv/bin/python bench/hostile.py --host PATH --plugins DIR --config FILE
                                    [--silent 200] [--events 3000] [--held 16] [--held-mib 60]
                                    [--hostile 256] [--hostile-mib 4]

One `authbridge agent` (memory vault, the bench profile's test plugin `ctest`) per part:

  (k) apps that never read: `--silent` connections initialize, then never read; a driver
      connection signs the bench profile in and out (`--events` `session/changed` in all), and
      one app that reads asks `listAccounts` in a loop meanwhile: VmRSS before, at its peak and
      after; how many silent apps the agent dropped; the reading app's round trip (p50, p99, max).
  (l) unfinished frames: `--held` connections each send `--held-mib` MiB of one line and never
      end it: VmRSS before, while they hold it, and once they have closed and the agent has let
      go of them (its log says "connection closed" for each).
  (m) `--hostile` connections (the agent's maximum) at once, each sends `--hostile-mib` MiB of an
      unfinished line and never `initialize`: VmRSS while they are open, how long until a new app
      is served again (its `initialize` answered; the agent drops connections that have not
      initialized within 10 s), and VmRSS once they are gone.

Prints a table and one line "HOSTILE_JSON {...}"; exits 1 if something failed (an error answer,
an agent that died). Memory figures are VmRSS from /proc; times are wall clock on this machine.
"""

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from agent_link import BenchError, Link, mib

HERE = Path(__file__).resolve().parent
LOCKED_OUT_S = 40.0   # how long part (m) waits for a new app to be served before it says "never"


def settle(agent, closed, limit=60.0):
    """Waits (bounded) until the agent has torn down `closed` connections in all: its log says
    "connection closed" for each (the agent of (l) and (m) logs at debug level)."""
    deadline = time.monotonic() + limit
    while agent.stderr_text().count("connection closed") < closed:
        if time.monotonic() > deadline:
            raise BenchError("the agent has let go of %d connections of %d" % (agent.stderr_text().count("connection closed"), closed))
        time.sleep(0.05)


def silent_apps(start, silent_count, events):
    """(k): events to apps that never read, one app that reads timed meanwhile."""
    agent = start()
    driver = Link(agent)
    reader = Link(agent)
    reader.call("listAccounts", {})
    before = agent.rss_kib()
    silent = [Link(agent) for _ in range(silent_count)]
    after_connect = agent.rss_kib()
    peak = [after_connect]
    stop = threading.Event()
    latencies = []

    def read_loop():
        while not stop.is_set():
            began = time.perf_counter()
            reader.call("listAccounts", {})
            latencies.append((time.perf_counter() - began) * 1000.0)
            peak[0] = max(peak[0], agent.rss_kib())

    reading = threading.Thread(target=read_loop, daemon=True)
    reading.start()
    began = time.monotonic()
    for cycle in range(events // 2):
        driver.call("requestOAuthTokens", {"provider": "bench", "flow": "session", "sessionId": "s%d" % cycle})
        driver.call("signOut", {"provider": "bench"})
        if cycle % 50 == 0:
            peak[0] = max(peak[0], agent.rss_kib())
    elapsed = time.monotonic() - began
    stop.set()
    reading.join(30)
    after = agent.rss_kib()
    dropped = agent.stderr_text().count("dropped the connection")
    for link in silent + [driver, reader]:
        link.close()
    agent.stop()
    return {"silent": silent_count, "events": 2 * (events // 2), "seconds": round(elapsed, 1),
            "rss_before_mib": mib(before), "rss_connected_mib": mib(after_connect), "rss_peak_mib": mib(peak[0]),
            "rss_after_mib": mib(after), "dropped": dropped,
            "reader_ms": {"p50": round(statistics.median(latencies), 2),
                          "p99": round(sorted(latencies)[int(0.99 * (len(latencies) - 1))], 1),
                          "max": round(max(latencies), 1), "n": len(latencies)}}


def open_unfinished(agent, count, mib_each):
    """`count` connections that never initialize, each holding an unfinished line of `mib_each` MiB."""
    links = []
    for _ in range(count):
        link = Link(agent, initialize=False)
        link.send_unfinished(mib_each)
        links.append(link)
    return links


def held_frames(start, held, held_mib):
    """(l): unfinished lines held, then closed."""
    agent = start(log_level="debug")
    app = Link(agent)
    app.call("listAccounts", {})
    before = agent.rss_kib()
    links = open_unfinished(agent, held, held_mib)
    holding = agent.rss_kib()
    for link in links:
        link.close()
    settle(agent, held)
    after = agent.rss_kib()
    app.call("listAccounts", {})
    app.close()
    agent.stop()
    return {"connections": held, "mib_each": held_mib, "rss_before_mib": mib(before), "rss_holding_mib": mib(holding),
            "rss_after_mib": mib(after)}


def at_capacity(start, hostile, hostile_mib):
    """(m): the agent's maximum of connections, each unfinished and never initialized."""
    agent = start(log_level="debug")
    app = Link(agent)   # initialize waits for the plugins: loaded from now on
    app.close()
    settle(agent, 1)
    before = agent.rss_kib()
    began = time.monotonic()
    links = open_unfinished(agent, hostile, hostile_mib)
    holding = agent.rss_kib()
    served_after = None
    while time.monotonic() - began < LOCKED_OUT_S:
        try:
            app = Link(agent)
        except (BenchError, OSError):
            time.sleep(0.1)   # refused while full: try again, as an app would
            continue
        served_after = time.monotonic() - began
        app.close()
        break
    for link in links:
        link.close()
    settle(agent, 1 + hostile + (served_after is not None))
    after = agent.rss_kib()
    agent.stop()
    return {"connections": hostile, "mib_each": hostile_mib, "rss_before_mib": mib(before), "rss_holding_mib": mib(holding),
            "served_again_s": None if served_after is None else round(served_after, 1), "rss_after_mib": mib(after)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", required=True)
    parser.add_argument("--plugins", required=True)
    parser.add_argument("--config", required=True)
    parser.add_argument("--silent", type=int, default=200)
    parser.add_argument("--events", type=int, default=3000)
    parser.add_argument("--held", type=int, default=16)
    parser.add_argument("--held-mib", type=int, default=60)
    parser.add_argument("--hostile", type=int, default=256)
    parser.add_argument("--hostile-mib", type=int, default=4)
    args = parser.parse_args()
    os.environ["AUTHBRIDGE_BIN"] = os.path.abspath(args.host)
    sys.path.insert(0, str(HERE.parent / "Tests" / "support"))
    from authbridge_testkit.agent import Agent   # after AUTHBRIDGE_BIN: the host it starts

    profiles = json.loads(Path(args.config).read_text())["profiles"]
    root = Path(tempfile.mkdtemp(prefix="ab-hostile-"))
    agents = []

    def start(log_level="warning"):
        agent = Agent(root / ("agent%d" % len(agents)), [Path(args.plugins).resolve()], profiles,
                      extra_args=["--vault", "memory"], log_level=log_level)
        agents.append(agent)
        return agent

    try:
        results = {"k": silent_apps(start, args.silent, args.events), "l": held_frames(start, args.held, args.held_mib),
                   "m": at_capacity(start, args.hostile, args.hostile_mib)}
    except BenchError as error:
        print("FAILED: %s" % error)
        for agent in agents:
            print(agent.stderr_tail())
        return 1
    finally:
        for agent in agents:
            if agent.proc.poll() is None:
                agent.proc.kill()
    k, l, m = results["k"], results["l"], results["m"]
    print("Agent under hostile connections (VmRSS, MiB):")
    print("  (k) %d apps that never read, %d session/changed in %.1f s: %.1f -> %.1f connected, peak %.1f, after %.1f; "
          "%d dropped; an app that reads, listAccounts round trip p50 %.2f / p99 %.1f / max %.1f ms (%d calls)" % (
              k["silent"], k["events"], k["seconds"], k["rss_before_mib"], k["rss_connected_mib"], k["rss_peak_mib"],
              k["rss_after_mib"], k["dropped"], k["reader_ms"]["p50"], k["reader_ms"]["p99"], k["reader_ms"]["max"],
              k["reader_ms"]["n"]))
    print("  (l) %d connections x %d MiB unfinished: %.1f -> %.1f while held, %.1f after they closed" % (
        l["connections"], l["mib_each"], l["rss_before_mib"], l["rss_holding_mib"], l["rss_after_mib"]))
    print("  (m) %d connections x %d MiB unfinished, never initialized: %.1f -> %.1f while open; a new app served after %s; "
          "%.1f after they closed" % (
              m["connections"], m["mib_each"], m["rss_before_mib"], m["rss_holding_mib"],
              "never (%.0f s)" % LOCKED_OUT_S if m["served_again_s"] is None else "%.1f s" % m["served_again_s"],
              m["rss_after_mib"]))
    print("HOSTILE_JSON " + json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
