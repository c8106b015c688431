#!/usr/bin/env python3
"""Stands in for `authbridge` and records every frame both ways, for validate_frames.py.

    AUTHBRIDGE=Tests/tools/frame_tap.py AUTHBRIDGE_TAP_TARGET=.build/debug/authbridge \\
    AUTHBRIDGE_TAP_LOG=/tmp/frames.jsonl  python3 Examples/python_example.py …

Frontends that run the host as a child process (examples, README quick starts, a client's own
subprocess tests) are checked against bridge-spec without changing them: point AUTHBRIDGE (or the
client's host path) at this script. It starts AUTHBRIDGE_TAP_TARGET with the same arguments, copies
stdin to it and its stdout back line by line, and appends one record per frame to
AUTHBRIDGE_TAP_LOG in validate_frames.py's format (`dir` "out" = sent by the frontend, "in" = written
by the host; `host` = the host's pid, as ids are per host). stderr is the host's own. The log holds
tokens (getAccessToken results): tests keep it in their temporary folder.

It behaves like the host to its parent: EOF on stdin reaches the host, SIGTERM/SIGINT/SIGHUP are
passed on, and it exits with the host's status (or dies of the host's signal). If the tap itself
is killed, the kernel ends the host too (PR_SET_PDEATHSIG).
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import subprocess
import sys
import threading

PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def main(argv: list[str]) -> int:
    target, log_path = os.environ.get("AUTHBRIDGE_TAP_TARGET"), os.environ.get("AUTHBRIDGE_TAP_LOG")
    if not target or not log_path:
        print("frame_tap: set AUTHBRIDGE_TAP_TARGET (the real authbridge) and AUTHBRIDGE_TAP_LOG (a .jsonl file)",
              file=sys.stderr)
        return 64
    host = subprocess.Popen([target, *argv], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            preexec_fn=_die_with_parent, bufsize=0)
    log = open(log_path, "a", encoding="utf-8")
    lock = threading.Lock()

    def record(direction: str, raw: bytes) -> None:
        line = raw.rstrip(b"\n").decode("utf-8", "replace")
        if line.strip():
            with lock:
                log.write(json.dumps({"host": host.pid, "dir": direction, "line": line}) + "\n")
                log.flush()

    def frontend_to_host() -> None:
        assert host.stdin is not None
        try:
            for raw in sys.stdin.buffer:
                record("out", raw)
                host.stdin.write(raw)
        except (BrokenPipeError, ConnectionResetError):
            pass
        finally:
            try:
                host.stdin.close()
            except OSError:
                pass

    for number in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(number, lambda received, _frame: host.send_signal(received))
    threading.Thread(target=frontend_to_host, daemon=True).start()
    assert host.stdout is not None
    out = sys.stdout.buffer
    for raw in iter(host.stdout.readline, b""):
        record("in", raw)
        try:
            out.write(raw)
            out.flush()
        except BrokenPipeError:
            break
    status = host.wait()
    log.close()
    if status < 0:
        signal.signal(-status, signal.SIG_DFL)
        os.kill(os.getpid(), -status)
    # Not through the interpreter's shutdown: the stdin thread may still be blocked reading (a
    # frontend keeps its end open for a moment after the host exited), and Python aborts (SIGABRT)
    # when a daemon thread holds stdin's lock at shutdown. Everything was flushed already.
    os._exit(status)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
