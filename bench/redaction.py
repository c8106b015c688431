#!/usr/bin/env python3
"""AuthBridge redaction bench: what scrubbing the secrets the host holds costs per MiB of message.

Usage:
  python3 bench/redaction.py --host PATH --plugins DIR --config FILE
                             [--starts 0,400,2000] [--sizes 1,4,16] [--repeat 3]

Every message, event and log line the host sends is scrubbed of the exact secrets it holds
(`KnownSecrets`: access, refresh and ID tokens, PKCE verifiers, session ids, each also
percent-encoded and in base64 and base64url; at most 512 values). For each count of sign-in
starts (the bench profile's external flow: each start holds its PKCE verifier, four forms), a
fresh host (memory vault) makes that many starts, then answers `checkSignInStatus` for a provider
whose name is SIZE MiB: the error names it, so the whole name is scrubbed. The host's CPU time
(utime + stime, /proc/PID/stat) for that one answer is measured, fastest of --repeat, and per MiB;
the row without starts is the floor (reading, parsing and writing the message). Also the host's
CPU per sign-in start (each one changes the secrets held) and its peak RSS (VmHWM).

Prints a table and one line "REDACTION_JSON {...}"; exits 1 if something failed. Python 3
standard library only.
"""

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402  (the same process handling and handshake)

ANSWER_TIMEOUT_S = 300.0   # one answer to a large message on the code before issue 26 took 12 s


def cpu_seconds(pid):
    with open("/proc/%d/stat" % pid) as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def peak_rss_mb(pid):
    return bench.status_mb(pid, "VmHWM")


def sign_in_starts(proc, count):
    """`count` external sign-in starts, one after the other (each replaces the one before)."""
    for i in range(count):
        proc.write(b'{"jsonrpc":"2.0","id":"start%d","method":"requestOAuthTokens",'
                   b'"params":{"provider":"bench","flow":"external"}}\n' % i)
        if i > 0:
            msg, line = proc.read_reply("start%d" % (i - 1), bench.REPLY_TIMEOUT_S)
            if msg.get("error", {}).get("data", {}).get("reason") != "superseded":
                raise bench.BenchError("sign-in start %d: %s" % (i - 1, bench.short(line)))


def answer_cpu(proc, size_mb, request_id):
    """CPU seconds the host spends answering a status check for a provider named by SIZE MiB."""
    name = "p" * (size_mb << 20)
    line = ('{"jsonrpc":"2.0","id":"%s","method":"checkSignInStatus","params":{"provider":"%s"}}\n'
            % (request_id, name)).encode()
    before = cpu_seconds(proc.p.pid)
    proc.write(line)
    msg, answer = proc.read_reply(request_id, ANSWER_TIMEOUT_S)
    spent = cpu_seconds(proc.p.pid) - before
    if "error" not in msg or len(answer) < size_mb << 20:
        raise bench.BenchError("the answer does not name the provider: %s" % bench.short(answer))
    return spent


def run(argv, starts, sizes, repeat):
    proc = bench.Proc(argv)
    with proc.killed_on_error():
        bench.handshake(proc)
        before = cpu_seconds(proc.p.pid)
        sign_in_starts(proc, starts)
        per_start_ms = (cpu_seconds(proc.p.pid) - before) * 1000.0 / starts if starts else None
        answers = {}
        for size in sizes:
            answers[size] = min(answer_cpu(proc, size, "big%d-%d" % (size, n)) for n in range(repeat))
        rss = peak_rss_mb(proc.p.pid)
    warning = proc.close()
    return {"starts": starts, "perStartMs": per_start_ms, "answerCpuS": answers, "peakRssMB": rss, "warning": warning}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--host", required=True)
    parser.add_argument("--plugins", required=True)
    parser.add_argument("--config", required=True)
    parser.add_argument("--starts", default="0,400,2000")
    parser.add_argument("--sizes", default="1,4,16", help="message sizes, MiB")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    argv = [args.host, "serve", "--no-default-plugins", "--vault", "memory", "--plugins", args.plugins,
            "--config", args.config, "--log-level", "warning"]
    starts = [int(n) for n in args.starts.split(",")]
    sizes = [int(n) for n in args.sizes.split(",")]
    try:
        rows = [run(argv, count, sizes, args.repeat) for count in starts]
    except bench.BenchError as e:
        print("FAILED: %s" % e)
        return 1
    print("Redaction (a status check naming a provider of N MiB: the host's CPU for the answer, fastest of %d)"
          % args.repeat)
    header = "%-22s" % "sign-in starts held" + "".join("%-20s" % ("%d MiB" % size) for size in sizes) \
        + "%-14s%s" % ("per start", "peak RSS")
    print(header)
    floor = rows[0] if rows and rows[0]["starts"] == 0 else None
    for row in rows:
        cells = ""
        for size in sizes:
            spent = row["answerCpuS"][size]
            cells += "%-20s" % ("%.2f s (%.0f ms/MiB)" % (spent, spent * 1000.0 / size))
        per_start = "%.2f ms" % row["perStartMs"] if row["perStartMs"] is not None else "-"
        print("%-22s%s%-14s%.1f MB" % (row["starts"], cells, per_start, row["peakRssMB"]))
    if floor:
        for row in rows:
            if row is floor:
                continue
            extra = [(row["answerCpuS"][size] - floor["answerCpuS"][size]) * 1000.0 / size for size in sizes]
            print("scrubbing with %d starts held costs %s ms/MiB more than none"
                  % (row["starts"], " / ".join("%.0f" % value for value in extra)))
    for row in rows:
        if row["warning"]:
            print("warning: %s" % row["warning"])
    print("REDACTION_JSON " + json.dumps({"repeat": args.repeat, "sizesMiB": sizes, "rows": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
