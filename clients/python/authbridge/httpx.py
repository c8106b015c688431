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


try:
    import httpx
except ImportError as missing:  # pragma: no cover - depends on the environment
    raise ImportError("authbridge.httpx needs the httpx package: pip install httpx") from missing

from ._httpxflow import AuthFlow

__all__ = ["AuthBridgeAuth"]


class AuthBridgeAuth(AuthFlow, httpx.Auth):
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
      kept).
    - One object may serve many threads and tasks: it keeps no token, and renewals take turns,
      so 401s that come back at once for one token make one refresh. asyncio only (not trio).
    - Neither its repr nor any error it raises contains a token.
    """

    _byte_stream = httpx.ByteStream
