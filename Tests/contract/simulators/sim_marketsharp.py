"""A MarketSharp simulator for the marketsharp plugin's scenario tests (Python standard library only).

No public documentation of MarketSharp's mobile OAuth exists: this server is the model the
plugin's README documents as assumptions, built from the requirements it quotes and the shape of
MarketSharp's REST API (restapi.marketsharpm.com: ``POST /token`` answering a Bearer token, data
under ``/companies/{companyId}/``).

Endpoints (one public client, PKCE S256 required, no client secret):

* ``GET /oauth/authorize`` — ``response_type=code``, ``client_id``, ``redirect_uri`` (the registered
  one, or ``http://127.0.0.1:<port>/callback`` for the browser flow, RFC 8252 §7.3), ``scope``
  (must include ``api``), ``state``, ``code_challenge`` + ``code_challenge_method=S256``. The user is
  whoever the simulated login page signs in (``browse(url, user=…)`` sends ``X-Sim-User``). Answers
  302 to the redirect URI with ``code`` and ``state``; with ``license_check="authorize"`` a user
  refused by the named-license checks is sent back with ``error`` / ``error_description`` instead.
* ``POST /token`` (form):
  - ``authorization_code``: single-use code (10 minutes), same ``redirect_uri``, PKCE verified.
    Named-license checks (``license_check="token"``, the default): organisation not on named
    licenses → 400 ``named_licenses_required``; user without a license → 400 ``no_license_assigned``
    (``error_description`` = the seed's message).
  - ``refresh_token``: rotation — every refresh returns a NEW refresh token and the presented one
    is used up. Presenting a used one again is reuse: the whole grant (every token of the sign-in)
    is revoked, 400 ``invalid_grant``. Expired (396 days) / revoked / unknown → 400 ``invalid_grant``.
    Licenses are not checked here unless ``license_check_on_refresh`` (the requirements: "Users that have a
    license revoked, will stay logged in, but will not be able to receive any new data").
  - Answer: ``access_token``, ``token_type: "bearer"``, ``expires_in`` 31 536 000 (365 days),
    ``refresh_token``, ``refresh_token_expires_in`` 34 214 400 (396 days), ``scope``, ``userName``,
    ``userId``, ``companyId``, ``email``.
* ``POST /oauth/revoke`` (RFC 7009, form ``token``, ``token_type_hint``, ``client_id``): 200 whatever
  the token; a refresh token ends its grant, an access token ends itself.
* ``GET /companies/{companyId}/users/current`` and ``GET /companies/{companyId}/appointments``:
  ``Authorization: Bearer``. Unknown, expired or revoked token → 401
  ``{"Message":"Authorization has been denied for this request."}`` (ASP.NET Web API's text) with
  ``WWW-Authenticate: Bearer``. Organisation off named licenses → 403
  ``{"errorCode":"OrganizationNotOnNamedLicenses","message":…}``; user without a license → 403
  ``{"errorCode":"NoLicenseAssigned","message":…}``.

Lifetimes run on the simulator's own clock (``advance(seconds)``, called together with the host's
``$/test/advanceClock``). Admin actions: ``remove_license``, ``assign_license``,
``set_named_licenses``, ``expire_access_tokens``. Everything the client sends is checked; problems
are recorded in ``violations`` (tests assert it stays empty). Every code and token handed out is
registered with the suite's leak scan.
"""

from __future__ import annotations

import json
import re
import secrets
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from typing import Any

from authbridge_testkit import leak_scan
from . import sim_http

CLIENT_ID = "authbridge-marketsharp"
DAY = 86_400
ACCESS_LIFETIME = 365 * DAY
REFRESH_LIFETIME = 396 * DAY
CODE_LIFETIME = 600

MESSAGE_NO_LICENSE = ("You do not have a license assigned. Please contact your system administrator "
                      "to have a license assigned to you.")
MESSAGE_NOT_NAMED = ("We're sorry, this application does not support your current version of MarketSharp. "
                     "Please have your account's System Admin contact your MarketSharp Account Representative.")

UNAUTHORIZED = {"Message": "Authorization has been denied for this request."}
PKCE_VERIFIER = re.compile(r"^[A-Za-z0-9\-._~]{43,128}$")
PKCE_CHALLENGE = re.compile(r"^[A-Za-z0-9\-_]{43}$")
LOOPBACK_REDIRECT = re.compile(r"^http://127\.0\.0\.1:\d{1,5}/callback$")


@dataclass
class Company:
    id: str
    name: str
    named_licenses: bool = True


@dataclass
class User:
    login: str
    id: str
    company: str
    name: str
    email: str
    licensed: bool = True


@dataclass
class Grant:
    """One sign-in: every token it produced dies with it."""
    user: str
    revoked: bool = False
    access: list[str] = field(default_factory=list)
    refresh: list[str] = field(default_factory=list)   # in issue order


@dataclass
class AccessToken:
    grant: int
    serial: int
    expires_at: float
    revoked: bool = False


@dataclass
class RefreshToken:
    grant: int
    serial: int
    expires_at: float
    used: bool = False
    revoked: bool = False


class MarketSharpSimulator(sim_http.Simulator):
    """The server and its state. `start()` binds 127.0.0.1 on an ephemeral port."""

    def __init__(self, license_check: str = "token", license_check_on_refresh: bool = False,
                 client_id: str = CLIENT_ID) -> None:
        assert license_check in ("token", "authorize")
        self.license_check = license_check
        self.license_check_on_refresh = license_check_on_refresh
        self.client_id = client_id
        self.lock = threading.Lock()
        self.offset = 0.0                                     # the simulator's clock shift, seconds
        self.companies = {
            "4711": Company("4711", "Sharp Windows Ltd", named_licenses=True),
            "5200": Company("5200", "Legacy Siding Co", named_licenses=False),
        }
        self.users = {
            "alice": User("alice", "101", "4711", "Alice Example", "alice@sharpwindows.example"),
            "bob": User("bob", "102", "4711", "Bob Example", "bob@sharpwindows.example", licensed=False),
            "carol": User("carol", "201", "5200", "Carol Example", "carol@legacysiding.example"),
        }
        self.codes: dict[str, dict[str, Any]] = {}
        self.grants: dict[int, Grant] = {}
        self.access_tokens: dict[str, AccessToken] = {}
        self.refresh_tokens: dict[str, RefreshToken] = {}
        self.handed_out: set[str] = set()
        self.violations: list[str] = []
        self.serial = 0
        # Counters and logs (read with snapshot()).
        self.sign_ins = 0
        self.refusals: list[str] = []            # OAuth error codes of refused sign-ins
        self.refreshes = 0                       # successful rotations
        self.rejected_refreshes: list[str] = []  # why each refused refresh was refused
        self.reuse_detected = 0
        self.revocations: list[tuple[str, bool]] = []   # (token_type_hint, whether it ended something)
        self.api_calls: list[tuple[str, int, int | None]] = []   # (path, status, access-token serial)
        self.base = ""
        self.redirect_uri = ""

    # ── Lifecycle ─────────────────────────────────────────────────────────

    def start(self) -> "MarketSharpSimulator":
        self.base = self.serve(type("Handler", (_Handler,), {"sim": self}), name="marketsharp-sim").base
        self.redirect_uri = f"{self.base}/oauth/mobile-callback"
        leak_scan.register(self._secrets)
        return self

    def _secrets(self) -> list[str]:
        with self.lock:
            return list(self.handed_out)

    @property
    def authorize_prefix(self) -> str:
        return f"{self.base}/oauth/authorize?"

    def settings(self, **extra: Any) -> dict[str, Any]:
        """The marketsharp plugin settings of a profile using this simulator."""
        return {"baseUrl": self.base, "clientId": self.client_id, "redirectUri": self.redirect_uri, **extra}

    # ── The user's part ─────────────────────────────────────────────────────

    def browse(self, url: str, user: str = "alice") -> str:
        """The browser: open the authorization URL, sign in as `user`, return the redirect (not followed)."""
        return sim_http.redirect_location(url, {"X-Sim-User": user})

    # ── Clock and admin actions ─────────────────────────────────────────────

    def now(self) -> float:
        return time.time() + self.offset

    def advance(self, seconds: float) -> None:
        with self.lock:
            self.offset += seconds

    def remove_license(self, login: str) -> None:
        with self.lock:
            self.users[login].licensed = False

    def assign_license(self, login: str) -> None:
        with self.lock:
            self.users[login].licensed = True

    def set_named_licenses(self, company: str, named: bool) -> None:
        with self.lock:
            self.companies[company].named_licenses = named

    def expire_access_tokens(self, login: str | None = None) -> int:
        """Ends the access tokens (of `login`, or everyone's) now, as the server's own expiry would."""
        count = 0
        with self.lock:
            now = self.now()
            for token in self.access_tokens.values():
                if login is None or self.grants[token.grant].user == login:
                    if token.expires_at > now:
                        token.expires_at = now
                        count += 1
        return count

    # ── What tests read ─────────────────────────────────────────────────────

    def snapshot(self) -> dict[str, Any]:
        with self.lock:
            return {
                "sign_ins": self.sign_ins,
                "refusals": list(self.refusals),
                "refreshes": self.refreshes,
                "rejected_refreshes": list(self.rejected_refreshes),
                "reuse_detected": self.reuse_detected,
                "revocations": list(self.revocations),
                "api_calls": list(self.api_calls),
                "grants": len(self.grants),
                "revoked_grants": sum(1 for g in self.grants.values() if g.revoked),
            }

    def refresh_tokens_of(self, login: str) -> list[str]:
        """Every refresh token issued to `login`, oldest first (for tests that replay one)."""
        with self.lock:
            return [t for g in self.grants.values() if g.user == login for t in g.refresh]

    def refresh_token_state(self, token: str) -> str:
        with self.lock:
            entry = self.refresh_tokens.get(token)
            if entry is None:
                return "unknown"
            if entry.revoked or self.grants[entry.grant].revoked:
                return "revoked"
            if entry.used:
                return "used"
            return "expired" if entry.expires_at <= self.now() else "active"

    def access_token_valid(self, token: str) -> bool:
        with self.lock:
            return self._access_entry(token) is not None

    def present_refresh_token(self, token: str) -> tuple[int, dict[str, Any]]:
        """POSTs a refresh grant as a client would (a test replaying an old token)."""
        body = urllib.parse.urlencode({"grant_type": "refresh_token", "refresh_token": token,
                                       "client_id": self.client_id})
        return self._post("/token", body)

    def call_api(self, access_token: str, path: str) -> int:
        status, _, _ = sim_http.request(self.base + path, headers={"Authorization": f"Bearer {access_token}",
                                                                   "Accept": "application/json"})
        return status

    def _post(self, path: str, body: str) -> tuple[int, dict[str, Any]]:
        status, _, raw = sim_http.request(self.base + path, "POST", body, {
            "Content-Type": "application/x-www-form-urlencoded", "Accept": "application/json"})
        return status, json.loads(raw) if raw else {}

    # ── Server logic (called by the handler) ────────────────────────────────

    def violation(self, text: str) -> None:
        with self.lock:
            self.violations.append(text)

    def _license_problem(self, user: User) -> tuple[str, str, str] | None:
        """(OAuth error, API errorCode, message) of a user refused by the named-license checks."""
        if not self.companies[user.company].named_licenses:
            return "named_licenses_required", "OrganizationNotOnNamedLicenses", MESSAGE_NOT_NAMED
        if not user.licensed:
            return "no_license_assigned", "NoLicenseAssigned", MESSAGE_NO_LICENSE
        return None

    def license_problem(self, login: str) -> tuple[str, str, str] | None:
        with self.lock:
            return self._license_problem(self.users[login])

    def new_code(self, login: str, params: dict[str, str]) -> str:
        code = "msc-" + secrets.token_urlsafe(24)
        with self.lock:
            self.handed_out.add(code)
            self.codes[code] = {"user": login, "redirect_uri": params["redirect_uri"],
                                "challenge": params["code_challenge"], "scope": params["scope"],
                                "expires_at": self.now() + CODE_LIFETIME}
        return code

    def _issue(self, grant_id: int, scope: str) -> dict[str, Any]:
        grant = self.grants[grant_id]
        user = self.users[grant.user]
        now = self.now()
        access, refresh = "msa-" + secrets.token_urlsafe(32), "msr-" + secrets.token_urlsafe(32)
        self.serial += 1
        self.access_tokens[access] = AccessToken(grant_id, self.serial, now + ACCESS_LIFETIME)
        self.refresh_tokens[refresh] = RefreshToken(grant_id, self.serial, now + REFRESH_LIFETIME)
        grant.access.append(access)
        grant.refresh.append(refresh)
        self.handed_out.update((access, refresh))
        return {"access_token": access, "token_type": "bearer", "expires_in": ACCESS_LIFETIME,
                "refresh_token": refresh, "refresh_token_expires_in": REFRESH_LIFETIME, "scope": scope,
                "userName": user.name, "userId": user.id, "companyId": user.company, "email": user.email}

    def exchange_code(self, form: dict[str, str]) -> tuple[int, dict[str, Any]]:
        with self.lock:
            entry = self.codes.pop(form.get("code", ""), None)   # single use
            if entry is None or entry["expires_at"] <= self.now():
                return 400, {"error": "invalid_grant", "error_description": "unknown, used or expired authorization code"}
            if form.get("redirect_uri") != entry["redirect_uri"]:
                self.violations.append("token: redirect_uri differs from the authorization request")
                return 400, {"error": "invalid_grant", "error_description": "redirect_uri mismatch"}
            verifier = form.get("code_verifier", "")
            if not PKCE_VERIFIER.match(verifier) or sim_http.pkce_s256(verifier) != entry["challenge"]:
                self.violations.append("token: PKCE code_verifier missing or wrong")
                return 400, {"error": "invalid_grant", "error_description": "PKCE verification failed"}
            user = self.users[entry["user"]]
            if self.license_check == "token":
                problem = self._license_problem(user)
                if problem is not None:
                    self.refusals.append(problem[0])
                    return 400, {"error": problem[0], "error_description": problem[2]}
            grant_id = len(self.grants) + 1
            self.grants[grant_id] = Grant(user.login)
            self.sign_ins += 1
            return 200, self._issue(grant_id, entry["scope"])

    def refresh(self, form: dict[str, str]) -> tuple[int, dict[str, Any]]:
        token = form.get("refresh_token", "")
        with self.lock:
            entry = self.refresh_tokens.get(token)
            if entry is None:
                self.rejected_refreshes.append("unknown")
                return 400, {"error": "invalid_grant", "error_description": "unknown refresh token"}
            grant = self.grants[entry.grant]
            if grant.revoked or entry.revoked:
                self.rejected_refreshes.append("revoked")
                return 400, {"error": "invalid_grant", "error_description": "the refresh token was revoked"}
            if entry.used:
                # Rotation with reuse detection: a spent refresh token ends the whole grant.
                self._revoke_grant(entry.grant)
                self.reuse_detected += 1
                self.rejected_refreshes.append("reused")
                return 400, {"error": "invalid_grant", "error_description": "refresh token reuse detected; the grant is revoked"}
            if entry.expires_at <= self.now():
                self.rejected_refreshes.append("expired")
                return 400, {"error": "invalid_grant", "error_description": "the refresh token has expired"}
            if self.license_check_on_refresh:
                problem = self._license_problem(self.users[grant.user])
                if problem is not None:
                    self.rejected_refreshes.append(problem[0])
                    return 400, {"error": problem[0], "error_description": problem[2]}
            entry.used = True
            self.refreshes += 1
            return 200, self._issue(entry.grant, form.get("scope", "api"))

    def _revoke_grant(self, grant_id: int) -> None:
        grant = self.grants[grant_id]
        grant.revoked = True
        for token in grant.access:
            self.access_tokens[token].revoked = True
        for token in grant.refresh:
            self.refresh_tokens[token].revoked = True

    def revoke(self, token: str, hint: str) -> None:
        with self.lock:
            ended = False
            if token in self.refresh_tokens:
                entry = self.refresh_tokens[token]
                ended = not (entry.revoked or self.grants[entry.grant].revoked)
                self._revoke_grant(entry.grant)   # RFC 7009 §2.1: the grant ends with its refresh token
            elif token in self.access_tokens:
                entry = self.access_tokens[token]
                ended = not entry.revoked
                entry.revoked = True
            self.revocations.append((hint, ended))

    def _access_entry(self, token: str) -> AccessToken | None:
        entry = self.access_tokens.get(token)
        if entry is None or entry.revoked or self.grants[entry.grant].revoked or entry.expires_at <= self.now():
            return None
        return entry

    def api(self, token: str, company: str, resource: str) -> tuple[int, dict[str, Any], int | None]:
        with self.lock:
            entry = self._access_entry(token)
            if entry is None:
                known = self.access_tokens.get(token)
                return 401, dict(UNAUTHORIZED), known.serial if known else None
            user = self.users[self.grants[entry.grant].user]
            if company != user.company:
                self.violations.append(f"api: a request for company {company!r} with a token of company {user.company!r}")
                return 403, {"errorCode": "Forbidden", "message": "This user does not belong to that company."}, entry.serial
            problem = self._license_problem(user)
            if problem is not None:
                return 403, {"errorCode": problem[1], "message": problem[2]}, entry.serial
            if resource == "users/current":
                return 200, {"id": user.id, "companyId": user.company, "name": user.name, "email": user.email}, entry.serial
            if resource == "appointments":
                return 200, {"items": [{"id": "A-1", "subject": "Window estimate", "start": "2030-01-02T09:00:00Z"}]}, entry.serial
            return 404, {"Message": "No HTTP resource was found that matches the request URI."}, entry.serial


class _Handler(sim_http.Handler):
    server_version = "MarketSharpSim/1.0"
    json_type = "application/json; charset=utf-8"
    json_headers = {"Cache-Control": "no-store", "Pragma": "no-cache"}
    sim: MarketSharpSimulator  # set on the subclass made by start()

    def violation(self, text: str) -> None:
        self.sim.violation(text)

    # ── Routing ───────────────────────────────────────────────────────────

    def do_GET(self) -> None:  # noqa: N802 - http.server naming
        parts = urllib.parse.urlsplit(self.path)
        self.read_body()
        if parts.path == "/oauth/authorize":
            return self.authorize(parts.query)
        match = re.fullmatch(r"/companies/([^/]+)/(.+)", parts.path)
        if match:
            return self.data(parts, match.group(1), match.group(2))
        if parts.path == "/oauth/mobile-callback":
            return self.send(200, b"Signed in.\n", "text/plain; charset=utf-8")
        self.send_json(404, {"Message": "No HTTP resource was found that matches the request URI."})

    def do_POST(self) -> None:  # noqa: N802
        path = urllib.parse.urlsplit(self.path).path
        form = self.public_client_form(path)
        if path not in ("/token", "/oauth/revoke"):
            return self.send_json(404, {"Message": "No HTTP resource was found that matches the request URI."})
        if form is None:
            return self.send_json(400, {"error": "invalid_request", "error_description": "expected one form body"})
        if path == "/oauth/revoke":
            return self.revoke(form)
        self.token(form)

    def public_client_form(self, path: str) -> dict[str, str] | None:
        """The form of a public client's request: no secret, no Authorization, nothing in the URL."""
        body = self.read_body()
        if urllib.parse.urlsplit(self.path).query:
            self.violation(f"{path}: parameters in the query string (secrets belong in the body)")
        form = self.read_form(body, path)
        if form is None:
            return None
        if self.headers.get("Authorization"):
            self.violation(f"{path}: an Authorization header on a public client's request")
        if "client_secret" in form:
            self.violation(f"{path}: a client_secret from a public client")
        return form

    # ── Endpoints ─────────────────────────────────────────────────────────

    def authorize(self, query: str) -> None:
        sim = self.sim
        pairs = urllib.parse.parse_qsl(query, keep_blank_values=True)
        params = dict(pairs)
        if len(params) != len(pairs):
            sim.violation("authorize: a parameter repeated")
        redirect = params.get("redirect_uri", "")
        # Never redirect to an unverified redirect_uri (RFC 6749 §4.1.2.1).
        if params.get("client_id") != sim.client_id or not (redirect == sim.redirect_uri or LOOPBACK_REDIRECT.match(redirect)):
            sim.violation(f"authorize: unknown client_id or redirect_uri {redirect!r}")
            return self.send_json(400, {"error": "invalid_request", "error_description": "unknown client or redirect_uri"})
        allowed = {"response_type", "client_id", "redirect_uri", "scope", "state", "code_challenge",
                   "code_challenge_method", "login_hint"}
        problems = [f"unexpected parameter {name!r}" for name in params if name not in allowed]
        if params.get("response_type") != "code":
            problems.append("response_type must be code")
        if not params.get("state"):
            problems.append("state is required")
        if not PKCE_CHALLENGE.match(params.get("code_challenge", "")):
            problems.append("code_challenge (PKCE S256) is required")
        if params.get("code_challenge_method") != "S256":
            problems.append("code_challenge_method must be S256")
        if "api" not in params.get("scope", "").split(" "):
            problems.append("scope must include api")
        if problems:
            for problem in problems:
                sim.violation("authorize: " + problem)
            return self.redirect(redirect, {"error": "invalid_request", "error_description": "; ".join(problems),
                                            "state": params.get("state", "")})
        login = self.headers.get("X-Sim-User", "")
        if login not in sim.users:
            return self.redirect(redirect, {"error": "access_denied", "state": params["state"]})
        if sim.license_check == "authorize":
            problem = sim.license_problem(login)
            if problem is not None:
                with sim.lock:
                    sim.refusals.append(problem[0])
                return self.redirect(redirect, {"error": problem[0], "error_description": problem[2],
                                                "state": params["state"]})
        self.redirect(redirect, {"code": sim.new_code(login, params), "state": params["state"]})

    def token(self, form: dict[str, str]) -> None:
        sim = self.sim
        if "json" not in (self.headers.get("Accept") or ""):
            sim.violation("token: no Accept: application/json")
        if form.get("client_id") != sim.client_id:
            sim.violation(f"token: client_id {form.get('client_id')!r}")
            return self.send_json(401, {"error": "invalid_client"})
        grant = form.get("grant_type")
        if grant == "authorization_code":
            expected = {"grant_type", "code", "redirect_uri", "code_verifier", "client_id"}
        elif grant == "refresh_token":
            expected = {"grant_type", "refresh_token", "client_id", "scope"}
        else:
            sim.violation(f"token: grant_type {grant!r}")
            return self.send_json(400, {"error": "unsupported_grant_type"})
        for name in form:
            if name not in expected:
                sim.violation(f"token: unexpected parameter {name!r} in a {grant} request")
        missing = [name for name in expected - {"scope"} if not form.get(name)]
        if missing:
            sim.violation(f"token: {grant} request without {', '.join(sorted(missing))}")
            return self.send_json(400, {"error": "invalid_request", "error_description": "missing " + ", ".join(sorted(missing))})
        status, payload = sim.exchange_code(form) if grant == "authorization_code" else sim.refresh(form)
        self.send_json(status, payload)

    def revoke(self, form: dict[str, str]) -> None:
        sim = self.sim
        if form.get("client_id") != sim.client_id:
            sim.violation(f"revoke: client_id {form.get('client_id')!r}")
        hint = form.get("token_type_hint", "")
        if hint not in ("access_token", "refresh_token"):
            sim.violation(f"revoke: token_type_hint {hint!r}")
        if not form.get("token"):
            sim.violation("revoke: no token")
            return self.send_json(400, {"error": "invalid_request", "error_description": "token is required"})
        sim.revoke(form["token"], hint)
        self.send(200)   # RFC 7009 §2.2: 200 whether or not the token was active

    def data(self, parts: urllib.parse.SplitResult, company: str, resource: str) -> None:
        sim = self.sim
        if "access_token" in urllib.parse.parse_qs(parts.query):
            sim.violation("api: an access token in the query string")
        scheme, _, token = (self.headers.get("Authorization") or "").partition(" ")
        if scheme != "Bearer" or not token:
            sim.violation(f"api: Authorization scheme {scheme!r} (expected Bearer)")
        if self.headers.get("Cookie"):
            sim.violation("api: cookies sent to the API")
        status, payload, serial = sim.api(token, company, resource)
        with sim.lock:
            sim.api_calls.append((parts.path, status, serial))
        headers = {"WWW-Authenticate": 'Bearer error="invalid_token"'} if status == 401 else None
        self.send_json(status, payload, headers)
