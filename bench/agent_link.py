"""What the agent benchmarks share (bench/hostile.py, bench/agent_memory.py, bench/oidc_agent.py):
one JSON-RPC connection to `authbridge agent` with a small line reader, its failure, and MiB.
Standard library only."""

from __future__ import annotations

import json
import socket


class BenchError(Exception):
    pass


def mib(kib):
    return round(kib / 1024.0, 1)


class Link:
    """One connection to the agent at `target` (a path, or anything with a `socket` path): frames
    written whole, answers read line by line (notifications skipped), error answers raised."""

    def __init__(self, target, initialize=True, timeout=None, client_name="bench"):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        if timeout is not None:
            self.sock.settimeout(timeout)
        self.sock.connect(str(getattr(target, "socket", target)))
        self.pending = bytearray()
        self.next_id = 0
        if initialize:
            self.call("initialize", {"protocolVersion": "1.0", "clientInfo": {"name": client_name}})
            self.notify("initialized", {})

    def line(self):
        """The next line the agent wrote, as bytes (without its newline)."""
        end = self.pending.find(b"\n")
        while end < 0:
            chunk = self.sock.recv(1 << 16)
            if not chunk:
                raise BenchError("the agent closed the connection")
            start = len(self.pending)
            self.pending += chunk
            end = self.pending.find(b"\n", start)
        frame = bytes(self.pending[:end])
        del self.pending[:end + 1]
        return frame

    def frame(self):
        return json.loads(self.line())

    def send(self, method, params):
        """Writes a request; its id."""
        self.next_id += 1
        self.sock.sendall(json.dumps({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params}).encode() + b"\n")
        return self.next_id

    def notify(self, method, params):
        self.sock.sendall(json.dumps({"jsonrpc": "2.0", "method": method, "params": params}).encode() + b"\n")

    def answer(self, request_id, on_notification=None):
        """The result of `request_id`; notifications go to `on_notification` (or are skipped)."""
        while True:
            frame = self.frame()
            if frame.get("id") == request_id and "method" not in frame:
                if "error" in frame:
                    raise BenchError("request %s failed: %s" % (request_id, frame["error"]))
                return frame["result"]
            if on_notification and "method" in frame:
                on_notification(frame)

    def call(self, method, params):
        return self.answer(self.send(method, params))

    def send_unfinished(self, mib_count):
        """`mib_count` MiB of one line that never ends; False when the agent closed the connection meanwhile."""
        chunk = b"x" * (1 << 20)
        try:
            for _ in range(mib_count):
                self.sock.sendall(chunk)
        except OSError:
            return False
        return True

    def close(self):
        self.sock.close()
