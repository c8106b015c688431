"""A blocking wrapper for programs without asyncio:

    import authbridge.sync

    with authbridge.sync.connect(plugins=["/usr/lib/authbridge/plugins"]) as bridge:
        print(bridge.check_sign_in_status("corp"))

Why a thread: the host streams notifications and answers out of order at any time, so someone
must always be reading. `SyncAuthBridge` runs an `AuthBridge` on its own event loop in a daemon
thread and each method blocks on that loop. Callbacks given to `on()` run in that thread: keep
them short and never call the bridge from them (it would wait on itself); use `events()` from
your own thread instead. An exception (or Ctrl-C) that interrupts a waiting call cancels the
request at the host.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Concatenate, Generic, Literal, ParamSpec, TypeVar, overload

from .client import AuthBridge, HttpLibrary, _auth_object, open_in_browser
from .errors import BridgeClosed
from .protocol import E_co, EventStream, Listeners, ProgressCallback
from .types import Event, Flow, InitializeResult, ProfilesChanged, SessionChanged, SignInProgress, SignOutProgress

if TYPE_CHECKING:   # imported only when asked for: each needs its HTTP library
    from . import httpx as _httpx
    from . import httpx2 as _httpx2
    from . import requests as _requests

__all__ = ["SyncAuthBridge", "SyncEventStream", "connect"]

P = ParamSpec("P")
R = TypeVar("R")


def _blocking(method: Callable[Concatenate[AuthBridge, P], Awaitable[R]]) -> Callable[Concatenate[SyncAuthBridge, P], R]:
    """The blocking twin of an `AuthBridge` coroutine method, same signature and docs."""
    def call(self: SyncAuthBridge, /, *args: P.args, **kwargs: P.kwargs) -> R:
        coroutine: Coroutine[Any, Any, R] = getattr(self._bridge, method.__name__)(*args, **kwargs)
        return self._run(coroutine)
    call.__name__, call.__qualname__ = method.__name__, f"SyncAuthBridge.{method.__name__}"
    call.__doc__ = method.__doc__
    return call


class SyncEventStream(Generic[E_co]):
    """A blocking iterator over events: `for event in stream:` or `stream.get(timeout=5)`."""

    def __init__(self, owner: SyncAuthBridge, stream: EventStream[E_co]) -> None:
        self._owner, self._stream = owner, stream

    def get(self, timeout: float | None = None) -> E_co:
        """The next event; `TimeoutError` after `timeout` seconds, `StopIteration` once the
        bridge is closed, `HostExited` when the host died."""
        try:
            return self._owner._run(self._stream.next(timeout))
        except StopAsyncIteration:
            raise StopIteration from None
        except asyncio.TimeoutError:
            raise TimeoutError(f"no event within {timeout} s") from None

    def __iter__(self) -> Iterator[E_co]:
        return self

    def __next__(self) -> E_co:
        return self.get()

    def close(self) -> None:
        self._owner._loop.call_soon_threadsafe(self._stream.close)

    def __enter__(self) -> SyncEventStream[E_co]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class SyncAuthBridge(Listeners):
    """`AuthBridge` with blocking methods (same names, arguments and results). Per-call
    `timeout=` works as in the async API: the request is cancelled at the host and
    `RequestTimeout` (a `TimeoutError`) is raised."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="authbridge-loop", daemon=True)
        self._thread.start()
        try:
            # Created in the loop's thread: asyncio objects belong to their loop.
            self._bridge: AuthBridge = self._run(self._make(args, kwargs))
        except BaseException:
            self._stop_loop()
            raise
        super().__init__(self._bridge._subscribers)    # `on()` adds to the asyncio bridge's listeners

    @staticmethod
    async def _make(args: tuple[Any, ...], kwargs: dict[str, Any]) -> AuthBridge:
        return AuthBridge(*args, **kwargs)

    def _run(self, coroutine: Coroutine[Any, Any, R]) -> R:
        if self._loop.is_closed():
            coroutine.close()
            raise BridgeClosed("the bridge is closed")
        future = asyncio.run_coroutine_threadsafe(coroutine, self._loop)
        try:
            return future.result()
        except concurrent.futures.CancelledError:
            raise BridgeClosed("the call was cancelled") from None
        except asyncio.TimeoutError as error:
            if isinstance(error, TimeoutError):
                raise
            raise TimeoutError(*error.args) from error  # Python 3.10: one TimeoutError for callers
        except BaseException:
            # Interrupted while waiting (KeyboardInterrupt…): cancel the task, which cancels the
            # request at the host.
            future.cancel()
            raise

    async def _await_from(self, coroutine: Coroutine[Any, Any, R]) -> R:
        """Awaits `coroutine` on the bridge's loop from another event loop (an `httpx.AsyncClient`'s):
        that loop goes on meanwhile, and cancelling the awaiting task cancels the request at the host."""
        if self._loop.is_closed():
            coroutine.close()
            raise BridgeClosed("the bridge is closed")
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coroutine, self._loop))

    def _stop_loop(self) -> None:
        if not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
            if not self._thread.is_alive():
                self._loop.close()

    # Life cycle

    def start(self) -> InitializeResult:
        return self._run(self._bridge.start())

    def close(self) -> int | None:
        """Shuts the host down (bounded) and stops the loop thread. Returns the exit status."""
        if self._loop.is_closed():
            return self._bridge.returncode
        try:
            return self._run(self._bridge.close())
        finally:
            self._stop_loop()

    def restart(self) -> InitializeResult:
        return self._run(self._bridge.restart())

    def __enter__(self) -> SyncAuthBridge:
        try:
            self.start()
        except BaseException:
            self.close()   # no `__exit__` follows a failed `__enter__`: stop the thread here
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def info(self) -> InitializeResult:
        return self._bridge.info

    @property
    def pid(self) -> int | None:
        return self._bridge.pid

    @property
    def returncode(self) -> int | None:
        return self._bridge.returncode

    @property
    def running(self) -> bool:
        return self._bridge.running

    @property
    def on_agent(self) -> bool:
        return self._bridge.on_agent

    @property
    def agent_socket(self) -> str | None:
        return self._bridge.agent_socket

    def stderr_tail(self, lines: int = 20) -> list[str]:
        return self._bridge.stderr_tail(lines)

    # Events

    @overload
    def events(self, method: Literal["session/changed"], /) -> SyncEventStream[SessionChanged]: ...
    @overload
    def events(self, method: Literal["signIn/progress"], /) -> SyncEventStream[SignInProgress]: ...
    @overload
    def events(self, method: Literal["signOut/progress"], /) -> SyncEventStream[SignOutProgress]: ...
    @overload
    def events(self, method: Literal["profiles/changed"], /) -> SyncEventStream[ProfilesChanged]: ...
    @overload
    def events(self, *methods: str) -> SyncEventStream[Event]: ...

    def events(self, *methods: str) -> SyncEventStream[Any]:
        """As `AuthBridge.events`, a blocking iterator."""
        async def make() -> EventStream[Any]:
            return self._bridge.events(*methods)
        return SyncEventStream(self, self._run(make()))

    # Methods

    request = _blocking(AuthBridge.request)
    notify = _blocking(AuthBridge.notify)
    discover = _blocking(AuthBridge.discover)
    list_providers = _blocking(AuthBridge.list_providers)
    configure_profile = _blocking(AuthBridge.configure_profile)
    remove_profile = _blocking(AuthBridge.remove_profile)
    list_accounts = _blocking(AuthBridge.list_accounts)
    check_sign_in_status = _blocking(AuthBridge.check_sign_in_status)
    request_oauth_tokens = _blocking(AuthBridge.request_oauth_tokens)
    complete_sign_in = _blocking(AuthBridge.complete_sign_in)
    complete_sign_out = _blocking(AuthBridge.complete_sign_out)
    get_access_token = _blocking(AuthBridge.get_access_token)
    exchange_token = _blocking(AuthBridge.exchange_token)
    fetch = _blocking(AuthBridge.fetch)
    sign_out = _blocking(AuthBridge.sign_out)
    sign_in_to_url = _blocking(AuthBridge.sign_in_to_url)

    @overload
    def auth_for_url(self, url: str, *, library: Literal["httpx"] = ..., profile: str | None = ...,
                     flow: Flow | None = ..., scopes: Sequence[str] | None = ...,
                     on_progress: ProgressCallback | None = ..., step_up: bool = ...,
                     timeout_ms: int | None = ..., timeout: float | None = ...) -> _httpx.AuthBridgeAuth: ...
    @overload
    def auth_for_url(self, url: str, *, library: Literal["httpx2"], profile: str | None = ...,
                     flow: Flow | None = ..., scopes: Sequence[str] | None = ...,
                     on_progress: ProgressCallback | None = ..., step_up: bool = ...,
                     timeout_ms: int | None = ..., timeout: float | None = ...) -> _httpx2.AuthBridgeAuth: ...
    @overload
    def auth_for_url(self, url: str, *, library: Literal["requests"], profile: str | None = ...,
                     flow: Flow | None = ..., scopes: Sequence[str] | None = ...,
                     on_progress: ProgressCallback | None = ..., step_up: bool = ...,
                     timeout_ms: int | None = ..., timeout: float | None = ...) -> _requests.AuthBridgeAuth: ...

    def auth_for_url(self, url: str, *, library: HttpLibrary = "httpx", profile: str | None = None,
                     flow: Flow | None = None, scopes: Sequence[str] | None = None,
                     on_progress: ProgressCallback | None = open_in_browser, step_up: bool = True,
                     timeout_ms: int | None = None, timeout: float | None = None) -> Any:
        """As `AuthBridge.auth_for_url`, blocking; `library` may also be "requests"."""
        status = self.sign_in_to_url(url, profile=profile, flow=flow, scopes=scopes, on_progress=on_progress,
                                     timeout_ms=timeout_ms, timeout=timeout)
        return _auth_object(library, self, status.provider, flow=flow, on_progress=on_progress, step_up=step_up)


def _options_of(_: Callable[P, Any]) -> Callable[[Callable[..., R]], Callable[P, R]]:
    """Types a function as taking the parameters of another (here: `AuthBridge`'s options)."""
    def apply(function: Callable[..., R]) -> Callable[P, R]:
        return function
    return apply


@_options_of(AuthBridge)
def connect(*args: Any, **kwargs: Any) -> SyncAuthBridge:
    """`with authbridge.sync.connect(...) as bridge:` — same arguments as `authbridge.connect`."""
    return SyncAuthBridge(*args, **kwargs)
