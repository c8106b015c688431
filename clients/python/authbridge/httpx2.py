"""AuthBridge as an `auth=` for httpx2, the HTTP library of the `mcp` SDK (2.x), blocking and
asyncio: every request carries the session's access token.

    import httpx2
    import authbridge
    from authbridge.httpx2 import AuthBridgeAuth
    from mcp.client.streamable_http import streamable_http_client

    async with authbridge.connect() as bridge:
        auth = await bridge.auth_for_url(MCP_URL, library="httpx2")
        async with httpx2.AsyncClient(auth=auth) as http, streamable_http_client(MCP_URL, http_client=http) as streams:
            ...

httpx2 is a fork of httpx whose `Auth` protocol is httpx's, but whose classes are its own, so
an `authbridge.httpx.AuthBridgeAuth` is refused by an `httpx2.AsyncClient`: this one is the same
object for it (same arguments and behaviour: see `authbridge.httpx.AuthBridgeAuth`). Needs the
`httpx2` package (the `mcp` SDK brings it); the rest of `authbridge` does not.
"""

from __future__ import annotations


try:
    import httpx2
except ImportError as missing:  # pragma: no cover - depends on the environment
    raise ImportError("authbridge.httpx2 needs the httpx2 package: pip install httpx2 (the mcp SDK brings it)") from missing

from ._httpxflow import AuthFlow

__all__ = ["AuthBridgeAuth"]


class AuthBridgeAuth(AuthFlow, httpx2.Auth):
    """`auth=` for `httpx2.Client` and `httpx2.AsyncClient` (the MCP SDK's clients): the access
    token of `profile` on every request, a 401 renewed once, a 403 `insufficient_scope` stepped
    up once (`step_up`, `flow`, `on_progress`) — as `authbridge.httpx.AuthBridgeAuth`, whose
    documentation holds for this one word for word."""

    _byte_stream = httpx2.ByteStream
