"""The host process and its pipes: spawning `authbridge serve`, reading and writing NDJSON lines,
draining stderr, and stopping the process within bounds; or a connection to the running
`authbridge agent` on its Unix socket, which offers the protocol layer the same interface.

Why it is separate from the protocol: everything here is about an OS process or a socket (paths,
pipes, signals, buffer limits); nothing here knows JSON-RPC.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import os
import re
import shutil
import socket
import struct
from collections.abc import Mapping, Sequence
from pathlib import Path

from ._bundled import bundled_host
from .errors import HostExited, HostNotFound

__all__ = ["HostProcess", "AgentSocket", "agent_socket_path", "find_executable", "DEFAULT_MAX_FRAME_BYTES"]

#: The spec's frame limit (64 MiB) is also the default longest line the client accepts. It is a
#: cap, not an allocation: asyncio's default (64 KiB) is smaller than a large `fetch` body.
DEFAULT_MAX_FRAME_BYTES = 64 * 1024 * 1024

host_log = logging.getLogger("authbridge.host")
log = logging.getLogger("authbridge")


#: How to point the client at a host, for HostNotFound's message.
_HOW_TO_FIND = ("pass its path (connect(executable=...)), set AUTHBRIDGE, or put `authbridge` on PATH "
                "(make install PREFIX=DIR installs DIR/bin/authbridge)")


def find_executable(executable: str | os.PathLike[str] | None = None, env: Mapping[str, str] | None = None) -> str:
    """The host to run: `executable`, else `AUTHBRIDGE` of the host's environment (`env`), else
    of this process's, else the host bundled in this package (the platform wheel), else
    `authbridge` on PATH (the host's PATH when `env` has one). A bare name is looked up on PATH;
    a path must be executable. `HostNotFound` (a `FileNotFoundError`) says what was looked for."""
    variables = env or {}
    candidate = (os.fspath(executable) if executable is not None
                 else variables.get("AUTHBRIDGE") or os.environ.get("AUTHBRIDGE") or bundled_host() or "authbridge")
    if os.sep not in candidate:
        found = shutil.which(candidate, path=variables.get("PATH"))
        if found is None:
            raise HostNotFound(f"the authbridge host {candidate!r} is not on PATH; {_HOW_TO_FIND}", executable=candidate)
        return found
    path = Path(candidate).expanduser()
    if not path.is_file():
        raise HostNotFound(f"the authbridge host {path} does not exist; {_HOW_TO_FIND}", executable=str(path))
    if not os.access(path, os.X_OK):
        raise HostNotFound(f"the authbridge host {path} is not executable (chmod +x it); {_HOW_TO_FIND}",
                           executable=str(path))
    return str(path.resolve())


async def read_frame_line(stream: asyncio.StreamReader) -> bytes | OversizeLine | None:
    """The next line of `stream` (with its `\\n`), an `OversizeLine` for one over the stream's
    limit (skipped entirely, the stream stays in step), or None at EOF."""
    head, tail, size = b"", b"", 0
    oversize = False
    while True:
        try:
            line = await stream.readuntil(b"\n")
        except asyncio.IncompleteReadError as eof:
            if oversize:
                return OversizeLine(head, (tail + eof.partial)[-512:], size + len(eof.partial))
            return eof.partial or None  # a last line without `\n`, or EOF
        except asyncio.LimitOverrunError as overrun:
            # The line goes past the limit: consume what is buffered, keep both ends.
            chunk = await stream.read(max(overrun.consumed, 1))
            if not oversize:
                head, oversize = chunk[:512], True
            tail = (tail + chunk)[-512:]
            size += len(chunk)
            continue
        except (ConnectionError, OSError):
            return None
        if oversize:
            return OversizeLine(head, (tail + line)[-512:], size + len(line))
        return line


class OversizeLine:
    """A line longer than the limit, skipped: its first and last bytes (to find its id)."""

    def __init__(self, head: bytes, tail: bytes, size: int) -> None:
        self.head, self.tail, self.size = head, tail, size

    _HEAD_ID = re.compile(rb'^\s*\{(?:"jsonrpc":"2\.0",)?"id":(-?\d+|"(?:[^"\\]|\\.)*")[,}]')
    _TAIL_ID = re.compile(rb'[{,]"id":(-?\d+|"(?:[^"\\]|\\.)*")(?:,"jsonrpc":"2\.0")?\}\s*$')

    def frame_id(self) -> bytes | None:
        """The frame's id as JSON text, when it is the first or last member (the host writes
        compact JSON with only jsonrpc, id and result/error at the top, so one of the ends holds
        it); None when it cannot be told."""
        match = self._HEAD_ID.search(self.head) or self._TAIL_ID.search(self.tail)
        return match.group(1) if match else None


class _Frames:
    """What both transports share, built on their `send`."""

    def send(self, data: bytes) -> None:
        raise NotImplementedError

    def write_nowait(self, data: bytes) -> bool:
        """`send` for frames written while a cancellation unwinds, which must not await or raise.
        False when the pipe or connection is closed."""
        try:
            self.send(data)
        except (ConnectionError, OSError, RuntimeError):
            return False
        return True


class HostProcess(_Frames):
    """One `authbridge` child process.

    Started in its own session: a Ctrl-C meant for the frontend must not kill the host before
    the frontend has shut it down cleanly (the host also exits by itself when its stdin closes,
    so it never outlives a frontend that died).
    """

    def __init__(self, argv: Sequence[str], *, env: Mapping[str, str] | None = None,
                 cwd: str | os.PathLike[str] | None = None, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
                 stderr_lines: int = 200) -> None:
        self.argv = list(argv)
        self.env = dict(env) if env is not None else None
        self.cwd = cwd
        self.max_frame_bytes = max_frame_bytes
        self._stderr = collections.deque(maxlen=stderr_lines)  # type: collections.deque[str]
        self._proc: asyncio.subprocess.Process | None = None
        self._stderr_task: asyncio.Task[None] | None = None

    # ── Life ────────────────────────────────────────────────────────────────

    async def start(self) -> None:
        try:
            self._proc = await asyncio.create_subprocess_exec(
                *self.argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE, env=self.env, cwd=self.cwd,
                limit=self.max_frame_bytes, start_new_session=True)
        except (FileNotFoundError, PermissionError) as error:
            # Removed or made unexecutable since it was found (cwd missing is reported likewise).
            raise HostNotFound(f"the authbridge host {self.argv[0]} could not be started ({error.strerror}); {_HOW_TO_FIND}",
                               executable=self.argv[0]) from error
        self._stderr_task = asyncio.get_running_loop().create_task(self._drain_stderr(), name="authbridge-stderr")
        log.debug("started %s (pid %d)", self.argv[0], self._proc.pid)

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    @property
    def returncode(self) -> int | None:
        return self._proc.returncode if self._proc else None

    async def wait(self, timeout: float) -> int | None:
        """The exit status, or None when the process is still running after `timeout` seconds."""
        if self._proc is None:
            return None
        try:
            return await asyncio.wait_for(self._proc.wait(), timeout)
        except asyncio.TimeoutError:
            return None

    async def stop(self, grace: float) -> int | None:
        """Ends the process whatever state it is in, each step bounded by `grace` seconds: close
        stdin (the host exits on EOF) → SIGTERM → SIGKILL. Returns the exit status."""
        if self._proc is None:
            return None
        self.close_stdin()
        code = await self.wait(grace)
        for step in ("terminate", "kill"):
            if code is not None:
                break
            log.warning("the authbridge host (pid %d) did not exit within %.1f s: %s", self._proc.pid, grace, step)
            try:
                getattr(self._proc, step)()
            except ProcessLookupError:
                pass
            code = await self.wait(grace if step == "terminate" else max(grace, 5.0))
        await self.stderr_done(grace)
        return code

    async def settle(self) -> int | None:
        """Stdout closed: the exit status, once the process has ended (bounded: one that closed
        stdout but lives on is of no use any more and is killed), and its last log lines read."""
        code = await self.wait(5.0)
        if code is None:
            self.kill()
            code = await self.wait(5.0)
        await self.stderr_done(1.0)
        return code

    def exited_error(self, request_method: str | None = None) -> HostExited:
        """The error of a call the ended process can no longer answer."""
        return HostExited(self.returncode, self.stderr_tail(), request_method=request_method)

    async def stderr_done(self, timeout: float) -> None:
        """Waits (bounded) until stderr reached EOF, so `stderr_tail` has the last lines. Past
        `timeout` (a child of the host may hold the pipe open) the drain stops."""
        if self._stderr_task is not None:
            await asyncio.wait({self._stderr_task}, timeout=timeout)
            if self.returncode is not None and not self._stderr_task.done():
                self._stderr_task.cancel()

    # ── stderr ──────────────────────────────────────────────────────────────

    async def _drain_stderr(self) -> None:
        """Reads stderr for as long as it is open: a full pipe would block the host's logging
        (and so the host). Lines go to the `authbridge.host` logger at debug level and to a ring
        buffer for `HostExited` and diagnostics. The host never logs tokens (spec §8)."""
        assert self._proc is not None and self._proc.stderr is not None
        stream = self._proc.stderr
        while True:
            try:
                line = await stream.readline()
            except ValueError:  # a log line over the limit: drop what is buffered and go on
                await stream.read(self.max_frame_bytes)
                continue
            except Exception:  # noqa: BLE001 — a closed transport ends the drain
                break
            if not line:
                break
            text = line.decode("utf-8", errors="replace").rstrip("\r\n")
            self._stderr.append(text)
            host_log.debug("%s", text)

    def stderr_tail(self, lines: int = 20) -> list[str]:
        return list(self._stderr)[-lines:] if lines > 0 else []

    # ── stdout / stdin ──────────────────────────────────────────────────────

    async def read_line(self) -> bytes | OversizeLine | None:
        """The next line from stdout (with its `\\n`), an `OversizeLine` for one over the limit
        (skipped entirely, the stream stays in step), or None at EOF."""
        assert self._proc is not None and self._proc.stdout is not None
        return await read_frame_line(self._proc.stdout)

    def send(self, data: bytes) -> None:
        """Queues one frame, whole, without waiting: the pipe transport takes it in one piece, so
        frames never interleave and a frame is either queued entirely or not at all."""
        stdin = self._proc.stdin if self._proc else None
        if stdin is None or stdin.is_closing():
            raise BrokenPipeError("the host is not running")
        stdin.write(data)

    async def drain(self) -> None:
        """Waits until the pipe takes what was queued (back-pressure). Several callers may wait
        at once (Python 3.10+)."""
        if self._proc is None or self._proc.stdin is None:
            raise BrokenPipeError("the host is not running")
        await self._proc.stdin.drain()

    def close_stdin(self) -> None:
        stdin = self._proc.stdin if self._proc else None
        if stdin is not None and not stdin.is_closing():
            try:
                stdin.close()
            except (ConnectionError, OSError, RuntimeError):
                pass

    def kill(self) -> None:
        """SIGKILL at once (used when the frontend gives up on the host)."""
        if self._proc is not None and self._proc.returncode is None:
            try:
                self._proc.kill()
            except ProcessLookupError:
                pass


def agent_socket_path(explicit: str | os.PathLike[str] | None = None, env: Mapping[str, str] | None = None) -> str | None:
    """Where the agent's socket is: `explicit`, else `AUTHBRIDGE_AGENT_SOCKET` (of `env`, then of
    this process), else `$XDG_RUNTIME_DIR/authbridge/agent.sock`; None when none can be named."""
    if explicit is not None:
        return os.fspath(explicit)
    variables = env or {}
    named = variables.get("AUTHBRIDGE_AGENT_SOCKET") or os.environ.get("AUTHBRIDGE_AGENT_SOCKET")
    if named:
        return named
    runtime = variables.get("XDG_RUNTIME_DIR") or os.environ.get("XDG_RUNTIME_DIR")
    return os.path.join(runtime, "authbridge", "agent.sock") if runtime and os.path.isabs(runtime) else None


class AgentNotYours(PermissionError):
    """What answers on the agent's socket is not the user's own agent (the kernel names another
    uid as the peer, SO_PEERCRED): nothing is sent to it."""


class AgentSocket(_Frames):
    """One connection to the running `authbridge agent`: the same interface as `HostProcess`, so
    the protocol layer does not know which it has. The agent is shared: closing this ends only
    this connection (`exit` ends the connection, not the agent), and it has no exit status or
    log of ours to report. `pid` is the agent's, as the kernel names the peer (SO_PEERCRED)."""

    def __init__(self, path: str, *, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> None:
        self.path = path
        self.max_frame_bytes = max_frame_bytes
        self.returncode: int | None = None
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._pid: int | None = None

    async def start(self) -> None:
        """Connects; `FileNotFoundError` (no socket) or `ConnectionRefusedError` (a socket nothing
        listens on: its agent died) when there is no agent, `AgentNotYours` when what answers runs
        as another user (or cannot be told): anyone may listen at a path others can write to, and
        would be handed every request, and answer with tokens and sign-in pages of its own."""
        self._reader, self._writer = await asyncio.open_unix_connection(self.path, limit=self.max_frame_bytes)
        sock = self._writer.get_extra_info("socket")
        pid = uid = None
        try:
            # struct ucred { pid_t pid; uid_t uid; gid_t gid; }
            pid, uid, _ = struct.unpack("iII", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("iII")))
        except (OSError, AttributeError):   # AttributeError: no SO_PEERCRED here (not Linux): nothing vouches for it
            pass
        if uid != os.getuid():
            self._writer.close()
            who = f"uid {uid} (pid {pid})" if uid is not None else "an unknown user"
            raise AgentNotYours(f"what answers on {self.path} runs as {who}, not as you (uid {os.getuid()}): "
                                "it is not your authbridge agent")
        self._pid = pid
        log.debug("connected to the authbridge agent on %s (pid %s)", self.path, self._pid)

    @property
    def pid(self) -> int | None:
        return self._pid

    async def read_line(self) -> bytes | OversizeLine | None:
        assert self._reader is not None
        return await read_frame_line(self._reader)

    def send(self, data: bytes) -> None:
        if self._writer is None or self._writer.is_closing():
            raise BrokenPipeError("the connection to the agent is closed")
        self._writer.write(data)

    async def drain(self) -> None:
        if self._writer is None:
            raise BrokenPipeError("the connection to the agent is closed")
        await self._writer.drain()

    def close_stdin(self) -> None:
        """Ends this connection (the agent sees end of input and ends its requests)."""
        if self._writer is not None and not self._writer.is_closing():
            try:
                self._writer.close()
            except (ConnectionError, OSError, RuntimeError):
                pass

    def kill(self) -> None:
        self.close_stdin()

    async def wait(self, timeout: float) -> int | None:
        return None

    async def stop(self, grace: float) -> int | None:
        self.close_stdin()
        if self._writer is not None:
            try:
                await asyncio.wait_for(self._writer.wait_closed(), grace)
            except (asyncio.TimeoutError, ConnectionError, OSError):
                pass
        return None

    async def settle(self) -> int | None:
        return None

    def exited_error(self, request_method: str | None = None) -> HostExited:
        return HostExited(None, (), request_method=request_method, agent=self.path)

    async def stderr_done(self, timeout: float) -> None:
        return None

    def stderr_tail(self, lines: int = 20) -> list[str]:
        return []
