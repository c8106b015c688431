#!/usr/bin/env python3
"""AuthBridge end-to-end demo: a real OAuth 2.0 sign-in through the bundled `oidc` plugin.

    .venv/bin/python Examples/demo.py --host .build/debug/authbridge --plugins .build/debug/plugins [--browser]

The authorization server is django-oauth-toolkit (DOT), the one the tests use
(Tests/support/dot_server.py), so it needs the venv's Django (`make deps`). What it does:

  1. starts DOT on 127.0.0.1 with short-lived access tokens, in a temporary folder;
  2. starts `authbridge serve` with its default encrypted-file vault in a temporary data home,
     and configures a profile "demo" for the `oidc` plugin from DOT's discovery document;
  3. checks the sign-in status (not signed in);
  4. signs in with the "browser" flow: the host listens on a 127.0.0.1 port for the redirect
     (RFC 8252). A scripted user signs in as ada at DOT's login page and follows the redirect
     to that port; with --browser the host opens your browser and you sign in yourself;
  5. shows the status, where the tokens are stored, and that the vault file holds no token bytes;
  6. calls DOT's userinfo endpoint through the host (`fetch`);
  7. waits until the access token has expired, then shows the host renewing it silently;
  8. signs out (the host revokes the tokens at DOT) and checks at DOT that they are dead;
  9. shuts the host down.

Token values, authorization codes and `state` values are never printed: tokens appear only as
short SHA-256 fingerprints. Every wait is bounded. Any failure ends the demo with a message and
exit status 1.
"""

from __future__ import annotations

import argparse
import ctypes
import hashlib
import http.cookiejar
import importlib.util
import json
import os
import queue
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DOT_SERVER = REPO / "Tests" / "support" / "dot_server.py"
PROFILE = "demo"
CLIENT_ID = "authbridge-test"       # DOT's public client: code + PKCE, consent skipped
USER, PASSWORD = "ada", "lovelace-test"
DOT_START_BOUND = 120.0             # first start migrates a database; slow on a busy machine
BROWSER_WAIT_S = 300                # how long a human gets to sign in with --browser
MAX_LIFETIME_S = 60                 # the demo waits out one access-token lifetime; keep it short


class DemoError(Exception):
    """A step did not go as expected; the message says what."""


# ── Output ─────────────────────────────────────────────────────────────────

def step(number: int, title: str) -> None:
    print(f"\n[{number}] {title}", flush=True)


def say(text: str = "") -> None:
    print(f"    {text}", flush=True)


def expect(condition: bool, message: str) -> None:
    if not condition:
        raise DemoError(message)


def is_kept_configuration(path: Path) -> bool:
    """A vault file that keeps a profile's resolved configuration (discovered endpoints and the
    provider's keys, sealed like a session) rather than a session: bridge-spec, Storage."""
    return path.name.startswith(hashlib.sha256("\x1eresolved".encode()).hexdigest()[:32] + "-")


def fingerprint(token: str) -> str:
    """Enough to tell two tokens apart on screen, useless to anyone reading the screen."""
    return "sha256:" + hashlib.sha256(token.encode()).hexdigest()[:12]


def where(url: str) -> str:
    """host:port/path of a URL: the query (codes, state, PKCE values) is never shown."""
    parts = urllib.parse.urlsplit(url)
    return parts.netloc + parts.path


def query_names(url: str) -> str:
    return ", ".join(name for name, _ in urllib.parse.parse_qsl(urllib.parse.urlsplit(url).query)) or "none"


def seconds_left(expires_at_ms) -> float | None:
    return None if not isinstance(expires_at_ms, int) else expires_at_ms / 1000 - time.time()


# ── HTTP as a browser and as an API client would do it ─────────────────────

class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None  # every redirect is looked at (and narrated) before it is followed


class WebClient:
    """A cookie-keeping HTTP client that never follows redirects by itself."""

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self.opener = urllib.request.build_opener(
            urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()), _NoRedirect)

    def send(self, url: str, form: dict | None = None, headers: dict | None = None) -> tuple[int, str, str]:
        """(status, Location, body) of one request; HTTP error statuses are answers, not exceptions."""
        data = urllib.parse.urlencode(form).encode() if form is not None else None
        request = urllib.request.Request(url, data=data, headers=headers or {})
        try:
            with self.opener.open(request, timeout=self.timeout) as response:
                return response.status, response.headers.get("Location", ""), response.read().decode("utf-8", "replace")
        except urllib.error.HTTPError as answer:
            return answer.code, answer.headers.get("Location", ""), answer.read().decode("utf-8", "replace")
        except OSError as error:
            raise DemoError(f"{where(url)} did not answer: {error}") from error

    def get_json(self, url: str, headers: dict | None = None) -> tuple[int, dict]:
        status, _, body = self.send(url, headers=headers)
        try:
            return status, json.loads(body) if body else {}
        except json.JSONDecodeError:
            raise DemoError(f"{where(url)} answered {status} with a body that is not JSON") from None


# ── 1. django-oauth-toolkit ────────────────────────────────────────────────

class Dot:
    """DOT as a child process (Tests/support/dot_server.py), plus its test-only endpoints."""

    def __init__(self, state: Path, access_lifetime: int, timeout: float) -> None:
        self.state = state
        self.access_lifetime = access_lifetime
        self.web = WebClient(timeout)
        self.proc: subprocess.Popen | None = None
        self.base = ""

    @property
    def issuer(self) -> str:
        return f"{self.base}/o"

    def start(self) -> float:
        """Starts DOT and waits (bounded) for its `READY <port>` line; returns the seconds it took."""
        if importlib.util.find_spec("oauth2_provider") is None:
            raise DemoError(f"django-oauth-toolkit is not installed for {sys.executable}; "
                            "run `make deps` and use .venv/bin/python")
        self.state.mkdir(parents=True, exist_ok=True)
        log = open(self.state / "server.log", "wb")
        started = time.monotonic()
        self.proc = subprocess.Popen(
            [sys.executable, str(DOT_SERVER), "--state", str(self.state),
             "--access-lifetime", str(self.access_lifetime), "--port", "0"],
            stdout=subprocess.PIPE, stderr=log, stdin=subprocess.DEVNULL, text=True, preexec_fn=die_with_parent)
        log.close()
        line = read_line_within(self.proc.stdout, DOT_START_BOUND)
        if line is None or not line.startswith("READY "):
            self.stop()
            tail = (self.state / "server.log").read_text(errors="replace").splitlines()[-15:]
            reason = f"no READY line within {DOT_START_BOUND:.0f} s" if line is None else "it exited"
            raise DemoError(f"django-oauth-toolkit did not start ({reason}):\n" + "\n".join(tail))
        self.base = f"http://127.0.0.1:{int(line.split()[1])}"
        return time.monotonic() - started

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass

    def endpoints(self) -> dict[str, tuple[str, str]]:
        """name → (URL, where it was found), read as the plugin reads them: OpenID Connect
        discovery first, then RFC 8414 metadata for what it lacks (DOT lists revocation only there)."""
        documents = [("OpenID Connect discovery", f"{self.issuer}/.well-known/openid-configuration"),
                     ("RFC 8414 metadata", f"{self.base}/.well-known/oauth-authorization-server/o")]
        found: dict[str, tuple[str, str]] = {}
        for label, url in documents:
            status, document = self.web.get_json(url)
            expect(status == 200 and document.get("issuer") == self.issuer, f"{where(url)} answered {status}")
            for name in ("authorization", "token", "userinfo", "revocation"):
                if document.get(f"{name}_endpoint") and name not in found:
                    found[name] = (document[f"{name}_endpoint"], label)
        return found

    def refreshes(self) -> int:
        """Successful refresh_token grants DOT has answered (its /test/stats)."""
        return self.web.get_json(f"{self.base}/test/stats")[1]["refreshes"]

    def issued(self, token: str) -> bool:
        query = urllib.parse.urlencode({"token": token})
        return self.web.get_json(f"{self.base}/test/issued?{query}")[1]["issued"]

    def userinfo_status(self, userinfo_url: str, token: str) -> int:
        """What DOT answers to a token presented directly, without the host."""
        return self.web.send(userinfo_url, headers={"Authorization": f"Bearer {token}"})[0]


def die_with_parent() -> None:
    """In DOT's process before it starts: Linux kills it if the demo dies without cleaning up
    (kill -9); the host needs no such care, it exits when its stdin closes."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # 1 = PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def read_line_within(stream, seconds: float) -> str | None:
    """One line from a child's pipe ("" once it closed), or None if none came in time:
    readline alone could block for ever."""
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: lines.put(stream.readline()), daemon=True).start()
    try:
        return lines.get(timeout=seconds)
    except queue.Empty:
        return None


# ── The scripted user ──────────────────────────────────────────────────────

def scripted_sign_in(url: str, timeout: float) -> None:
    """What a person does in a browser: open the URL, sign in as ada at DOT's login page, and
    get sent back to the host's loopback listener, which is really called, as a browser would."""
    web = WebClient(timeout)
    status, location, _ = web.send(url)
    expect(status == 302 and "/accounts/login/" in location, f"DOT's authorize page answered {status}, not the login redirect")
    say(f"user: GET  {where(url)} → {status}, to the login page")

    login_url = urllib.parse.urljoin(url, location)
    status, _, page = web.send(login_url)
    csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page)
    expect(status == 200 and csrf is not None, f"DOT's login page answered {status} without a login form")
    say(f"user: GET  {where(login_url)} → {status}, a login form")

    next_url = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(login_url).query)).get("next", "")
    form = {"username": USER, "password": PASSWORD, "csrfmiddlewaretoken": csrf.group(1), "next": next_url}
    status, location, _ = web.send(login_url, form=form, headers={"Referer": login_url})
    expect(status == 302, f"signing in as {USER} answered {status} (wrong password?)")
    say(f"user: POST {where(login_url)} as {USER} → {status}, back to {urllib.parse.urlsplit(location).path}")

    authorize_again = urllib.parse.urljoin(login_url, location)
    status, callback, _ = web.send(authorize_again)
    expect(status == 302 and callback.startswith("http://127.0.0.1:"),
           f"DOT's authorize page answered {status} without a redirect to the loopback listener")
    say(f"user: GET  {where(authorize_again)} → {status}, to {where(callback)} "
        f"(carrying {query_names(callback)}: values not shown)")

    status, _, _ = web.send(callback)
    expect(status == 200, f"the host's loopback listener answered {status}")
    say(f"user: GET  {where(callback)} → {status}: the host's listener took the redirect")


# ── The host's JSON-RPC client ─────────────────────────────────────────────

class RpcError(Exception):
    def __init__(self, method: str, error: dict) -> None:
        super().__init__(f"{method} failed: {error.get('code')} {error.get('message')}")
        self.code = error.get("code")
        self.data = error.get("data")


class Host:
    """`authbridge serve` as a child process; one JSON message per line on stdio."""

    def __init__(self, argv: list[str], env: dict, timeout: float) -> None:
        self.timeout = timeout
        self.next_id = 1
        self.lock = threading.Lock()
        self.pending: dict[int, queue.Queue] = {}
        self.notifications: list[dict] = []
        self.cursor = 0  # notifications already narrated
        self.changed = threading.Condition(self.lock)
        self.stderr_tail: list[str] = []
        self.closed = False
        try:
            self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                         env=env, text=True, encoding="utf-8", bufsize=1)
        except OSError as error:
            raise DemoError(f"cannot start the host {argv[0]}: {error}") from error
        threading.Thread(target=self._read_stdout, name="host-stdout", daemon=True).start()
        threading.Thread(target=self._read_stderr, name="host-stderr", daemon=True).start()

    def _read_stdout(self) -> None:
        for line in self.proc.stdout:
            if not line.strip():
                continue
            try:
                msg = json.loads(line)
            except json.JSONDecodeError:
                self._stderr(f"(demo) host wrote a line that is not JSON: {line[:200]!r}")
                continue
            if not isinstance(msg, dict) or msg.get("jsonrpc") != "2.0":
                self._stderr(f"(demo) host wrote an invalid frame: {line[:200]!r}")
                continue
            with self.lock:
                if "method" in msg:
                    self.notifications.append(msg)
                    self.changed.notify_all()
                    continue
                waiter = self.pending.pop(msg.get("id"), None)
            if waiter is not None:
                waiter.put(msg)
        with self.lock:
            self.closed = True
            for waiter in self.pending.values():
                waiter.put(None)
            self.pending.clear()
            self.changed.notify_all()

    def _read_stderr(self) -> None:
        for line in self.proc.stderr:
            self._stderr(line.rstrip("\n"))

    def _stderr(self, line: str) -> None:
        with self.lock:
            self.stderr_tail = (self.stderr_tail + [line])[-40:]

    def _send(self, frame: dict) -> None:
        try:
            self.proc.stdin.write(json.dumps(frame) + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, ValueError) as error:
            raise DemoError(f"the host stopped reading its input ({error})") from error

    def start_request(self, method: str, params: dict | None = None) -> tuple[int, queue.Queue]:
        """Sends a request; returns its id and the queue its answer will arrive on."""
        waiter: queue.Queue = queue.Queue(maxsize=1)
        with self.lock:
            if self.closed:
                raise DemoError(f"the host has exited; cannot send {method}")
            request_id = self.next_id
            self.next_id += 1
            self.pending[request_id] = waiter
        frame = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params is not None:
            frame["params"] = params
        self._send(frame)
        return request_id, waiter

    def answer(self, method: str, request_id: int, waiter: queue.Queue, timeout: float | None = None):
        try:
            msg = waiter.get(timeout=timeout or self.timeout)
        except queue.Empty:
            with self.lock:
                self.pending.pop(request_id, None)
            raise DemoError(f"no answer to {method} within {timeout or self.timeout:.0f} s") from None
        if msg is None:
            raise DemoError(f"the host exited before answering {method}")
        if ("result" in msg) == ("error" in msg):
            raise DemoError(f"malformed answer to {method}: it must carry exactly one of result/error")
        if "error" in msg:
            raise RpcError(method, msg["error"])
        return msg["result"]

    def request(self, method: str, params: dict | None = None, timeout: float | None = None):
        request_id, waiter = self.start_request(method, params)
        return self.answer(method, request_id, waiter, timeout)

    def notify(self, method: str, params: dict | None = None) -> None:
        frame = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            frame["params"] = params
        self._send(frame)

    def wait_for_notification(self, predicate, what: str, timeout: float | None = None) -> dict:
        deadline = time.monotonic() + (timeout or self.timeout)
        with self.lock:
            while True:
                for msg in self.notifications:
                    if predicate(msg):
                        return msg
                remaining = deadline - time.monotonic()
                if self.closed:
                    raise DemoError(f"the host exited while we waited for {what}")
                if remaining <= 0:
                    raise DemoError(f"no {what} within {timeout or self.timeout:.0f} s")
                self.changed.wait(remaining)

    def new_notifications(self) -> list[dict]:
        """Notifications that arrived since the last call (for the narration)."""
        with self.lock:
            fresh = self.notifications[self.cursor:]
            self.cursor = len(self.notifications)
        return fresh

    def wait_exit(self, timeout: float | None = None) -> int:
        try:
            return self.proc.wait(timeout=timeout or self.timeout)
        except subprocess.TimeoutExpired:
            raise DemoError(f"the host did not exit within {timeout or self.timeout:.0f} s") from None

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass

    def stderr_text(self) -> str:
        with self.lock:
            return "\n".join(self.stderr_tail)


def is_event(msg: dict, method: str, **params) -> bool:
    got = msg.get("params") or {}
    return msg.get("method") == method and all(got.get(name) == value for name, value in params.items())


def describe_event(msg: dict) -> str:
    params = msg.get("params") or {}
    if msg.get("method") == "signIn/progress":
        text = f"signIn/progress stage={params.get('stage')}"
        if params.get("url"):
            text += f" url={where(params['url'])}?…"
        return text
    if msg.get("method") == "session/changed":
        text = f"session/changed state={params.get('state')} reason={params.get('reason')}"
        if params.get("message"):
            text += f" ({params['message']})"
        return text
    return f"{msg.get('method')}"


def narrate(host: Host) -> None:
    for event in host.new_notifications():
        say(f"host event: {describe_event(event)}")


# ── The host's environment ─────────────────────────────────────────────────

def host_environment(workdir: Path, desktop: bool) -> tuple[dict, str]:
    """The host's environment and where its vault key will come from.

    The data home is always a temporary one: vault, key file and installation id stay out of
    yours. Scripted, the rest is isolated too, and without a session bus the host keeps the
    vault key in a key file there, never in your keyring. With --browser the host starts your
    browser (xdg-open), which needs your desktop session (session bus, runtime and config
    folders), so those stay; AUTHBRIDGE_VAULT_KEY, a random secret of this run, then keeps the
    host away from your keyring (it takes precedence over it).
    """
    env = dict(os.environ)
    env["XDG_DATA_HOME"] = str(workdir / "data")
    env.pop("AUTHBRIDGE_VAULT_KEY", None)
    if desktop:
        env["AUTHBRIDGE_VAULT_KEY"] = secrets.token_urlsafe(32)
        key = "derived from AUTHBRIDGE_VAULT_KEY (a random secret of this run, in memory only)"
    else:
        env["XDG_CONFIG_HOME"] = str(workdir / "config")
        env["XDG_RUNTIME_DIR"] = str(workdir / "runtime")
        env.pop("DBUS_SESSION_BUS_ADDRESS", None)
        key = "in a key file, data/authbridge/keys/vault.key: this run has no keyring"
    for name in ("XDG_DATA_HOME", "XDG_CONFIG_HOME", "XDG_RUNTIME_DIR"):
        if env.get(name, "").startswith(str(workdir)):
            os.makedirs(env[name], mode=0o700, exist_ok=True)
    return env, key


# ── The session, step by step ──────────────────────────────────────────────

class Demo:
    """One run: DOT, the host, and what the steps learn along the way."""

    def __init__(self, args: argparse.Namespace, workdir: Path) -> None:
        self.args = args
        self.workdir = workdir
        self.dot = Dot(workdir / "dot", args.access_lifetime, args.timeout)
        self.host: Host | None = None
        self.vault_key = ""
        self.userinfo_url = ""
        self.vault_dir = workdir / "data" / "authbridge" / "vault"
        self.tokens: list[str] = []  # access tokens seen, kept in memory only to check them at DOT
        self.expires_at = None       # the first access token's expiry (ms), as the host reported it

    def run(self) -> None:
        who = "you sign in yourself, in your browser" if self.args.browser else "a scripted user signs in as ada"
        print(f"AuthBridge demo: the bundled \"oidc\" plugin against django-oauth-toolkit; {who}")
        try:
            self.start_dot()
            self.start_host()
            self.configure_profile()
            self.check_not_signed_in()
            self.sign_in()
            self.show_status_and_storage()
            self.call_userinfo()
            self.wait_for_silent_refresh()
            self.sign_out()
            self.shut_down()
        except BaseException:
            if self.host is not None:
                self.host.kill()
                if self.host.stderr_text():
                    print("\n--- host stderr (last lines) ---\n" + self.host.stderr_text(), file=sys.stderr)
            raise
        finally:
            self.dot.stop()

    # 1
    def start_dot(self) -> None:
        step(1, "Starting django-oauth-toolkit, the authorization server")
        say("set-up in a temporary folder: a SQLite database is migrated, an RSA signing key made (usually 2–5 s)")
        took = self.dot.start()
        say(f"ready at {self.dot.base} after {took:.1f} s; user {USER}, public client {CLIENT_ID}, "
            f"access tokens live {self.args.access_lifetime} s")
        endpoints = self.dot.endpoints()
        expect(set(endpoints) == {"authorization", "token", "userinfo", "revocation"},
               f"DOT's metadata lists only the {', '.join(endpoints)} endpoints")
        self.userinfo_url = endpoints["userinfo"][0]
        say(f"issuer {self.dot.issuer}; what the oidc plugin will discover from it:")
        for name, (url, source) in endpoints.items():
            say(f"  {name:13} {where(url):34} ({source})")

    # 2
    def start_host(self) -> None:
        step(2, "Starting authbridge (default encrypted-file vault, temporary data home)")
        env, self.vault_key = host_environment(self.workdir, desktop=self.args.browser)
        config = self.workdir / "config.json"
        config.write_text(json.dumps({"profiles": {}}))  # the demo's profile comes at run time
        argv = [self.args.host, "serve", "--no-default-plugins", "--plugins", self.args.plugins,
                "--config", str(config), "--log-level", "warning"]
        if self.args.browser:
            argv.append("--open-browser")
        say(f"temporary folder {self.workdir} (removed at the end); paths below are relative to it")
        say("$ authbridge " + " ".join(argv[1:]).replace(str(self.workdir) + "/", ""))
        self.host = Host(argv, env, self.args.timeout)
        init = self.host.request("initialize", {"protocolVersion": "1.0",
                                                "clientInfo": {"name": "authbridge-demo", "version": "2.0"}})
        self.host.notify("initialized", {})
        info, storage = init.get("serverInfo", {}), init.get("storage", {})
        say(f"initialize → {info.get('name')} {info.get('version')}, protocol {init.get('protocolVersion')}, "
            f"storage {storage.get('backend')} ({storage.get('protection')})")
        oidc = next((p for p in init.get("providers", []) if p.get("id") == "oidc"), None)
        expect(oidc is not None and oidc.get("status") == "loaded",
               f"the oidc plugin is not loaded from {self.args.plugins}: {json.dumps(oidc)}")
        say(f"plugin oidc {oidc.get('version')}: {oidc.get('displayName')} (flows: {', '.join(oidc.get('flows', []))})")

    def configure_profile(self) -> None:
        settings = {"issuer": self.dot.issuer, "clientId": CLIENT_ID, "scopes": ["openid", "read"]}
        profile = self.host.request("configureProfile", {"name": PROFILE, "plugin": "oidc", "settings": settings})
        say(f"configureProfile \"{PROFILE}\": issuer {settings['issuer']}, client {CLIENT_ID}, "
            f"scopes {' '.join(settings['scopes'])}")
        say(f"→ {profile.get('status')}, flows {', '.join(profile.get('flows', []))} "
            "(the plugin found the endpoints by discovery)")
        expect(profile.get("status") == "ready", f"profile {PROFILE} is not ready: {profile.get('message')}")

    # 3
    def check_not_signed_in(self) -> None:
        step(3, "Sign-in status before signing in (checkSignInStatus)")
        status = self.host.request("checkSignInStatus", {"provider": PROFILE})
        say(f"→ {status.get('state')} (reason {status.get('reason')})")
        expect(status.get("state") == "notSignedIn", f"expected notSignedIn, got {status.get('state')}")

    # 4
    def sign_in(self) -> None:
        step(4, "Signing in with the browser flow (requestOAuthTokens, flow \"browser\")")
        say("the host makes PKCE, state and nonce values and listens on a 127.0.0.1 port for the redirect")
        params = {"provider": PROFILE, "flow": "browser"}
        wait = self.args.timeout
        if self.args.browser:
            params["timeoutMs"] = BROWSER_WAIT_S * 1000
            wait = BROWSER_WAIT_S + 10
        request_id, waiter = self.host.start_request("requestOAuthTokens", params)
        opened = self.host.wait_for_notification(
            lambda m: is_event(m, "signIn/progress", stage="openUrl", requestId=request_id), "signIn/progress openUrl")
        narrate(self.host)
        url = opened["params"].get("url") or ""
        expect(url.startswith(f"{self.dot.issuer}/authorize/?"), f"unexpected sign-in URL {where(url)}")
        query = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(url).query))
        expect(query.get("code_challenge_method") == "S256", "the sign-in URL asks for no PKCE S256")
        say(f"authorization request to {where(url)}: client {query.get('client_id')}, scope \"{query.get('scope')}\", "
            f"PKCE S256, redirect to {where(query.get('redirect_uri', ''))}")
        say("(state, nonce and code_challenge are in the URL too; the demo does not print them)")
        if self.args.browser:
            self.ask_the_human(url)
        else:
            scripted_sign_in(url, self.args.timeout)
        status = self.host.answer("requestOAuthTokens", request_id, waiter, timeout=wait)
        self.host.wait_for_notification(lambda m: is_event(m, "session/changed", state="signedIn"), "session/changed signedIn")
        narrate(self.host)
        say(f"→ requestOAuthTokens: {status.get('state')} (reason {status.get('reason')})")
        expect(status.get("state") == "signedIn", f"expected signedIn, got {status.get('state')}")

    def ask_the_human(self, url: str) -> None:
        """With --browser the host has run xdg-open; the URL is printed in case nothing opened."""
        say("your browser should have opened DOT's login page; if it did not, open this URL:")
        print(f"\n    {url}\n", flush=True)
        say(f"sign in as {USER} / {PASSWORD}; waiting up to {BROWSER_WAIT_S // 60} min…")

    # 5
    def show_status_and_storage(self) -> None:
        step(5, "Status after signing in, and where the tokens are kept")
        status = self.host.request("checkSignInStatus", {"provider": PROFILE})
        account = status.get("account") or {}
        left = seconds_left(status.get("expiresAt"))
        say(f"→ {status.get('state')} (reason {status.get('reason')}), account "
            f"{json.dumps(account) if account else 'not reported by the plugin'}, access token expires in "
            f"{'?' if left is None else f'{left:.0f} s'}")
        expect(status.get("state") == "signedIn", f"expected signedIn, got {status.get('state')}")
        storage = status.get("storage") or {}
        say(f"storage: backend {storage.get('backend')}, protection {storage.get('protection')}")
        say(f"  AES-256-GCM records under data/authbridge/vault/; the key is {self.vault_key}")
        expect(storage == {"backend": "encrypted-file", "protection": "encrypted"},
               f"expected the encrypted-file vault without a keyring, got {storage}")
        if not self.args.browser:
            key_file = self.vault_dir.parent / "keys" / "vault.key"
            expect(key_file.is_file() and key_file.stat().st_mode & 0o077 == 0, f"{key_file} is missing or not private")
        # minValidityMs 0: by default the host renews a token with less than 60 s left, and the
        # demo's tokens live only a few seconds.
        token = self.host.request("getAccessToken", {"provider": PROFILE, "minValidityMs": 0})
        access = token.get("accessToken") or ""
        expect(bool(access) and self.dot.issued(access), "getAccessToken returned a token DOT did not issue")
        self.tokens.append(access)
        self.expires_at = token.get("expiresAt")
        say(f"getAccessToken → a {token.get('tokenType')} token issued by DOT, {fingerprint(access)} "
            f"(header names to attach: {', '.join(sorted(token.get('headers') or {})) or 'none'})")
        self.check_vault_files(access)

    def check_vault_files(self, access: str) -> None:
        """The vault on disk must hold ciphertext only: the token's bytes appear in no file."""
        files = sorted(p for p in self.vault_dir.rglob("*") if p.is_file()) if self.vault_dir.is_dir() else []
        expect(any(p.suffix == ".vault" for p in files), f"no session record under {self.vault_dir}")
        for path in files:
            data = path.read_bytes()
            expect(access.encode() not in data, f"the access token is readable in {path}")
            what = " (the profile's kept configuration: endpoints and keys, no token)" if is_kept_configuration(path) else ""
            say(f"  {path.relative_to(self.workdir)}{what}: {len(data)} bytes, mode {path.stat().st_mode & 0o777:04o}, "
                "the access token's bytes are not in it")

    # 6
    def call_userinfo(self) -> None:
        step(6, "Calling DOT's userinfo endpoint through the host (fetch)")
        result = self.host.request("fetch", {"provider": PROFILE, "url": self.userinfo_url})
        body = parse_json(result.get("body"))
        say(f"fetch GET {where(self.userinfo_url)} → HTTP {result.get('status')}, sub {json.dumps(body.get('sub'))}")
        expect(result.get("status") == 200 and body.get("sub"), f"userinfo answered {result.get('status')} without a sub")
        say("the host added the Authorization header itself; the frontend never handled the token")

    # 7
    def wait_for_silent_refresh(self) -> None:
        step(7, "Waiting for the access token to expire, then a silent refresh")
        before = self.dot.refreshes()
        left = seconds_left(self.expires_at)  # not asked again: a check past expiry would refresh
        expect(left is not None and left <= MAX_LIFETIME_S,
               f"the access token's expiry is {left} s away; the demo waits at most {MAX_LIFETIME_S} s")
        say(f"the access token expires in {max(left, 0):.0f} s; the demo waits until a second after that")
        countdown(left + 1)  # one second past expiry: the host's check is "expiresAt <= now"
        status = self.host.request("checkSignInStatus", {"provider": PROFILE})
        self.host.wait_for_notification(lambda m: is_event(m, "session/changed", state="refreshed"), "session/changed refreshed")
        narrate(self.host)
        left = seconds_left(status.get("expiresAt"))
        say(f"checkSignInStatus → {status.get('state')} (reason {status.get('reason')}); "
            f"the new access token expires in {'?' if left is None else f'{left:.0f} s'}")
        expect(status.get("state") == "signedIn" and status.get("reason") == "refreshed",
               f"expected signedIn/refreshed, got {status.get('state')}/{status.get('reason')} (if steps 5–6 "
               "outlasted the token, the refresh came earlier: try a longer --access-lifetime)")
        access = self.host.request("getAccessToken", {"provider": PROFILE, "minValidityMs": 0}).get("accessToken") or ""
        expect(access not in self.tokens and self.dot.issued(access), "the refresh did not give a new token from DOT")
        self.tokens.append(access)
        after = self.dot.refreshes()
        say(f"access token {fingerprint(self.tokens[0])} → {fingerprint(access)}; "
            f"DOT's refresh count {before} → {after}")
        expect(after == before + 1, f"DOT counted {after - before} refreshes, expected 1")
        result = self.host.request("fetch", {"provider": PROFILE, "url": self.userinfo_url})
        say(f"fetch userinfo with the renewed token → HTTP {result.get('status')}")
        expect(result.get("status") == 200, f"userinfo answered {result.get('status')} after the refresh")

    # 8
    def sign_out(self) -> None:
        step(8, "Signing out (signOut): the host revokes the tokens at DOT")
        out = self.host.request("signOut", {"provider": PROFILE})
        self.host.wait_for_notification(lambda m: is_event(m, "session/changed", state="signedOut"), "session/changed signedOut")
        narrate(self.host)
        failures = ", ".join(f"{f.get('token')} ({f.get('reason')})" for f in out.get("failures", [])) or "none"
        say(f"→ signedOut {str(out.get('signedOut')).lower()}; revoked: {', '.join(out.get('revoked', [])) or 'nothing'}; "
            f"failures: {failures}")
        expect(out.get("signedOut") is True and not out.get("failures"), "sign-out did not revoke cleanly")
        expect(sorted(out.get("revoked", [])) == ["access_token", "refresh_token"],
               f"expected both tokens revoked, got {out.get('revoked')}")
        for label, token, why in (("first", self.tokens[0], "DOT dropped it at the refresh"),
                                  ("renewed", self.tokens[-1], "revoked by the sign-out")):
            code = self.dot.userinfo_status(self.userinfo_url, token)
            say(f"at DOT, without the host: userinfo with the {label} access token ({fingerprint(token)}) "
                f"→ HTTP {code} ({why})")
            expect(code == 401, f"DOT still accepts the {label} access token (HTTP {code})")
        status = self.host.request("checkSignInStatus", {"provider": PROFILE})
        records = sorted(p.name for p in self.vault_dir.glob("*.vault") if not is_kept_configuration(p))
        say(f"checkSignInStatus → {status.get('state')} (reason {status.get('reason')}); "
            f"session records left in the vault: {', '.join(records) or 'none'}")
        expect(status.get("state") == "notSignedIn", f"expected notSignedIn, got {status.get('state')}")
        expect(not records, "the vault still holds a session record after sign-out")

    # 9
    def shut_down(self) -> None:
        step(9, "Shutting the host down (shutdown, exit)")
        expect(self.host.request("shutdown") is None, "shutdown did not answer null")
        self.host.notify("exit")
        code = self.host.wait_exit()
        say(f"authbridge exited with status {code}")
        expect(code == 0, f"the host exited with status {code}")


def parse_json(text) -> dict:
    try:
        value = json.loads(text or "null")
    except json.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


def countdown(seconds: float) -> None:
    """Sleeps `seconds` (bounded by the caller) while showing the time left, one number a second."""
    print("    waiting:", end="", flush=True)
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        print(f" {left:.0f}", end="", flush=True)
        time.sleep(min(1.0, left))
    print(" — expired", flush=True)


def stop_on_sigterm(signum, frame) -> None:
    """`kill` (or a test's timeout) ends the demo as Ctrl-C does: DOT and the host are stopped."""
    raise KeyboardInterrupt


def main() -> int:
    parser = argparse.ArgumentParser(description="AuthBridge end-to-end demo against django-oauth-toolkit.")
    parser.add_argument("--host", required=True, help="path to the authbridge executable")
    parser.add_argument("--plugins", required=True, help="folder holding the oidc plugin (.so + oidc.json)")
    parser.add_argument("--browser", action="store_true",
                        help="sign in yourself in your browser (the host opens it) instead of the scripted user")
    parser.add_argument("--access-lifetime", type=int, default=6, metavar="S",
                        help=f"DOT's access-token lifetime in seconds (1–{MAX_LIFETIME_S}, default 6)")
    parser.add_argument("--timeout", type=float, default=15.0, help="bound for every other wait, in seconds (default 15)")
    args = parser.parse_args()
    args.host = os.path.abspath(args.host)
    args.plugins = os.path.abspath(args.plugins)
    if not 1 <= args.access_lifetime <= MAX_LIFETIME_S:
        parser.error(f"--access-lifetime must be between 1 and {MAX_LIFETIME_S}")
    if not os.access(args.host, os.X_OK):
        print(f"demo failed: {args.host} is not an executable (run `make build` first)", file=sys.stderr)
        return 1
    if not os.path.isfile(os.path.join(args.plugins, "oidc.json")):
        print(f"demo failed: no oidc.json in {args.plugins} (run `make build` first)", file=sys.stderr)
        return 1

    signal.signal(signal.SIGTERM, stop_on_sigterm)
    workdir = Path(tempfile.mkdtemp(prefix="authbridge-demo-"))
    started = time.monotonic()
    try:
        Demo(args, workdir).run()
        print(f"\ndemo complete in {time.monotonic() - started:.1f} s")
        return 0
    except RpcError as error:
        detail = f" {json.dumps(error.data)}" if error.data else ""
        print(f"\ndemo failed: {error}{detail}", file=sys.stderr)
    except DemoError as error:
        print(f"\ndemo failed: {error}", file=sys.stderr)
    except KeyboardInterrupt:
        print("\ndemo interrupted", file=sys.stderr)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return 1


if __name__ == "__main__":
    sys.exit(main())
