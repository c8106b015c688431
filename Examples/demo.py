#!/usr/bin/env python3
"""AuthBridge end-to-end demo: an OAuth 2.0 sign-in through the bundled `oidc` plugin.

    python3 Examples/demo.py --host .build/debug/authbridge --plugins .build/debug/plugins

What it does, step by step (Python standard library only):

  1. starts a tiny OAuth 2.0 authorization server on 127.0.0.1 (ephemeral port):
     /authorize (code + PKCE S256), /token (authorization_code, refresh_token),
     /revoke (RFC 7009) and a protected /api/me;
  2. writes a host configuration with a profile "demo" using the "oidc" plugin;
  3. starts `authbridge serve` and speaks JSON-RPC 2.0 with it over stdio;
  4. checks the sign-in status (not signed in);
  5. signs in with the "external" flow, acting as the browser;
  6. asks for an access token (only header names are shown);
  7. calls the API through the host (`fetch`);
  8. signs out (the host revokes the tokens at the server);
  9. checks the status again, then shuts the host down.

Token values are never printed. Every wait is bounded (--timeout, default 15 s). Any
failure ends the demo with a message and a non-zero exit status.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import http.client
import json
import os
import queue
import secrets
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

CLIENT_ID = "demo-client"
PROFILE = "demo"
MASK = "••••"


class DemoError(Exception):
    """A step did not go as expected; the message says what."""


# ── Output ─────────────────────────────────────────────────────────────────

def step(number: int, title: str) -> None:
    print(f"\n[{number}] {title}", flush=True)


def say(text: str = "") -> None:
    print(f"    {text}", flush=True)


def redact_url(url: str, keep: tuple[str, ...] = ()) -> str:
    """The URL with every query value masked except the parameters in `keep`."""
    parts = urllib.parse.urlsplit(url)
    pairs = urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
    query = "&".join(f"{name}={value if name in keep else MASK}" for name, value in pairs)
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, parts.path, "", "")) + (f"?{query}" if query else "")


def expect(condition: bool, message: str) -> None:
    if not condition:
        raise DemoError(message)


# ── 1. A tiny OAuth 2.0 authorization server ──────────────────────────────

def b64url_sha256(text: str) -> str:
    digest = hashlib.sha256(text.encode("ascii")).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


class AuthServerState:
    """Everything the server knows, behind one lock (handlers run on threads)."""

    def __init__(self, client_id: str) -> None:
        self.client_id = client_id
        self.redirect_uri = ""  # set once the port is known
        self.lock = threading.Lock()
        self.codes: dict[str, dict] = {}          # code → {redirect_uri, challenge, scope}
        self.access_tokens: set[str] = set()
        self.refresh_tokens: set[str] = set()
        self.revoked: list[str] = []              # token_type_hint of each revoked token
        self.events: list[str] = []               # what happened, for the narration

    def note(self, text: str) -> None:
        with self.lock:
            self.events.append(text)

    def drain_events(self) -> list[str]:
        with self.lock:
            events, self.events = self.events, []
        return events

    def issue_tokens(self) -> dict:
        access, refresh = secrets.token_urlsafe(32), secrets.token_urlsafe(32)
        self.access_tokens.add(access)
        self.refresh_tokens.add(refresh)
        return {"access_token": access, "refresh_token": refresh, "token_type": "Bearer", "expires_in": 3600}


class AuthServerHandler(BaseHTTPRequestHandler):
    # Headers and body go out in separate writes; without TCP_NODELAY, delayed ACKs add ~40 ms.
    disable_nagle_algorithm = True
    protocol_version = "HTTP/1.1"
    server_version = "DemoAuthServer/1.0"
    state: AuthServerState  # set on the subclass made by start_auth_server

    # -- plumbing --

    def log_message(self, format: str, *args) -> None:  # noqa: A002 - signature from the base class
        pass  # the demo narrates instead

    def send(self, status: int, body: bytes = b"", content_type: str | None = None, headers: dict | None = None) -> None:
        self.send_response(status)
        if content_type:
            self.send_header("Content-Type", content_type)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if body and self.command != "HEAD":
            self.wfile.write(body)

    def send_json(self, status: int, payload: dict, headers: dict | None = None) -> None:
        extra = {"Cache-Control": "no-store", "Pragma": "no-cache", **(headers or {})}
        self.send(status, json.dumps(payload).encode("utf-8"), "application/json", extra)

    def oauth_error(self, error: str, description: str) -> None:
        self.state.note(f"{self.command} {urllib.parse.urlsplit(self.path).path} → 400 {error} ({description})")
        self.send_json(400, {"error": error, "error_description": description})

    def read_form(self) -> dict[str, str] | None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length).decode("utf-8", "replace") if length > 0 else ""
        content_type = (self.headers.get("Content-Type") or "").split(";")[0].strip().lower()
        if content_type != "application/x-www-form-urlencoded":
            return None
        form: dict[str, str] = {}
        for name, value in urllib.parse.parse_qsl(raw, keep_blank_values=True):
            if name in form:  # RFC 6749 §3.1: parameters must not repeat
                return None
            form[name] = value
        return form

    # -- routes --

    def do_GET(self) -> None:  # noqa: N802 - http.server naming
        parts = urllib.parse.urlsplit(self.path)
        if parts.path == "/authorize":
            self.authorize(parts.query)
        elif parts.path == "/api/me":
            self.api_me()
        elif parts.path == "/callback":
            self.send(200, b"Signed in; you may close this window.\n", "text/plain; charset=utf-8")
        else:
            self.send_json(404, {"error": "not_found"})

    def do_POST(self) -> None:  # noqa: N802
        path = urllib.parse.urlsplit(self.path).path
        if path == "/token":
            self.token()
        elif path == "/revoke":
            self.revoke()
        else:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self.send_json(404, {"error": "not_found"})

    def authorize(self, query: str) -> None:
        params = dict(urllib.parse.parse_qsl(query, keep_blank_values=True))
        state = self.state
        # Never redirect to an unverified redirect_uri (RFC 6749 §4.1.2.1): answer 400 instead.
        if params.get("client_id") != state.client_id:
            return self.oauth_error("invalid_request", "unknown client_id")
        if params.get("redirect_uri") != state.redirect_uri:
            return self.oauth_error("invalid_request", "redirect_uri is not registered for this client")
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
            return self.oauth_error("invalid_request", "; ".join(problems))
        code = secrets.token_urlsafe(24)
        with state.lock:
            state.codes[code] = {"redirect_uri": params["redirect_uri"], "challenge": params["code_challenge"],
                                 "scope": params.get("scope", "")}
        separator = "&" if "?" in params["redirect_uri"] else "?"
        location = params["redirect_uri"] + separator + urllib.parse.urlencode({"code": code, "state": params["state"]})
        state.note(f"GET /authorize (scope \"{params.get('scope', '')}\", PKCE S256) → 302 to redirect_uri with a code")
        self.send(302, b"", headers={"Location": location})

    def token(self) -> None:
        form = self.read_form()
        state = self.state
        if form is None:
            return self.oauth_error("invalid_request", "expected a form body without repeated parameters")
        if form.get("client_id") != state.client_id:
            state.note("POST /token → 401 invalid_client")
            return self.send_json(401, {"error": "invalid_client"}, {"WWW-Authenticate": 'Basic realm="demo"'})
        grant = form.get("grant_type")
        if grant == "authorization_code":
            with state.lock:
                entry = state.codes.pop(form.get("code", ""), None)  # single use
            if entry is None:
                return self.oauth_error("invalid_grant", "unknown or already used code")
            if form.get("redirect_uri") != entry["redirect_uri"]:
                return self.oauth_error("invalid_grant", "redirect_uri differs from the authorization request")
            verifier = form.get("code_verifier", "")
            if not (43 <= len(verifier) <= 128) or b64url_sha256(verifier) != entry["challenge"]:
                return self.oauth_error("invalid_grant", "PKCE verification failed")
            with state.lock:
                tokens = state.issue_tokens()
            state.note("POST /token grant_type=authorization_code: code, redirect_uri, client_id ok; "
                       "PKCE verified (BASE64URL(SHA256(code_verifier)) == code_challenge) → 200 tokens")
            return self.send_json(200, {**tokens, "scope": entry["scope"]})
        if grant == "refresh_token":
            with state.lock:
                old = form.get("refresh_token", "")
                if old not in state.refresh_tokens:
                    tokens = None
                else:
                    state.refresh_tokens.discard(old)  # rotation: the old refresh token dies
                    tokens = state.issue_tokens()
            if tokens is None:
                return self.oauth_error("invalid_grant", "unknown or revoked refresh token")
            state.note("POST /token grant_type=refresh_token → 200 (refresh token rotated)")
            return self.send_json(200, tokens)
        return self.oauth_error("unsupported_grant_type", f"grant_type {grant!r} is not supported")

    def revoke(self) -> None:
        form = self.read_form()
        state = self.state
        if form is None or "token" not in form:
            return self.oauth_error("invalid_request", "the token parameter is required")
        token = form["token"]
        with state.lock:
            known = token in state.access_tokens or token in state.refresh_tokens
            state.access_tokens.discard(token)
            state.refresh_tokens.discard(token)
            if known:
                state.revoked.append(form.get("token_type_hint", "unknown"))
        # RFC 7009 §2.2: 200 whether or not the token was valid.
        state.note(f"POST /revoke ({form.get('token_type_hint', 'no hint')}) → 200"
                   + ("" if known else " (token was not active)"))
        self.send(200)

    def api_me(self) -> None:
        header = self.headers.get("Authorization") or ""
        scheme, _, token = header.partition(" ")
        with self.state.lock:
            valid = scheme.lower() == "bearer" and token in self.state.access_tokens
        if not valid:
            self.state.note("GET /api/me → 401 (missing or invalid bearer token)")
            return self.send_json(401, {"error": "invalid_token"},
                                  {"WWW-Authenticate": 'Bearer error="invalid_token"'})
        self.state.note("GET /api/me with a valid bearer token → 200")
        self.send_json(200, {"name": "Demo User"})


def start_auth_server() -> tuple[ThreadingHTTPServer, AuthServerState, str]:
    state = AuthServerState(CLIENT_ID)
    handler = type("Handler", (AuthServerHandler,), {"state": state})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    base = f"http://127.0.0.1:{server.server_address[1]}"
    state.redirect_uri = f"{base}/callback"
    threading.Thread(target=server.serve_forever, name="auth-server", daemon=True).start()
    return server, state, base


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


def describe_event(msg: dict) -> str:
    params = msg.get("params") or {}
    if msg.get("method") == "signIn/progress":
        text = f"signIn/progress stage={params.get('stage')}"
        if params.get("callbackPrefix"):
            text += f" callbackPrefix={params['callbackPrefix']}"
        return text
    if msg.get("method") == "session/changed":
        text = f"session/changed state={params.get('state')} reason={params.get('reason')}"
        if params.get("message"):
            text += f" ({params['message']})"
        return text
    return f"{msg.get('method')}"


def narrate(host: Host, server: AuthServerState) -> None:
    for event in host.new_notifications():
        say(f"host event:  {describe_event(event)}")
    for event in server.drain_events():
        say(f"auth server: {event}")


def expires_in(expires_at) -> str:
    if not isinstance(expires_at, int):
        return "no expiry known"
    return f"expires in about {round((expires_at - time.time() * 1000) / 60000)} min"


# ── The session ────────────────────────────────────────────────────────────

def run_demo(args: argparse.Namespace, workdir: str) -> None:
    timeout = args.timeout
    print("AuthBridge demo: OAuth 2.0 authorization code + PKCE through the bundled \"oidc\" plugin")

    step(1, "Starting a tiny OAuth 2.0 authorization server")
    server, server_state, base = start_auth_server()
    try:
        say(f"listening on {base}")
        say("endpoints: GET /authorize, POST /token, POST /revoke, GET /api/me (protected)")

        step(2, "Writing the host configuration")
        settings = {
            "clientId": CLIENT_ID,
            "authorizationEndpoint": f"{base}/authorize",
            "tokenEndpoint": f"{base}/token",
            "revocationEndpoint": f"{base}/revoke",
            "redirectUri": f"{base}/callback",
            "apiBaseUrl": f"{base}/api",
            "scopes": ["openid", "profile"],
        }
        config_path = os.path.join(workdir, "config.json")
        with open(config_path, "w", encoding="utf-8") as handle:
            json.dump({"profiles": {PROFILE: {"plugin": "oidc", "settings": settings}}}, handle, indent=2)
        os.chmod(config_path, 0o600)
        say(f"profile \"{PROFILE}\" → plugin \"oidc\", client \"{CLIENT_ID}\", scopes {' '.join(settings['scopes'])}")
        say(f"redirect URI {settings['redirectUri']}, API base {settings['apiBaseUrl']}")
        say(f"written to {config_path}")

        step(3, "Starting authbridge and initializing")
        env = dict(os.environ)
        for name in ("XDG_CONFIG_HOME", "XDG_DATA_HOME"):
            folder = os.path.join(workdir, name.lower())
            os.makedirs(folder, mode=0o700, exist_ok=True)
            env[name] = folder  # keep the user's own configuration and plugins out of the demo
        env.pop("DBUS_SESSION_BUS_ADDRESS", None)  # the demo's vault key stays in its own folder, not your keyring
        argv = [args.host, "serve", "--no-default-plugins", "--plugins", args.plugins,
                "--config", config_path, "--log-level", "warning"]
        say("$ " + " ".join(argv))
        host = Host(argv, env, timeout)
        try:
            session(host, server_state, base)
        except BaseException:
            host.kill()
            stderr = host.stderr_text()
            if stderr:
                print("\n--- host stderr (last lines) ---\n" + stderr, file=sys.stderr)
            raise
    finally:
        server.shutdown()
        server.server_close()


def session(host: Host, server: AuthServerState, base: str) -> None:
    init = host.request("initialize", {"protocolVersion": "1.0", "clientInfo": {"name": "authbridge-demo", "version": "1.0"}})
    host.notify("initialized", {})
    info = init.get("serverInfo", {})
    say(f"initialize → {info.get('name')} {info.get('version')}, protocol {init.get('protocolVersion')}, "
        f"storage {init.get('storage', {}).get('backend')}")
    say("providers:")
    for plugin in init.get("providers", []):
        if plugin.get("status") == "loaded":
            say(f"  - {plugin.get('id')} {plugin.get('version')}: loaded, {plugin.get('displayName')} "
                f"(flows: {', '.join(plugin.get('flows', []))})")
        else:
            say(f"  - {plugin.get('id', '?')}: {plugin.get('status')} ({plugin.get('reason')}: {plugin.get('message')})")
    for profile in init.get("profiles", []):
        say(f"profile {profile.get('name')}: plugin {profile.get('plugin')}, {profile.get('status')}"
            + (f" ({profile.get('message')})" if profile.get("message") else ""))
    oidc = next((p for p in init.get("providers", []) if p.get("id") == "oidc"), None)
    expect(oidc is not None and oidc.get("status") == "loaded",
           f"the oidc plugin is not loaded from the plugin folder: {json.dumps(oidc)}")
    demo = next((p for p in init.get("profiles", []) if p.get("name") == PROFILE), None)
    expect(demo is not None and demo.get("status") == "ready", f"profile {PROFILE} is not ready: {json.dumps(demo)}")

    step(4, "Checking the sign-in status (checkSignInStatus)")
    status = host.request("checkSignInStatus", {"provider": PROFILE})
    say(f"→ state {status.get('state')} (reason {status.get('reason')})")
    expect(status.get("state") == "notSignedIn", f"expected notSignedIn, got {status.get('state')}")

    step(5, "Signing in with the external flow (requestOAuthTokens)")
    say("the host prepares PKCE and asks the frontend to open the authorization URL;")
    say("this demo plays the browser")
    request_id, waiter = host.start_request("requestOAuthTokens", {"provider": PROFILE, "flow": "external"})
    progress = host.wait_for_notification(
        lambda m: m.get("method") == "signIn/progress" and (m.get("params") or {}).get("stage") == "openUrl"
        and (m.get("params") or {}).get("requestId") == request_id,
        "signIn/progress openUrl")
    narrate(host, server)
    url = progress["params"].get("url") or ""
    expect(url.startswith(f"{base}/authorize?"), f"unexpected sign-in URL {redact_url(url)}")
    say("open URL: " + redact_url(url, keep=("response_type", "client_id", "redirect_uri", "scope", "code_challenge_method")))
    callback_prefix = progress["params"].get("callbackPrefix")
    if not callback_prefix:
        callback_prefix = f"{base}/callback"
        say(f"(no callbackPrefix in the event; using the configured redirect URI {callback_prefix})")

    parts = urllib.parse.urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=host.timeout)
    try:
        connection.request("GET", parts.path + "?" + parts.query)  # http.client never follows redirects
        response = connection.getresponse()
        response.read()
        location = response.getheader("Location")
    finally:
        connection.close()
    expect(response.status == 302 and location, f"the authorization server answered {response.status} without a redirect")
    narrate(host, server)
    say(f"browser: GET /authorize → {response.status}, Location {redact_url(location, keep=())}")
    expect(location.startswith(callback_prefix), "the redirect does not start with the callback prefix")

    accepted = host.request("completeSignIn", {"provider": PROFILE, "callbackUrl": location})
    say(f"completeSignIn → accepted: {accepted.get('accepted')}")
    expect(accepted.get("accepted") is True, "the host did not accept the callback")
    status = host.answer("requestOAuthTokens", request_id, waiter)
    host.wait_for_notification(
        lambda m: m.get("method") == "session/changed" and (m.get("params") or {}).get("state") == "signedIn",
        "session/changed signedIn")
    narrate(host, server)
    say(f"→ requestOAuthTokens: state {status.get('state')} (reason {status.get('reason')}), "
        f"{expires_in(status.get('expiresAt'))}")
    expect(status.get("state") == "signedIn", f"expected signedIn, got {status.get('state')}")

    step(6, "Getting an access token (getAccessToken)")
    token = host.request("getAccessToken", {"provider": PROFILE})
    access_token = token.get("accessToken") or ""
    headers = token.get("headers") or {}
    say(f"→ {token.get('tokenType')} token of {len(access_token)} characters ({MASK}), {expires_in(token.get('expiresAt'))}")
    say(f"headers to attach: {', '.join(sorted(headers)) or 'none'} (values hidden)")
    expect(bool(access_token), "getAccessToken returned no token")
    expect(headers.get("Authorization") == f"Bearer {access_token}", "the Authorization header is not 'Bearer <token>'")
    with server.lock:
        issued = access_token in server.access_tokens
    expect(issued, "the host's token is not one the server issued")
    say("the token is one the authorization server issued")

    step(7, "Calling the API through the host (fetch /me)")
    result = host.request("fetch", {"provider": PROFILE, "url": "/me"})
    narrate(host, server)
    say(f"→ HTTP {result.get('status')}, content-type {result.get('headers', {}).get('content-type')}")
    say(f"body: {result.get('body')}")
    expect(result.get("status") == 200, f"expected HTTP 200 from /api/me, got {result.get('status')}")
    expect(json.loads(result.get("body") or "null") == {"name": "Demo User"}, "unexpected /api/me body")

    step(8, "Signing out (signOut)")
    out = host.request("signOut", {"provider": PROFILE})
    host.wait_for_notification(
        lambda m: m.get("method") == "session/changed" and (m.get("params") or {}).get("state") == "signedOut",
        "session/changed signedOut")
    narrate(host, server)
    say(f"→ signedOut: {out.get('signedOut')}; revoked: {', '.join(out.get('revoked', [])) or 'nothing'}; "
        f"failures: {', '.join(f.get('token', '?') + ' ' + f.get('reason', '') for f in out.get('failures', [])) or 'none'}")
    expect(out.get("signedOut") is True, "signOut did not report signedOut")
    expect(not out.get("failures"), f"revocation failures: {json.dumps(out.get('failures'))}")
    with server.lock:
        still_active = access_token in server.access_tokens or bool(server.refresh_tokens)
    expect(not still_active, "the server still holds active tokens after sign-out")
    # The old token, kept in memory only, no longer opens the API.
    connection = http.client.HTTPConnection("127.0.0.1", urllib.parse.urlsplit(base).port, timeout=host.timeout)
    try:
        connection.request("GET", "/api/me", headers={"Authorization": f"Bearer {access_token}"})
        response = connection.getresponse()
        response.read()
    finally:
        connection.close()
    server.drain_events()
    say(f"the old access token now gets HTTP {response.status} from /api/me "
        f"({response.getheader('WWW-Authenticate')})")
    expect(response.status == 401, "the revoked token still works")

    step(9, "Checking the sign-in status again")
    status = host.request("checkSignInStatus", {"provider": PROFILE})
    say(f"→ state {status.get('state')} (reason {status.get('reason')})")
    expect(status.get("state") == "notSignedIn", f"expected notSignedIn, got {status.get('state')}")

    print("\nShutting down", flush=True)
    expect(host.request("shutdown") is None, "shutdown did not answer null")
    host.notify("exit")
    code = host.wait_exit()
    say(f"authbridge exited with status {code}")
    expect(code == 0, f"the host exited with status {code}")
    print("\ndemo complete")


def main() -> int:
    parser = argparse.ArgumentParser(description="AuthBridge end-to-end demo with the bundled oidc plugin.")
    parser.add_argument("--host", required=True, help="path to the authbridge executable")
    parser.add_argument("--plugins", required=True, help="folder holding the oidc plugin (.so + oidc.json)")
    parser.add_argument("--timeout", type=float, default=15.0, help="bound for every wait, in seconds (default 15)")
    args = parser.parse_args()
    args.host = os.path.abspath(args.host)
    args.plugins = os.path.abspath(args.plugins)
    if not os.access(args.host, os.X_OK):
        print(f"demo failed: {args.host} is not an executable (run `make build` first)", file=sys.stderr)
        return 2
    if not os.path.isfile(os.path.join(args.plugins, "oidc.json")):
        print(f"demo failed: no oidc.json in {args.plugins} (run `make build` first)", file=sys.stderr)
        return 2

    workdir = tempfile.mkdtemp(prefix="authbridge-demo-")
    try:
        run_demo(args, workdir)
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
