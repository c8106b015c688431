"""A small OAuth 2.0 authorization server with refresh-token rotation and reuse protection,
for the cross-process vault tests (Python standard library only).

Modelled on django-oauth-toolkit (DOT) configured with

    ROTATE_REFRESH_TOKEN = True
    REFRESH_TOKEN_REUSE_PROTECTION = True
    REFRESH_TOKEN_GRACE_PERIOD_SECONDS = <grace_period> (default 0)

Endpoints (one public client, PKCE S256 required):

* ``GET /authorize``: checks client_id, redirect_uri, response_type=code, state and the PKCE
  S256 parameters, then answers 302 to redirect_uri with ``code`` and ``state``.
* ``POST /token``:
  - ``authorization_code``: single-use code, redirect_uri and PKCE verified; starts a new token
    *family* (one per grant) and issues an access/refresh pair.
  - ``refresh_token``: rotation. The presented refresh token becomes *used* and a new pair of
    the same family is issued. Presenting a used refresh token again:
      * within ``grace_period`` seconds of its first use: the same new pair is returned again
        (DOT's grace period; counted in ``reuse_within_grace``, not a rotation);
      * otherwise: replay detected, the whole family (every access and refresh token of the
        grant) is revoked and the answer is 400 ``invalid_grant`` (counted in ``revocations``).
    A token of a revoked family, or an unknown one, gets 400 ``invalid_grant``.
* ``POST /revoke`` (RFC 7009): 200 whatever the token; revoking a refresh token revokes its
  family (the grant), revoking an access token revokes that token.
* ``GET /api/me``: 200 for an active, unexpired access token, else 401.

Access tokens live ``access_lifetime`` whole seconds (``expires_in`` in token answers).
Every counter is read under the server's lock with ``snapshot()``; handlers never sleep.
"""

from __future__ import annotations

import secrets
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from typing import Any

from authbridge_testkit import leak_scan
from . import sim_http

CLIENT_ID = "rotating-client"


@dataclass
class RefreshToken:
    family: int
    used_at: float | None = None              # monotonic time of its (first) use
    successor: tuple[str, str] | None = None  # the (access, refresh) pair its use produced


@dataclass
class AccessToken:
    family: int
    expires_at: float                         # monotonic


@dataclass
class Family:
    revoked: bool = False
    access: set[str] = field(default_factory=set)
    refresh: set[str] = field(default_factory=set)


class RotatingAuthServer(sim_http.Simulator):
    """The server and its state. `start()` binds 127.0.0.1 on an ephemeral port."""

    def __init__(self, access_lifetime: int = 1, grace_period: float = 0.0, reuse_protection: bool = True,
                 rotate: bool = True, client_id: str = CLIENT_ID) -> None:
        if not isinstance(access_lifetime, int) or access_lifetime < 1:
            raise ValueError("access_lifetime is a whole number of seconds ≥ 1 (expires_in is an integer)")
        self.access_lifetime = access_lifetime
        self.grace_period = float(grace_period)
        self.reuse_protection = reuse_protection
        self.rotate = rotate
        self.client_id = client_id
        self.lock = threading.Lock()
        self.codes: dict[str, dict[str, str]] = {}
        self.families: dict[int, Family] = {}
        self.refresh_tokens: dict[str, RefreshToken] = {}
        self.access_tokens: dict[str, AccessToken] = {}
        self.issued_access: set[str] = set()      # every access token ever issued (never shrinks)
        self.handed_out: set[str] = set()         # every code, access and refresh token (the leak scan)
        # Counters (read with snapshot()).
        self.sign_ins = 0
        self.refreshes = 0            # successful rotations (new pair issued by the refresh grant)
        self.revocations = 0          # families revoked because a used refresh token was replayed
        self.reuse_within_grace = 0   # used refresh tokens accepted again inside the grace period
        self.rejected_refreshes = 0   # every refresh answered invalid_grant (incl. the replays)
        self.client_revocations = 0   # /revoke calls that ended an active token
        self.issued_access_count = 0
        self.issued_refresh_count = 0
        self.refresh_times: list[float] = []  # monotonic time of each rotation
        # Tests that race a refresh: when `refresh_gate` is set, a rotation's answer waits for it
        # (the server has rotated; the client has not heard yet); `refresh_rotated` tells it happened.
        self.refresh_gate: threading.Event | None = None
        self.refresh_rotated = threading.Event()
        self.base = ""
        self.redirect_uri = ""

    # ── Lifecycle ─────────────────────────────────────────────────────────

    def start(self) -> "RotatingAuthServer":
        self.base = self.serve(type("Handler", (_Handler,), {"auth": self}), name="rotating-auth-server").base
        self.redirect_uri = f"{self.base}/callback"
        leak_scan.register(lambda: list(self.handed_out))
        return self

    @property
    def authorize_prefix(self) -> str:
        return f"{self.base}/authorize?"

    def browse(self, url: str) -> str:
        """The browser's part: GET the authorization URL and return the redirect (not followed)."""
        return sim_http.redirect_location(url)

    def settings(self, **extra: Any) -> dict[str, Any]:
        """The `oidc` plugin settings of a profile using this server."""
        return {
            "clientId": self.client_id,
            "authorizationEndpoint": f"{self.base}/authorize",
            "tokenEndpoint": f"{self.base}/token",
            "revocationEndpoint": f"{self.base}/revoke",
            "redirectUri": self.redirect_uri,
            **extra,
        }

    def snapshot(self) -> dict[str, Any]:
        with self.lock:
            return {
                "sign_ins": self.sign_ins,
                "refreshes": self.refreshes,
                "revocations": self.revocations,
                "reuse_within_grace": self.reuse_within_grace,
                "rejected_refreshes": self.rejected_refreshes,
                "client_revocations": self.client_revocations,
                "issued_access": self.issued_access_count,
                "issued_refresh": self.issued_refresh_count,
                "families": len(self.families),
                "revoked_families": sum(1 for f in self.families.values() if f.revoked),
            }

    def is_issued(self, access_token: str) -> bool:
        with self.lock:
            return access_token in self.issued_access

    # ── Token bookkeeping (called with self.lock held) ──────────────────────

    def _issue(self, family_id: int) -> tuple[str, str]:
        family = self.families[family_id]
        access, refresh = "at-" + secrets.token_urlsafe(24), "rt-" + secrets.token_urlsafe(24)
        self.access_tokens[access] = AccessToken(family_id, time.monotonic() + self.access_lifetime)
        self.refresh_tokens[refresh] = RefreshToken(family_id)
        family.access.add(access)
        family.refresh.add(refresh)
        self.issued_access.add(access)
        self.handed_out.update((access, refresh))
        self.issued_access_count += 1
        self.issued_refresh_count += 1
        return access, refresh

    def _revoke_family(self, family_id: int) -> None:
        family = self.families[family_id]
        family.revoked = True
        for token in family.access:
            self.access_tokens.pop(token, None)
        # Refresh tokens stay known (so a later replay is recognised) but their family is revoked.

    def _answer(self, access: str, refresh: str) -> dict[str, Any]:
        entry = self.access_tokens.get(access)
        remaining = entry.expires_at - time.monotonic() if entry else 0
        # A grace-period answer repeats a pair issued earlier: its real remaining lifetime.
        expires_in = max(0, min(self.access_lifetime, int(remaining + 0.999)))
        return {"access_token": access, "refresh_token": refresh, "token_type": "Bearer", "expires_in": expires_in}

    def exchange_code(self, form: dict[str, str]) -> tuple[int, dict[str, Any]]:
        with self.lock:
            entry = self.codes.pop(form.get("code", ""), None)  # single use
            if entry is None:
                return 400, {"error": "invalid_grant", "error_description": "unknown or already used code"}
            if form.get("redirect_uri") != entry["redirect_uri"]:
                return 400, {"error": "invalid_grant", "error_description": "redirect_uri differs from the authorization request"}
            verifier = form.get("code_verifier", "")
            if not (43 <= len(verifier) <= 128) or sim_http.pkce_s256(verifier) != entry["challenge"]:
                return 400, {"error": "invalid_grant", "error_description": "PKCE verification failed"}
            family_id = len(self.families) + 1
            self.families[family_id] = Family()
            access, refresh = self._issue(family_id)
            self.sign_ins += 1
            return 200, {**self._answer(access, refresh), "scope": entry["scope"]}

    def refresh(self, form: dict[str, str]) -> tuple[int, dict[str, Any]]:
        token = form.get("refresh_token", "")
        with self.lock:
            entry = self.refresh_tokens.get(token)
            if entry is None or self.families[entry.family].revoked:
                self.rejected_refreshes += 1
                return 400, {"error": "invalid_grant", "error_description": "unknown or revoked refresh token"}
            now = time.monotonic()
            if entry.used_at is not None:
                if entry.successor is not None and now - entry.used_at <= self.grace_period:
                    # DOT: within REFRESH_TOKEN_GRACE_PERIOD_SECONDS the same new pair is returned.
                    self.reuse_within_grace += 1
                    return 200, self._answer(*entry.successor)
                self.rejected_refreshes += 1
                if self.reuse_protection:
                    self._revoke_family(entry.family)
                    self.revocations += 1
                    return 400, {"error": "invalid_grant", "error_description": "refresh token reuse detected; the grant is revoked"}
                return 400, {"error": "invalid_grant", "error_description": "refresh token already used"}
            access, refresh = self._issue(entry.family)
            if self.rotate:
                entry.used_at = now
                entry.successor = (access, refresh)
            self.refreshes += 1
            self.refresh_times.append(now)
            return 200, self._answer(access, refresh)

    def revoke(self, token: str) -> bool:
        with self.lock:
            if token in self.access_tokens:
                family = self.families[self.access_tokens[token].family]
                del self.access_tokens[token]
                family.access.discard(token)
                self.client_revocations += 1
                return True
            entry = self.refresh_tokens.get(token)
            if entry is not None and not self.families[entry.family].revoked:
                self._revoke_family(entry.family)  # RFC 7009 §2.1: the grant ends with its refresh token
                self.client_revocations += 1
                return True
            return False

    def access_valid(self, token: str) -> bool:
        with self.lock:
            entry = self.access_tokens.get(token)
            return entry is not None and entry.expires_at > time.monotonic()


class _Handler(sim_http.Handler):
    server_version = "RotatingAuthServer/1.0"
    json_headers = {"Cache-Control": "no-store", "Pragma": "no-cache"}
    auth: RotatingAuthServer  # set on the subclass made by start()

    def do_GET(self) -> None:  # noqa: N802 - http.server naming
        parts = urllib.parse.urlsplit(self.path)
        if parts.path == "/authorize":
            self.authorize(dict(urllib.parse.parse_qsl(parts.query, keep_blank_values=True)))
        elif parts.path == "/api/me":
            scheme, _, token = (self.headers.get("Authorization") or "").partition(" ")
            if scheme.lower() == "bearer" and self.auth.access_valid(token):
                self.send_json(200, {"name": "Rotating User"})
            else:
                self.send_json(401, {"error": "invalid_token"}, {"WWW-Authenticate": 'Bearer error="invalid_token"'})
        elif parts.path == "/callback":
            self.send(200, b"Signed in.\n", "text/plain; charset=utf-8")
        else:
            self.send_json(404, {"error": "not_found"})

    def do_POST(self) -> None:  # noqa: N802
        path = urllib.parse.urlsplit(self.path).path
        form = self.read_form(self.read_body(), path)
        if path not in ("/token", "/revoke"):
            return self.send_json(404, {"error": "not_found"})
        if form is None:
            return self.send_json(400, {"error": "invalid_request", "error_description": "expected a form body"})
        if path == "/revoke":
            if "token" not in form:
                return self.send_json(400, {"error": "invalid_request", "error_description": "token is required"})
            self.auth.revoke(form["token"])
            return self.send(200)  # RFC 7009 §2.2: 200 whether or not the token was active
        if form.get("client_id") != self.auth.client_id:
            return self.send_json(401, {"error": "invalid_client"}, {"WWW-Authenticate": 'Basic realm="rotating"'})
        grant = form.get("grant_type")
        if grant == "authorization_code":
            status, payload = self.auth.exchange_code(form)
        elif grant == "refresh_token":
            status, payload = self.auth.refresh(form)
            gate = self.auth.refresh_gate
            if status == 200 and gate is not None:
                self.auth.refresh_rotated.set()
                gate.wait(timeout=30)
        else:
            status, payload = 400, {"error": "unsupported_grant_type"}
        self.send_json(status, payload)

    def authorize(self, params: dict[str, str]) -> None:
        auth = self.auth
        # Never redirect to an unverified redirect_uri (RFC 6749 §4.1.2.1).
        if params.get("client_id") != auth.client_id or params.get("redirect_uri") != auth.redirect_uri:
            return self.send_json(400, {"error": "invalid_request", "error_description": "unknown client or redirect_uri"})
        problems = []
        if params.get("response_type") != "code":
            problems.append("response_type must be code")
        if not params.get("state"):
            problems.append("state is required")
        if not params.get("code_challenge"):
            problems.append("code_challenge is required (PKCE)")
        if params.get("code_challenge_method") != "S256":
            problems.append("code_challenge_method must be S256")
        if problems:
            return self.send_json(400, {"error": "invalid_request", "error_description": "; ".join(problems)})
        code = secrets.token_urlsafe(24)
        with auth.lock:
            auth.handed_out.add(code)
            auth.codes[code] = {"redirect_uri": params["redirect_uri"], "challenge": params["code_challenge"],
                                "scope": params.get("scope", "")}
        self.redirect(params["redirect_uri"], {"code": code, "state": params["state"]})
