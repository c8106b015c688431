"""JSON-RPC 2.0 over the host's stdio: ids, pending calls, cancellation, notifications.

Why it is its own layer: the rules here are the spec's (§1 framing, §3 JSON-RPC, §6
cancellation) and hold for every method; the typed API in `client.py` is a thin skin over
`Connection.request`.

Concurrency model: one reader task per host reads frames in order and, for each, either
resolves the pending call it answers or dispatches the notification. Notifications a request
causes come before its answer (spec §5), and they are dispatched in that order, so a caller that
got its answer has already seen the events that led to it.
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import json
import logging
from collections.abc import Callable, Iterable
from typing import Any, Generic, Literal, TypeVar, cast, overload

from .errors import AuthBridgeError, BridgeClosed, FrameTooLarge, HostExited, RequestTimeout, error_from_wire
from .transport import AgentSocket, HostProcess, OversizeLine
from .types import Event, ProfilesChanged, SessionChanged, SignInProgress, event_from_wire

__all__ = ["Connection", "EventStream", "Listeners", "FrameTap", "EventCallback", "ProgressCallback", "SessionCallback"]

log = logging.getLogger("authbridge")

#: `on_frame(direction, raw, frame)`: direction "send" or "receive", the raw line (with its
#: `\n`), and the parsed object (None when the line is not JSON). A debugging and testing hook:
#: frames carry tokens (getAccessToken's result), so never log them in production.
FrameTap = Callable[[str, bytes, Any | None], None]

# Event listeners: called with one event; an awaitable they return runs as a task, anything else
# they return is ignored (so `lambda e: items.append(e)` is a listener). `AuthBridge.on` types the
# event by the notification's name.
EventCallback = Callable[[Event], object]
SessionCallback = Callable[[SessionChanged], object]
ProfilesCallback = Callable[[ProfilesChanged], object]
ProgressCallback = Callable[[SignInProgress], object]
_Listener = Callable[[Any], object]   # as stored: the type was checked where it was registered

E_co = TypeVar("E_co", bound=Event, covariant=True)

_END = object()


class EventStream(Generic[E_co]):
    """An async iterator over the notifications the host sends from the moment it was created.

    It buffers without bound (notifications are few and small); `close()` or leaving an
    `async with` block unsubscribes. It ends when the bridge is closed, and raises `HostExited`
    when the host dies (after the events received before).
    """

    def __init__(self, connection: Connection, methods: Iterable[str]) -> None:
        self._connection = connection
        self._methods = frozenset(methods)
        self._queue: asyncio.Queue[Any] = asyncio.Queue()
        self._done = False
        connection._streams.add(self)

    def _offer(self, event: Event) -> None:
        if not self._methods or event.method in self._methods:
            self._queue.put_nowait(event)

    def _finish(self, error: BaseException | None) -> None:
        self._queue.put_nowait(error if error is not None else _END)

    def __aiter__(self) -> EventStream[E_co]:
        return self

    async def __anext__(self) -> E_co:
        if self._done:
            raise StopAsyncIteration
        item = await self._queue.get()
        if item is _END:
            self._done = True
            raise StopAsyncIteration
        if isinstance(item, BaseException):
            self._done = True
            raise item
        return cast(E_co, item)

    async def next(self, timeout: float | None = None) -> E_co:
        """The next event, waiting at most `timeout` seconds (`asyncio.TimeoutError`)."""
        return await asyncio.wait_for(self.__anext__(), timeout)

    def close(self) -> None:
        """Unsubscribes; a consumer waiting in `async for` sees the end."""
        self._connection._streams.discard(self)
        self._queue.put_nowait(_END)

    async def __aenter__(self) -> EventStream[E_co]:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()


class Listeners:
    """`on()`: the listeners of notifications, by method (None: all). A base of `AuthBridge` and
    of the blocking `SyncAuthBridge`; the table is handed to each `Connection`, so listeners
    survive a restart of the host."""

    def __init__(self, table: dict[str | None, list[_Listener]] | None = None) -> None:
        self._subscribers: dict[str | None, list[_Listener]] = table if table is not None else {}

    @overload
    def on(self, method: Literal["session/changed"], callback: SessionCallback) -> Callable[[], None]: ...
    @overload
    def on(self, method: Literal["signIn/progress"], callback: ProgressCallback) -> Callable[[], None]: ...
    @overload
    def on(self, method: Literal["profiles/changed"], callback: ProfilesCallback) -> Callable[[], None]: ...
    @overload
    def on(self, method: str | None, callback: EventCallback) -> Callable[[], None]: ...

    def on(self, method: str | None, callback: _Listener) -> Callable[[], None]:
        """Calls `callback(event)` for every notification `method` ("session/changed" gives a
        `SessionChanged`, "signIn/progress" a `SignInProgress`, "profiles/changed" a
        `ProfilesChanged`; None: all). It runs in the reader
        (the blocking wrapper's event-loop thread), in order, before the answer of the request
        that caused it; a coroutine it returns runs as a task. Returns a function that
        unsubscribes. Survives `restart()`."""
        self._subscribers.setdefault(method, []).append(callback)

        def unsubscribe() -> None:
            callbacks = self._subscribers.get(method, [])
            if callback in callbacks:
                callbacks.remove(callback)
        return unsubscribe


class _Pending:
    __slots__ = ("method", "future", "on_progress")

    def __init__(self, method: str, future: asyncio.Future[Any], on_progress: ProgressCallback | None) -> None:
        self.method, self.future, self.on_progress = method, future, on_progress


class Connection:
    """A JSON-RPC session with one host process, or one connection to the agent (`AgentSocket`,
    which offers the same interface). Created by `AuthBridge`; one per start.

    `subscribers` and `streams` are shared with the `AuthBridge`, so callbacks registered with
    `bridge.on()` survive a restart of the host.
    """

    def __init__(self, process: HostProcess | AgentSocket, *, subscribers: dict[str | None, list[_Listener]],
                 streams: set[EventStream[Event]], on_frame: FrameTap | None = None) -> None:
        self.process = process
        self._subscribers = subscribers
        self._streams = streams
        self._on_frame = on_frame
        self._ids = itertools.count(1)
        self._pending: dict[int | str, _Pending] = {}
        self._abandoned: dict[int | str, str] = {}   # cancelled by us; their late answers are dropped
        self._closing = False
        self._end_streams = True
        self._reader: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self.closed: asyncio.Future[BaseException] = asyncio.get_running_loop().create_future()

    def start(self) -> None:
        self._reader = asyncio.get_running_loop().create_task(self._read_loop(), name="authbridge-reader")

    # ── Sending ─────────────────────────────────────────────────────────────

    def _encode(self, frame: dict[str, Any]) -> bytes:
        # Compact JSON, UTF-8: json.dumps escapes control characters, so a frame is one line.
        data = (json.dumps(frame, separators=(",", ":"), ensure_ascii=False) + "\n").encode("utf-8")
        if self._on_frame is not None:
            self._tap("send", data, frame)
        return data

    def _tap(self, direction: str, raw: bytes, frame: Any) -> None:
        try:
            self._on_frame(direction, raw, frame)  # type: ignore[misc]
        except Exception:  # noqa: BLE001 — a debugging hook must not break the bridge
            log.exception("on_frame callback failed")

    async def notify(self, method: str, params: dict[str, Any] | None = None) -> None:
        frame: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            frame["params"] = params
        if self.closed.done():
            raise self._closed_error(method)
        try:
            self.process.send(self._encode(frame))
            await self.process.drain()
        except (ConnectionError, OSError) as error:
            raise await self._write_failed(method) from error

    async def request(self, method: str, params: dict[str, Any] | None = None, *,
                      timeout: float | None = None, on_progress: ProgressCallback | None = None) -> Any:
        """Sends a request and returns its `result`, or raises the error class of its `error`.

        Cancelling the awaiting task, or `timeout` (seconds) running out, sends `$/cancelRequest`
        for this id so the host stops the work (a pending sign-in closes its listener), then
        raises `asyncio.CancelledError` or `RequestTimeout` (a `TimeoutError`). The host's `-32800` answer that
        follows is dropped. `on_progress` receives this request's `signIn/progress` events.
        """
        if self.closed.done():
            raise self._closed_error(method)
        request_id = next(self._ids)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = _Pending(method, future, on_progress)
        frame: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params is not None:
            frame["params"] = params
        try:
            try:
                # Queued at once, before any await: a caller cancelled from here on has a frame the
                # host will answer, so `_cancel_at_host` always has an answer to wait for and drop.
                self.process.send(self._encode(frame))
                await self.process.drain()
            except (ConnectionError, OSError) as error:
                raise await self._write_failed(method) from error
            if timeout is None:
                return await future
            try:
                return await asyncio.wait_for(future, timeout)
            except asyncio.TimeoutError:
                self._cancel_at_host(request_id)
                raise RequestTimeout(method, timeout) from None
        except asyncio.CancelledError:
            self._cancel_at_host(request_id)
            raise
        finally:
            self._pending.pop(request_id, None)

    def _cancel_at_host(self, request_id: int | str) -> None:
        """`$/cancelRequest` for a call whose caller gave up, unless it was already answered.
        Written without awaiting: this runs while a cancellation unwinds."""
        pending = self._pending.get(request_id)
        if pending is None or self.closed.done():
            return
        if pending.future.done() and not pending.future.cancelled():
            return  # answered in the same instant: nothing left to cancel
        self._abandoned[request_id] = pending.method
        frame = {"jsonrpc": "2.0", "method": "$/cancelRequest", "params": {"id": request_id}}
        if self.process.write_nowait(self._encode(frame)):
            log.debug("cancelled %s (id %s) at the host", pending.method, request_id)

    async def _write_failed(self, method: str) -> AuthBridgeError:
        """The host stopped reading: wait (bounded) for the reader to see it die, for a precise error."""
        try:
            await asyncio.wait_for(asyncio.shield(self.closed), 5.0)
        except asyncio.TimeoutError:
            return self.process.exited_error(method)
        return self._closed_error(method)

    def _closed_error(self, method: str | None = None) -> AuthBridgeError:
        reason = self.closed.result() if self.closed.done() else None
        if isinstance(reason, HostExited):
            return HostExited(reason.returncode, reason.stderr_tail, request_method=method, agent=reason.agent)
        return BridgeClosed("the bridge is closed", request_method=method)

    # ── Receiving ───────────────────────────────────────────────────────────

    async def _read_loop(self) -> None:
        try:
            while True:
                line = await self.process.read_line()
                if line is None:
                    break
                if isinstance(line, OversizeLine):
                    self._oversize(line)
                    continue
                self._receive(line)
        except Exception as error:  # noqa: BLE001 — a bug here must not leave callers hanging
            log.exception("the authbridge reader failed")
            self.process.kill()
            await self._finish(error)
            return
        await self._finish(None)

    def _receive(self, raw: bytes) -> None:
        if not raw.strip():
            return
        try:
            frame = json.loads(raw)
        except ValueError:
            frame = None
        if self._on_frame is not None:
            self._tap("receive", raw, frame)
        if not isinstance(frame, dict):
            log.warning("the host wrote a line that is not a JSON object (%d bytes); ignored", len(raw))
            return
        if "method" in frame:
            if "id" not in frame:
                self._dispatch(frame["method"], frame.get("params"))
            return
        self._answer(frame)

    def _answer(self, frame: dict[str, Any]) -> None:
        request_id = frame.get("id")
        key = request_id if isinstance(request_id, (int, str)) and not isinstance(request_id, bool) else None
        pending = self._pending.get(key) if key is not None else None
        if pending is None:
            method = self._abandoned.pop(key, None) if key is not None else None
            if method is not None:
                log.debug("answer to cancelled %s (id %s) dropped", method, key)
            else:
                log.warning("the host answered an unknown request id %r: %s", request_id,
                            (frame.get("error") or {}).get("message", "(result)"))
            return
        if pending.future.done():
            return
        if "error" in frame:
            pending.future.set_exception(error_from_wire(frame["error"], pending.method))
        else:
            pending.future.set_result(frame.get("result"))

    def _oversize(self, line: OversizeLine) -> None:
        frame_id = line.frame_id()
        key: int | str | None = None
        if frame_id is not None:
            try:
                key = json.loads(frame_id)
            except ValueError:
                key = None
        pending = self._pending.get(key) if key is not None else None
        limit = self.process.max_frame_bytes
        if pending is not None and not pending.future.done():
            pending.future.set_exception(FrameTooLarge(
                f"the answer ({line.size} bytes) is longer than max_frame_bytes ({limit}); it was skipped",
                request_method=pending.method))
        else:
            log.error("skipped a %d-byte frame from the host (over max_frame_bytes %d) that answers no known call",
                      line.size, limit)

    def _dispatch(self, method: Any, params: Any) -> None:
        if not isinstance(method, str):
            return
        event = event_from_wire(method, params)
        if isinstance(event, SignInProgress):
            pending = self._pending.get(event.request_id)
            if pending is not None and pending.on_progress is not None:
                self._call(pending.on_progress, event)
        for callback in list(self._subscribers.get(method, ())) + list(self._subscribers.get(None, ())):
            self._call(callback, event)
        for stream in list(self._streams):
            stream._offer(event)

    def _call(self, callback: _Listener, event: Event) -> None:
        """Runs a callback now; a coroutine it returns runs as a task. Errors are logged, never
        raised into the reader (one faulty listener must not stop the bridge)."""
        try:
            outcome = callback(event)
        except Exception:  # noqa: BLE001
            log.exception("event callback %r failed", callback)
            return
        if inspect.isawaitable(outcome):
            task = asyncio.ensure_future(outcome)
            self._tasks.add(task)
            task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("event callback failed", exc_info=task.exception())

    # ── End ─────────────────────────────────────────────────────────────────

    async def _finish(self, failure: BaseException | None) -> None:
        """stdout (the agent's socket) closed: the host is gone or going. Collect its status and
        last log lines (both bounded), then fail every pending call at once."""
        await self.process.settle()
        if self._closing:
            reason: AuthBridgeError = BridgeClosed("the bridge was closed")
        else:
            reason = self.process.exited_error()
            log.warning("%s", reason)
        if failure is not None:
            reason.__cause__ = failure
        if not self.closed.done():
            self.closed.set_result(reason)
        for pending in list(self._pending.values()):
            if not pending.future.done():
                pending.future.set_exception(self._closed_error(pending.method))
        if self._end_streams or not self._closing:
            for stream in list(self._streams):
                stream._finish(None if self._closing else reason)
                self._streams.discard(stream)

    async def close(self, grace: float, end_streams: bool = True) -> int | None:
        """The spec's clean stop (§2), every step bounded by `grace` seconds: `shutdown` (the host
        answers null and refuses new work), `exit` (also when shutdown went unanswered), then EOF;
        if the host is still there, SIGTERM, then SIGKILL. Returns the exit status (0 after a clean shutdown). Event streams
        end, unless `end_streams` is false (a restart: they go on with the next host)."""
        self._closing = True
        self._end_streams = end_streams
        if not self.closed.done() and self.process.returncode is None:
            try:
                await self.request("shutdown", timeout=grace)
            except (AuthBridgeError, asyncio.TimeoutError) as error:
                log.debug("shutdown was not answered (%s); sending exit anyway", type(error).__name__)
            try:
                await asyncio.wait_for(self.notify("exit"), grace)    # honoured in any phase (spec §2)
            except (AuthBridgeError, asyncio.TimeoutError, ConnectionError, OSError) as error:
                log.debug("exit could not be sent (%s); stopping the host", type(error).__name__)
        code = await self.process.stop(grace)
        if self._reader is not None:
            await asyncio.wait({self._reader}, timeout=grace)
            if not self._reader.done():
                self._reader.cancel()
        if not self.closed.done():
            await self._finish(None)
        for task in list(self._tasks):
            task.cancel()
        return code
