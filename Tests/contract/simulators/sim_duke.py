"""Duke University's mobile authorizer, simulated for the duke plugin's scenarios (Python
standard library only, http on 127.0.0.1, started and stopped by the tests).

What it reproduces (plugins/duke/README.md, "What Duke's server does"):

* ``GET /{client}/ios/login`` — the web sign-in. It sends the web view to the university's
  Shibboleth login page (``/idp/profile/SAML2/Redirect/SSO``: a form with ``j_username`` /
  ``j_password``); after a good NetID and password the page redirects to
  ``/{client}/ios/token?access_token=<JWT>&session_token=<opaque>`` — with extra query parameters
  and the two tokens NOT first and second, so a client reading the query by position fails.
  The layout can be changed per test (``set_callback``: order, extras, a token left out).
* ``GET /{client}/ios/token`` — the page the web view lands on (the frontend catches the
  navigation; loading it does nothing).
* ``POST /{client}/ios/refresh`` — headers ``X-Access-Token`` and ``X-Session-Token``, no body.
  200 ``{"data":{"access_token","session_token"}}``: BOTH are replaced (the old session token is
  dead from then on, the old access token too). 400 when the session is dead or unknown. A
  missing header or a body is a client error: recorded as a violation (and answered 400, as the
  real server refuses it). ``fail(503)`` makes it (and logout, and the login page) answer 5xx.
* ``POST /{client}/ios/revoke`` — logout, the same two headers (checked the same way); ends the
  session (and its access token). 400 for a dead session.
* ``GET /api/v1/me`` — an API needing ``Authorization: Bearer <access token>``: 200 for the
  session's current, unexpired access token, else 401. A session token sent to the API (it must
  never leave the authorizer's own endpoints) is a violation.

Access tokens are JWTs signed HS256 with a key only the simulator knows; ``exp`` = the
simulator's clock + ``access_lifetime`` seconds. The simulator has its own clock offset
(``advance``), moved together with the host's ``$/test/advanceClock``.

Admin actions: ``end_session(netid)`` (an administrator or Duke's policy ends the user's
session: refresh answers 400 from then on), ``fail(status)`` / ``recover()``, ``stop()`` and
``start()`` again on the same port (the server unreachable meanwhile).

Every token handed out is registered with the suite's leak scan. Violations are collected in
``violations`` (texts name headers and paths, never token values); tests assert there are none.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import threading
import time
import urllib.parse
from dataclasses import dataclass
from typing import Any

from authbridge_testkit import leak_scan
from . import sim_http

CLIENT = "duke-mobile-test"
API_PATH = "/api/v1/me"
SSO_PATH = "/idp/profile/SAML2/Redirect/SSO"

USERS = {
    "ab123": {"password": "blue-devils", "name": "Alex Blue", "email": "alex.blue@duke.edu"},
    "cd456": {"password": "chapel-bells", "name": "Casey Dunn", "email": "casey.dunn@duke.edu"},
}

#: The token URL's default layout: the tokens are neither first nor second.
DEFAULT_ORDER = ("netid", "session_token", "expires_in", "access_token", "token_type")


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


@dataclass
class Session:
    netid: str
    access: str            # the session's current access token
    alive: bool = True


class DukeAuthorizer(sim_http.Simulator):
    """The server and its state. ``start()`` binds 127.0.0.1 (an ephemeral port the first time)."""

    def __init__(self, client: str = CLIENT, access_lifetime: int = 3600) -> None:
        self.client = client
        self.access_lifetime = access_lifetime
        self.lock = threading.Lock()
        self._key = secrets.token_bytes(32)          # HS256 key: never handed out
        self.sessions: dict[str, Session] = {}        # session token → session
        self.access_exp: dict[str, int] = {}          # access token → exp (s), while it is current
        self.handed_out: set[str] = set()             # every token issued (the leak scan)
        self.violations: list[str] = []
        self.offset_ms = 0
        self.failing: int | None = None
        self.order: tuple[str, ...] = DEFAULT_ORDER
        self.extras: dict[str, str] = {}
        self.omit: set[str] = set()
        self.last_exp: int | None = None              # exp of the latest access token issued
        # Counters (read with snapshot()).
        self.logins = 0
        self.refreshes = 0            # successful refreshes (a new pair issued)
        self.refused_refreshes = 0    # refreshes answered 400
        self.failed_requests = 0      # requests answered with the failure status
        self.revokes = 0              # successful logouts
        self.api_calls = 0
        self.api_refusals = 0
        self.token_page_visits = 0
        self.port = 0
        self.base = ""
        self._leak_source = lambda: list(self.handed_out)
        self._registered = False

    # ── Lifecycle ─────────────────────────────────────────────────────────

    def start(self) -> "DukeAuthorizer":
        served = self.serve(type("Handler", (_Handler,), {"duke": self}), port=self.port, name="duke-authorizer")
        self.port = served.port
        self.base = f"{served.base}/"                     # Duke's bases end with '/'
        if not self._registered:
            leak_scan.register(self._leak_source)
            self._registered = True
        return self

    # ── URLs ──────────────────────────────────────────────────────────────

    @property
    def login_url(self) -> str:
        return f"{self.base}{self.client}/ios/login"

    @property
    def token_prefix(self) -> str:
        return f"{self.base}{self.client}/ios/token"

    @property
    def api_url(self) -> str:
        return f"{self.base.rstrip('/')}{API_PATH}"

    def settings(self, **extra: Any) -> dict[str, Any]:
        """The duke plugin settings of a profile using this server."""
        return {"clientName": self.client, "baseUrl": self.base, "apiBaseUrl": self.base.rstrip("/") + "/api/v1",
                **extra}

    # ── Admin and test controls ───────────────────────────────────────────

    def now(self) -> int:
        """The simulator's clock, in whole seconds."""
        return int(time.time() + self.offset_ms / 1000)

    def advance(self, milliseconds: int) -> None:
        with self.lock:
            self.offset_ms += milliseconds

    def fail(self, status: int = 503) -> None:
        with self.lock:
            self.failing = status

    def recover(self) -> None:
        with self.lock:
            self.failing = None

    def end_session(self, netid: str) -> int:
        """An administrator (or Duke's policy) ends the user's sessions; returns how many."""
        ended = 0
        with self.lock:
            for session in self.sessions.values():
                if session.netid == netid and session.alive:
                    session.alive = False
                    self.access_exp.pop(session.access, None)
                    ended += 1
        return ended

    def live_sessions(self, netid: str) -> int:
        with self.lock:
            return sum(1 for s in self.sessions.values() if s.netid == netid and s.alive)

    def set_callback(self, order: tuple[str, ...] | None = None, extras: dict[str, str] | None = None,
                     omit: tuple[str, ...] = ()) -> None:
        """How the next sign-ins' token URL is laid out: parameter names in order (the names of
        `extras` and access_token / session_token / netid / expires_in / token_type), extra
        parameters, and tokens to leave out."""
        with self.lock:
            self.order = tuple(order) if order is not None else DEFAULT_ORDER
            self.extras = dict(extras or {})
            self.omit = set(omit)

    def snapshot(self) -> dict[str, Any]:
        with self.lock:
            return {"logins": self.logins, "refreshes": self.refreshes, "refused_refreshes": self.refused_refreshes,
                    "failed_requests": self.failed_requests, "revokes": self.revokes, "api_calls": self.api_calls,
                    "api_refusals": self.api_refusals, "token_page_visits": self.token_page_visits}

    def is_current_access(self, token: str) -> bool:
        with self.lock:
            return token in self.access_exp

    def claims(self, token: str) -> dict[str, Any]:
        """The payload of a JWT this simulator issued (its signature checked)."""
        header, payload, signature = token.split(".")
        expected = b64url(hmac.new(self._key, f"{header}.{payload}".encode(), hashlib.sha256).digest())
        assert hmac.compare_digest(signature, expected), "not a token of this simulator"
        return json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))

    # ── The user in the web view ──────────────────────────────────────────

    def browse(self, url: str, netid: str = "ab123", password: str | None = None) -> str:
        """The web view: opens the login URL, follows it to Shibboleth, signs in there and returns
        the token URL the page finally redirects to (the navigation the frontend intercepts)."""
        parts = urllib.parse.urlsplit(url)
        assert (parts.hostname, parts.port) == ("127.0.0.1", self.port), "the sign-in URL is not this server"
        status, headers, _ = self._request("GET", parts.path + ("?" + parts.query if parts.query else ""))
        assert status == 302, f"{parts.path} answered {status}"
        sso = urllib.parse.urlsplit(headers["location"])
        status, _, page = self._request("GET", sso.path + "?" + sso.query)
        assert status == 200 and b"j_username" in page, "no Shibboleth login form"
        form = urllib.parse.urlencode({"j_username": netid, "j_password": password or USERS[netid]["password"],
                                       "_eventId_proceed": ""})
        status, headers, _ = self._request("POST", sso.path + "?" + sso.query, form,
                                           {"Content-Type": "application/x-www-form-urlencoded"})
        assert status == 302, f"the Shibboleth login answered {status}"
        return urllib.parse.urljoin(self.base, headers["location"])

    def _request(self, method: str, target: str, body: str | None = None,
                 headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
        return sim_http.request(f"http://127.0.0.1:{self.port}{target}", method, body, headers)

    # ── Token bookkeeping (called with self.lock held) ──────────────────────

    def _jwt(self, netid: str) -> tuple[str, int]:
        now = self.now()
        exp = now + self.access_lifetime
        user = USERS[netid]
        header = b64url(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
        payload = b64url(json.dumps({
            "iss": self.base + self.client, "aud": self.client, "sub": netid, "name": user["name"],
            "email": user["email"], "iat": now, "exp": exp, "jti": secrets.token_hex(8),
        }).encode())
        signature = b64url(hmac.new(self._key, f"{header}.{payload}".encode(), hashlib.sha256).digest())
        return f"{header}.{payload}.{signature}", exp

    def _issue(self, netid: str) -> tuple[str, str, int]:
        access, exp = self._jwt(netid)
        # Opaque, and with characters a URL must percent-encode ('+', '/', '='): a client that
        # does not decode the query sends the wrong token back.
        session = "s+" + base64.b64encode(secrets.token_bytes(24)).decode("ascii") + "/="
        self.sessions[session] = Session(netid=netid, access=access)
        self.access_exp[access] = exp
        self.handed_out.update((access, session))
        self.last_exp = exp
        return access, session, exp

    def token_location(self, netid: str) -> str:
        with self.lock:
            access, session, _ = self._issue(netid)
            self.logins += 1
            values = {"access_token": access, "session_token": session, "netid": netid,
                      "expires_in": str(self.access_lifetime), "token_type": "Bearer", **self.extras}
            pairs = [(name, values[name]) for name in self.order if name not in self.omit]
        return f"/{self.client}/ios/token?" + urllib.parse.urlencode(pairs)

    def refresh(self, access: str, session_token: str) -> tuple[int, dict[str, Any]]:
        with self.lock:
            session = self.sessions.get(session_token)
            if session is None or not session.alive:
                self.refused_refreshes += 1
                return 400, {"error": "invalid session"}
            if not hmac.compare_digest(session.access, access):
                self.violations.append("refresh: X-Access-Token is not the session's current access token")
                self.refused_refreshes += 1
                return 400, {"error": "invalid session"}
            # Both are replaced: the old pair is dead from now on.
            session.alive = False
            self.access_exp.pop(session.access, None)
            new_access, new_session, _ = self._issue(session.netid)
            self.refreshes += 1
            return 200, {"data": {"access_token": new_access, "session_token": new_session}}

    def revoke(self, access: str, session_token: str) -> tuple[int, dict[str, Any]]:
        with self.lock:
            session = self.sessions.get(session_token)
            if session is None or not session.alive or not hmac.compare_digest(session.access, access):
                return 400, {"error": "invalid session"}
            session.alive = False
            self.access_exp.pop(session.access, None)
            self.revokes += 1
            return 200, {"data": {}}

    def api_user(self, token: str) -> dict[str, Any] | None:
        with self.lock:
            exp = self.access_exp.get(token)
            if exp is None or exp <= self.now():
                return None
        return {"netid": self.claims(token)["sub"]}


class _Handler(sim_http.Handler):
    server_version = "DukeMobileAuthorizer/1.0"
    duke: DukeAuthorizer  # set on the subclass made by start()

    def read_body(self) -> bytes:
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            return b"<chunked>"  # never sent by a client that sends no body
        return super().read_body()

    def violation(self, text: str) -> None:
        with self.duke.lock:
            self.duke.violations.append(text)

    def failing(self) -> bool:
        with self.duke.lock:
            status = self.duke.failing
            if status is not None:
                self.duke.failed_requests += 1
        if status is None:
            return False
        self.send(status, b"<html><body><h1>Service Unavailable</h1></body></html>", "text/html")
        return True

    def do_GET(self) -> None:  # noqa: N802 - http.server naming
        duke = self.duke
        parts = urllib.parse.urlsplit(self.path)
        if parts.path == f"/{duke.client}/ios/login":
            if self.failing():
                return
            target = urllib.parse.urlencode({"execution": "e1s1", "client": duke.client})
            self.send(302, headers={"Location": f"{SSO_PATH}?{target}"})
        elif parts.path == SSO_PATH:
            page = (b'<html><body><form method="post"><input name="j_username"><input name="j_password" '
                    b'type="password"><button name="_eventId_proceed">Log in</button></form></body></html>')
            self.send(200, page, "text/html; charset=utf-8")
        elif parts.path == f"/{duke.client}/ios/token":
            with duke.lock:
                duke.token_page_visits += 1
            self.send(200, b"<html><body>Signed in. You may close this window.</body></html>", "text/html")
        elif parts.path == API_PATH:
            self.api()
        else:
            self.violation(f"unexpected request GET {parts.path}")
            self.send_json(404, {"error": "not found"})

    def do_POST(self) -> None:  # noqa: N802
        duke = self.duke
        parts = urllib.parse.urlsplit(self.path)
        body = self.read_body()
        if parts.path == SSO_PATH:
            form = dict(urllib.parse.parse_qsl(body.decode("utf-8", "replace")))
            netid = form.get("j_username", "")
            user = USERS.get(netid)
            if user is None or not hmac.compare_digest(form.get("j_password", ""), user["password"]):
                return self.send(200, b"<html><body>The password you entered was incorrect.</body></html>", "text/html")
            return self.send(302, headers={"Location": duke.token_location(netid)})
        endpoint = {f"/{duke.client}/ios/refresh": "refresh", f"/{duke.client}/ios/revoke": "revoke"}.get(parts.path)
        if endpoint is None:
            self.violation(f"unexpected request POST {parts.path}")
            return self.send_json(404, {"error": "not found"})
        if body:
            self.violation(f"{endpoint}: the request has a body (Duke's {endpoint} takes none)")
        if parts.query:
            self.violation(f"{endpoint}: the request has a query string (the tokens go in headers)")
        access = self.headers.get("X-Access-Token")
        session = self.headers.get("X-Session-Token")
        missing = [name for name, value in (("X-Access-Token", access), ("X-Session-Token", session)) if not value]
        if self.failing():
            return
        if missing:
            self.violation(f"{endpoint}: missing header {', '.join(missing)}")
            return self.send_json(400, {"error": "missing token header"})
        status, payload = duke.refresh(access, session) if endpoint == "refresh" else duke.revoke(access, session)
        self.send_json(status, payload)

    def api(self) -> None:
        duke = self.duke
        if self.headers.get("X-Session-Token") is not None:
            self.violation("API: a session token was sent to the API (it belongs to the authorizer only)")
        scheme, _, token = (self.headers.get("Authorization") or "").partition(" ")
        user = duke.api_user(token) if scheme == "Bearer" and token else None
        with duke.lock:
            duke.api_calls += 1
            if user is None:
                duke.api_refusals += 1
        if user is None:
            return self.send_json(401, {"error": "invalid or expired token"})
        self.send_json(200, user)
