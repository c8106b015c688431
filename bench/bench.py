#!/usr/bin/env python3
"""AuthBridge benchmark: pipelined throughput, cold start and hook round trip, host vs. a C baseline.

Usage:
  python3 bench/bench.py --host PATH --answerer PATH
                         [--host-args "serve --plugins DIR --config FILE --plugin-isolation none"]
                         [--isolated-host-args "serve ... --plugin-isolation process"]
                         [--requests 200000] [--cold-runs 30] [--repeat 3] [--round-trips 5000]

Both programs get the same byte stream. With --isolated-host-args, the host
is also measured with its plugin in a runner process: throughput, cold start
and (c) the hook round trip, next to the in-process host. Prints a table and
one line "BENCH_JSON {...}". Exits 1 if something failed (error responses,
timeouts, early exit); missed goals do NOT change the exit status.
Python 3 standard library only.
"""

import argparse
import contextlib
import json
import math
import os
import select
import shlex
import statistics
import subprocess
import sys
import tempfile
import threading
import time

GOAL_THROUGHPUT_RATIO = 1.25   # host wall time / C answerer wall time
GOAL_COLD_MEDIAN_MS = 10.0     # host, spawn -> initialize reply

THROUGHPUT_TIMEOUT_S = 120.0   # whole pipelined run (default of --timeout)
REPLY_TIMEOUT_S = 10.0         # handshake / setup replies
COLD_REPLY_TIMEOUT_S = 5.0     # one cold start
ROUND_TRIP_WARMUP = 200        # untimed round trips before the timed ones
EXIT_TIMEOUT_S = 5.0           # after closing stdin

INIT_LINE = (b'{"jsonrpc":"2.0","id":0,"method":"initialize",'
             b'"params":{"protocolVersion":"1.0"}}\n')
INITIALIZED_LINE = b'{"jsonrpc":"2.0","method":"initialized","params":{}}\n'
SETUP_LINE = (b'{"jsonrpc":"2.0","id":"setup","method":"requestOAuthTokens",'
              b'"params":{"provider":"bench","flow":"session","sessionId":"bench"}}\n')


def status_mb(pid, field):
    """A memory figure of /proc/PID/status (`VmRSS`, `VmHWM`…), in MB."""
    with open("/proc/%d/status" % pid) as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024.0
    raise BenchError("no %s for pid %d" % (field, pid))


class BenchError(Exception):
    pass


def status_line(i):
    return b'{"jsonrpc":"2.0","id":%d,"method":"checkSignInStatus","params":{"provider":"bench"}}\n' % i


def request_stream(n):
    """Pipelined requests, ids 1..n, as one bytes buffer."""
    return b"".join(status_line(i) for i in range(1, n + 1))


def short(b, limit=400):
    s = b.decode("utf-8", "replace") if isinstance(b, (bytes, bytearray)) else str(b)
    return s if len(s) <= limit else s[:limit] + "...(%d chars)" % len(s)


class Proc:
    """A spawned process with raw pipe fds and stderr captured to a temp file."""

    def __init__(self, argv, env=None):
        self.argv = argv
        self.stderr = tempfile.TemporaryFile()
        try:
            self.p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      stderr=self.stderr, bufsize=0, env=env)
        except OSError as e:
            self.stderr.close()
            raise BenchError("cannot start %s: %s" % (argv[0], e))
        self.wfd = self.p.stdin.fileno()
        self.rfd = self.p.stdout.fileno()
        self.buf = bytearray()

    def write(self, data):
        view = memoryview(data)
        try:
            while view:
                n = os.write(self.wfd, view)
                view = view[n:]
        except OSError as e:
            time.sleep(0.05)   # let it finish exiting so the exit code is known
            raise BenchError("writing to the process failed: %s (exit code %s)"
                             % (e, self.p.poll()))

    def read_chunk(self, deadline):
        """One os.read with a deadline; b'' at EOF; BenchError on timeout."""
        remaining = deadline - time.perf_counter()
        ready = remaining > 0 and select.select([self.rfd], [], [], remaining)[0]
        if not ready:
            raise BenchError("timed out")
        return os.read(self.rfd, 1 << 20)

    def read_line(self, deadline):
        while True:
            i = self.buf.find(b"\n")
            if i >= 0:
                line = bytes(self.buf[:i])
                del self.buf[:i + 1]
                return line
            chunk = self.read_chunk(deadline)
            if not chunk:
                raise BenchError("process closed stdout (exit code %s)" % self.p.poll())
            self.buf += chunk

    def read_reply(self, want_id, timeout):
        """Read lines until the response with id == want_id; skip notifications."""
        deadline = time.perf_counter() + timeout
        while True:
            try:
                line = self.read_line(deadline)
            except BenchError as e:
                raise BenchError("waiting for the reply to id %s: %s" % (json.dumps(want_id), e))
            if not line.strip():
                continue
            try:
                msg = json.loads(line)
            except ValueError:
                raise BenchError("unparseable line: %s" % short(line))
            if isinstance(msg, dict) and "method" not in msg and msg.get("id") == want_id \
                    and type(msg.get("id")) is type(want_id):
                return msg, line

    def close(self):
        """Close stdin, wait for exit (kill after EXIT_TIMEOUT_S). Returns a warning or None."""
        warning = None
        try:
            self.p.stdin.close()
        except OSError:
            pass
        try:
            rc = self.p.wait(timeout=EXIT_TIMEOUT_S)
            if rc != 0:
                warning = "%s exited with %s after stdin EOF" % (self.argv[0], rc)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()
            warning = "%s did not exit within %.0f s of stdin EOF; killed" % (
                self.argv[0], EXIT_TIMEOUT_S)
        try:
            self.p.stdout.close()
        except OSError:
            pass
        return warning

    def kill(self):
        if self.p.poll() is None:
            self.p.kill()
        self.p.wait()

    @contextlib.contextmanager
    def killed_on_error(self):
        """Kills the process when the block raises; a BenchError then carries its stderr's tail."""
        try:
            yield
        except BaseException as e:
            self.kill()
            tail = self.stderr_tail()
            if isinstance(e, BenchError) and tail.strip():
                raise BenchError("%s\n--- stderr of %s (tail) ---\n%s" % (e, self.argv[0], tail))
            raise

    def stderr_tail(self, limit=2000):
        try:
            self.stderr.seek(0, os.SEEK_END)
            size = self.stderr.tell()
            self.stderr.seek(max(0, size - limit))
            return self.stderr.read().decode("utf-8", "replace")
        except OSError:
            return ""


def handshake(proc):
    """initialize, initialized and the setup sign-in of the bench profile."""
    proc.write(INIT_LINE)
    msg, line = proc.read_reply(0, REPLY_TIMEOUT_S)
    if "result" not in msg:
        raise BenchError("initialize failed: %s" % short(line))
    proc.write(INITIALIZED_LINE)
    proc.write(SETUP_LINE)
    msg, line = proc.read_reply("setup", REPLY_TIMEOUT_S)
    if "result" not in msg:
        raise BenchError("setup requestOAuthTokens failed: %s" % short(line))


def throughput_run(argv, n, stream, timeout=THROUGHPUT_TIMEOUT_S, env=None, proc=None, warm=None):
    """Handshake + setup (+ `warm(proc)`, untimed), then pipeline n requests. Returns (wall
    seconds, warning). With `proc` (already handshaken), pipelines into it and leaves it
    running (warning None)."""
    keep = proc is not None
    proc = proc or Proc(argv, env)
    with proc.killed_on_error():
        if not keep:
            handshake(proc)
        if warm:
            warm(proc)

        # Pipelined phase. The writer thread writes the whole stream; the main
        # thread only collects bytes and counts newlines, so that Python stays
        # far cheaper per message than either program under test. Lines are
        # parsed when the newline count says enough of them may be there;
        # notifications interleaved by the host just mean reading on.
        write_error = []
        t_start = [None]

        def writer():
            try:
                t_start[0] = time.perf_counter()
                proc.write(stream)
            except BenchError as e:
                write_error.append(e)

        chunks = [bytes(proc.buf)]
        proc.buf = bytearray()
        newlines = chunks[0].count(b"\n")
        responses = 0          # responses with integer ids found so far
        seen_ids = set()
        errors = 0
        first_error = None
        parsed_lines = 0       # complete lines already parsed
        pending = b""          # partial line carried between parses
        parse_from = 0         # index into chunks not yet parsed
        t_end = None

        deadline = time.perf_counter() + timeout
        th = threading.Thread(target=writer, daemon=True)
        th.start()
        while True:
            if newlines - parsed_lines >= n - responses:
                # Possibly done: parse what arrived since the last parse.
                data = pending + b"".join(chunks[parse_from:])
                parse_from = len(chunks)
                lines = data.split(b"\n")
                pending = lines.pop()
                for ln in lines:
                    parsed_lines += 1
                    if not ln.strip():
                        continue
                    try:
                        msg = json.loads(ln)
                    except ValueError:
                        errors += 1
                        first_error = first_error or ln
                        continue
                    if not isinstance(msg, dict) or "method" in msg:
                        continue   # notification from the host
                    mid = msg.get("id")
                    if type(mid) is not int:
                        if "error" in msg:
                            errors += 1
                            first_error = first_error or ln
                        continue
                    responses += 1
                    seen_ids.add(mid)
                    if "result" not in msg:
                        errors += 1
                        first_error = first_error or ln
                if responses >= n:
                    break
                continue
            try:
                chunk = proc.read_chunk(deadline)
            except BenchError:
                raise BenchError("pipelined phase timed out after %.0f s: %d output lines of "
                                 "%d responses expected" % (timeout, newlines, n))
            t_end = time.perf_counter()
            if not chunk:
                time.sleep(0.05)   # let it finish exiting so the exit code is known
                raise BenchError("process closed stdout after %d output lines in the pipelined "
                                 "phase, %d responses expected (exit code %s)"
                                 % (newlines, n, proc.p.poll()))
            chunks.append(chunk)
            newlines += chunk.count(b"\n")
        th.join(timeout=max(0.0, deadline - time.perf_counter()))
        if th.is_alive():
            raise BenchError("writer still blocked after all responses were read")
        if write_error:
            raise BenchError("writing requests failed: %s" % write_error[0])
        if errors:
            raise BenchError("%d error responses in the pipelined phase; first: %s"
                             % (errors, short(first_error)))
        if responses != n or len(seen_ids) != n or min(seen_ids) != 1 or max(seen_ids) != n:
            raise BenchError("expected one response for each id 1..%d; got %d responses "
                             "with %d distinct integer ids" % (n, responses, len(seen_ids)))
        if t_end is None or t_start[0] is None:
            raise BenchError("responses arrived before any request was written")
        wall = t_end - t_start[0]
        return wall, (None if keep else proc.close())


def cold_start_once(argv):
    """Spawn, send initialize, time until its reply. Returns (ms, warning)."""
    t0 = time.perf_counter()
    proc = Proc(argv)
    with proc.killed_on_error():
        proc.write(INIT_LINE)
        msg, line = proc.read_reply(0, COLD_REPLY_TIMEOUT_S)
        t1 = time.perf_counter()
        if "result" not in msg:
            raise BenchError("initialize failed: %s" % short(line))
    return (t1 - t0) * 1000.0, proc.close()


def round_trip_runs(progs, n, warmup=ROUND_TRIP_WARMUP, request_line=status_line):
    """(c) Sequential round trips: each program gets one checkSignInStatus, and the next only
    after its answer; the programs take turns request by request (in a rotating order), so that
    drift hits all alike.
    Returns ({name: [microseconds]}, {name: failure}, [warnings])."""
    procs, failures, warnings = {}, {}, []
    for name, spec in progs.items():
        argv, env = spec if isinstance(spec, tuple) else (spec, None)   # an argv, or (argv, environment)
        try:
            proc = Proc(argv, env)
            with proc.killed_on_error():
                handshake(proc)
            procs[name] = proc
        except BenchError as e:
            failures[name] = str(e)
    times = {name: [] for name in procs}
    for i in range(1, warmup + n + 1):
        # Each round starts with the next program, so that none always follows the same one.
        turn = list(procs.items())
        if not turn:
            break
        turn = turn[i % len(turn):] + turn[:i % len(turn)]
        for name, proc in turn:
            try:
                with proc.killed_on_error():
                    t0 = time.perf_counter()
                    proc.write(request_line(i))
                    msg, line = proc.read_reply(i, REPLY_TIMEOUT_S)
                    t1 = time.perf_counter()
                    if "result" not in msg:
                        raise BenchError("error response: %s" % short(line))
            except BenchError as e:
                failures[name] = "round trip %d: %s" % (i, e)
                del procs[name]
                continue
            if i > warmup:
                times[name].append((t1 - t0) * 1e6)
    for proc in procs.values():
        w = proc.close()
        if w:
            warnings.append(w)
    return {k: v for k, v in times.items() if k not in failures}, failures, warnings


def rounded(d):
    return {k: [round(x, 6) for x in v] if isinstance(v, list) else round(v, 6)
            for k, v in d.items()}


def p90(values):
    s = sorted(values)
    return s[max(0, math.ceil(0.9 * len(s)) - 1)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--host", required=True, help="path to the authbridge executable")
    ap.add_argument("--answerer", required=True, help="path to the compiled c-answerer")
    ap.add_argument("--host-args", default="",
                    help='arguments for the host as one string, shlex-split '
                         '(e.g. "serve --plugins DIR --config FILE --plugin-isolation none")')
    ap.add_argument("--isolated-host-args", default=None,
                    help="arguments for the host with its plugin isolated (e.g. the same with "
                         "--plugin-isolation process); measures it too, and the hook round trip")
    ap.add_argument("--round-trips", type=int, default=5000,
                    help="sequential round trips per host for (c) (default %(default)s)")
    ap.add_argument("--requests", type=int, default=200000)
    ap.add_argument("--cold-runs", type=int, default=30)
    ap.add_argument("--timeout", type=float, default=THROUGHPUT_TIMEOUT_S,
                    help="seconds allowed for one pipelined run (default %(default)s)")
    ap.add_argument("--repeat", type=int, default=3,
                    help="throughput runs per program (alternating); the fastest is reported")
    args = ap.parse_args()
    if args.requests < 1 or args.cold_runs < 1 or args.repeat < 1 or args.round_trips < 1:
        ap.error("--requests, --cold-runs, --repeat and --round-trips must be >= 1")

    progs = {
        "host": [args.host] + shlex.split(args.host_args),
        "answerer": [args.answerer],
    }
    if args.isolated_host_args is not None:
        progs["isolated"] = [args.host] + shlex.split(args.isolated_host_args)
    for argv in progs.values():
        if not os.access(argv[0], os.X_OK):
            print("bench: not an executable: %s" % argv[0], file=sys.stderr)
            return 1

    n = args.requests
    stream = request_stream(n)
    warnings = []
    results = {k: {} for k in progs}
    failed = []

    def note(w):
        if w and w not in warnings:
            warnings.append(w)

    # (a) pipelined throughput: one untimed warm-up run of the answerer (page
    # cache, CPU clocks, Python's own buffers), then host and answerer runs
    # alternate so that drift hits both; the fastest run of each counts.
    walls = {k: [] for k in progs}
    tp_failed = set()
    try:
        throughput_run(progs["answerer"], n, stream, args.timeout)
    except BenchError as e:
        failed.append("throughput warm-up (answerer): %s" % e)
        tp_failed.add("answerer")
    for _ in range(args.repeat):
        for name, argv in progs.items():
            if name in tp_failed:
                continue
            try:
                wall, w = throughput_run(argv, n, stream, args.timeout)
                note(w)
            except BenchError as e:
                failed.append("throughput (%s): %s" % (name, e))
                tp_failed.add(name)
                continue
            walls[name].append(wall)
            print("bench: throughput %-8s %.3f s" % (name, wall), file=sys.stderr)
    for name, values in walls.items():
        if name not in tp_failed and values:
            results[name]["throughput_wall_s"] = min(values)
            results[name]["throughput_rate_per_s"] = n / min(values)
            results[name]["throughput_walls_s"] = values

    # (b) cold start; one untimed warm-up each, then alternate host/answerer runs
    cold = {k: [] for k in progs}
    cold_failed = set()
    for i in range(args.cold_runs + 1):
        for name, argv in progs.items():
            if name in cold_failed:
                continue
            try:
                ms, w = cold_start_once(argv)
                note(w)
            except BenchError as e:
                failed.append("cold start (%s): %s" % (name, e))
                cold_failed.add(name)
                continue
            if i > 0:
                cold[name].append(ms)
    for name, values in cold.items():
        if name not in cold_failed and values:
            results[name]["cold_median_ms"] = statistics.median(values)
            results[name]["cold_p90_ms"] = p90(values)
            results[name]["cold_min_ms"] = min(values)
            results[name]["cold_max_ms"] = max(values)

    # (c) hook round trip: the in-process host, the isolated one and, as the floor (Python,
    # the pipes, a line answered at once), the C answerer.
    round_trip = {}
    if "isolated" in progs:
        times, rt_failures, rt_warnings = round_trip_runs(
            {"inProcess": progs["host"], "isolated": progs["isolated"], "answerer": progs["answerer"]},
            args.round_trips)
        for w in rt_warnings:
            note(w)
        for name, e in rt_failures.items():
            failed.append("round trip (%s): %s" % (name, e))
        for name, values in times.items():
            round_trip[name] = {"p50": statistics.median(values), "p90": p90(values)}

    h, c = results["host"], results["answerer"]
    iso = results.get("isolated", {})
    ratio = None
    if "throughput_wall_s" in h and "throughput_wall_s" in c:
        ratio = h["throughput_wall_s"] / c["throughput_wall_s"]

    def fmt(d, key, f):
        return f(d[key]) if key in d else "FAILED"

    print()
    print("AuthBridge bench (%d requests, %d cold starts)" % (n, args.cold_runs))
    print("%-20s  %-11s %-12s %-7s %s" % ("", "host", "C answerer", "ratio", "goal"))
    print("%-20s  %-11s %-12s %-7s %s" % (
        "throughput wall",
        fmt(h, "throughput_wall_s", lambda v: "%.3f s" % v),
        fmt(c, "throughput_wall_s", lambda v: "%.3f s" % v),
        "%.2fx" % ratio if ratio is not None else "-",
        "<= %.2fx" % GOAL_THROUGHPUT_RATIO))
    print("%-20s  %-11s %-12s" % (
        "throughput rate",
        fmt(h, "throughput_rate_per_s", lambda v: "%.0fk/s" % (v / 1000)),
        fmt(c, "throughput_rate_per_s", lambda v: "%.0fk/s" % (v / 1000))))
    print("%-20s  %-11s %-12s %-7s %s" % (
        "cold start median",
        fmt(h, "cold_median_ms", lambda v: "%.1f ms" % v),
        fmt(c, "cold_median_ms", lambda v: "%.1f ms" % v),
        "", "<= %.0f ms" % GOAL_COLD_MEDIAN_MS))
    print("%-20s  %-11s %-12s" % (
        "cold start p90",
        fmt(h, "cold_p90_ms", lambda v: "%.1f ms" % v),
        fmt(c, "cold_p90_ms", lambda v: "%.1f ms" % v)))

    if "isolated" in progs:
        print("%-20s  %-11s %s" % (
            "isolated throughput",
            fmt(iso, "throughput_wall_s", lambda v: "%.3f s" % v),
            fmt(iso, "throughput_rate_per_s", lambda v: "%.0fk/s" % (v / 1000))))
        print("%-20s  %-11s %s" % (
            "isolated cold start",
            fmt(iso, "cold_median_ms", lambda v: "%.1f ms" % v),
            fmt(iso, "cold_p90_ms", lambda v: "p90 %.1f ms" % v)))
        print()
        print("hook round trip (%d sequential checkSignInStatus, after %d untimed)"
              % (args.round_trips, ROUND_TRIP_WARMUP))
        print("%-20s  %-9s %s" % ("", "p50", "p90"))
        for label, name in (("in-process", "inProcess"), ("isolated", "isolated"),
                            ("C answerer (floor)", "answerer")):
            r = round_trip.get(name)
            print("%-20s  %-9s %s" % (label, "%.0f us" % r["p50"] if r else "FAILED",
                                      "%.0f us" % r["p90"] if r else ""))
        if "inProcess" in round_trip and "isolated" in round_trip:
            print("%-20s  %-9s %s" % (
                "isolation costs",
                "%+.0f us" % (round_trip["isolated"]["p50"] - round_trip["inProcess"]["p50"]),
                "%+.0f us" % (round_trip["isolated"]["p90"] - round_trip["inProcess"]["p90"])))

    goals = {
        "throughput_ratio": (ratio <= GOAL_THROUGHPUT_RATIO) if ratio is not None else None,
        "cold_median": (h["cold_median_ms"] <= GOAL_COLD_MEDIAN_MS)
        if "cold_median_ms" in h else None,
    }
    print("goals: throughput ratio %s, cold start median %s" % tuple(
        {True: "met", False: "MISSED", None: "n/a"}[goals[k]]
        for k in ("throughput_ratio", "cold_median")))
    for w in warnings:
        print("warning: %s" % w)
    for f in failed:
        print("FAILED: %s" % f)

    report = {
        "requests": n,
        "cold_runs": args.cold_runs,
        "repeat": args.repeat,
        "host_argv": progs["host"],
        "answerer_argv": progs["answerer"],
        "host": rounded(h),
        "answerer": rounded(c),
        "throughput_ratio": round(ratio, 4) if ratio is not None else None,
        "goals": {"throughput_ratio_max": GOAL_THROUGHPUT_RATIO,
                  "cold_median_ms_max": GOAL_COLD_MEDIAN_MS},
        "goals_met": goals,
        "warnings": warnings,
        "failures": failed,
        "ok": not failed,
    }
    if "isolated" in progs:
        report["isolated_argv"] = progs["isolated"]
        report["isolated"] = rounded(iso)
        report["round_trips"] = args.round_trips
        report["roundTrip"] = {
            name: {k: round(v, 1) for k, v in round_trip[key].items()} if key in round_trip else None
            for name, key in (("inProcess", "inProcess"), ("isolated", "isolated"), ("answerer", "answerer"))}
    print("BENCH_JSON " + json.dumps(report, separators=(",", ":")))
    sys.stdout.flush()
    return 1 if failed else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
