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
from dataclasses import dataclass
from typing import Any

from .client import AuthBridge
from .errors import AuthBridgeError, InsecureURL, NotSignedIn
from .protocol import ProgressCallback
from .sync import SyncAuthBridge
from .types import AccessTokenResult, Cookie, Flow

__all__ = ["Challenge", "TokenSource", "authorize", "check_url", "dpop_nonce_requested", "insufficient_scope", "origin",
           "parse_challenges", "same_origin", "where"]

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


# ── WWW-Authenticate (RFC 9110 §11.6.1) ─────────────────────────────────────

_TCHAR = frozenset("!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
_TOKEN68 = frozenset("-._~+/0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")


@dataclass(frozen=True)
class Challenge:
    """One challenge of a `WWW-Authenticate` field: its scheme (as sent), its auth-params (names in
    lower case, quoted values unescaped; the first of a repeated name wins) or its token68."""
    scheme: str
    params: dict[str, str]
    token68: str | None = None


def parse_challenges(value: str) -> list[Challenge]:
    """The challenges of a `WWW-Authenticate` field value (several fields: join them with ", ").
    `challenge = auth-scheme [ 1*SP ( token68 / #auth-param ) ]`, comma separated, where an
    auth-param's value is a token or a quoted string (`\\` escapes the next character). What
    cannot be parsed ends the list: the challenges before it are kept."""
    challenges: list[Challenge] = []
    n, i = len(value), 0

    def skip(i: int, chars: str = " \t") -> int:
        while i < n and value[i] in chars:
            i += 1
        return i

    def token(i: int) -> tuple[str, int]:
        start = i
        while i < n and value[i] in _TCHAR:
            i += 1
        return value[start:i], i

    def param_at(i: int) -> bool:
        """Whether an auth-param (`token BWS "="`, not a token68's padding) starts at `i`."""
        name, j = token(i)
        j = skip(j)
        if not name or j >= n or value[j] != "=":
            return False
        j = skip(j + 1)
        return j < n and value[j] not in ",="

    while True:
        i = skip(i, " \t,")
        if i >= n:
            return challenges
        scheme, i = token(i)
        if not scheme:
            return challenges
        params: dict[str, str] = {}
        j = skip(i)
        if j == i and j < n and value[j] != ",":   # a scheme must be followed by SP, a comma or the end
            return challenges
        i = j
        if i < n and value[i] != "," and not param_at(i):
            start = i                                  # token68
            while i < n and value[i] in _TOKEN68:
                i += 1
            if i == start:
                return challenges
            while i < n and value[i] == "=":
                i += 1
            challenges.append(Challenge(scheme, params, value[start:i]))
            i = skip(i)
            if i < n and value[i] != ",":
                return challenges
            continue
        while i < n and param_at(i):
            name, i = token(i)
            i = skip(skip(i) + 1)
            if value[i] == '"':
                i += 1
                chars: list[str] = []
                while i < n and value[i] != '"':
                    if value[i] == "\\" and i + 1 < n:
                        i += 1
                    chars.append(value[i])
                    i += 1
                if i >= n:                              # an unterminated quoted string
                    return challenges
                i += 1
                text = "".join(chars)
            else:
                text, i = token(i)
            params.setdefault(name.lower(), text)
            i = skip(i)
            if i < n and value[i] != ",":
                challenges.append(Challenge(scheme, params))
                return challenges
            i = skip(i, " \t,")
        challenges.append(Challenge(scheme, params))


def insufficient_scope(status: int, headers: Any) -> list[str] | None:
    """The scopes a 403 asks for (RFC 6750 §3.1: a `Bearer` — or, for a DPoP-bound token, `DPoP` —
    challenge with `error="insufficient_scope"` and a `scope`), in its order; None otherwise.
    `headers`: the response's (a case-insensitive mapping; httpx's several fields are joined)."""
    if status != 403:
        return None
    get_list = getattr(headers, "get_list", None)
    fields = get_list("WWW-Authenticate") if callable(get_list) else [headers.get("WWW-Authenticate") or ""]
    for challenge in parse_challenges(", ".join(str(f) for f in fields)):
        if challenge.scheme.lower() in ("bearer", "dpop") and challenge.params.get("error") == "insufficient_scope":
            scopes = list(dict.fromkeys(challenge.params.get("scope", "").split()))
            if scopes:
                return scopes
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
                 resource: str | Sequence[str] | None = None, step_up: bool = True, flow: Flow | None = None,
                 on_progress: ProgressCallback | None = None) -> None:
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
        self.step_up = step_up
        self.flow = flow
        self.on_progress = on_progress
        self._lock = threading.Lock()
        self._loop_locks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = weakref.WeakKeyDictionary()

    def __repr__(self) -> str:
        extra = "".join(f", {name}={value!r}" for name, value in (("scopes", self.scopes), ("resource", self.resource))
                        if value is not None)
        return f"{self.owner}(profile={self.profile!r}, account={self.account!r}{extra})"

    def _params(self, force: bool, method: str, url: str, dpop_nonce: str | None = None,
                added: Sequence[str] = ()) -> dict[str, Any]:
        """The request's method and URL go along: a DPoP-bound session's answer carries the proof
        for exactly that request (RFC 9449); a bearer session's ignores them. `added`: scopes a
        step-up asked for, which a token for `scopes` must then carry too."""
        scopes = self.scopes if self.scopes is None or not added else tuple(dict.fromkeys((*self.scopes, *added)))
        return {"account": self.account, "min_validity_ms": self.min_validity_ms, "force_refresh": True if force else None,
                "method": method, "url": url, "dpop_nonce": dpop_nonce, "scopes": scopes, "resource": self.resource}

    def _sign_in_params(self, scopes: Sequence[str]) -> dict[str, Any]:
        return {"flow": self.flow, "scopes": list(scopes), "on_progress": self.on_progress}

    def _step_up_failed(self, error: AuthBridgeError, request: str, scopes: Sequence[str]) -> AuthBridgeError:
        """As `_renewal_failed`, for a step-up that did not end signed in."""
        if type(error).__init__ is not AuthBridgeError.__init__:
            return error
        message = (f"{request} answered 403 (insufficient_scope: it needs {' '.join(scopes)}) and signing in to "
                   f"{self.profile!r} with those scopes failed: {error.message}")
        return type(error)(message, code=error.code, data=error.data, request_method=error.request_method)

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

    def stepped_up(self, rejected: AccessTokenResult, scopes: Sequence[str], method: str, url: str) -> AccessTokenResult:
        """The token to replay `method url` with after a 403 `insufficient_scope` asked for
        `scopes`: the user is asked for them (`requestOAuthTokens` with `scopes`: incremental
        consent, keeping the account), unless another request stepped up meanwhile."""
        bridge = self._blocking()
        with self._lock:
            try:
                current = bridge.get_access_token(self.profile, **self._params(False, method, url, added=scopes))
                if current.access_token != rejected.access_token:
                    return current
                bridge.request_oauth_tokens(self.profile, **self._sign_in_params(scopes))
                return bridge.get_access_token(self.profile, **self._params(False, method, url, added=scopes))
            except AuthBridgeError as error:
                raise self._step_up_failed(error, where(method, url), scopes) from error

    # ── asyncio (httpx.AsyncClient) ──────────────────────────────────────────

    async def _ask(self, force: bool, method: str, url: str, dpop_nonce: str | None = None,
                   added: Sequence[str] = ()) -> AccessTokenResult:
        params = self._params(force, method, url, dpop_nonce, added)
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

    async def stepped_up_async(self, rejected: AccessTokenResult, scopes: Sequence[str], method: str,
                               url: str) -> AccessTokenResult:
        lock = self._loop_locks.setdefault(asyncio.get_running_loop(), asyncio.Lock())
        async with lock:
            try:
                current = await self._ask(False, method, url, added=scopes)
                if current.access_token != rejected.access_token:
                    return current
                params = self._sign_in_params(scopes)
                if isinstance(self.bridge, SyncAuthBridge):
                    await self.bridge._await_from(self.bridge._bridge.request_oauth_tokens(self.profile, **params))
                else:
                    await self.bridge.request_oauth_tokens(self.profile, **params)
                return await self._ask(False, method, url, added=scopes)
            except AuthBridgeError as error:
                raise self._step_up_failed(error, where(method, url), scopes) from error
