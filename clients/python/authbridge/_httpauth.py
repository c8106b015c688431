"""What the auth objects for HTTP libraries share (`authbridge.requests`, `authbridge.httpx`),
without importing either library: where a token may go, which of `getAccessToken`'s headers and
cookies a URL gets, and how a rejected token is renewed.

Why the auth objects keep no token: the host answers a valid session's `getAccessToken` from its
cache, so asking it for every request costs one local round trip and never hands out a token
the user has since signed out of, or that another process has since refreshed.
"""

from __future__ import annotations

import asyncio
import ipaddress
import threading
import urllib.parse
import weakref
from collections.abc import MutableMapping, Sequence
from typing import Any

from .client import AuthBridge
from .errors import AuthBridgeError, InsecureURL, NotSignedIn
from .sync import SyncAuthBridge
from .types import AccessTokenResult, Cookie

__all__ = ["TokenSource", "authorize", "check_url", "dpop_nonce_requested", "origin", "same_origin", "where"]

_DEFAULT_PORTS = {"http": 80, "https": 443}


def origin(url: str) -> str:
    """`scheme://host[:port]` of a URL as the web serialises an origin (lower case, no default
    port), without user info, path or query: what a message may show of it, and what decides
    whether a 401 came from where the token went."""
    parts = urllib.parse.urlsplit(url)
    scheme = parts.scheme.lower()
    host = (parts.hostname or "").lower()
    try:
        port = parts.port
    except ValueError:   # a port that is not a number
        port = None
    shown = f"[{host}]" if ":" in host else host
    return f"{scheme}://{shown}" + (f":{port}" if port is not None and port != _DEFAULT_PORTS.get(scheme) else "")


def same_origin(first: str, second: str) -> bool:
    return origin(first) == origin(second)


def where(method: str, url: str) -> str:
    """`METHOD origin/path` of a request, for messages (no query: it may hold secrets of its own)."""
    return f"{method} {origin(url)}{urllib.parse.urlsplit(url).path}"


def check_url(url: str) -> None:
    """Raises `InsecureURL` unless a token may be sent to `url`: https, or plain http to a loopback
    IP address (the host's rule for provider endpoints; a name such as `localhost` may resolve
    anywhere)."""
    parts = urllib.parse.urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme == "https":
        return
    if scheme == "http" and parts.hostname:
        try:
            if ipaddress.ip_address(parts.hostname).is_loopback:
                return
        except ValueError:
            pass
    raise InsecureURL(origin(url))


def _path_matches(request_path: str, cookie_path: str) -> bool:
    """RFC 6265 §5.1.4."""
    if request_path == cookie_path:
        return True
    return request_path.startswith(cookie_path) and (cookie_path.endswith("/") or request_path[len(cookie_path)] == "/")


def _applies(cookie: Cookie, url: str) -> bool:
    """Whether a cookie of `getAccessToken` goes with a request to `url`. Its `domain` is the host it
    is for (bridge-spec: no leading dot), so it goes to that host only, as a host-only cookie;
    within its `path`; over https only when `secure`."""
    parts = urllib.parse.urlsplit(url)
    if (parts.hostname or "").lower() != cookie.domain.lower().lstrip("."):
        return False
    if cookie.secure and parts.scheme.lower() != "https":
        return False
    if cookie.max_age == 0:
        return False
    return _path_matches(parts.path or "/", cookie.path or "/")


def authorize(headers: MutableMapping[str, str], token: AccessTokenResult, url: str) -> None:
    """Puts `getAccessToken`'s headers on a request to `url` (replacing fields of the same name), and
    its cookies for that URL into the Cookie field (replacing cookies of the same name, keeping
    the others)."""
    for name, value in token.headers.items():
        headers[name] = value
    cookies = [cookie for cookie in token.cookies if _applies(cookie, url)]
    if not cookies:
        return
    names = {cookie.name for cookie in cookies}
    kept = [pair.strip() for pair in headers.get("Cookie", "").split(";")
            if pair.strip() and pair.split("=", 1)[0].strip() not in names]
    headers["Cookie"] = "; ".join([*kept, *(f"{cookie.name}={cookie.value}" for cookie in cookies)])


def dpop_nonce_requested(status: int, headers: Any) -> str | None:
    """The server's nonce when a 401 asks for one (RFC 9449 §9: `WWW-Authenticate: DPoP
    error="use_dpop_nonce"` with a `DPoP-Nonce`); None otherwise. `headers`: the response's
    (a case-insensitive mapping)."""
    nonce = headers.get("DPoP-Nonce")
    if status == 401 and isinstance(nonce, str) and nonce and "use_dpop_nonce" in str(headers.get("WWW-Authenticate") or ""):
        return nonce
    return None


class TokenSource:
    """One profile (and account) of a bridge, as an auth object asks it for tokens.

    `token()` / `token_async()` before a request; after the provider rejected a token with a 401,
    `renewed(rejected)` / `renewed_async(rejected)`: the token to replay with. Renewals are one at
    a time per auth object (a lock for threads, one per event loop for tasks), and each first
    asks for the current token: when 401s for one token come back at once, the first caller
    forces the refresh (`forceRefresh`) and the others find the new token, so the provider sees
    one refresh."""

    def __init__(self, owner: str, bridge: AuthBridge | SyncAuthBridge, profile: str, *, account: str | None,
                 min_validity_ms: int | None, scopes: Sequence[str] | None = None,
                 resource: str | Sequence[str] | None = None) -> None:
        if not isinstance(bridge, (AuthBridge, SyncAuthBridge)):
            raise TypeError(f"{owner} needs a bridge from authbridge.connect() or authbridge.sync.connect(), "
                            f"not {type(bridge).__name__}")
        self.owner = owner
        self.bridge = bridge
        self.profile = profile
        self.account = account
        self.min_validity_ms = min_validity_ms
        self.scopes = tuple(scopes) if scopes is not None else None
        self.resource = resource if resource is None or isinstance(resource, str) else tuple(resource)
        self._lock = threading.Lock()
        self._loop_locks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = weakref.WeakKeyDictionary()

    def __repr__(self) -> str:
        extra = "".join(f", {name}={value!r}" for name, value in (("scopes", self.scopes), ("resource", self.resource))
                        if value is not None)
        return f"{self.owner}(profile={self.profile!r}, account={self.account!r}{extra})"

    def _params(self, force: bool, method: str, url: str, dpop_nonce: str | None = None) -> dict[str, Any]:
        """The request's method and URL go along: a DPoP-bound session's answer carries the proof
        for exactly that request (RFC 9449); a bearer session's ignores them."""
        return {"account": self.account, "min_validity_ms": self.min_validity_ms, "force_refresh": True if force else None,
                "method": method, "url": url, "dpop_nonce": dpop_nonce, "scopes": self.scopes, "resource": self.resource}

    # ── Blocking (requests, httpx.Client) ────────────────────────────────────

    def _blocking(self) -> SyncAuthBridge:
        if not isinstance(self.bridge, SyncAuthBridge):
            raise TypeError(f"{self.owner} is used from blocking code (requests, httpx.Client) with an asyncio bridge: "
                            "give it a bridge from authbridge.sync.connect(), or use httpx.AsyncClient")
        return self.bridge

    def token(self, method: str, url: str, dpop_nonce: str | None = None) -> AccessTokenResult:
        """The token for one request (`dpop_nonce`: the server's, when it refused the last proof for want of it)."""
        return self._blocking().get_access_token(self.profile, **self._params(False, method, url, dpop_nonce))

    def _renewal_failed(self, error: AuthBridgeError, request: str) -> AuthBridgeError:
        """The bridge's error, of the same class and data, with a message that says what happened
        to which request (the host's alone may be the provider's bare `invalid_grant`). Errors the
        client made itself (`HostExited`…) are raised as they are."""
        if type(error).__init__ is not AuthBridgeError.__init__:
            return error
        advice = f"; sign in to {self.profile!r} again" if isinstance(error, NotSignedIn) else ""
        message = (f"{request} answered 401 (the access token was refused) and the session could not be renewed: "
                   f"{error.message}{advice}")
        return type(error)(message, code=error.code, data=error.data, request_method=error.request_method)

    def renewed(self, rejected: AccessTokenResult, method: str, url: str) -> AccessTokenResult:
        """The token to replay `method url` with after it was refused."""
        bridge = self._blocking()
        with self._lock:
            try:
                current = bridge.get_access_token(self.profile, **self._params(False, method, url))
                if current.access_token != rejected.access_token:
                    return current
                return bridge.get_access_token(self.profile, **self._params(True, method, url))
            except AuthBridgeError as error:
                raise self._renewal_failed(error, where(method, url)) from error

    # ── asyncio (httpx.AsyncClient) ──────────────────────────────────────────

    async def _ask(self, force: bool, method: str, url: str, dpop_nonce: str | None = None) -> AccessTokenResult:
        params = self._params(force, method, url, dpop_nonce)
        if isinstance(self.bridge, SyncAuthBridge):
            # Runs on the blocking bridge's own loop; this loop goes on meanwhile.
            call = self.bridge._bridge.get_access_token(self.profile, **params)
            return await self.bridge._await_from(call)
        return await self.bridge.get_access_token(self.profile, **params)

    async def token_async(self, method: str, url: str, dpop_nonce: str | None = None) -> AccessTokenResult:
        return await self._ask(False, method, url, dpop_nonce)

    async def renewed_async(self, rejected: AccessTokenResult, method: str, url: str) -> AccessTokenResult:
        lock = self._loop_locks.setdefault(asyncio.get_running_loop(), asyncio.Lock())
        async with lock:
            try:
                current = await self._ask(False, method, url)
                if current.access_token != rejected.access_token:
                    return current
                return await self._ask(True, method, url)
            except AuthBridgeError as error:
                raise self._renewal_failed(error, where(method, url)) from error
