"""`Agent`: one `authbridge agent` under test, isolated like a `Host` (its own XDG folders, its
runtime folder for the socket), and `AgentClient`: one connection to it, driven and validated
frame by frame like a `Host` (host.FrameLink). Also what the agent's tests measure: its open
descriptors and resident memory (from /proc).
"""

from __future__ import annotations

import itertools
import json
import os
import select
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from .host import TIMEOUT, FrameLink, HostError
from .isolation import isolated_environment
from .paths import HOST_BIN


def end_input(sock: socket.socket) -> None:
    """Ends what a client sends on `sock` (its write side), as a frontend that is done does; the agent
    may have closed the connection already."""
    try:
        sock.shutdown(socket.SHUT_WR)
    except OSError:
        pass


class Agent:
    """One `authbridge agent` process. The socket is the default one under the agent's own
    XDG_RUNTIME_DIR (`env` holds it, for the command line and clients run in that
    environment), or `socket` (`--socket`)."""

    def __init__(self, workdir: Path, plugin_dirs: Iterable[Path] = (), profiles: dict | None = None,
                 extra_args: Iterable[str] = (), socket_path: Path | None = None, env: dict[str, str] | None = None,
                 log_level: str = "debug", test_clock: bool = False, command: Iterable[str] = (),
                 wait_ready: bool = True, binary: Path = HOST_BIN) -> None:
        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        self.config = workdir / "config.json"
        self.config.write_text(json.dumps({"profiles": profiles or {}}))
        self.env = isolated_environment(workdir)
        self.env.update(env or {})
        self.socket = Path(socket_path) if socket_path else Path(self.env["XDG_RUNTIME_DIR"]) / "authbridge" / "agent.sock"
        self.host_args = ["--no-default-plugins", "--config", str(self.config), "--log-level", log_level]
        for folder in plugin_dirs:
            self.host_args += ["--plugins", str(folder)]
        if test_clock:
            self.host_args.append("--test-clock")
        self.argv = [*command, str(binary), "agent", *self.host_args, *extra_args]
        if socket_path:
            self.argv += ["--socket", str(socket_path)]
        self.stderr_path = workdir / "agent.log"
        self._stderr_file = open(self.stderr_path, "ab")
        self.proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=self._stderr_file,
                                     env=self.env, cwd=workdir)
        self.ready_line = self.read_ready() if wait_ready else None

    def read_ready(self, timeout: float = TIMEOUT) -> str:
        """The line the agent writes once it listens (its socket's path); fails when it ends first."""
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        line = self.proc.stdout.readline().decode() if ready else ""
        if not line:
            raise HostError(f"the agent did not say it was ready within {timeout} s ({self.describe_exit()})\n{self.stderr_tail()}")
        return line.rstrip("\n")

    @property
    def pid(self) -> int:
        return self.proc.pid

    def connect(self, initialize: bool = True, name: str = "client") -> AgentClient:
        client = AgentClient(self, name)
        if initialize:
            client.initialize()
        return client

    # What the agent holds

    def fd_count(self) -> int:
        return len(os.listdir(f"/proc/{self.pid}/fd"))

    def rss_kib(self) -> int:
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        raise HostError("no VmRSS in /proc/PID/status")

    # Ending

    def stop(self, sig: int = signal.SIGTERM, timeout: float = TIMEOUT) -> int:
        """Signals the agent (SIGTERM: its clean stop) and waits for it; its exit status."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(TIMEOUT)
            raise HostError(f"the agent did not end within {timeout} s of signal {sig}\n{self.stderr_tail()}") from None
        if self.proc.stdout:
            self.proc.stdout.close()
        self._stderr_file.close()
        return code

    def describe_exit(self) -> str:
        code = self.proc.poll()
        return "still running" if code is None else f"exit status {code}"

    def stderr_text(self) -> str:
        if not self._stderr_file.closed:
            self._stderr_file.flush()
        return self.stderr_path.read_bytes().decode("utf-8", errors="replace")

    def stderr_tail(self, lines: int = 25) -> str:
        return "agent stderr (tail):\n  " + "\n  ".join(self.stderr_text().splitlines()[-lines:])


class AgentClient(FrameLink):
    """One connection to an agent: a bridge session of its own, every frame validated."""

    def __init__(self, agent: Agent, name: str = "client") -> None:
        super().__init__(agent.workdir)
        self.agent = agent
        self.name = name
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(TIMEOUT)
        self.sock.connect(str(agent.socket))
        self.sock.settimeout(None)
        self._start_reading(self.sock.makefile("rb"), f"agent-{name}")

    def _write(self, data: bytes) -> None:
        try:
            self.sock.sendall(data)
        except (BrokenPipeError, ConnectionResetError):
            raise HostError(f"the agent closed the connection of {self.name} ({self.agent.describe_exit()})\n"
                            f"{self.agent.stderr_tail()}") from None

    def describe_exit(self) -> str:
        return f"the agent closed the connection ({self.agent.describe_exit()})"

    def stderr_tail(self, lines: int = 25) -> str:
        return self.agent.stderr_tail(lines)

    def wait_closed(self, timeout: float = TIMEOUT) -> None:
        """Waits until the agent has closed this connection (the reader saw its end)."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while not self._eof:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise HostError(f"{self.name}: the agent did not close the connection within {timeout} s")
                self.cond.wait(remaining)

    def close(self) -> None:
        """Ends this connection as a frontend does (end of input) and waits for the agent to close it."""
        end_input(self.sock)
        self.wait_closed()
        self.sock.close()
        self._count_answers()


class NodeBridge:
    """A Node client (clients/node's `AuthBridge`) in a child process, driven through
    Tests/support/bridge_repl.mjs: next to Python clients in one test. Its frames are recorded
    in `frames` for recorded.validate."""

    REPL = Path(__file__).resolve().parents[1] / "bridge_repl.mjs"

    def __init__(self, options: dict, frames: Path, env: dict[str, str] | None = None) -> None:
        self.frames = frames
        self.messages: list[dict] = []
        self.cond = threading.Condition()
        self._ids = itertools.count(1)
        self._ended = False
        self.proc = subprocess.Popen(["node", str(self.REPL), json.dumps(options), str(frames)], env=env, text=True,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        threading.Thread(target=self._read, daemon=True).start()
        first = self.wait(lambda m: "ready" in m or "startError" in m, what="the Node client to start")
        if "startError" in first:
            raise HostError(f"the Node client could not start: {first['startError']}")
        self.on_agent: bool = first["onAgent"]

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self.cond:
                self.messages.append(json.loads(line))
                self.cond.notify_all()
        with self.cond:
            self._ended = True
            self.cond.notify_all()

    def wait(self, predicate: Callable[[dict], bool], timeout: float = TIMEOUT, what: str = "a message") -> dict:
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                found = next((m for m in self.messages if predicate(m)), None)
                if found is not None:
                    return found
                remaining = deadline - time.monotonic()
                if self._ended or remaining <= 0:
                    stderr = self.proc.stderr.read() if self._ended and self.proc.stderr else ""
                    raise HostError(f"the Node client gave no {what} within {timeout} s\n{stderr}")
                self.cond.wait(remaining)

    def send(self, command: dict) -> int:
        command = {"id": next(self._ids), **command}
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(command) + "\n")
        self.proc.stdin.flush()
        return command["id"]

    def call_nowait(self, method: str, params: dict | None = None) -> int:
        return self.send({"method": method, "params": params})

    def answer(self, call_id: int, timeout: float = TIMEOUT) -> dict:
        """`{"result": …}` or `{"error": {name, message, code, data, agent}}` of call `call_id`."""
        return self.wait(lambda m: m.get("id") == call_id, timeout, f"answer to call {call_id}")

    def call(self, method: str, params: dict | None = None, timeout: float = TIMEOUT) -> Any:
        answer = self.answer(self.call_nowait(method, params), timeout)
        if "error" in answer:
            raise HostError(f"the Node client's {method} failed: {answer['error']}")
        return answer["result"]

    def events(self, method: str) -> list[dict]:
        """`{"params": …, "at": CLOCK_MONOTONIC ns}` of each notification `method` so far."""
        with self.cond:
            return [{"params": m["params"], "at": int(m["at"])} for m in self.messages if m.get("event") == method]

    def close(self, timeout: float = TIMEOUT) -> None:
        if self.proc.stdin and not self.proc.stdin.closed:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout)


def frame_recorder(path: Path, name: str) -> Callable[[str, bytes, Any], None]:
    """An `on_frame` tap for the Python client that appends each frame to `path` in the records
    recorded.validate reads (both ways; the connection named `name`, and `name#2`… after each
    restart, whose ids start again)."""
    lock = threading.Lock()
    starts = itertools.count(1)
    current = [name]

    def record(direction: str, raw: bytes, frame: Any) -> None:
        line = raw.decode("utf-8", errors="replace").rstrip("\n")
        with lock:
            if direction == "send" and isinstance(frame, dict) and frame.get("method") == "initialize":
                number = next(starts)
                current[0] = name if number == 1 else f"{name}#{number}"
            with open(path, "a", encoding="utf-8") as out:
                out.write(json.dumps({"host": current[0], "dir": "out" if direction == "send" else "in", "line": line}) + "\n")
    return record
