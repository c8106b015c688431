"""AuthBridge as an `auth=` for httpx, blocking and asyncio: every request carries the session's
access token.

    import httpx
    import authbridge
    from authbridge.httpx import AuthBridgeAuth

    async with authbridge.connect() as bridge, httpx.AsyncClient(auth=AuthBridgeAuth(bridge, "corp")) as client:
        print((await client.get("https://api.example.com/me")).json())

Needs the `httpx` package (`pip install httpx`, or the client's `httpx` extra); the rest of
`authbridge` does not. Each request asks the host for the token (`getAccessToken`, answered
from its cache while the token is valid) and gets its headers, and the cookies whose host and
path match its URL. When the server answers 401, the auth object renews the token once
(`forceRefresh`) and sends the request again; see `AuthBridgeAuth` for the details.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Generator, Sequence
from dataclasses import dataclass
from typing import Any

try:
    import httpx
except ImportError as missing:  # pragma: no cover - depends on the environment
    raise ImportError("authbridge.httpx needs the httpx package: pip install httpx") from missing

from ._httpauth import TokenSource, authorize, check_url, dpop_nonce_requested, same_origin
from .client import AuthBridge
from .sync import SyncAuthBridge
from .types import AccessTokenResult

__all__ = ["AuthBridgeAuth"]


@dataclass(frozen=True)
class _Token:
    """A step of the flow: the token to authorize the request `method url` with (`rejected`: the
    one a 401 refused; `dpop_nonce`: the nonce a 401 asked the next DPoP proof to carry)."""
    method: str
    url: str
    rejected: AccessTokenResult | None = None
    dpop_nonce: str | None = None


class AuthBridgeAuth(httpx.Auth):
    """`auth=` for `httpx.Client` and `httpx.AsyncClient`: the access token of `profile` (its
    `account`, default the current one) on every request, taken from `bridge`.

    Which bridge for which client: `httpx.AsyncClient` takes either kind — an asyncio bridge
    (`authbridge.connect()`) used on the same event loop, or a blocking one
    (`authbridge.sync.connect()`), which it awaits without blocking its loop. `httpx.Client`
    needs a blocking bridge: an asyncio one raises `TypeError` (its loop would wait on itself).

    - Headers and cookies: `getAccessToken`'s `headers` replace fields of the same name; its
      `cookies` go into the Cookie field when the URL's host is the cookie's `domain`, its path is
      within the cookie's `path`, and it is https for a `secure` cookie. Nothing is put into the
      client's cookie jar. Following a redirect, httpx drops the Authorization field when the
      origin changes and rebuilds the Cookie field from its jar: the token does not follow.
    - `min_validity_ms`: renew first when the token expires sooner (the host's default: 60 s).
    - `scopes`, `resource` (one absolute URI or several): every request gets the token for exactly
      those (`getAccessToken`'s `scopes` and `resource`), not the session's own.
    - Only https URLs, or plain http to a loopback IP address, get a token: any other URL raises
      `authbridge.InsecureURL` before anything is sent.
    - A 401 from the URL's origin renews the token once (`forceRefresh`, unless another request
      has renewed it meanwhile) and sends the request again; the answer to that is the result
      (a second 401 included). A body httpx cannot send twice (`content=` a generator, iterator
      or file; `files=` uploads) is not: the 401 is the result, and the token is renewed for the
      caller's own retry. Bytes, text, `data=` forms and `json=` are sent again.
    - When the token cannot be had, the bridge's error is raised. When a 401 cannot be answered
      with a renewed token, an error of the bridge's class and `reason` is raised whose message
      names the request and what failed: `NotSignedIn` ("revoked": the provider ended the
      grant; sign in again), `ProviderUnavailable` (it cannot be reached now; the session is
      kept).
    - One object may serve many threads and tasks: it keeps no token, and renewals take turns,
      so 401s that come back at once for one token make one refresh. asyncio only (not trio).
    - Neither its repr nor any error it raises contains a token.
    """

    def __init__(self, bridge: AuthBridge | SyncAuthBridge, profile: str, *, account: str | None = None,
                 min_validity_ms: int | None = None, scopes: Sequence[str] | None = None,
                 resource: str | Sequence[str] | None = None) -> None:
        self._source = TokenSource("authbridge.httpx.AuthBridgeAuth", bridge, profile, account=account,
                                   min_validity_ms=min_validity_ms, scopes=scopes, resource=resource)

    def __repr__(self) -> str:
        return repr(self._source)

    def _flow(self, request: httpx.Request) -> Generator[httpx.Request | _Token, Any, None]:
        """The flow of both clients, without I/O: it yields the requests to send (and is sent their
        responses) and `_Token` steps (and is sent the token)."""
        url = str(request.url)
        check_url(url)
        token: AccessTokenResult = yield _Token(request.method, url)
        authorize(request.headers, token, url)
        response: httpx.Response = yield request
        if response.status_code != 401 or not same_origin(str(response.request.url), url):
            return
        # A DPoP server that wants its nonce in the proof (RFC 9449 §9) gets a new proof, not a refresh.
        nonce = dpop_nonce_requested(response.status_code, response.headers)
        fresh: AccessTokenResult = yield (_Token(request.method, url, dpop_nonce=nonce) if nonce
                                          else _Token(request.method, url, rejected=token))
        if not isinstance(request.stream, httpx.ByteStream):   # streamed: it cannot be sent again
            return
        authorize(request.headers, fresh, url)
        yield request

    def sync_auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        steps = self._flow(request)
        answer: httpx.Response | AccessTokenResult | None = None   # None starts the generator
        while True:
            try:
                step = steps.send(answer)
            except StopIteration:
                return
            if isinstance(step, httpx.Request):
                answer = yield step
            else:
                answer = (self._source.renewed(step.rejected, step.method, step.url) if step.rejected
                          else self._source.token(step.method, step.url, step.dpop_nonce))

    async def async_auth_flow(self, request: httpx.Request) -> AsyncGenerator[httpx.Request, httpx.Response]:
        steps = self._flow(request)
        answer: httpx.Response | AccessTokenResult | None = None   # None starts the generator
        while True:
            try:
                step = steps.send(answer)
            except StopIteration:
                return
            if isinstance(step, httpx.Request):
                answer = yield step
            elif step.rejected:
                answer = await self._source.renewed_async(step.rejected, step.method, step.url)
            else:
                answer = await self._source.token_async(step.method, step.url, step.dpop_nonce)
