"""A Salesforce simulator for the salesforce plugin's scenario tests (Python standard library only).

It reproduces what plugins/salesforce/README.md records about Salesforce, on two loopback servers:

* the **login host** (``login_base``, what the profile's ``loginHost`` names — production, sandbox
  or My Domain in real life):
  - ``GET /services/oauth2/authorize``: the web-server flow with PKCE. Checks ``response_type=code``,
    the consumer key, the redirect URI (exactly one of the connected app's callback URLs,
    ``callback_urls``, as Salesforce matches them), ``code_challenge`` and
    ``code_challenge_method=S256``, ``state``, and that the scopes include ``refresh_token``. The scripted user (``browse``)
    signs in and allows access: 302 to the redirect URI with ``code`` (ending in ``==``, so it is
    percent-encoded like Salesforce's) and ``state``; or denies: ``error=access_denied``.
  - ``POST /services/oauth2/token``:
      ``authorization_code``: single-use code (15 minutes), same client and redirect URI, PKCE S256
      verifier checked; answers ``access_token``, ``refresh_token`` (only when the scope has
      ``refresh_token``), ``signature``, ``scope``, ``instance_url``, ``id``, ``token_type``,
      ``issued_at`` (ms since the epoch, a string). **No** ``expires_in``.
      ``refresh_token`` (``format=json`` expected): a new access token and **no** refresh token
      (Salesforce's default; ``rotate_refresh_tokens=True`` models a connected app with refresh-token
      rotation). Refusals, as Salesforce words them: revoked grant → 400 ``invalid_grant`` "expired
      access/refresh token"; deactivated user → "inactive user"; deactivated org → "inactive org";
      a second request with a refresh token whose request is still running → 400 ``invalid_grant``
      "token request is already being processed" (counted: the tests assert it never happens).
  - ``POST /services/oauth2/revoke`` (``token=``): a refresh token revokes its grant and every access
    token obtained with it; an access token revokes itself. 200, or 400 ``unsupported_token_type``.
  - ``GET /id/<orgId>/<userId>``: the identity service (Bearer access token): 200 JSON with
    ``user_id``, ``organization_id``, ``username``, ``display_name``, ``email``…; a dead or missing
    token → 403 ``Bad_OAuth_Token`` / ``Missing_OAuth_Token`` (bare text), another org → 403
    ``Wrong_Org``, unknown user → 404 ``Bad_Id``, a deactivated user whose session it still
    recognises (``deactivate_user(end_sessions=False)``) → 404 ``Inactive``.
* the org's **instance** (``instance_url``, another port: API calls must go there, not to the login
  host; https with ``instance_tls``, for clients that speak only https, such as simple-salesforce):
  a small REST API under ``/services/data/v60.0/`` (``sobjects``, ``query``, records, a POST that
  creates one), each resource with or without a trailing slash, as Salesforce answers them (the
  REST API Developer Guide's own examples call ``…/v60.0/query/?q=…``; simple-salesforce calls
  ``query/`` and ``sobjects/Account/``). A dead access token → 401
  ``[{"message":"Session expired or invalid","errorCode":"INVALID_SESSION_ID"}]``. A session dies when
  the org's session timeout (24 h, on the simulator's clock) has passed since its token was issued,
  or by an admin action.

Admin actions (the scenarios of plugins/salesforce/README.md): ``expire_sessions`` (Setup > Session Management: access tokens
die, refresh still works), ``revoke_app`` (the user's OAuth Connected Apps > Revoke), ``deactivate_user``,
``deactivate_org``. ``hold_next_refresh`` makes the next refresh meet a request of another client
still running (the "already being processed" refusal, counted apart). Failures a test switches on:
``refresh_failure`` (a refresh answered with that status, content type and body, e.g. a 503 page),
``revoke_failure`` (the revoke endpoint answers that status), ``edit_sign_in_answer`` and
``edit_refresh_answer`` (functions that change the code exchange's or a refresh's answer, e.g. drop
or move ``instance_url``). ``refresh_gaps()`` says how long a client waited before trying a refresh
again after an "already being processed" refusal.

The simulator **checks the client** and records each deviation in ``violations`` (the tests assert
there is none): wrong or missing parameters, a secret sent where none belongs, PKCE, ``format=json``,
tokens in URLs, API calls on the login host, parameters the revoke endpoint does not take.

Clock: ``now_ms()`` is the real clock plus ``advance(ms)``'s offset; tests move it together with the
host's (``$/test/advanceClock``). Every code and token handed out is registered with the leak scan.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import ssl
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from typing import Any, Callable

from authbridge_testkit import leak_scan
from . import sim_http

CLIENT_ID = "3MVG9simulatedConsumerKey.AuthBridge"
EXTERNAL_REDIRECT_URI = "sfdc://success"
ORG_ID = "00D5g000004SiMuEAA"
API_VERSION = "60.0"
SESSION_TIMEOUT_MS = 24 * 3600 * 1000
CODE_LIFETIME_MS = 15 * 60 * 1000
KNOWN_SCOPES = {"api", "refresh_token", "offline_access", "id", "openid", "profile", "email", "address", "phone",
                "web", "full", "chatter_api", "visualforce", "custom_permissions", "wave_api", "content", "lightning"}
INVALID_SESSION = [{"message": "Session expired or invalid", "errorCode": "INVALID_SESSION_ID"}]
BUSY = {"error": "invalid_grant", "error_description": "token request is already being processed"}


@dataclass
class User:
    user_id: str
    username: str
    display_name: str
    email: str
    first_name: str
    last_name: str
    active: bool = True


@dataclass
class Grant:
    """One user's authorization of the connected app (what Setup > OAuth Connected Apps lists)."""
    user_id: str
    refresh_token: str | None
    scope: str
    revoked: bool = False
    access_tokens: set[str] = field(default_factory=set)


@dataclass
class Session:
    """An access token: a Salesforce session."""
    grant: Grant
    user_id: str
    issued_at_ms: int
    dead: bool = False


DEFAULT_USERS = {
    "jane": User("0055g00000SiMu1AAB", "jane.doe@acme.example", "Jane Doe", "jane.doe@acme.example", "Jane", "Doe"),
    "raj": User("0055g00000SiMu2AAB", "raj.patel@acme.example", "Raj Patel", "raj.patel@acme.example", "Raj", "Patel"),
}


class SalesforceSim(sim_http.Simulator):
    """The simulator and its state. `start()` binds two ephemeral ports on 127.0.0.1."""

    def __init__(self, client_id: str = CLIENT_ID, redirect_uri: str = EXTERNAL_REDIRECT_URI,
                 session_timeout_ms: int = SESSION_TIMEOUT_MS, refresh_latency: float = 0.1,
                 rotate_refresh_tokens: bool = False, client_secret: str | None = None,
                 callback_urls: list[str] | None = None, instance_tls: ssl.SSLContext | None = None) -> None:
        self.client_id = client_id
        self.redirect_uri = redirect_uri            # what settings() gives a profile
        self.callback_urls = callback_urls or [redirect_uri]
        self.session_timeout_ms = session_timeout_ms
        self.refresh_latency = refresh_latency
        self.rotate_refresh_tokens = rotate_refresh_tokens
        self.client_secret = client_secret
        self.instance_tls = instance_tls
        self.lock = threading.Lock()
        self.users = {name: User(**vars(user)) for name, user in DEFAULT_USERS.items()}
        self.org_active = True
        self.offset_ms = 0
        self.codes: dict[str, dict[str, Any]] = {}
        self.grants: list[Grant] = []
        self.refresh_index: dict[str, Grant] = {}
        self.sessions: dict[str, Session] = {}
        self.handed_out: set[str] = set()
        self.violations: list[str] = []
        self.login_as = "jane"
        self.last_issued_at: int | None = None       # issued_at of the latest token answer
        self._deny_next = False
        self.identity_unavailable = False            # the identity service answers 503 (maintenance)
        self.refresh_failure: tuple[int, str, bytes] | None = None
        self.revoke_failure: int | None = None
        self.edit_sign_in_answer: Callable[[dict[str, Any]], None] | None = None
        self.edit_refresh_answer: Callable[[dict[str, Any]], None] | None = None
        self._refresh_log: list[tuple[float, bool]] = []   # (monotonic time, refused as busy) per refresh request
        self._in_flight: set[str] = set()
        self._held_refreshes = 0
        # Counters and logs (read with snapshot()).
        self.authorize_requests: list[dict[str, str]] = []
        self.sign_ins = 0
        self.refresh_requests = 0
        self.refreshes = 0
        self.presented_refresh_tokens: list[str] = []
        self.refused_refreshes: list[str] = []        # error_description of each refused refresh
        self.failed_refreshes: list[int] = []         # status of each refresh answered by refresh_failure
        self.concurrent_refreshes = 0                 # "already being processed" caused by the client itself
        self.held_refreshes = 0                       # the same, caused by hold_next_refresh()
        self.revocations: list[str] = []              # "refresh_token" / "access_token" / "unknown"
        self.api_calls: list[tuple[str, str, int]] = []   # (method, path, status) at the instance
        self.login_host_api_calls = 0
        self.identity_calls: list[int] = []           # statuses
        self.login_base = ""
        self.instance_url = ""
        if client_secret:
            self.handed_out.add(client_secret)       # a secret like the tokens: never in a log or a frame
        self._leak_source = lambda: list(self.handed_out)

    # ── Lifecycle ─────────────────────────────────────────────────────────

    def start(self) -> "SalesforceSim":
        for role in ("login", "instance"):
            handler = type(f"{role.title()}Handler", (_Handler,), {"sim": self, "role": role})
            tls = self.instance_tls if role == "instance" else None
            base = self.serve(handler, name=f"salesforce-sim-{role}", tls=tls).base
            if role == "login":
                self.login_base = base
            else:
                self.instance_url = base
        leak_scan.register(self._leak_source)
        return self

    # ── What tests use ────────────────────────────────────────────────────

    @property
    def authorize_prefix(self) -> str:
        return f"{self.login_base}/services/oauth2/authorize?"

    def settings(self, **extra: Any) -> dict[str, Any]:
        """Settings of a `salesforce` profile whose login host is this simulator (a My Domain URL)."""
        return {"clientId": self.client_id, "loginHost": self.login_base, "redirectUri": self.redirect_uri, **extra}

    def now_ms(self) -> int:
        return int(time.time() * 1000) + self.offset_ms

    def advance(self, milliseconds: int) -> None:
        with self.lock:
            self.offset_ms += milliseconds

    def user(self, name: str) -> User:
        return self.users[name]

    def identity_url(self, name: str = "jane") -> str:
        return f"{self.login_base}/id/{ORG_ID}/{self.users[name].user_id}"

    def account_id(self, name: str = "jane") -> str:
        return f"{ORG_ID}/{self.users[name].user_id}"

    def browse(self, url: str, user: str = "jane", deny: bool = False) -> str:
        """The browser's part: the user signs in as `user` and allows (or denies) the app. Returns
        the redirect's Location (not followed)."""
        with self.lock:
            self.login_as = user
            self._deny_next = deny
        return sim_http.redirect_location(url)

    def grant_refresh_token(self, user: str = "jane") -> str | None:
        """The refresh token of the user's latest grant (to compare, never to print)."""
        with self.lock:
            grants = [g for g in self.grants if g.user_id == self.users[user].user_id]
            return grants[-1].refresh_token if grants else None

    def session_alive(self, access_token: str) -> bool:
        with self.lock:
            return self._session_for(access_token) is not None

    def snapshot(self) -> dict[str, Any]:
        with self.lock:
            return {
                "sign_ins": self.sign_ins,
                "refresh_requests": self.refresh_requests,
                "refreshes": self.refreshes,
                "refused_refreshes": list(self.refused_refreshes),
                "failed_refreshes": list(self.failed_refreshes),
                "concurrent_refreshes": self.concurrent_refreshes,
                "held_refreshes": self.held_refreshes,
                "revocations": list(self.revocations),
                "api_calls": list(self.api_calls),
                "api_statuses": [status for _, _, status in self.api_calls],
                "login_host_api_calls": self.login_host_api_calls,
                "identity_calls": list(self.identity_calls),
                "grants": len(self.grants),
                "revoked_grants": sum(1 for g in self.grants if g.revoked),
            }

    # ── Admin actions (Setup) ─────────────────────────────────────────────

    def expire_sessions(self, user: str = "jane") -> None:
        """Setup > Session Management > Remove: the user's sessions (access tokens) end; the
        connected app's refresh tokens still work."""
        with self.lock:
            for session in self.sessions.values():
                if session.user_id == self.users[user].user_id:
                    session.dead = True

    def revoke_app(self, user: str = "jane") -> None:
        """Setup > Users > the user > OAuth Connected Apps > Revoke: access and refresh tokens die."""
        with self.lock:
            for grant in self.grants:
                if grant.user_id == self.users[user].user_id:
                    self._revoke_grant(grant)

    def deactivate_user(self, user: str = "jane", end_sessions: bool = True) -> None:
        """Setup > Users > Deactivate. `end_sessions=False`: the identity service still recognises
        the user's sessions for a while and answers them 404 ``Inactive``."""
        with self.lock:
            self.users[user].active = False
            for session in self.sessions.values():
                if end_sessions and session.user_id == self.users[user].user_id:
                    session.dead = True

    def deactivate_org(self) -> None:
        with self.lock:
            self.org_active = False
            for session in self.sessions.values():
                session.dead = True

    def refresh_gaps(self) -> list[float]:
        """Seconds between each "already being processed" refusal and the refresh request after it."""
        with self.lock:
            log = list(self._refresh_log)
        return [later[0] - earlier[0] for earlier, later in zip(log, log[1:]) if earlier[1]]

    def hold_next_refresh(self) -> None:
        """The next refresh meets another client's request with the same refresh token still
        running (e.g. a second device of the user): "token request is already being processed"."""
        with self.lock:
            self._held_refreshes += 1

    # ── Bookkeeping (called with self.lock held) ──────────────────────────

    def _violation(self, text: str) -> None:
        self.violations.append(text)

    def _user_by_id(self, user_id: str) -> User | None:
        return next((u for u in self.users.values() if u.user_id == user_id), None)

    def _revoke_grant(self, grant: Grant) -> None:
        grant.revoked = True
        for token in grant.access_tokens:
            self.sessions[token].dead = True

    def _session_for(self, token: str, active_user: bool = True) -> Session | None:
        """The live session of an access token (`active_user=False`: whether or not its user is active)."""
        session = self.sessions.get(token)
        if session is None or session.dead or session.grant.revoked or not self.org_active:
            return None
        user = self._user_by_id(session.user_id)
        if user is None or (active_user and not user.active):
            return None
        if self.now_ms() - session.issued_at_ms >= self.session_timeout_ms:
            return None
        return session

    def _new_session(self, grant: Grant) -> tuple[str, int]:
        token = f"{ORG_ID[:15]}!AQ4AQ" + secrets.token_urlsafe(72)
        issued_at = self.now_ms()
        self.sessions[token] = Session(grant, grant.user_id, issued_at)
        grant.access_tokens.add(token)
        self.handed_out.add(token)
        return token, issued_at

    def _new_refresh_token(self, grant: Grant) -> str:
        token = "5Aep861" + secrets.token_urlsafe(60)
        grant.refresh_token = token
        self.refresh_index[token] = grant
        self.handed_out.add(token)
        return token

    def _token_answer(self, grant: Grant, with_refresh: bool) -> dict[str, Any]:
        access, issued_at = self._new_session(grant)
        self.last_issued_at = issued_at
        identity = f"{self.login_base}/id/{ORG_ID}/{grant.user_id}"
        key = (self.client_secret or self.client_id).encode()
        signature = base64.b64encode(hmac.new(key, (identity + str(issued_at)).encode(), hashlib.sha256).digest()).decode()
        answer: dict[str, Any] = {"access_token": access}
        if with_refresh:
            answer["refresh_token"] = self._new_refresh_token(grant)
        answer.update({"signature": signature, "scope": grant.scope, "instance_url": self.instance_url,
                       "id": identity, "token_type": "Bearer", "issued_at": str(issued_at)})
        return answer

    # ── Endpoints ─────────────────────────────────────────────────────────

    def authorize(self, params: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
        redirect = params.get("redirect_uri", "")
        with self.lock:
            self.authorize_requests.append(dict(params))
            if params.get("client_id") != self.client_id:
                self._violation(f"authorize: unknown client_id {params.get('client_id')!r}")
                return 400, {}, b"error=invalid_client_id&error_description=client%20identifier%20invalid"
            if not self._registered(redirect):
                self._violation(f"authorize: redirect_uri {redirect!r} is not a callback URL of the connected app")
                return 400, {}, b"error=redirect_uri_mismatch&error_description=redirect_uri%20must%20match%20configuration"
            state = params.get("state")
            problems = []
            if params.get("response_type") != "code":
                problems.append(("unsupported_response_type", f"response_type {params.get('response_type')!r}"))
            if not params.get("code_challenge"):
                problems.append(("invalid_request", "no code_challenge (PKCE)"))
            if params.get("code_challenge_method") != "S256":
                problems.append(("invalid_request", f"code_challenge_method {params.get('code_challenge_method')!r}, expected S256"))
            if not state:
                problems.append(("invalid_request", "no state"))
            scopes = params.get("scope", "").split(" ") if params.get("scope") else []
            if "refresh_token" not in scopes:
                problems.append(("invalid_scope", f"scope {params.get('scope')!r} lacks refresh_token"))
            unknown = [s for s in scopes if s not in KNOWN_SCOPES]
            if unknown:
                problems.append(("invalid_scope", f"unknown scopes {unknown}"))
            for _, text in problems:
                self._violation(f"authorize: {text}")
            deny, self._deny_next = self._deny_next, False
            answer: dict[str, str]
            if problems:
                error, text = problems[0]
                answer = {"error": error, "error_description": text}
            elif deny:
                answer = {"error": "access_denied", "error_description": "end-user denied authorization"}
            else:
                user = self.users[self.login_as]
                code = "aPrx" + secrets.token_urlsafe(48) + "=="
                self.codes[code] = {"redirect_uri": redirect, "challenge": params["code_challenge"],
                                    "scope": " ".join(scopes), "user_id": user.user_id, "created_ms": self.now_ms()}
                self.handed_out.update((code, urllib.parse.quote(code, safe="")))
                answer = {"code": code}
            if state:
                answer["state"] = state
        location = redirect + ("&" if "?" in redirect else "?") + urllib.parse.urlencode(answer)
        return 302, {"Location": location}, b""

    def _registered(self, redirect: str) -> bool:
        # A connected app's callback URLs are matched exactly (a loopback one with its port too).
        return redirect in self.callback_urls

    def token(self, form: dict[str, str], headers: Any) -> tuple[int, dict[str, Any]]:
        grant_type = form.get("grant_type")
        with self.lock:
            secret = form.get("client_secret")
            if self.client_secret is None and secret is not None:
                self._violation("token: a client_secret was sent for a connected app that has none")
            if form.get("client_id") != self.client_id:
                self._violation(f"token: client_id {form.get('client_id')!r}")
                return 400, {"error": "invalid_client_id", "error_description": "client identifier invalid"}
            if self.client_secret is not None and secret != self.client_secret:
                self._violation("token: missing or wrong client_secret")
                return 400, {"error": "invalid_client", "error_description": "invalid client credentials"}
            if grant_type == "authorization_code":
                return self._exchange(form)
        if grant_type == "refresh_token":
            return self._refresh(form)
        with self.lock:
            self._violation(f"token: grant_type {grant_type!r}")
        return 400, {"error": "unsupported_grant_type", "error_description": "grant type not supported"}

    def _exchange(self, form: dict[str, str]) -> tuple[int, dict[str, Any]]:
        for name in ("code", "redirect_uri", "code_verifier"):
            if name not in form:
                self._violation(f"token (authorization_code): no {name}")
        entry = self.codes.pop(form.get("code", ""), None)  # single use
        if entry is None or self.now_ms() - entry["created_ms"] > CODE_LIFETIME_MS:
            self._violation("token (authorization_code): unknown, used or expired code")
            return 400, {"error": "invalid_grant", "error_description": "invalid authorization code"}
        if form.get("redirect_uri") != entry["redirect_uri"]:
            self._violation("token (authorization_code): redirect_uri differs from the authorization request")
            return 400, {"error": "redirect_uri_mismatch", "error_description": "redirect_uri must match configuration"}
        verifier = form.get("code_verifier", "")
        if not (43 <= len(verifier) <= 128) or sim_http.pkce_s256(verifier) != entry["challenge"]:
            self._violation("token (authorization_code): the PKCE code_verifier does not match the code_challenge")
            return 400, {"error": "invalid_grant", "error_description": "invalid code verifier"}
        grant = Grant(entry["user_id"], None, entry["scope"])
        self.grants.append(grant)
        self.sign_ins += 1
        answer = self._token_answer(grant, with_refresh="refresh_token" in entry["scope"].split(" "))
        if self.edit_sign_in_answer is not None:
            self.edit_sign_in_answer(answer)
        return 200, answer

    def failing_refresh(self, form: dict[str, str]) -> tuple[int, bytes, str] | None:
        """(status, body, content type) when refreshes fail now (`refresh_failure`), else None."""
        with self.lock:
            if form.get("grant_type") != "refresh_token" or self.refresh_failure is None:
                return None
            status, content_type, body = self.refresh_failure
            self.refresh_requests += 1
            self.failed_refreshes.append(status)
            return status, body, content_type

    def _refresh(self, form: dict[str, str]) -> tuple[int, dict[str, Any]]:
        token = form.get("refresh_token", "")
        with self.lock:
            self.refresh_requests += 1
            self.presented_refresh_tokens.append(token)
            if form.get("format") != "json":
                self._violation(f"token (refresh_token): format {form.get('format')!r}, expected json")
            if self._held_refreshes:
                self._held_refreshes -= 1
                self.held_refreshes += 1
                self.refused_refreshes.append(BUSY["error_description"])
                self._refresh_log.append((time.monotonic(), True))
                return 400, dict(BUSY)
            if token in self._in_flight:
                # Salesforce lets one request per refresh token run at a time.
                self.concurrent_refreshes += 1
                self.refused_refreshes.append(BUSY["error_description"])
                self._refresh_log.append((time.monotonic(), True))
                return 400, dict(BUSY)
            self._refresh_log.append((time.monotonic(), False))
            self._in_flight.add(token)
        try:
            # Latency, so that a second concurrent refresh would overlap this one and be refused.
            threading.Event().wait(self.refresh_latency)
            with self.lock:
                return self._refresh_locked(token)
        finally:
            with self.lock:
                self._in_flight.discard(token)

    def _refresh_locked(self, token: str) -> tuple[int, dict[str, Any]]:
        grant = self.refresh_index.get(token)
        refusal = None
        if grant is None or grant.revoked or grant.refresh_token != token:
            refusal = "expired access/refresh token"
        elif not self._user_by_id(grant.user_id).active:
            refusal = "inactive user"
        elif not self.org_active:
            refusal = "inactive org"
        if refusal is not None:
            self.refused_refreshes.append(refusal)
            return 400, {"error": "invalid_grant", "error_description": refusal}
        self.refreshes += 1
        answer = self._token_answer(grant, with_refresh=self.rotate_refresh_tokens)
        if self.edit_refresh_answer is not None:
            self.edit_refresh_answer(answer)
        return 200, answer

    def revoke(self, form: dict[str, str]) -> tuple[int, dict[str, Any] | None]:
        with self.lock:
            extra = sorted(set(form) - {"token"})
            if extra:
                self._violation(f"revoke: parameters Salesforce does not take: {extra}")
            if self.revoke_failure is not None:
                self.revocations.append(f"failed {self.revoke_failure}")
                return self.revoke_failure, None
            token = form.get("token", "")
            grant = self.refresh_index.get(token)
            if grant is not None and grant.refresh_token == token and not grant.revoked:
                self._revoke_grant(grant)
                self.revocations.append("refresh_token")
                return 200, None
            session = self.sessions.get(token)
            if session is not None and not session.dead:
                session.dead = True
                self.revocations.append("access_token")
                return 200, None
            self.revocations.append("unknown")
            return 400, {"error": "unsupported_token_type", "error_description": "this token type is not supported"}

    def identity(self, org_id: str, user_id: str, token: str | None) -> tuple[int, Any]:
        with self.lock:
            if self.identity_unavailable:
                self.identity_calls.append(503)
                return 503, "Service Unavailable"
            status, body = self._identity_locked(org_id, user_id, token)
            self.identity_calls.append(status)
            return status, body

    def _identity_locked(self, org_id: str, user_id: str, token: str | None) -> tuple[int, Any]:
        if not token:
            return 403, "Missing_OAuth_Token"
        session = self._session_for(token, active_user=False)
        if session is None:
            return 403, "Bad_OAuth_Token"
        if org_id != ORG_ID:
            return 403, "Wrong_Org"
        user = self._user_by_id(user_id)
        if user is None:
            return 404, "Bad_Id"
        if not user.active:
            return 404, "Inactive"
        rest = f"{self.instance_url}/services/data/v{{version}}/"
        return 200, {
            "id": f"{self.login_base}/id/{ORG_ID}/{user.user_id}", "asserted_user": session.user_id == user.user_id,
            "user_id": user.user_id, "organization_id": ORG_ID, "username": user.username,
            "nick_name": user.username.split("@")[0], "display_name": user.display_name, "email": user.email,
            "email_verified": True, "first_name": user.first_name, "last_name": user.last_name,
            "timezone": "Europe/London", "active": user.active, "user_type": "STANDARD", "language": "en_US",
            "locale": "en_GB", "utcOffset": 0, "last_modified_date": "2024-01-01T00:00:00Z", "is_app_installed": True,
            "urls": {"rest": rest, "sobjects": rest + "sobjects/", "query": rest + "query/",
                     "profile": f"{self.instance_url}/{user.user_id}"},
        }

    def api(self, method: str, path: str, query: dict[str, str], token: str | None,
            body: bytes) -> tuple[int, Any]:
        with self.lock:
            status, answer = self._api_locked(method, path, query, token, body)
            self.api_calls.append((method, path, status))
            return status, answer

    def _api_locked(self, method: str, path: str, query: dict[str, str], token: str | None,
                    body: bytes) -> tuple[int, Any]:
        path = path.rstrip("/")     # `…/query/` is `…/query`
        if path == "/services/data":
            return 200, [{"label": "Spring '24", "url": f"/services/data/v{API_VERSION}", "version": API_VERSION}]
        if not token or self._session_for(token) is None:
            return 401, INVALID_SESSION
        base = f"/services/data/v{API_VERSION}"
        if path == base:
            return 200, {"sobjects": f"{base}/sobjects", "query": f"{base}/query", "limits": f"{base}/limits"}
        if path == base + "/sobjects" and method == "GET":
            return 200, {"encoding": "UTF-8", "maxBatchSize": 200,
                         "sobjects": [{"name": "Account", "label": "Account", "urls": {"sobject": f"{base}/sobjects/Account"}}]}
        if path == base + "/query" and method == "GET":
            if not query.get("q"):
                return 400, [{"message": "A query string has to be specified", "errorCode": "MALFORMED_QUERY"}]
            records = [{"attributes": {"type": "Account", "url": f"{base}/sobjects/Account/0015g00000SiMuAAAA"},
                        "Id": "0015g00000SiMuAAAA", "Name": "Acme"}]
            return 200, {"totalSize": len(records), "done": True, "records": records}
        if path == base + "/sobjects/Account" and method == "POST":
            try:
                fields = json.loads(body or b"null")
            except ValueError:
                fields = None
            if not isinstance(fields, dict) or not fields.get("Name"):
                return 400, [{"message": "Required fields are missing: [Name]", "errorCode": "REQUIRED_FIELD_MISSING", "fields": ["Name"]}]
            return 201, {"id": "0015g00000SiMuBAAA", "success": True, "errors": []}
        if path.startswith(base + "/sobjects/Account/") and method == "GET":
            return 200, {"attributes": {"type": "Account", "url": path}, "Id": path.rsplit("/", 1)[1], "Name": "Acme"}
        return 404, [{"errorCode": "NOT_FOUND", "message": "The requested resource does not exist"}]


class _Handler(sim_http.Handler):
    server_version = "SalesforceSim/1.0"
    json_type = "application/json;charset=UTF-8"
    json_headers = {"Cache-Control": "no-cache,must-revalidate,max-age=0,no-store,private"}
    sim: SalesforceSim
    role: str  # "login" or "instance"

    def violation(self, text: str) -> None:
        with self.sim.lock:
            self.sim._violation(text)

    def bearer(self) -> str | None:
        scheme, _, token = (self.headers.get("Authorization") or "").partition(" ")
        return token.strip() if scheme.lower() in ("bearer", "oauth") and token.strip() else None

    def check_url(self, query: dict[str, str]) -> None:
        for name in ("access_token", "oauth_token", "refresh_token", "client_secret"):
            if name in query:
                self.violation(f"a {name} in a URL ({self.command} {urllib.parse.urlsplit(self.path).path})")

    def do_GET(self) -> None:  # noqa: N802 - http.server naming
        self.route("GET")

    def do_POST(self) -> None:  # noqa: N802
        self.route("POST")

    def do_PATCH(self) -> None:  # noqa: N802
        self.route("PATCH")

    def do_DELETE(self) -> None:  # noqa: N802
        self.route("DELETE")

    def route(self, method: str) -> None:
        parts = urllib.parse.urlsplit(self.path)
        query = dict(urllib.parse.parse_qsl(parts.query, keep_blank_values=True))
        body = self.read_body()
        path = parts.path
        if path != "/services/oauth2/authorize":
            self.check_url(query)
        if self.role == "instance":
            if path.startswith("/services/data"):
                status, answer = self.sim.api(method, path, query, self.bearer(), body)
                return self.send_json(status, answer)
            if path.startswith("/services/oauth2/") or path.startswith("/id/"):
                self.violation(f"{method} {path} sent to the instance, not the login host")
            return self.send_json(404, [{"errorCode": "NOT_FOUND", "message": "The requested resource does not exist"}])
        # The login host.
        if path == "/services/oauth2/authorize" and method == "GET":
            status, headers, payload = self.sim.authorize(query)
            return self.send(status, payload, "text/plain" if payload else None, headers)
        if path == "/services/oauth2/token" and method == "POST":
            form = self.read_form(body, "token")
            if form is None:
                return self.send_json(400, {"error": "invalid_request", "error_description": "expected a form body"})
            failure = self.sim.failing_refresh(form)
            if failure is not None:
                return self.send(*failure)
            status, answer = self.sim.token(form, self.headers)
            return self.send_json(status, answer)
        if path == "/services/oauth2/revoke" and method == "POST":
            form = self.read_form(body, "revoke")
            if form is None:
                return self.send_json(400, {"error": "invalid_request", "error_description": "expected a form body"})
            status, answer = self.sim.revoke(form)
            return self.send_json(status, answer) if answer is not None else self.send(status)
        if path.startswith("/id/") and method == "GET":
            pieces = path.split("/")
            if len(pieces) != 4:
                return self.send(404, b"Bad_Id", "text/plain")
            status, answer = self.sim.identity(pieces[2], pieces[3], self.bearer())
            if isinstance(answer, str):
                return self.send(status, answer.encode(), "text/plain")
            return self.send_json(status, answer)
        if path.startswith("/services/data"):
            with self.sim.lock:
                self.sim.login_host_api_calls += 1
                self.sim._violation(f"{method} {path} sent to the login host, not the org's instance_url")
        return self.send(404, b"Not Found", "text/plain")
