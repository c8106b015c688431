"""A Tableau Server simulator for the `tableau` plugin's scenario tests (Python standard library only).

It reproduces what plugins/tableau/README.md ("What the server does") says the server sends and
expects, and CHECKS what the client sends: every departure is recorded in `violations` (the tests
assert there are none), and answered as the server would.

Endpoints (on 127.0.0.1, or another loopback address, port 0):

* ``POST /vizportal/api/web/v1/login`` — the web sign-in a frontend's web view performs (JSON
  ``{"method":"login","params":{"username","password"}}``); sets the ``workgroup_session_id``
  cookie. ``web_sign_in(user)`` plays the web view and returns that id.
* ``POST /oauth2/v1/token`` (form, ``Accept: application/json``):
  - ``grant_type=session`` with ``client_id``, ``session_id``, ``device_id``, ``device_name`` (each
    required; ``client_id`` must equal ``device_id``; no secret, code or redirect URI). One valid
    token set per device id: a new session grant for the device replaces its old set.
  - ``grant_type=refresh_token`` with ``refresh_token``, ``client_id``, ``device_id``,
    ``site_namespace`` (each required, the site may be ""). Rotation: a new access, refresh and
    XSRF token; the old refresh token is dead.
  - Answers ``access_token``, ``refresh_token``, ``xsrf_token`` (no ``expires_in``). Refusals carry
    a top-level ``error``: a string (``invalid_grant``, ``invalid_request``…) with
    ``error_description``, or an object ``{"code","message"}`` (connected clients disabled).
* ``POST /oauth2/v1/revoke`` (form) — ``token`` and ``token_hint`` (``access_token`` or
  ``refresh_token``); ``token_type_hint`` is a violation (Tableau's name is ``token_hint``).
  Revoking the refresh token ends the device's grant; the access token ends its session. 200.
* ``POST /vizportal/api/web/v1/getSessionInfo`` — body ``{"method":"getSessionInfo","params":{}}``,
  cookie ``tableau_access_token``, header ``X-XSRF-TOKEN`` equal to the ``XSRF-TOKEN`` cookie.
  200 ``{"result":{"user":…,"site":…}}``, or ``{"result":{"errors":[…]}}`` once the session is
  over, with HTTP 401 (``session_over_status``; 200 to check that the client reads the body).
* ``POST /vizportal/api/web/v1/getViews`` — a small API page needing the same cookies and header;
  401 with ``result.errors`` when the session is over.
* ``GET /views/<workbook>/<view>`` — a page a web view loads with the cookies alone (Tableau checks
  the XSRF header on its API calls, not on page loads): 200 HTML whose script reads the
  ``XSRF-TOKEN`` cookie and calls ``getViews`` with it, as Tableau's web client does, then lists the
  views (``#status`` says ``loaded``, or ``refused <status>``); 401 "Sign in" without a live
  ``tableau_access_token`` cookie.

Server policy (on the simulator's own clock, `advance()`): a server session (access token) lasts
`session_lifetime_ms` (4 h); a refresh token expires after 14 days unused and one year after the
device's sign-in. Admin actions: `revoke_device(name)` (as an administrator sees devices: by
name), `disable_connected_clients()`, `expire_sessions()`. `outage(status)` makes chosen endpoints
answer 503 (with an ``error`` key in the body, as a proxy might) until the block ends.
`stall(paths)` makes chosen endpoints take requests and never answer (a server that hangs) until
the block ends, counting how many wait at once.
`omit_xsrf_on_refresh` models a renewal answered without ``xsrf_token`` (the server keeps the
device's XSRF token, so the client must keep using the one it has).

Everything it hands out (session ids, access, refresh and XSRF tokens) is registered with the
suite's leak scan.
"""

from __future__ import annotations

import contextlib
import copy
import json
import secrets
import threading
import time
import urllib.parse
import uuid
from dataclasses import dataclass, field
from http.cookies import SimpleCookie
from typing import Any, Iterator

from authbridge_testkit import leak_scan
from . import sim_http

DAY_MS = 86_400_000
TOKEN_PATH = "/oauth2/v1/token"
REVOKE_PATH = "/oauth2/v1/revoke"
SESSION_INFO_PATH = "/vizportal/api/web/v1/getSessionInfo"
VIEWS_PATH = "/vizportal/api/web/v1/getViews"
VIEW_PAGE = "/views/Superstore/Overview"
LOGIN_PATH = "/vizportal/api/web/v1/login"

DEFAULT_USERS = {
    "alice": {"password": "alice-pw", "displayName": "Alice Analyst", "email": "alice@example.com"},
    "bob": {"password": "bob-pw", "displayName": "Bob Builder", "email": "bob@example.com"},
}
DEFAULT_SITES = {"": "Default", "finance": "Finance"}


@dataclass
class WebSession:
    user: str
    site: str
    created: int


@dataclass
class TokenSet:
    """The one valid token set of a device."""
    device_id: str
    device_name: str
    user: str
    site: str
    signed_in_at: int                 # the session grant: the refresh token's absolute lifetime starts here
    access: str | None
    xsrf: str
    access_issued: int
    refresh: str
    refresh_last_used: int            # issued or last used: the 14-day idle rule counts from here


@dataclass
class Counters:
    session_grants: int = 0
    refreshes: int = 0
    rejected: int = 0                 # token requests answered with an error
    session_checks: int = 0           # getSessionInfo calls
    api_calls: int = 0                # getViews calls
    page_loads: list[int] = field(default_factory=list)         # status of each /views page load
    outage_hits: int = 0
    revocations: list[str] = field(default_factory=list)        # token_hint of each revoke call
    refresh_forms: list[dict[str, str]] = field(default_factory=list)
    grant_forms: list[dict[str, str]] = field(default_factory=list)


class Stall:
    """Requests held without an answer (TableauServer.stall): how many arrived, how many waited at
    the same time at most."""

    def __init__(self, paths: frozenset[str]) -> None:
        self.paths = paths
        self.arrived = 0
        self.waiting = 0
        self.most_at_once = 0
        self._cond = threading.Condition()
        self._released = False

    def hold(self) -> None:
        """Called by a request's handler thread: waits (at most a minute) until released."""
        with self._cond:
            self.arrived += 1
            self.waiting += 1
            self.most_at_once = max(self.most_at_once, self.waiting)
            self._cond.notify_all()
            self._cond.wait_for(lambda: self._released, timeout=60)
            self.waiting -= 1

    def wait_until_waiting(self, count: int, timeout: float) -> bool:
        """True once `count` requests wait at the same time (False after `timeout` seconds)."""
        with self._cond:
            return self._cond.wait_for(lambda: self.most_at_once >= count, timeout=timeout)

    def release(self) -> None:
        with self._cond:
            self._released = True
            self._cond.notify_all()


class TableauServer(sim_http.Simulator):
    """The server and its state. `start()` binds `address` (a loopback IP) on an ephemeral port."""

    def __init__(self, address: str = "127.0.0.1", session_lifetime_ms: int = 4 * 3_600_000,
                 refresh_idle_days: int = 14, refresh_absolute_days: int = 365,
                 users: dict[str, dict[str, str]] | None = None, sites: dict[str, str] | None = None) -> None:
        self.address = address
        self.session_lifetime_ms = session_lifetime_ms
        self.refresh_idle_ms = refresh_idle_days * DAY_MS
        self.refresh_absolute_ms = refresh_absolute_days * DAY_MS
        self.users = {name: {**info, "id": str(uuid.uuid4())} for name, info in (users or DEFAULT_USERS).items()}
        self.sites = {url: {"id": str(uuid.uuid4()), "name": name, "urlName": url}
                      for url, name in (sites or DEFAULT_SITES).items()}
        self.lock = threading.Lock()
        self.offset_ms = 0
        self.web_sessions: dict[str, WebSession] = {}
        self.token_sets: dict[str, TokenSet] = {}         # device id → its one valid set
        self.sessions_expired_at = 0                       # expire_sessions(): everything issued before is over
        self.connected_clients_enabled = True
        # The HTTP status of a getSessionInfo answer whose session is over (result.errors is the signal).
        self.session_over_status = 401
        self.omit_xsrf_on_refresh = False
        self.down: tuple[int, frozenset[str], bool] | None = None
        self.stalled: Stall | None = None
        self.handed_out: set[str] = set()
        self.violations: list[str] = []
        self.counters = Counters()
        self._leak_source = lambda: list(self.handed_out)
        self.base = ""

    # ── Lifecycle ─────────────────────────────────────────────────────────

    def start(self) -> "TableauServer":
        self.base = self.serve(type("Handler", (_Handler,), {"sim": self}), self.address, name=f"tableau-sim-{self.address}").base
        leak_scan.register(self._leak_source)
        return self

    @property
    def host(self) -> str:
        """The server's host name: what its cookies' domain must be."""
        return self.address

    # ── Clock ─────────────────────────────────────────────────────────────

    def now(self) -> int:
        return int(time.time() * 1000) + self.offset_ms

    def advance(self, milliseconds: int) -> None:
        """Moves the simulator's clock (call it with the host's `$/test/advanceClock`)."""
        with self.lock:
            self.offset_ms += milliseconds

    # ── The user's and the administrator's side ──────────────────────────

    def web_sign_in(self, user: str = "alice", password: str | None = None) -> str:
        """The frontend's web view: signs `user` in on the server's page; returns the
        `workgroup_session_id` cookie that page sets."""
        password = password if password is not None else self.users[user]["password"]
        body = json.dumps({"method": "login", "params": {"username": user, "password": password}})
        status, headers, _ = sim_http.request(self.base + LOGIN_PATH, "POST", body, {"Content-Type": "application/json"})
        cookies = SimpleCookie(headers.get("set-cookie", ""))
        assert status == 200 and "workgroup_session_id" in cookies, f"web sign-in answered {status}"
        return cookies["workgroup_session_id"].value

    def devices(self) -> list[dict[str, str]]:
        """The connected devices as an administrator sees them."""
        with self.lock:
            return [{"id": s.device_id, "name": s.device_name, "user": s.user, "site": s.site}
                    for s in self.token_sets.values()]

    def revoke_device(self, device_name: str) -> int:
        """An administrator revokes a user's device (picked by its name); returns how many."""
        with self.lock:
            doomed = [d for d, s in self.token_sets.items() if s.device_name == device_name]
            for device_id in doomed:
                del self.token_sets[device_id]
            return len(doomed)

    def disable_connected_clients(self, disabled: bool = True) -> None:
        with self.lock:
            self.connected_clients_enabled = not disabled

    def expire_sessions(self) -> None:
        """Settings > Session management: every server session (web and access token) ends."""
        with self.lock:
            self.sessions_expired_at = self.now() + 1

    @contextlib.contextmanager
    def outage(self, status: int = 503, paths: tuple[str, ...] = (TOKEN_PATH, REVOKE_PATH, SESSION_INFO_PATH, VIEWS_PATH),
               bare: bool = False) -> Iterator[None]:
        """`paths` answer `status` until the block ends: with an `error` key in a JSON body, as a proxy
        might, or with no body at all (`bare`), as some servers refuse a request."""
        with self.lock:
            self.down = (status, frozenset(paths), bare)
        try:
            yield
        finally:
            with self.lock:
                self.down = None

    @contextlib.contextmanager
    def stall(self, paths: tuple[str, ...] = (REVOKE_PATH,)) -> Iterator["Stall"]:
        """Requests to `paths` are read and never answered until the block ends (then their
        connections are closed): an unresponsive server."""
        stall = Stall(frozenset(paths))
        with self.lock:
            self.stalled = stall
        try:
            yield stall
        finally:
            with self.lock:
                self.stalled = None
            stall.release()

    def token_set(self, device_id: str) -> TokenSet | None:
        with self.lock:
            return self.token_sets.get(device_id)

    def access_valid(self, access: str) -> bool:
        with self.lock:
            return self._set_for_access(access) is not None

    def snapshot(self) -> Counters:
        with self.lock:
            return copy.deepcopy(self.counters)

    # ── Server logic (called with self.lock held) ─────────────────────────

    def _violation(self, text: str) -> None:
        self.violations.append(text)

    def _new(self, prefix: str) -> str:
        value = prefix + secrets.token_urlsafe(24)
        self.handed_out.add(value)
        return value

    def _session_live(self, issued: int) -> bool:
        now = self.now()
        return issued >= self.sessions_expired_at and now - issued < self.session_lifetime_ms

    def _set_for_access(self, access: str) -> TokenSet | None:
        for token_set in self.token_sets.values():
            if token_set.access is not None and secrets.compare_digest(token_set.access, access):
                return token_set if self._session_live(token_set.access_issued) else None
        return None

    def _tokens(self, token_set: TokenSet) -> dict[str, str]:
        return {"access_token": token_set.access or "", "refresh_token": token_set.refresh, "xsrf_token": token_set.xsrf}

    def login(self, params: dict[str, Any]) -> tuple[int, dict[str, Any], str | None]:
        user = self.users.get(str(params.get("username")))
        if user is None or params.get("password") != user["password"]:
            return 401, {"result": {"errors": [{"code": 16, "message": "Invalid username or password."}]}}, None
        session_id = self._new("wg-")
        self.web_sessions[session_id] = WebSession(str(params["username"]), "", self.now())
        return 200, {"result": {"user": {"name": params["username"]}}}, session_id

    def token(self, form: dict[str, str]) -> tuple[int, dict[str, Any]]:
        grant = form.get("grant_type")
        if grant == "session":
            status, answer = self._session_grant(form)
        elif grant == "refresh_token":
            status, answer = self._refresh_grant(form)
        else:
            self._violation(f"token request with grant_type {grant!r}")
            status, answer = 400, {"error": "unsupported_grant_type", "error_description": "grant_type must be session or refresh_token"}
        if "error" in answer:
            self.counters.rejected += 1
        return status, answer

    def _refusal(self, form: dict[str, str], required: tuple[str, ...], grant: str) -> tuple[int, dict[str, Any]] | None:
        """The answer to a grant refused before its tokens are looked at (parameters missing or
        not Tableau's, connected clients disabled), or None."""
        problem = self._param_problem(form, required, grant)
        if problem:
            return 400, {"error": "invalid_request", "error_description": problem}
        if not self.connected_clients_enabled:
            return 403, {"error": {"code": "connected_clients_disabled", "message": "Connected clients are disabled on this server."}}
        return None

    def _param_problem(self, form: dict[str, str], required: tuple[str, ...], grant: str) -> str | None:
        missing = [name for name in required if name not in form or (name != "site_namespace" and not form[name])]
        for name in ("client_secret", "code", "code_verifier", "redirect_uri"):
            if name in form:
                self._violation(f"{grant} grant sent {name!r} (Tableau's connected client has none)")
        if missing:
            self._violation(f"{grant} grant without {', '.join(missing)}")
            return f"missing {', '.join(missing)}"
        if form["client_id"] != form["device_id"]:
            self._violation(f"{grant} grant: client_id differs from device_id")
            return "client_id must be the device id"
        return None

    def _session_grant(self, form: dict[str, str]) -> tuple[int, dict[str, Any]]:
        self.counters.grant_forms.append({k: v for k, v in form.items() if k != "session_id"})
        refusal = self._refusal(form, ("client_id", "session_id", "device_id", "device_name"), "session")
        if refusal:
            return refusal
        session = self.web_sessions.get(form["session_id"])
        if session is None or not self._session_live(session.created):
            return 400, {"error": "invalid_grant", "error_description": "The session is not valid or has expired."}
        now = self.now()
        # One valid token set per device id: this grant replaces the device's old set.
        token_set = TokenSet(device_id=form["device_id"], device_name=form["device_name"], user=session.user,
                             site=session.site, signed_in_at=now, access=self._new("at-"), xsrf=self._new("xs-"),
                             access_issued=now, refresh=self._new("rt-"), refresh_last_used=now)
        self.token_sets[token_set.device_id] = token_set
        self.counters.session_grants += 1
        return 200, self._tokens(token_set)

    def _refresh_grant(self, form: dict[str, str]) -> tuple[int, dict[str, Any]]:
        self.counters.refresh_forms.append({k: v for k, v in form.items() if k != "refresh_token"})
        refusal = self._refusal(form, ("refresh_token", "client_id", "device_id", "site_namespace"), "refresh_token")
        if refusal:
            return refusal
        token_set = next((s for s in self.token_sets.values() if secrets.compare_digest(s.refresh, form["refresh_token"])), None)
        if token_set is None:
            return 400, {"error": "invalid_grant", "error_description": "The refresh token is not valid."}
        if token_set.device_id != form["device_id"]:
            self._violation("refresh_token grant from another device id than the token was issued to")
            return 400, {"error": "invalid_grant", "error_description": "The refresh token belongs to another device."}
        now = self.now()
        if now - token_set.refresh_last_used > self.refresh_idle_ms or now - token_set.signed_in_at > self.refresh_absolute_ms:
            del self.token_sets[token_set.device_id]
            return 400, {"error": "invalid_grant", "error_description": "The refresh token has expired."}
        site = form["site_namespace"]
        if site not in self.sites:
            return 400, {"error": "invalid_request", "error_description": "No site has that content URL."}
        token_set.site = site
        token_set.access, token_set.access_issued = self._new("at-"), now
        token_set.refresh, token_set.refresh_last_used = self._new("rt-"), now  # rotation
        self.counters.refreshes += 1
        if self.omit_xsrf_on_refresh:
            return 200, {k: v for k, v in self._tokens(token_set).items() if k != "xsrf_token"}
        token_set.xsrf = self._new("xs-")
        return 200, self._tokens(token_set)

    def revoke(self, form: dict[str, str]) -> tuple[int, dict[str, Any] | None]:
        if "token_type_hint" in form:
            self._violation("revoke sent token_type_hint (Tableau reads token_hint)")
        hint = form.get("token_hint")
        if not form.get("token") or hint not in ("access_token", "refresh_token"):
            self._violation(f"revoke without token or with token_hint {hint!r}")
            return 400, {"error": "invalid_request", "error_description": "token and token_hint are required"}
        self.counters.revocations.append(hint)
        token = form["token"]
        for device_id, token_set in list(self.token_sets.items()):
            if hint == "refresh_token" and secrets.compare_digest(token_set.refresh, token):
                del self.token_sets[device_id]                  # the device's grant ends
            elif hint == "access_token" and token_set.access is not None and secrets.compare_digest(token_set.access, token):
                token_set.access = None                         # its session ends
        return 200, None

    def authenticate(self, cookies: SimpleCookie, xsrf_header: str | None, what: str) -> TokenSet | None:
        """The vizportal check: the access-token cookie, and the XSRF header equal to its cookie."""
        access = cookies["tableau_access_token"].value if "tableau_access_token" in cookies else None
        xsrf_cookie = cookies["XSRF-TOKEN"].value if "XSRF-TOKEN" in cookies else None
        if access is None:
            self._violation(f"{what} without the tableau_access_token cookie")
            return None
        if not xsrf_header:
            self._violation(f"{what} without the X-XSRF-TOKEN header")
            return None
        if xsrf_cookie is None:
            self._violation(f"{what} without the XSRF-TOKEN cookie")
            return None
        if xsrf_cookie != xsrf_header:
            self._violation(f"{what}: X-XSRF-TOKEN differs from the XSRF-TOKEN cookie")
            return None
        token_set = self._set_for_access(access)
        if token_set is None:
            return None                                          # the session is over: not a client error
        if not secrets.compare_digest(token_set.xsrf, xsrf_header):
            self._violation(f"{what}: X-XSRF-TOKEN is not the one issued with this access token")
            return None
        return token_set

    def page_session(self, cookies: SimpleCookie) -> TokenSet | None:
        """A page load: the access-token cookie alone decides (no XSRF check on GET)."""
        if "tableau_access_token" not in cookies:
            return None
        return self._set_for_access(cookies["tableau_access_token"].value)

    def session_info(self, token_set: TokenSet) -> dict[str, Any]:
        user = self.users[token_set.user]
        return {"result": {
            "user": {"id": user["id"], "name": token_set.user, "displayName": user["displayName"], "email": user["email"]},
            "site": self.sites[token_set.site],
            "server": {"version": {"externalVersion": {"major": "2024", "minor": "2"}}},
        }}


SESSION_OVER = {"result": {"errors": [{"code": 1, "message": "The session has expired or is not valid."}]}}

SIGN_IN_PAGE = b"<!doctype html><html><head><title>Sign In</title></head><body><h1>Sign in to Tableau</h1></body></html>"

#: What Tableau's web client does with the two cookies: the page came with the access-token cookie,
#: its API calls send the XSRF-TOKEN cookie back as the X-XSRF-TOKEN header.
VIEW_PAGE_HTML = """<!doctype html><html><head><title>Overview</title></head><body>
<h1>Superstore</h1><p id="status">loading</p><ul id="views"></ul>
<script>
const xsrf = (document.cookie.match(/(?:^|; )XSRF-TOKEN=([^;]*)/) || [])[1] || "";
fetch("%s", {method: "POST", credentials: "same-origin",
             headers: {"Content-Type": "application/json", "X-XSRF-TOKEN": decodeURIComponent(xsrf)},
             body: JSON.stringify({method: "getViews", params: {}})})
  .then(response => response.json().then(body => [response.status, body]))
  .then(([status, body]) => {
    if (status !== 200) { document.getElementById("status").textContent = "refused " + status; return; }
    for (const view of body.result.views) {
      const item = document.createElement("li");
      item.textContent = view.name;
      document.getElementById("views").appendChild(item);
    }
    document.getElementById("status").textContent = "loaded";
  }, error => { document.getElementById("status").textContent = "failed " + error; });
</script></body></html>""".replace("%s", VIEWS_PATH).encode("utf-8")


class _Handler(sim_http.Handler):
    server_version = "TableauServerSimulator/1.0"
    json_type = "application/json;charset=utf-8"
    sim: TableauServer  # set on the subclass made by start()

    def violation(self, text: str) -> None:
        self.sim._violation(text)   # the routes run with sim.lock held

    def read_vizportal(self, raw: bytes, method: str) -> bool:
        if self.content_type() != "application/json":
            self.violation(f"{method} body is not JSON")
            return False
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        if body != {"method": method, "params": {}}:
            self.violation(f"{method} body is not {{\"method\":\"{method}\",\"params\":{{}}}}")
            return False
        return True

    def cookies(self) -> SimpleCookie:
        jar = SimpleCookie()
        for header in self.headers.get_all("Cookie") or []:
            try:
                jar.load(header)
            except Exception:  # noqa: BLE001 - a malformed header is the client's problem
                self.violation("a malformed Cookie header")
        return jar

    def do_GET(self) -> None:  # noqa: N802 - http.server naming
        self.read_body()
        if urllib.parse.urlsplit(self.path).path != VIEW_PAGE:
            return self.send_json(404, {"error": "not_found"})
        with self.sim.lock:
            signed_in = self.sim.page_session(self.cookies()) is not None
            self.sim.counters.page_loads.append(200 if signed_in else 401)
        page = VIEW_PAGE_HTML if signed_in else SIGN_IN_PAGE
        self.send(200 if signed_in else 401, page, "text/html; charset=utf-8", {"Cache-Control": "no-store"})

    def do_POST(self) -> None:  # noqa: N802
        sim = self.sim
        path = urllib.parse.urlsplit(self.path).path
        raw = self.read_body()
        stall = sim.stalled
        if stall is not None and path in stall.paths:
            stall.hold()                  # no answer; the connection is closed afterwards
            self.close_connection = True
            return
        with sim.lock:
            if sim.down is not None and path in sim.down[1]:
                sim.counters.outage_hits += 1
                status, _, bare = sim.down
                if bare:
                    return self.send(status)
                return self.send_json(status, {"error": "temporarily_unavailable", "error_description": "The server is busy."})
            if path == LOGIN_PATH:
                try:
                    params = json.loads(raw).get("params", {})
                except (ValueError, AttributeError):
                    params = {}
                status, answer, session_id = sim.login(params)
                cookie = {"Set-Cookie": f"workgroup_session_id={session_id}; Path=/; HttpOnly"} if session_id else None
                return self.send_json(status, answer, cookie)
            if path == TOKEN_PATH:
                if "application/json" not in (self.headers.get("Accept") or ""):
                    sim._violation("token request without Accept: application/json")
                form = self.read_form(raw, "token request")
                if form is None:
                    return self.send_json(400, {"error": "invalid_request", "error_description": "expected a form body"})
                status, answer = sim.token(form)
                return self.send_json(status, answer)
            if path == REVOKE_PATH:
                form = self.read_form(raw, "revoke")
                if form is None:
                    return self.send_json(400, {"error": "invalid_request", "error_description": "expected a form body"})
                status, answer = sim.revoke(form)
                return self.send_json(status, answer) if answer is not None else self.send(status, headers=self.json_headers)
            if path in (SESSION_INFO_PATH, VIEWS_PATH):
                method = "getSessionInfo" if path == SESSION_INFO_PATH else "getViews"
                if path == SESSION_INFO_PATH:
                    sim.counters.session_checks += 1
                else:
                    sim.counters.api_calls += 1
                if not self.read_vizportal(raw, method):
                    return self.send_json(400, {"result": {"errors": [{"code": 2, "message": "Bad request."}]}})
                token_set = sim.authenticate(self.cookies(), self.headers.get("X-XSRF-TOKEN"), method)
                if token_set is None:
                    return self.send_json(sim.session_over_status if path == SESSION_INFO_PATH else 401, SESSION_OVER)
                if path == SESSION_INFO_PATH:
                    return self.send_json(200, sim.session_info(token_set))
                views = [{"name": "Overview", "workbook": "Superstore"}, {"name": "Forecast", "workbook": "Superstore"}]
                return self.send_json(200, {"result": {"totalCount": len(views), "views": views, "site": token_set.site}})
        self.send_json(404, {"error": "not_found"})
