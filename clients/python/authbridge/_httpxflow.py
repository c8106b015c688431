"""The auth flow of `authbridge.httpx` and `authbridge.httpx2` (the MCP SDK's HTTP library, a
fork of httpx with the same `Auth` protocol): one generator without I/O, driven by each
library's `sync_auth_flow` and `async_auth_flow`. Requests, responses and streams are duck-typed:
the two libraries' classes are distinct but alike."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Generator, Sequence
from dataclasses import dataclass
from typing import Any

from ._httpauth import TokenSource, authorize, check_url, dpop_nonce_requested, insufficient_scope, same_origin
from .client import AuthBridge
from .protocol import ProgressCallback
from .sync import SyncAuthBridge
from .types import AccessTokenResult, Flow

__all__ = ["AuthFlow"]


@dataclass(frozen=True)
class _Token:
    """A step of the flow: the token to authorize the request `method url` with (`rejected`: the
    one a 401 refused, or a 403 found short of `step_up`, the scopes it asked for; `dpop_nonce`:
    the nonce a 401 asked the next DPoP proof to carry)."""
    method: str
    url: str
    rejected: AccessTokenResult | None = None
    dpop_nonce: str | None = None
    step_up: tuple[str, ...] = ()


class AuthFlow:
    """What both auth classes share: `_source` (the profile's tokens) and the flow. `_byte_stream`
    is the library's `ByteStream` (a body it can send twice)."""

    _source: TokenSource
    _byte_stream: type

    def __init__(self, bridge: AuthBridge | SyncAuthBridge, profile: str, *, account: str | None = None,
                 min_validity_ms: int | None = None, scopes: Sequence[str] | None = None,
                 resource: str | Sequence[str] | None = None, step_up: bool = True, flow: Flow | None = None,
                 on_progress: ProgressCallback | None = None) -> None:
        self._source = TokenSource(f"{type(self).__module__}.AuthBridgeAuth", bridge, profile, account=account,
                                   min_validity_ms=min_validity_ms, scopes=scopes, resource=resource,
                                   step_up=step_up, flow=flow, on_progress=on_progress)

    def __repr__(self) -> str:
        return repr(self._source)

    def _flow(self, request: Any) -> Generator[Any, Any, None]:
        """Yields the requests to send (and is sent their responses) and `_Token` steps (and is
        sent the token). A 401 renews the token once, a 403 `insufficient_scope` steps up once."""
        url = str(request.url)
        check_url(url)
        token: AccessTokenResult = yield _Token(request.method, url)
        authorize(request.headers, token, url)
        renewed = stepped = False
        while True:
            response = yield request
            status = response.status_code
            if not same_origin(str(response.request.url), url):
                return
            step: _Token
            if status == 401 and not renewed:
                renewed = True
                # A DPoP server that wants its nonce in the proof (RFC 9449 §9) gets a new proof, not a refresh.
                nonce = dpop_nonce_requested(status, response.headers)
                step = (_Token(request.method, url, dpop_nonce=nonce) if nonce
                        else _Token(request.method, url, rejected=token))
            elif status == 403 and not stepped and self._source.step_up:
                scopes = insufficient_scope(status, response.headers)
                if not scopes:
                    return
                stepped = True
                step = _Token(request.method, url, rejected=token, step_up=tuple(scopes))
            else:
                return
            token = yield step
            if not isinstance(request.stream, self._byte_stream):   # streamed: it cannot be sent again
                return
            authorize(request.headers, token, url)

    def sync_auth_flow(self, request: Any) -> Generator[Any, Any, None]:
        steps = self._flow(request)
        answer: Any = None   # None starts the generator
        while True:
            try:
                step = steps.send(answer)
            except StopIteration:
                return
            if isinstance(step, _Token):
                name, arguments = self._source_call(step)
                answer = getattr(self._source, name)(*arguments)
            else:
                answer = yield step

    async def async_auth_flow(self, request: Any) -> AsyncGenerator[Any, Any]:
        steps = self._flow(request)
        answer: Any = None   # None starts the generator
        while True:
            try:
                step = steps.send(answer)
            except StopIteration:
                return
            if isinstance(step, _Token):
                name, arguments = self._source_call(step)
                answer = await getattr(self._source, name + "_async")(*arguments)
            else:
                answer = yield step

    @staticmethod
    def _source_call(step: _Token) -> tuple[str, tuple[Any, ...]]:
        """Which `TokenSource` method answers `step` (its blocking name; `_async` for asyncio), with what."""
        if step.step_up and step.rejected:
            return "stepped_up", (step.rejected, step.step_up, step.method, step.url)
        if step.rejected:
            return "renewed", (step.rejected, step.method, step.url)
        return "token", (step.method, step.url, step.dpop_nonce)
