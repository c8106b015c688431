"""The test kit's own MCP server: a Model Context Protocol server (streamable HTTP) that is its own
OAuth authorization server, built on the `mcp` SDK 2.3.0 (its `MCPServer` and `mcp.server.auth`
routes) over an in-memory authorization-server provider of ours (`MemoryProvider`).

    from authbridge_testkit.mcp_server import McpServer
    server = McpServer(**options).start()   # uvicorn in a daemon thread, 127.0.0.1, a free port
    server.url                    # "http://127.0.0.1:PORT/mcp": the protected resource (MCP endpoint)
    server.issuer                 # "http://127.0.0.1:PORT/": the authorization server, as its metadata's "issuer"
    server.resource_metadata_url  # "http://127.0.0.1:PORT/.well-known/oauth-protected-resource/mcp"
    server.clients                # client_id -> the registration request's JSON as received (201s only)
    server.forget_clients()       # forget every client, code and token (an in-memory server restarted)
    server.token_info(token)      # an active access token: {"client_id", "sub", "scopes", "resource",
                                  #   "expires_at"}, else None
    server.revoked                # ("access" | "refresh", client_id) per token revoked through /revoke
    server.grants                 # (grant_type, http_status) per /token request, in order ("" if none given)
    server.stop()                 # stops serving and frees the port; start() again serves on a new port

Command line (PYTHONPATH=Tests/support): `python -m authbridge_testkit.mcp_server [--port N]
[--access-ttl S] [--no-require-resource] [--challenge-scope S | --no-challenge-scope]
[--no-public-revocation] [--pkce-methods M,M | --no-pkce-methods] [--prm-resource URI]
[--no-registration]` prints one JSON line {"url", "issuer", "resource_metadata_url"} once serving
and serves until stdin closes or SIGTERM/SIGINT.

Options (keywords of `McpServer`):
- `access_ttl=3600`: access tokens' lifetime in seconds (refresh tokens do not expire);
- `require_resource=True`: the MCP endpoint accepts only a token bound (RFC 8707, the `resource`
  of the authorization request) to exactly `server.url`; a token without one or with another is
  401 invalid_token. False: any active token;
- `challenge_scope="mcp:tools"`: the `scope` of the 401's WWW-Authenticate (None: no scope);
- `public_revocation=True`: /revoke works for public clients (client_id only); False: the SDK's
  stock /revoke, which refuses them (see below);
- `pkce_methods=["S256"]`: the AS metadata's code_challenge_methods_supported (None: the member
  left out). Only the metadata changes: /authorize still takes S256 only;
- `prm_resource=None`: when set, the protected resource metadata names this `resource` instead of
  server.url (a mismatching document, for the client to refuse);
- `registration=True`: False leaves out registration_endpoint and /register.

The server: scopes "mcp:read", "mcp:tools", "mcp:admin" (scopes_supported, registration's
valid_scopes; a client registered without `scope` gets all three); the MCP endpoint requires
"mcp:tools". The test user `mcp-user` approves every authorization at once: /authorize redirects
straight to the redirect URI with code and state. Codes (60 s, single use) are bound to client,
redirect URI, PKCE challenge, scopes and the authorization request's `resource` (the SDK's token
endpoint parses a token request's `resource` but hands it to the provider only for the
jwt-bearer grant, so the code's resource is what binds). Access tokens are opaque; refresh tokens
rotate (the old one dies at once), keep the resource binding, and narrow scopes to those asked
(never widen: the SDK refuses a wider `scope` with 400 invalid_scope). Revoking a refresh token
kills the access tokens of its grant; revoking an access token kills that token.

Tools: echo(message) -> "echo: <message>"; whoami() -> JSON text {"sub", "scopes"};
admin_echo(message) -> "admin echo: <message>", needs mcp:admin: a tools/call of it with a token
without mcp:admin is refused at the HTTP level, 403 with `WWW-Authenticate: Bearer
error="insufficient_scope", scope="mcp:tools mcp:admin", resource_metadata="…"` (RFC 6750 §3.1,
the MCP spec's step-up), by an ASGI middleware reading (and replaying) the JSON-RPC body.

The 401 without a token: `WWW-Authenticate: Bearer resource_metadata="<resource_metadata_url>",
scope="mcp:tools"`, body {"error": "invalid_token", "error_description": "Authentication
required"}. With a token that is not accepted: `Bearer error="invalid_token",
error_description="…", resource_metadata=…, scope=…`. The SDK's own middleware (replaced here)
sends `Bearer error="invalid_token", error_description="Authentication required",
resource_metadata="…"` in both cases and never a scope; its 403 for a missing required scope
has no scope either.

What mcp 2.3.0 does (measured, tests in Tests/contract/test_kit_mcp_server.py):
- PKCE S256 only: /authorize with code_challenge_method=plain redirects back with
  error=invalid_request ("code_challenge_method: Input should be 'S256'"); metadata lists
  token_endpoint_auth_methods_supported ["client_secret_post", "client_secret_basic"] without
  "none", yet a public client (token_endpoint_auth_method "none") registers (201, no secret);
- /authorize with an unknown client_id: 400 JSON {"error": "invalid_request",
  "error_description": "Client ID '<id>' not found"} (no redirect); an unregistered redirect URI
  (exact match: another loopback port too): 400 JSON invalid_request "Redirect URI '…' not
  registered for client";
- /token for a client it does not know (forget_clients, then a refresh): 401 {"error":
  "invalid_client", "error_description": "Invalid client_id"};
- the stock /revoke with a public client: 400 {"error": "invalid_request", "error_description":
  "client_secret: Field required"} (its request model requires the member, even empty);
- streamable HTTP wants `Accept: application/json, text/event-stream` on POSTs (406 "Not
  Acceptable: Client must accept both application/json and text/event-stream" with
  `application/json` alone; `*/*`, httpx's default, counts as both) and answers initialize (an
  SSE stream) with an `mcp-session-id` header that later requests carry.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import signal
import socket
import sys
import threading
import time
import urllib.parse
from typing import Any

import uvicorn
from pydantic import AnyHttpUrl
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from mcp.server.auth.handlers.revoke import RevocationErrorResponse
from mcp.server.auth.json_response import PydanticJSONResponse
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser, RequireAuthMiddleware
from mcp.server.auth.middleware.client_auth import AuthenticationError, ClientAuthenticator
from mcp.server.auth.provider import (AccessToken, AuthorizationCode, AuthorizationParams, AuthorizeError,
                                      RefreshToken, TokenError, construct_redirect_uri)
from mcp.server.auth.routes import build_metadata, cors_middleware
from mcp.server.auth.settings import AuthSettings, ClientRegistrationOptions, RevocationOptions
from mcp.server.mcpserver import MCPServer
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken, ProtectedResourceMetadata

SCOPES = ["mcp:read", "mcp:tools", "mcp:admin"]
REQUIRED_SCOPE = "mcp:tools"
ADMIN_SCOPE = "mcp:admin"
USER = "mcp-user"
CODE_TTL = 60
STARTUP_TIMEOUT = 10.0
MAX_BODY = 1 << 20


class MemoryProvider:
    """The SDK's OAuthAuthorizationServerProvider, in memory. Its methods run on the server's event
    loop; the test's thread reads through `McpServer`, so every table is under `lock`."""

    def __init__(self, access_ttl: int) -> None:
        self.access_ttl = access_ttl
        self.lock = threading.Lock()
        self.revoked: list[tuple[str, str]] = []   # McpServer.revoked
        self.clients: dict[str, OAuthClientInformationFull] = {}
        self.codes: dict[str, AuthorizationCode] = {}
        self.access: dict[str, AccessToken] = {}
        self.refresh: dict[str, RefreshToken] = {}
        self.grant_of: dict[str, str] = {}   # token (access or refresh) -> its grant's id

    def forget(self) -> None:
        with self.lock:
            for table in (self.clients, self.codes, self.access, self.refresh, self.grant_of):
                table.clear()

    async def get_client(self, client_id: str) -> OAuthClientInformationFull | None:
        with self.lock:
            return self.clients.get(client_id)

    async def register_client(self, client_info: OAuthClientInformationFull) -> None:
        with self.lock:
            self.clients[client_info.client_id or ""] = client_info

    async def authorize(self, client: OAuthClientInformationFull, params: AuthorizationParams) -> str:
        scopes = params.scopes if params.scopes is not None else (client.scope or "").split()
        if not scopes:
            raise AuthorizeError("invalid_scope", "no scope asked and none registered")
        code = secrets.token_urlsafe(32)
        with self.lock:
            self.codes[code] = AuthorizationCode(
                code=code, scopes=scopes, expires_at=time.time() + CODE_TTL, client_id=client.client_id or "",
                code_challenge=params.code_challenge, redirect_uri=params.redirect_uri,
                redirect_uri_provided_explicitly=params.redirect_uri_provided_explicitly, resource=params.resource,
                subject=USER)
        return construct_redirect_uri(str(params.redirect_uri), code=code, state=params.state)

    async def load_authorization_code(self, client: OAuthClientInformationFull, authorization_code: str) -> AuthorizationCode | None:
        with self.lock:
            code = self.codes.get(authorization_code)
        return code if code is not None and code.client_id == client.client_id else None

    async def exchange_authorization_code(self, client: OAuthClientInformationFull, authorization_code: AuthorizationCode) -> OAuthToken:
        with self.lock:
            if self.codes.pop(authorization_code.code, None) is None:   # single use
                raise TokenError("invalid_grant", "authorization code already used")
        return self._issue(client.client_id or "", authorization_code.scopes, authorization_code.resource, secrets.token_hex(8))

    async def load_refresh_token(self, client: OAuthClientInformationFull, refresh_token: str) -> RefreshToken | None:
        with self.lock:
            token = self.refresh.get(refresh_token)
        return token if token is not None and token.client_id == client.client_id else None

    async def exchange_refresh_token(self, client: OAuthClientInformationFull, refresh_token: RefreshToken, scopes: list[str]) -> OAuthToken:
        with self.lock:
            if self.refresh.pop(refresh_token.token, None) is None:   # rotation: the old one dies at once
                raise TokenError("invalid_grant", "refresh token already used")
            grant = self.grant_of.pop(refresh_token.token, secrets.token_hex(8))
        narrowed = [scope for scope in refresh_token.scopes if scope in scopes] if scopes else refresh_token.scopes
        return self._issue(client.client_id or "", narrowed, refresh_token.resource, grant, refresh_scopes=refresh_token.scopes)

    def _issue(self, client_id: str, scopes: list[str], resource: str | None, grant: str,
               refresh_scopes: list[str] | None = None) -> OAuthToken:
        access, refresh = secrets.token_urlsafe(32), secrets.token_urlsafe(32)
        expires_at = int(time.time()) + self.access_ttl
        with self.lock:
            self.access[access] = AccessToken(token=access, client_id=client_id, scopes=scopes, expires_at=expires_at,
                                              resource=resource, subject=USER)
            # The refresh token keeps the grant's scopes: a narrowed refresh does not shrink the grant.
            self.refresh[refresh] = RefreshToken(token=refresh, client_id=client_id, scopes=refresh_scopes or scopes,
                                                 resource=resource, subject=USER)
            self.grant_of[access] = grant
            self.grant_of[refresh] = grant
        return OAuthToken(access_token=access, token_type="Bearer", expires_in=self.access_ttl, scope=" ".join(scopes),
                          refresh_token=refresh)

    async def load_access_token(self, token: str) -> AccessToken | None:
        with self.lock:
            found = self.access.get(token)
        if found is None or (found.expires_at is not None and found.expires_at <= time.time()):
            return None
        return found

    async def revoke_token(self, token: AccessToken | RefreshToken) -> None:
        with self.lock:
            self.revoked.append(("refresh" if isinstance(token, RefreshToken) else "access", token.client_id))
            if isinstance(token, RefreshToken):
                self.refresh.pop(token.token, None)
                grant = self.grant_of.pop(token.token, None)
                for access in [key for key in self.access if self.grant_of.get(key) == grant]:
                    self.access.pop(access, None)
                    self.grant_of.pop(access, None)
            else:
                self.access.pop(token.token, None)
                self.grant_of.pop(token.token, None)

    async def exchange_identity_assertion(self, client: OAuthClientInformationFull, params: Any) -> OAuthToken:
        raise TokenError("unsupported_grant_type", "not supported")


# ── ASGI helpers ────────────────────────────────────────────────────────────


async def read_body(receive: Any) -> bytes:
    """The whole request body (at most MAX_BODY bytes read)."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunk = message.get("body", b"")
        chunks.append(chunk)
        size += len(chunk)
        if not message.get("more_body", False) or size > MAX_BODY:
            break
    return b"".join(chunks)


def replay(body: bytes, receive: Any) -> Any:
    """A `receive` that gives the buffered body once, then what the real one gives (disconnects)."""
    sent = False

    async def replayed() -> dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replayed


async def send_json(send: Any, status: int, body: dict[str, Any], headers: list[tuple[bytes, bytes]]) -> None:
    data = json.dumps(body).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode()), *headers]})
    await send({"type": "http.response.body", "body": data})


def asks_for_admin(body: bytes) -> bool:
    """Whether a JSON-RPC message (or batch) is a tools/call of admin_echo."""
    try:
        message = json.loads(body)
    except ValueError:
        return False
    messages = message if isinstance(message, list) else [message]
    return any(isinstance(item, dict) and item.get("method") == "tools/call"
               and isinstance(item.get("params"), dict) and item["params"].get("name") == "admin_echo"
               for item in messages)


class Recorder:
    """Around the whole app: records /token's (grant_type, status) and /register's request bodies."""

    def __init__(self, app: Any, server: "McpServer") -> None:
        self.app = app
        self.server = server

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        path = scope.get("path") if scope["type"] == "http" else None
        if scope.get("method") != "POST" or path not in ("/token", "/register"):
            await self.app(scope, receive, send)
            return
        body = await read_body(receive)
        status = 0
        answer: list[bytes] = []

        def record() -> None:
            with self.server._lock:
                if path == "/token":
                    grant_type = urllib.parse.parse_qs(body.decode("utf-8", "replace")).get("grant_type", [""])[0]
                    self.server.grants.append((grant_type, status))
                elif status == 201:
                    try:
                        self.server.clients[json.loads(b"".join(answer))["client_id"]] = json.loads(body)
                    except (ValueError, KeyError, TypeError):
                        pass

        async def recording(message: dict[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            elif message["type"] == "http.response.body":
                answer.append(message.get("body", b""))
                # Recorded before the last of the answer leaves: whoever reads the answer then
                # finds it in `grants` and `clients` (no race with the caller).
                if not message.get("more_body", False):
                    record()
            await send(message)

        await self.app(scope, replay(body, receive), recording)


class McpGate:
    """In place of the SDK's RequireAuthMiddleware on /mcp: the 401 challenge (with the scope
    option), the exact resource binding, the required scope, and admin_echo's step-up 403."""

    def __init__(self, app: Any, server: "McpServer") -> None:
        self.app = app
        self.server = server

    def challenge(self, error: str | None, description: str | None, scope: str | None) -> list[tuple[bytes, bytes]]:
        parts = []
        if error:
            parts += [f'error="{error}"', f'error_description="{description}"']
        parts.append(f'resource_metadata="{self.server.resource_metadata_url}"')
        if scope:
            parts.append(f'scope="{scope}"')
        return [(b"www-authenticate", ("Bearer " + ", ".join(parts)).encode())]

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        server = self.server
        user = scope.get("user")
        token = user.access_token if isinstance(user, AuthenticatedUser) else None
        if token is not None and server.require_resource and token.resource != server.url:
            token = None
        if token is None:
            presented = any(name.lower() == b"authorization" and value.lower().startswith(b"bearer ")
                            for name, value in scope.get("headers", []))
            description = "token not active or not for this resource" if presented else "Authentication required"
            headers = self.challenge("invalid_token" if presented else None, description, server.challenge_scope)
            await send_json(send, 401, {"error": "invalid_token", "error_description": description}, headers)
            return
        if REQUIRED_SCOPE not in token.scopes:
            await send_json(send, 403, {"error": "insufficient_scope", "error_description": f"Required scope: {REQUIRED_SCOPE}"},
                            self.challenge("insufficient_scope", f"Required scope: {REQUIRED_SCOPE}", REQUIRED_SCOPE))
            return
        if scope.get("method") == "POST" and ADMIN_SCOPE not in token.scopes:
            body = await read_body(receive)
            if asks_for_admin(body):
                wanted = f"{REQUIRED_SCOPE} {ADMIN_SCOPE}"
                await send_json(send, 403, {"error": "insufficient_scope", "error_description": f"Required scope: {ADMIN_SCOPE}"},
                                self.challenge("insufficient_scope", f"Required scope: {ADMIN_SCOPE}", wanted))
                return
            receive = replay(body, receive)
        await self.app(scope, receive, send)


class _Uvicorn(uvicorn.Server):
    """Tells when it serves (after the lifespan's startup and the listening sockets)."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.ready = threading.Event()

    async def startup(self, sockets: Any = None) -> None:
        await super().startup(sockets)
        self.loop = asyncio.get_running_loop()
        self.ready.set()

    def install_signal_handlers(self) -> None:  # the thread's server: the process's signals are not its own
        pass


class McpServer:
    def __init__(self, *, access_ttl: int = 3600, require_resource: bool = True, challenge_scope: str | None = REQUIRED_SCOPE,
                 public_revocation: bool = True, pkce_methods: list[str] | None = ["S256"],  # noqa: B006 - never mutated
                 prm_resource: str | None = None, registration: bool = True, port: int = 0) -> None:
        self.access_ttl = access_ttl
        self.require_resource = require_resource
        self.challenge_scope = challenge_scope
        self.public_revocation = public_revocation
        self.pkce_methods = list(pkce_methods) if pkce_methods is not None else None
        self.prm_resource = prm_resource
        self.registration = registration
        self.port = port
        self.provider = MemoryProvider(access_ttl)
        self.clients: dict[str, dict[str, Any]] = {}
        self.revoked = self.provider.revoked
        self.grants: list[tuple[str, int]] = []
        self._lock = threading.Lock()
        self._server: _Uvicorn | None = None
        self._thread: threading.Thread | None = None
        self._socket: socket.socket | None = None
        self.url = self.issuer = self.resource_metadata_url = ""

    # ── what tests read ──

    def forget_clients(self) -> None:
        self.provider.forget()
        with self._lock:
            self.clients.clear()

    def token_info(self, access_token: str) -> dict[str, Any] | None:
        with self.provider.lock:
            token = self.provider.access.get(access_token)
        if token is None or (token.expires_at is not None and token.expires_at <= time.time()):
            return None
        return {"client_id": token.client_id, "sub": token.subject, "scopes": list(token.scopes),
                "resource": token.resource, "expires_at": token.expires_at}

    # ── lifecycle ──

    def start(self) -> "McpServer":
        if self._thread is not None:
            return self
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", self.port))
        sock.listen(128)
        self._socket = sock
        port = sock.getsockname()[1]
        base = f"http://127.0.0.1:{port}"
        self.url = f"{base}/mcp"
        self.issuer = f"{base}/"
        self.resource_metadata_url = f"{base}/.well-known/oauth-protected-resource/mcp"
        config = uvicorn.Config(self._app(), log_level="warning", lifespan="on", timeout_graceful_shutdown=1,
                                access_log=False)
        self._server = _Uvicorn(config)
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [sock]}, daemon=True,
                                        name=f"mcp-server-{port}")
        self._thread.start()
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while not self._server.ready.wait(0.05):   # bounded: a failed start ends the thread
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("the MCP server did not start")
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._end_sessions()
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None
        if self._socket is not None:
            self._socket.close()
            self._socket = None
        self._server = None

    def _end_sessions(self) -> None:
        """Ends the MCP sessions first, so that an open SSE stream (a client's GET) does not hold the
        shutdown for uvicorn's graceful timeout. The session manager's table is the SDK's own."""
        server, manager = self._server, getattr(self, "_session_manager", None)
        transports = list(getattr(manager, "_server_instances", {}).values())
        if server is None or not transports or not server.ready.is_set():
            return

        async def end() -> None:
            for transport in transports:
                await transport.terminate()

        try:
            asyncio.run_coroutine_threadsafe(end(), server.loop).result(timeout=5)
        except Exception:   # a session that will not end: uvicorn's graceful timeout still bounds the stop
            pass

    def __enter__(self) -> "McpServer":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # ── the app ──

    def _app(self) -> Any:
        issuer = AnyHttpUrl(self.issuer)
        registration = ClientRegistrationOptions(enabled=self.registration, valid_scopes=SCOPES, default_scopes=SCOPES)
        revocation = RevocationOptions(enabled=True)
        auth = AuthSettings(issuer_url=issuer, resource_server_url=AnyHttpUrl(self.url), required_scopes=[REQUIRED_SCOPE],
                            client_registration_options=registration, revocation_options=revocation,
                            validate_token_resource=self.require_resource)
        mcp = MCPServer(name="authbridge-testkit-mcp", auth_server_provider=self.provider, auth=auth, log_level="WARNING")

        @mcp.tool()
        def echo(message: str) -> str:
            """Echoes the message."""
            return f"echo: {message}"

        @mcp.tool()
        def whoami() -> str:
            """The token's subject and scopes, as JSON."""
            token = get_access_token()
            return json.dumps({"sub": token.subject if token else None, "scopes": token.scopes if token else []})

        @mcp.tool()
        def admin_echo(message: str) -> str:
            """Echoes the message; needs the mcp:admin scope."""
            token = get_access_token()
            if token is None or ADMIN_SCOPE not in token.scopes:
                raise ValueError("mcp:admin required")
            return f"admin echo: {message}"

        app = mcp.streamable_http_app(streamable_http_path="/mcp")
        self._session_manager = mcp.session_manager
        metadata = build_metadata(issuer, None, registration, revocation)
        metadata_document = metadata.model_dump(mode="json", exclude_none=True)
        if self.pkce_methods is None:
            metadata_document.pop("code_challenge_methods_supported", None)
        else:
            metadata_document["code_challenge_methods_supported"] = self.pkce_methods
        prm = ProtectedResourceMetadata(resource=AnyHttpUrl(self.prm_resource or self.url), authorization_servers=[issuer],
                                        scopes_supported=SCOPES).model_dump(mode="json", exclude_none=True)
        prm["resource"] = self.prm_resource or self.url   # exactly these strings (no URL normalising)
        prm["authorization_servers"] = [self.issuer]

        routes = []
        for route in app.router.routes:
            path = getattr(route, "path", None)
            if path == "/mcp" and isinstance(route, Route) and isinstance(route.endpoint, RequireAuthMiddleware):
                route = Route("/mcp", endpoint=McpGate(route.endpoint.app, self))   # in place of the SDK's gate, on its app
            elif path == "/.well-known/oauth-authorization-server":
                route = Route(path, endpoint=cors_middleware(_document(metadata_document), ["GET", "OPTIONS"]),
                              methods=["GET", "OPTIONS"])
            elif path == "/.well-known/oauth-protected-resource/mcp":
                route = Route(path, endpoint=cors_middleware(_document(prm), ["GET", "OPTIONS"]), methods=["GET", "OPTIONS"])
            elif path == "/revoke" and self.public_revocation:
                route = Route(path, endpoint=self._revoke, methods=["POST"])
            routes.append(route)
        assert any(isinstance(route, Route) and isinstance(route.endpoint, McpGate) for route in routes), "the SDK's /mcp route moved"
        app.router.routes[:] = routes
        return Recorder(app, self)

    async def _revoke(self, request: Request) -> Response:
        """RFC 7009 for every client the SDK's authenticator accepts, public ones (client_id only) too.
        The SDK's handler refuses those: its request model requires `client_secret`."""
        try:
            client = await ClientAuthenticator(self.provider).authenticate_request(request)
        except AuthenticationError as failure:
            return PydanticJSONResponse(status_code=401, content=RevocationErrorResponse(
                error="unauthorized_client", error_description=failure.message))
        form = await request.form()
        value = form.get("token")
        if not isinstance(value, str) or not value:
            return JSONResponse({"error": "invalid_request", "error_description": "token: Field required"}, status_code=400)
        await self._revoke_token(client, value, form.get("token_type_hint"))
        return Response(status_code=200, headers={"Cache-Control": "no-store", "Pragma": "no-cache"})

    async def _revoke_token(self, client: OAuthClientInformationFull, value: str, hint: Any) -> None:
        access = await self.provider.load_access_token(value)
        refresh = await self.provider.load_refresh_token(client, value)
        token: AccessToken | RefreshToken | None = (refresh or access) if hint == "refresh_token" else (access or refresh)
        if token is not None and token.client_id == client.client_id:
            await self.provider.revoke_token(token)


def _document(document: dict[str, Any]) -> Any:
    async def handle(request: Request) -> Response:
        return JSONResponse(document, headers={"Cache-Control": "public, max-age=3600"})
    return handle


# ── command line ────────────────────────────────────────────────────────────


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m authbridge_testkit.mcp_server", description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--access-ttl", type=int, default=3600)
    parser.add_argument("--no-require-resource", dest="require_resource", action="store_false")
    parser.add_argument("--challenge-scope", default=REQUIRED_SCOPE)
    parser.add_argument("--no-challenge-scope", dest="challenge_scope", action="store_const", const=None)
    parser.add_argument("--no-public-revocation", dest="public_revocation", action="store_false")
    parser.add_argument("--pkce-methods", default="S256", help="comma-separated")
    parser.add_argument("--no-pkce-methods", dest="pkce_methods", action="store_const", const=None)
    parser.add_argument("--prm-resource", default=None)
    parser.add_argument("--no-registration", dest="registration", action="store_false")
    options = parser.parse_args(argv)
    pkce = options.pkce_methods.split(",") if options.pkce_methods is not None else None
    server = McpServer(port=options.port, access_ttl=options.access_ttl, require_resource=options.require_resource,
                       challenge_scope=options.challenge_scope, public_revocation=options.public_revocation,
                       pkce_methods=pkce, prm_resource=options.prm_resource, registration=options.registration).start()
    done = threading.Event()
    for number in (signal.SIGTERM, signal.SIGINT):
        signal.signal(number, lambda *_: done.set())

    def watch_stdin() -> None:   # the raw descriptor: a daemon thread in a buffered read aborts the interpreter's exit
        try:
            while os.read(sys.stdin.fileno(), 65536):
                pass
        except OSError:
            pass
        done.set()

    threading.Thread(target=watch_stdin, daemon=True).start()
    print(json.dumps({"url": server.url, "issuer": server.issuer, "resource_metadata_url": server.resource_metadata_url}),
          flush=True)
    while not done.wait(0.5):   # wakes for the signal handlers too
        pass
    server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
