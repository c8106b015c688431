#!/usr/bin/env python3
"""AuthBridge agent's memory over a long mixed load (issue 32): does it grow?

Usage:
  .venv/bin/python bench/agent_memory.py --host PATH --plugins DIR --config FILE
                                         [--requests 1000000] [--vault encrypted-file]
                                         [--only tokens,fetch,connects,events] [--agent-env NAME=VALUE]...
                                         [--settle 6] [--trim] [--smaps] [--wrap COMMAND] [--hold SECONDS]

One `authbridge agent` (the bench profile's test plugin `ctest`, from --plugins; the
encrypted-file vault unless --vault says otherwise), then:

  (1) its first steps: VmRSS after initialize, the sign-in (flow "session", as bench/hostile.py
      does), the first token, the first refresh (forceRefresh: ctest refreshes without HTTP) and
      the first `fetch` (the first HTTP request: libAuthBridgeHTTP.so and libcurl are loaded then),
      with what each mapping (a library, the heap, anonymous memory) adds (/proc/PID/smaps Rss).
  (2) --requests requests in ten slices (tenths), each slice running every kind at once:
        tokens    93 %  getAccessToken and checkSignInStatus alternating, pipelined (batches of
                        64, two at most unanswered) on 4 connections (new ones each tenth, each
                        in a process of its own), for the bench profile;
        fetch      5 %  `fetch` of http://127.0.0.1:PORT/… (a small http.server thread; loopback
                        http is allowed) for the bench profile, 8 at a time on each of 2 connections
                        (ctest takes 32 host requests in flight at most);
        connects   1 %  connect, initialize, disconnect (one at a time);
        events     1 %  requestOAuthTokens / signOut of a second profile (`events`, the same
                        plugin and settings) on a driver connection: each answer comes with a
                        session/changed that the agent fans out to 8 more connections that read
                        (and to every other connection open then).
      VmRSS, threads and the smaps summary (heap, anonymous: glibc's arenas, thread stacks, others;
      libraries) after each tenth, and VmRSS again after --settle seconds idle (what the agent keeps
      once a burst is over); --only runs some kinds alone (their counts as in the full mix), to
      find which grows. --agent-env sets the agent's environment (MALLOC_ARENA_MAX=2...); --trim
      calls malloc_trim(0) in the agent at the end (gdb) and says what it gave back (what glibc held
      freed); --wrap runs the agent under a tool (heaptrack); --hold keeps it running at the end.

Prints a table and one line "AGENT_MEMORY_JSON {...}"; exits 1 if something failed (an error
answer, an event that did not arrive, an agent that died). Memory figures are from /proc; the
run takes a few minutes on a 2-core machine at the default 1,000,000 requests.
"""

import argparse
import http.server
import json
import multiprocessing
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from agent_link import BenchError, Link, mib

HERE = Path(__file__).resolve().parent
KINDS = ("tokens", "fetch", "connects", "events")
SHARES = {"fetch": 0.05, "connects": 0.01, "events": 0.01}   # tokens: the rest
TOKEN_LINKS, TOKEN_BATCH = 4, 64
FETCH_LINKS, FETCH_WINDOW = 2, 8
READERS = 8


class LocalServer:
    """A small HTTP/1.1 server on 127.0.0.1 (keep-alive) that answers every GET with a JSON body."""

    def __init__(self):
        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self):
                body = b'{"ok":true,"items":[1,2,3]}'
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = "http://127.0.0.1:%d/items" % self.server.server_port
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self):
        self.server.shutdown()


# ── What the agent holds ─────────────────────────────────────────────────────────────────────

def status(pid):
    values = {}
    for line in Path("/proc/%d/status" % pid).read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "RssAnon", "RssFile", "Threads", "VmHWM"):
            values[key] = int(value.split()[0])
    return values


def smaps(pid):
    """Rss (KiB) per mapping name: a file, [heap], [stack], or "[anon]" (anonymous mmaps: malloc
    arenas, big blocks) and "[anon:guard]" (PROT_NONE reservations, thread stack guards)."""
    sizes = {}
    name = None
    for line in Path("/proc/%d/smaps" % pid).read_text().splitlines():
        head = line.split(None, 5)
        if "-" in head[0] and len(head) >= 5 and ":" not in head[0]:
            name = head[5].strip() if len(head) > 5 else ("[anon:%s]" % head[1])
        elif head[0] == "Rss:":
            sizes[name] = sizes.get(name, 0) + int(head[1])
    return sizes


def anonymous_kinds(pid):
    """Rss (KiB) of the anonymous read-write mappings by what they likely are: glibc malloc arenas
    of threads (heaps of at most 64 MiB, aligned to 64 MiB, with their PROT_NONE rest), thread
    stacks (8 MiB mappings), and the others (the main arena's mmapped blocks, Swift's metadata...);
    and how many arenas and stacks there are."""
    kinds = {"arenas": 0, "stacks": 0, "other": 0, "arena_count": 0, "stack_count": 0}
    start = size = None
    perms = ""
    for line in Path("/proc/%d/smaps" % pid).read_text().splitlines():
        head = line.split(None, 5)
        if "-" in head[0] and len(head) >= 5 and ":" not in head[0]:
            low, high = (int(x, 16) for x in head[0].split("-"))
            start, size, perms = low, high - low, head[1] if len(head) == 5 else ""
        elif head[0] == "Rss:" and perms.startswith("rw"):
            if start % (64 << 20) == 0 and size <= (64 << 20):
                kinds["arenas"] += int(head[1])
                kinds["arena_count"] += 1
            elif (8 << 20) - 4096 <= size <= (8 << 20) + 4096:
                kinds["stacks"] += int(head[1])
                kinds["stack_count"] += 1
            else:
                kinds["other"] += int(head[1])
    return kinds


def thread_names(pid):
    names = {}
    for task in Path("/proc/%d/task" % pid).iterdir():
        try:
            name = (task / "comm").read_text().strip()
        except OSError:
            continue
        names[name] = names.get(name, 0) + 1
    return dict(sorted(names.items(), key=lambda kv: -kv[1]))


def summary(sizes):
    """The smaps figures that say where memory is: heap, anonymous (read-write: arenas, stacks,
    big blocks), and the libraries' (file-backed) in all."""
    anon = sum(v for k, v in sizes.items() if k.startswith("[anon:rw"))
    files = sum(v for k, v in sizes.items() if k.startswith("/"))
    return {"heap": sizes.get("[heap]", 0), "anon": anon, "files": files}


def diff(before, after, floor=16):
    changed = {k: after.get(k, 0) - before.get(k, 0) for k in set(before) | set(after)}
    return sorted(((k, v) for k, v in changed.items() if abs(v) >= floor), key=lambda kv: -kv[1])


# ── (1) The first steps ──────────────────────────────────────────────────────────────────────

def first_steps(agent, server):
    steps = []
    app = Link(agent)
    previous = smaps(agent.pid)

    def mark(label):
        nonlocal previous
        now = smaps(agent.pid)
        steps.append({"step": label, "rss_kib": status(agent.pid)["VmRSS"], "added": diff(previous, now)})
        previous = now

    mark("initialize")
    app.call("requestOAuthTokens", {"provider": "bench", "flow": "session", "sessionId": "first"})
    mark("sign-in")
    app.call("getAccessToken", {"provider": "bench"})
    mark("first token")
    app.call("getAccessToken", {"provider": "bench", "forceRefresh": True})
    mark("first refresh")
    answer = app.call("fetch", {"provider": "bench", "url": server.url})
    if answer.get("status") != 200:
        raise BenchError("fetch answered %s" % answer)
    mark("first fetch")
    app.close()
    return steps


# ── (2) The mix ──────────────────────────────────────────────────────────────────────────────

def token_load(agent, count, links):
    """`count` getAccessToken/checkSignInStatus alternating, pipelined on `links` new connections
    (each in a process of its own): batches of TOKEN_BATCH, at most two unanswered; a thread per
    connection reads all the while (the agent drops a connection that leaves 64 KiB of events
    unread)."""
    def run(link, share):
        answered = [0]
        failure = []
        cond = threading.Condition()

        def read():
            # Whole chunks, counted, not split into lines: a reader that lags behind the answers
            # leaves the events queued behind them unread, and the agent drops the connection.
            done = 0
            try:
                while done < share:
                    chunk = link.sock.recv(1 << 18)
                    if not chunk:
                        raise BenchError("the agent closed the connection")
                    link.pending += chunk
                    end = link.pending.rfind(b"\n") + 1
                    if end == 0:
                        continue
                    lines = bytes(link.pending[:end])
                    del link.pending[:end]
                    if b'"error"' in lines:
                        raise BenchError("a token request failed: %s" % lines[lines.find(b'"error"') - 100:][:300])
                    # Notifications (session/changed of the events profile) name a method; answers do not.
                    done += lines.count(b"\n") - lines.count(b'"method":"')
                    with cond:
                        answered[0] = done
                        cond.notify()
            except Exception as error:   # noqa: BLE001 - raised by the sender
                with cond:
                    failure.append(error)
                    cond.notify()

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        sent = 0
        while sent < share:
            with cond:
                cond.wait_for(lambda: failure or sent - answered[0] < 2 * TOKEN_BATCH)
                if failure:
                    break
            batch = min(TOKEN_BATCH, share - sent)
            frames = []
            for i in range(batch):
                method = b"getAccessToken" if (sent + i) % 2 == 0 else b"checkSignInStatus"
                frames.append(b'{"jsonrpc":"2.0","id":%d,"method":"%s","params":{"provider":"bench"}}\n' % (link.next_id, method))
                link.next_id += 1
            link.sock.sendall(b"".join(frames))
            sent += batch
        reader.join()
        if failure:
            raise failure[0]

    def child(share):
        try:
            link = Link(agent)
            run(link, share)
            link.close()
        except Exception as error:   # noqa: BLE001 - the exit status says it; the message goes to stderr
            print("a token connection failed: %s" % error, file=sys.stderr)
            os._exit(1)
        os._exit(0)

    # A process per connection: threads of one Python process starve each other's reads (the
    # GIL), and an app that leaves 64 KiB of events unread is dropped.
    fork = multiprocessing.get_context("fork")
    children = [fork.Process(target=child, args=(count // links + (i < count % links),)) for i in range(links)]
    for process in children:
        process.start()
    for process in children:
        process.join()
    if any(process.exitcode != 0 for process in children):
        raise BenchError("a token connection failed (its message is above)")


def fetch_load(url, count, links):
    """`count` fetches, `FETCH_WINDOW` in flight on each of `links`."""
    def run(link, share):
        sent = received = 0
        in_flight = set()
        while received < share:
            while sent < share and len(in_flight) < FETCH_WINDOW:
                in_flight.add(link.send("fetch", {"provider": "bench", "url": "%s?n=%d" % (url, sent)}))
                sent += 1
            frame = json.loads(link.line())
            if frame.get("id") in in_flight:
                in_flight.discard(frame["id"])
                if "error" in frame or frame["result"].get("status") != 200:
                    raise BenchError("a fetch failed: %s" % frame)
                received += 1

    run_all([(run, (link, count // len(links) + (i < count % len(links)))) for i, link in enumerate(links)])


def connect_load(agent, count):
    """`count` connections, one at a time: connect, initialize, close."""
    for _ in range(count):
        Link(agent).close()


class EventReaders:
    """`READERS` connections that read everything; they count session/changed."""

    def __init__(self, agent):
        self.links = [Link(agent) for _ in range(READERS)]
        self.counts = [0] * READERS
        self.failure = None
        for index, link in enumerate(self.links):
            threading.Thread(target=self.read, args=(index, link), daemon=True).start()

    def read(self, index, link):
        try:
            while True:
                if b'"session/changed"' in link.line():
                    self.counts[index] += 1
        except (BenchError, OSError) as error:
            self.failure = error

    def wait(self, expected, limit=60.0):
        deadline = time.monotonic() + limit
        while min(self.counts) < expected:
            if time.monotonic() > deadline:
                raise BenchError("the readers saw %s session/changed of %d" % (self.counts, expected))
            time.sleep(0.01)


def event_load(driver, count, first_cycle):
    """`count` requests: sign-in and sign-out of the `events` profile, alternating."""
    for cycle in range(first_cycle, first_cycle + count // 2):
        driver.call("requestOAuthTokens", {"provider": "events", "flow": "session", "sessionId": "e%d" % cycle})
        driver.call("signOut", {"provider": "events"})


def run_all(jobs):
    """Runs (function, args) jobs on threads; the first failure is raised."""
    failures = []

    def wrap(function, args):
        try:
            function(*args)
        except Exception as error:   # noqa: BLE001 - reported on the main thread
            failures.append(error)

    threads = [threading.Thread(target=wrap, args=job, daemon=True) for job in jobs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failures:
        raise failures[0]


def counts_for(total, only):
    counts = {kind: int(total * share) for kind, share in SHARES.items()}
    counts["events"] -= counts["events"] % 2
    counts["tokens"] = total - sum(counts.values())
    return {kind: (n if kind in only else 0) for kind, n in counts.items()}


def mix(agent, server, total, only, log, settle):
    counts = counts_for(total, only)
    fetch_links = [Link(agent) for _ in range(FETCH_LINKS)]
    driver = Link(agent)
    readers = EventReaders(agent)
    tenths = []
    events_done = 0
    began = time.monotonic()
    for tenth in range(10):
        part = {kind: n // 10 + (n % 10 if tenth == 9 else 0) for kind, n in counts.items()}
        part["events"] -= part["events"] % 2
        run_all([(token_load, (agent, part["tokens"], TOKEN_LINKS)), (fetch_load, (server.url, part["fetch"], fetch_links)),
                 (connect_load, (agent, part["connects"])), (event_load, (driver, part["events"], events_done // 2))])
        events_done += part["events"]
        readers.wait(events_done)
        if readers.failure:
            raise BenchError("a reader failed: %s" % readers.failure)
        figures = status(agent.pid)
        figures.update(summary(smaps(agent.pid)))
        figures.update(anonymous_kinds(agent.pid))
        figures["seconds"] = round(time.monotonic() - began, 1)
        if settle:
            time.sleep(settle)
            figures["settled_rss"] = status(agent.pid)["VmRSS"]
        tenths.append(figures)
        log("  %3d %%  VmRSS %6.1f MiB%s  heap %5.1f  anon %5.1f (arenas %5.1f in %2d, stacks %5.1f in %3d, other %5.1f)  "
            "files %5.1f  threads %3d  (%.0f s)" % (
                10 * (tenth + 1), mib(figures["VmRSS"]),
                ", %5.1f %.0f s later" % (mib(figures["settled_rss"]), settle) if settle else "",
                mib(figures["heap"]), mib(figures["anon"]), mib(figures["arenas"]),
                figures["arena_count"], mib(figures["stacks"]), figures["stack_count"], mib(figures["other"]),
                mib(figures["files"]), figures["Threads"], figures["seconds"]))
        if tenth == 9:
            log("        threads by name: %s" % thread_names(agent.pid))
    for link in fetch_links + [driver] + readers.links:
        link.close()
    time.sleep(0.5)
    after_close = status(agent.pid)
    after_close.update(summary(smaps(agent.pid)))
    return counts, tenths, after_close


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", required=True)
    parser.add_argument("--plugins", required=True)
    parser.add_argument("--config", required=True)
    parser.add_argument("--requests", type=int, default=1_000_000)
    parser.add_argument("--vault", default="encrypted-file")
    parser.add_argument("--only", default=",".join(KINDS), help="the kinds to run, comma-separated: %s" % ", ".join(KINDS))
    parser.add_argument("--agent-env", action="append", default=[], metavar="NAME=VALUE",
                        help="a variable for the agent's environment (e.g. MALLOC_ARENA_MAX=2)")
    parser.add_argument("--smaps", action="store_true", help="also print the agent's largest mappings at the end")
    parser.add_argument("--wrap", default="", metavar="COMMAND",
                        help='a command the agent runs under, e.g. "heaptrack -o /tmp/agent" (its socket is waited for)')
    parser.add_argument("--settle", type=float, default=6.0, metavar="SECONDS",
                        help="after each tenth, wait this long (idle) and read VmRSS again: what the agent keeps "
                             "once a burst is over (0: no wait)")
    parser.add_argument("--trim", action="store_true",
                        help="at the end, call malloc_trim(0) in the agent (gdb) and say what VmRSS it gives back: "
                             "what the agent holds in freed memory")
    parser.add_argument("--hold", type=float, default=0.0, metavar="SECONDS",
                        help="keep the agent running this long after the mix (its pid is printed): for gdb, smaps")
    args = parser.parse_args()
    only = [kind for kind in args.only.split(",") if kind]
    if any(kind not in KINDS for kind in only):
        parser.error("--only takes %s" % ", ".join(KINDS))
    os.environ["AUTHBRIDGE_BIN"] = os.path.abspath(args.host)
    sys.path.insert(0, str(HERE.parent / "Tests" / "support"))
    from authbridge_testkit.agent import Agent   # after AUTHBRIDGE_BIN: the host it starts

    profiles = json.loads(Path(args.config).read_text())["profiles"]
    profiles["events"] = dict(profiles["bench"])
    root = Path(tempfile.mkdtemp(prefix="ab-agent-memory-"))
    env = dict(item.split("=", 1) for item in args.agent_env)
    server = LocalServer()
    agent = Agent(root / "agent", [Path(args.plugins).resolve()], profiles, extra_args=["--vault", args.vault],
                  log_level="warning", env=env, command=args.wrap.split(), wait_ready=not args.wrap)
    if args.wrap:   # the wrapper may write on stdout first: wait for the socket instead of the ready line
        deadline = time.monotonic() + 120
        while not agent.socket.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(1.0)
    try:
        print("agent %s, %s vault%s" % (args.host, args.vault, "".join(" " + item for item in args.agent_env)))
        steps = first_steps(agent, server)
        print("First steps (VmRSS, MiB; what each mapping added, KiB):")
        for step in steps:
            added = ", ".join("%s %+d" % (os.path.basename(name), kib) for name, kib in step["added"][:8])
            print("  %-14s %6.1f   %s" % (step["step"], mib(step["rss_kib"]), added))
        counts, tenths, after_close = mix(agent, server, args.requests, only, print, args.settle)
        final_smaps = smaps(agent.pid)
        trimmed = None
        if args.trim:
            subprocess.run(["gdb", "-q", "-batch", "-p", str(agent.pid), "-ex", "call (int) malloc_trim(0)"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120, check=False)
            trimmed = status(agent.pid)
            trimmed.update(summary(smaps(agent.pid)))
            trimmed.update(anonymous_kinds(agent.pid))
        if args.hold:
            print("holding the agent, pid %d, for %.0f s" % (agent.pid, args.hold), flush=True)
            time.sleep(args.hold)
        if agent.proc.poll() is not None:
            raise BenchError("the agent ended: %s" % agent.describe_exit())
    except BenchError as error:
        print("FAILED: %s" % error)
        print(agent.stderr_tail())
        return 1
    finally:
        if agent.proc.poll() is None:
            agent.stop()
        server.stop()
    key = "settled_rss" if args.settle else "VmRSS"
    growth = tenths[-1][key] - tenths[0][key]
    print("Mix: %s in %.0f s (%s); VmRSS %.1f MiB after the first tenth, %.1f after the last (%+.1f)%s, %.1f once its "
          "connections closed; peak (VmHWM) %.1f" % (
              ", ".join("%s %d" % kv for kv in counts.items()), tenths[-1]["seconds"],
              "with %.0f s idle after each tenth" % (10 * args.settle) if args.settle else "no idle time",
              mib(tenths[0][key]), mib(tenths[-1][key]), mib(growth), " (%.0f s idle after each)" % args.settle if args.settle else "",
              mib(after_close["VmRSS"]), mib(tenths[-1]["VmHWM"])))
    if trimmed:
        print("After malloc_trim(0): VmRSS %.1f MiB (%+.1f), arenas %.1f MiB" % (
            mib(trimmed["VmRSS"]), mib(trimmed["VmRSS"] - after_close["VmRSS"]), mib(trimmed["arenas"])))
    if args.smaps:
        print("Largest mappings at the end (Rss, KiB):")
        for name, kib in sorted(final_smaps.items(), key=lambda kv: -kv[1])[:25]:
            print("  %8d  %s" % (kib, name))
    print("AGENT_MEMORY_JSON " + json.dumps({
        "vault": args.vault, "env": args.agent_env, "requests": args.requests, "counts": counts,
        "first_steps": [{"step": s["step"], "rss_kib": s["rss_kib"], "added_kib": dict(s["added"][:12])} for s in steps],
        "tenths": tenths, "after_close": after_close, "after_trim": trimmed, "growth_kib": growth}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
