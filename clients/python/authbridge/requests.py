"""AuthBridge as an `auth=` for requests: every request carries the session's access token.

    import requests
    import authbridge.sync
    from authbridge.requests import AuthBridgeAuth

    with authbridge.sync.connect() as bridge, requests.Session() as session:
        session.auth = AuthBridgeAuth(bridge, "corp")
        print(session.get("https://api.example.com/me").json())

Needs the `requests` package (`pip install requests`, or the client's `requests` extra); the
rest of `authbridge` does not. Each request asks the host for the token (`getAccessToken`,
answered from its cache while the token is valid) and gets its headers, and the cookies whose
host and path match its URL. When the server answers 401, the auth object renews the token
once (`forceRefresh`) and sends the request again; see `AuthBridgeAuth` for the details.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

try:
    import requests
    import requests.auth
    import requests.exceptions
    import requests.utils
except ImportError as missing:  # pragma: no cover - depends on the environment
    raise ImportError("authbridge.requests needs the requests package: pip install requests") from missing

from ._httpauth import TokenSource, authorize, check_url, dpop_nonce_requested, insufficient_scope, same_origin
from .protocol import ProgressCallback
from .sync import SyncAuthBridge
from .types import AccessTokenResult, Flow

__all__ = ["AuthBridgeAuth"]


def _rewound(request: requests.PreparedRequest) -> bool:
    """Whether `request` can be sent again, its body rewound if it is a file: bytes and text can;
    a file only when requests noted where it started; a generator or iterator never."""
    body = request.body
    if body is None or isinstance(body, (bytes, str)):
        return True
    if isinstance(getattr(request, "_body_position", None), int):
        try:
            requests.utils.rewind_body(request)
        except requests.exceptions.UnrewindableBodyError:
            return False
        return True
    return False


class AuthBridgeAuth(requests.auth.AuthBase):
    """`auth=` for requests: the access token of `profile` (its `account`, default the current one)
    on every request, taken from `bridge`, a blocking bridge (`authbridge.sync.connect()`; an
    asyncio `AuthBridge` is refused: requests blocks).

    - Headers and cookies: `getAccessToken`'s `headers` replace fields of the same name; its
      `cookies` go into the Cookie field when the URL's host is the cookie's `domain`, its path is
      within the cookie's `path`, and it is https for a `secure` cookie. Nothing is put into the
      session's cookie jar. Following a redirect, requests drops the Authorization field when
      the host changes and rebuilds the Cookie field from its jar: the token does not follow.
    - `min_validity_ms`: renew first when the token expires sooner (the host's default: 60 s).
    - `scopes`, `resource` (one absolute URI or several): every request gets the token for exactly
      those (`getAccessToken`'s `scopes` and `resource`), not the session's own.
    - Only https URLs, or plain http to a loopback IP address, get a token: any other URL raises
      `authbridge.InsecureURL` before anything is sent.
    - A 401 from the URL's origin renews the token once (`forceRefresh`, unless another request
      has renewed it meanwhile) and sends the request again; the answer to that is the result
      (a second 401 included). A body requests cannot rewind (a generator, an iterator, a file
      whose position it did not note) is not sent twice: the 401 is the result, and the token is
      renewed for the caller's own retry.
    - A 403 from the URL's origin whose `WWW-Authenticate` challenge (`Bearer`, or `DPoP`) says
      `error="insufficient_scope"` with a `scope` (RFC 6750 §3.1; an MCP server's step-up) asks
      the user for those scopes once (`requestOAuthTokens` with `scopes`: incremental consent,
      keeping the account; `flow` and `on_progress` are that sign-in's) and sends the request
      again with the new token; a second 403 is the result. `step_up=False`: the 403 is the
      result at once. A failed step-up raises the bridge's error (`UserCancelled`…), its
      message naming the request.
    - When the token cannot be had, the bridge's error is raised. When a 401 cannot be answered
      with a renewed token, an error of the bridge's class and `reason` is raised whose message
      names the request and what failed: `NotSignedIn` ("revoked": the provider ended the
      grant; sign in again), `ProviderUnavailable` (it cannot be reached now; the session is
      kept). The 401 response is closed.
    - One object may serve a session shared by many threads: it keeps no token, and renewals
      take turns, so 401s that come back at once for one token make one refresh.
    - Neither its repr nor any error it raises contains a token.
    """

    def __init__(self, bridge: SyncAuthBridge, profile: str, *, account: str | None = None,
                 min_validity_ms: int | None = None, scopes: Sequence[str] | None = None,
                 resource: str | Sequence[str] | None = None, step_up: bool = True, flow: Flow | None = None,
                 on_progress: ProgressCallback | None = None) -> None:
        self._source = TokenSource("authbridge.requests.AuthBridgeAuth", bridge, profile, account=account,
                                   min_validity_ms=min_validity_ms, scopes=scopes, resource=resource,
                                   step_up=step_up, flow=flow, on_progress=on_progress)
        self._source._blocking()   # refuse an asyncio bridge now, not at the first request

    def __repr__(self) -> str:
        return repr(self._source)

    def __call__(self, request: requests.PreparedRequest) -> requests.PreparedRequest:
        url = request.url or ""
        check_url(url)
        token = self._source.token(request.method or "GET", url)
        authorize(request.headers, token, url)
        hook = functools.partial(self._on_response, sent=token, url=url)
        request.register_hook("response", hook)  # type: ignore[no-untyped-call]  # untyped in types-requests
        return request

    def _on_response(self, response: requests.Response, *, sent: AccessTokenResult, url: str,
                     **send_options: Any) -> requests.Response:
        """The response hook: a 401 from where the token went → renew, and send again once; a 403
        `insufficient_scope` → step up, and send again once."""
        request = response.request
        if response.status_code not in (401, 403) or not same_origin(str(request.url), url):
            return response
        method = request.method or "GET"
        scopes = insufficient_scope(response.status_code, response.headers) if self._source.step_up else None
        if response.status_code == 403 and not scopes:
            return response
        # A DPoP server that wants its nonce in the proof (RFC 9449 §9) gets a new proof, not a refresh.
        nonce = dpop_nonce_requested(response.status_code, response.headers)
        try:
            if scopes:
                fresh = self._source.stepped_up(sent, scopes, method, url)
            else:
                fresh = self._source.token(method, url, nonce) if nonce else self._source.renewed(sent, method, url)
        except BaseException:
            response.close()
            raise
        again = request.copy()
        if not _rewound(again):
            return response
        response.content    # read the 401 to the end, so that its connection can carry the replay
        response.close()
        authorize(again.headers, fresh, str(again.url))
        replayed: requests.Response = response.connection.send(again, **send_options)
        replayed.history.append(response)
        replayed.request = again
        return replayed
