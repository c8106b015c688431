"""The test kit's MCP server (authbridge_testkit/mcp_server.py), proved with plain HTTP (httpx) and
the SDK's own client: no AuthBridge host here, only what the host's and the clients' MCP scenarios
will rely on — the challenge, the documents, registration, the auto-approving authorization, PKCE,
resource binding, refresh rotation, revocation (public and stock), the step-up 403, the options
for negative tests, and a client the server forgot.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import secrets
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest

from authbridge_testkit.mcp_server import McpServer

REDIRECTS = ["http://127.0.0.1:43111/callback", "http://127.0.0.1:43112/callback"]
ACCEPT = "application/json, text/event-stream"
PROTOCOL = "2025-06-18"


@pytest.fixture
def server() -> Iterator[McpServer]:
    running = McpServer().start()
    yield running
    running.stop()


@pytest.fixture
def http() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=10) as client:
        yield client


def register(http: httpx.Client, server: McpServer, scope: str = "mcp:read mcp:tools mcp:admin") -> str:
    answer = http.post(server.issuer + "register", json={
        "redirect_uris": REDIRECTS, "client_name": "kit test", "token_endpoint_auth_method": "none",
        "grant_types": ["authorization_code", "refresh_token"], "response_types": ["code"], "scope": scope})
    assert answer.status_code == 201, answer.text
    assert "client_secret" not in answer.json()
    return answer.json()["client_id"]


def pkce() -> tuple[str, str]:
    verifier = secrets.token_urlsafe(48)
    return verifier, base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()


def authorize(http: httpx.Client, server: McpServer, client_id: str, challenge: str, scope: str = "mcp:tools",
              redirect_uri: str = REDIRECTS[0], resource: str | None = "url", state: str = "s-1") -> httpx.Response:
    params = {"client_id": client_id, "response_type": "code", "redirect_uri": redirect_uri, "code_challenge": challenge,
              "code_challenge_method": "S256", "state": state, "scope": scope}
    if resource is not None:
        params["resource"] = server.url if resource == "url" else resource
    return http.get(server.issuer + "authorize", params=params)


def sign_in(http: httpx.Client, server: McpServer, client_id: str, scope: str = "mcp:tools",
            resource: str | None = "url") -> dict[str, Any]:
    verifier, challenge = pkce()
    answer = authorize(http, server, client_id, challenge, scope=scope, resource=resource)
    assert answer.status_code == 302, answer.text
    code = httpx.URL(answer.headers["location"]).params["code"]
    tokens = http.post(server.issuer + "token", data={"grant_type": "authorization_code", "code": code, "client_id": client_id,
                                                      "redirect_uri": REDIRECTS[0], "code_verifier": verifier})
    assert tokens.status_code == 200, tokens.text
    return tokens.json()


def rpc(http: httpx.Client, server: McpServer, token: str, method: str, params: dict[str, Any] | None = None,
        session: str | None = None, ident: int | None = 1) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}", "Accept": ACCEPT}
    if session:
        headers |= {"mcp-session-id": session, "mcp-protocol-version": PROTOCOL}
    message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    if ident is not None:
        message["id"] = ident
    if params is not None:
        message["params"] = params
    return http.post(server.url, headers=headers, json=message)


def result(answer: httpx.Response) -> dict[str, Any]:
    """The JSON-RPC answer of a POST, whether JSON or one SSE `message` event."""
    assert answer.status_code == 200, answer.text
    if answer.headers["content-type"].startswith("text/event-stream"):
        data = [line[5:].strip() for line in answer.text.splitlines() if line.startswith("data:")]
        message = json.loads(data[-1])
    else:
        message = answer.json()
    assert "result" in message, message
    return message["result"]


def open_session(http: httpx.Client, server: McpServer, token: str) -> str:
    answer = rpc(http, server, token, "initialize",
                 {"protocolVersion": PROTOCOL, "capabilities": {}, "clientInfo": {"name": "kit-test", "version": "1"}})
    assert result(answer)["serverInfo"]["name"]
    session = answer.headers["mcp-session-id"]
    assert rpc(http, server, token, "notifications/initialized", session=session, ident=None).status_code == 202
    return session


def call_tool(http: httpx.Client, server: McpServer, token: str, session: str, name: str, **arguments: Any) -> httpx.Response:
    return rpc(http, server, token, "tools/call", {"name": name, "arguments": arguments}, session=session, ident=7)


def text_of(answer: httpx.Response) -> str:
    content = result(answer)["content"]
    return content[0]["text"]


# ── the challenge and the documents ─────────────────────────────────────────


def test_challenge_names_the_metadata_and_the_scope(server: McpServer, http: httpx.Client) -> None:
    answer = http.post(server.url, json={"jsonrpc": "2.0", "id": 1, "method": "ping"}, headers={"Accept": ACCEPT})
    assert answer.status_code == 401
    assert answer.headers["www-authenticate"] == (
        f'Bearer resource_metadata="{server.resource_metadata_url}", scope="mcp:tools"')
    assert answer.json()["error"] == "invalid_token"
    bad = http.post(server.url, json={}, headers={"Authorization": "Bearer nonsense", "Accept": ACCEPT})
    assert bad.status_code == 401
    assert bad.headers["www-authenticate"].startswith('Bearer error="invalid_token"')
    assert f'resource_metadata="{server.resource_metadata_url}"' in bad.headers["www-authenticate"]


def test_challenge_without_scope(http: httpx.Client) -> None:
    with McpServer(challenge_scope=None) as server:
        answer = http.post(server.url, json={}, headers={"Accept": ACCEPT})
        assert answer.status_code == 401
        assert answer.headers["www-authenticate"] == f'Bearer resource_metadata="{server.resource_metadata_url}"'


def test_documents(server: McpServer, http: httpx.Client) -> None:
    port = server.url.split(":")[2].split("/")[0]
    assert server.url == f"http://127.0.0.1:{port}/mcp"
    assert server.issuer == f"http://127.0.0.1:{port}/"
    assert server.resource_metadata_url == f"http://127.0.0.1:{port}/.well-known/oauth-protected-resource/mcp"
    prm = http.get(server.resource_metadata_url).json()
    assert prm["resource"] == server.url
    assert prm["authorization_servers"] == [server.issuer]
    assert prm["scopes_supported"] == ["mcp:read", "mcp:tools", "mcp:admin"]
    metadata = http.get(server.issuer + ".well-known/oauth-authorization-server").json()
    assert metadata["issuer"] == server.issuer
    base = server.issuer.rstrip("/")
    assert (metadata["authorization_endpoint"], metadata["token_endpoint"], metadata["registration_endpoint"],
            metadata["revocation_endpoint"]) == (f"{base}/authorize", f"{base}/token", f"{base}/register", f"{base}/revoke")
    assert metadata["code_challenge_methods_supported"] == ["S256"]
    assert metadata["scopes_supported"] == ["mcp:read", "mcp:tools", "mcp:admin"]
    assert "none" not in metadata["token_endpoint_auth_methods_supported"]   # the SDK's; public clients register all the same


def test_document_options(http: httpx.Client) -> None:
    other = "https://elsewhere.example/mcp"
    with McpServer(pkce_methods=["plain"], prm_resource=other, registration=False) as server:
        metadata = http.get(server.issuer + ".well-known/oauth-authorization-server").json()
        assert metadata["code_challenge_methods_supported"] == ["plain"]
        assert "registration_endpoint" not in metadata
        assert http.post(server.issuer + "register", json={"redirect_uris": REDIRECTS}).status_code in (404, 405)
        assert http.get(server.resource_metadata_url).json()["resource"] == other
    with McpServer(pkce_methods=None) as server:
        metadata = http.get(server.issuer + ".well-known/oauth-authorization-server").json()
        assert "code_challenge_methods_supported" not in metadata


# ── registration, authorization, tokens ─────────────────────────────────────


def test_register_authorize_exchange_and_use(server: McpServer, http: httpx.Client) -> None:
    client_id = register(http, server)
    received = server.clients[client_id]
    assert received["redirect_uris"] == REDIRECTS and received["token_endpoint_auth_method"] == "none"
    assert received["client_name"] == "kit test" and received["scope"] == "mcp:read mcp:tools mcp:admin"

    verifier, challenge = pkce()
    refused = authorize(http, server, client_id, challenge, redirect_uri="http://127.0.0.1:43999/callback")
    assert refused.status_code == 400 and refused.json()["error"] == "invalid_request"   # exact match: another port
    unknown = authorize(http, server, "no-such-client", challenge)
    assert unknown.status_code == 400
    assert unknown.json() == {"error": "invalid_request", "error_description": "Client ID 'no-such-client' not found",
                              "state": "s-1"}
    plain = http.get(server.issuer + "authorize", params={
        "client_id": client_id, "response_type": "code", "redirect_uri": REDIRECTS[0], "code_challenge": verifier,
        "code_challenge_method": "plain", "state": "p"})
    assert plain.status_code == 302 and httpx.URL(plain.headers["location"]).params["error"] == "invalid_request"
    second = authorize(http, server, client_id, challenge, redirect_uri=REDIRECTS[1], state="second")
    assert second.status_code == 302 and second.headers["location"].startswith(REDIRECTS[1] + "?")

    answer = authorize(http, server, client_id, challenge, state="xyz")
    assert answer.status_code == 302
    location = httpx.URL(answer.headers["location"])
    assert str(location).startswith(REDIRECTS[0] + "?") and location.params["state"] == "xyz"
    code = location.params["code"]
    exchange = {"grant_type": "authorization_code", "code": code, "client_id": client_id, "redirect_uri": REDIRECTS[0]}
    wrong = http.post(server.issuer + "token", data=exchange | {"code_verifier": pkce()[0]})
    assert wrong.status_code == 400 and wrong.json()["error"] == "invalid_grant"
    tokens = http.post(server.issuer + "token", data=exchange | {"code_verifier": verifier})
    assert tokens.status_code == 200, tokens.text
    body = tokens.json()
    assert body["token_type"] == "Bearer" and body["scope"] == "mcp:tools" and body["expires_in"] == 3600
    again = http.post(server.issuer + "token", data=exchange | {"code_verifier": verifier})
    assert again.status_code == 400 and again.json()["error"] == "invalid_grant"   # single use
    assert server.grants == [("authorization_code", 400), ("authorization_code", 200), ("authorization_code", 400)]

    info = server.token_info(body["access_token"])
    assert info is not None
    assert (info["client_id"], info["sub"], info["scopes"], info["resource"]) == (client_id, "mcp-user", ["mcp:tools"], server.url)
    assert server.token_info("nonsense") is None

    token = body["access_token"]
    only_json = http.post(server.url, headers={"Authorization": f"Bearer {token}", "Accept": "application/json"},
                          json={"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                              "protocolVersion": PROTOCOL, "capabilities": {}, "clientInfo": {"name": "x", "version": "1"}}})
    assert only_json.status_code == 406
    session = open_session(http, server, token)
    tools = result(rpc(http, server, token, "tools/list", {}, session=session))["tools"]
    assert {tool["name"] for tool in tools} == {"echo", "whoami", "admin_echo"}
    assert text_of(call_tool(http, server, token, session, "echo", message="hello")) == "echo: hello"
    assert json.loads(text_of(call_tool(http, server, token, session, "whoami"))) == {"sub": "mcp-user", "scopes": ["mcp:tools"]}


def test_token_bound_elsewhere_or_nowhere_is_refused(server: McpServer, http: httpx.Client) -> None:
    client_id = register(http, server)
    for resource in (None, "http://127.0.0.1:1/mcp"):
        token = sign_in(http, server, client_id, resource=resource)["access_token"]
        assert server.token_info(token)["resource"] == resource
        answer = rpc(http, server, token, "initialize",
                     {"protocolVersion": PROTOCOL, "capabilities": {}, "clientInfo": {"name": "x", "version": "1"}})
        assert answer.status_code == 401
        assert answer.headers["www-authenticate"].startswith('Bearer error="invalid_token"')
    with McpServer(require_resource=False) as lax:
        client_id = register(http, lax)
        token = sign_in(http, lax, client_id, resource=None)["access_token"]
        assert open_session(http, lax, token)


def test_refresh_rotates_and_narrows(server: McpServer, http: httpx.Client) -> None:
    client_id = register(http, server)
    first = sign_in(http, server, client_id, scope="mcp:read mcp:tools")
    refresh = {"grant_type": "refresh_token", "client_id": client_id}
    second = http.post(server.issuer + "token", data=refresh | {"refresh_token": first["refresh_token"]})
    assert second.status_code == 200, second.text
    assert second.json()["refresh_token"] != first["refresh_token"]
    assert server.token_info(second.json()["access_token"])["resource"] == server.url   # the binding kept
    old = http.post(server.issuer + "token", data=refresh | {"refresh_token": first["refresh_token"]})
    assert old.status_code == 400 and old.json()["error"] == "invalid_grant"
    narrowed = http.post(server.issuer + "token", data=refresh | {"refresh_token": second.json()["refresh_token"], "scope": "mcp:tools"})
    assert narrowed.status_code == 200 and narrowed.json()["scope"] == "mcp:tools"
    assert server.token_info(narrowed.json()["access_token"])["scopes"] == ["mcp:tools"]
    wider = http.post(server.issuer + "token", data=refresh | {"refresh_token": narrowed.json()["refresh_token"], "scope": "mcp:admin"})
    assert wider.status_code == 400 and wider.json()["error"] == "invalid_scope"
    assert [grant for grant, _ in server.grants].count("refresh_token") == 4


def test_public_revocation(server: McpServer, http: httpx.Client) -> None:
    client_id = register(http, server)
    tokens = sign_in(http, server, client_id)
    revoked = http.post(server.issuer + "revoke", data={"token": tokens["refresh_token"], "client_id": client_id,
                                                        "token_type_hint": "refresh_token"})
    assert revoked.status_code == 200
    assert server.token_info(tokens["access_token"]) is None   # the grant's access token dies with it
    assert server.revoked == [("refresh", client_id)]
    refresh = http.post(server.issuer + "token", data={"grant_type": "refresh_token", "client_id": client_id,
                                                       "refresh_token": tokens["refresh_token"]})
    assert refresh.status_code == 400
    other = sign_in(http, server, client_id)
    assert http.post(server.issuer + "revoke", data={"token": other["access_token"], "client_id": client_id}).status_code == 200
    assert server.token_info(other["access_token"]) is None
    assert server.revoked[-1] == ("access", client_id)
    assert http.post(server.issuer + "token", data={"grant_type": "refresh_token", "client_id": client_id,
                                                    "refresh_token": other["refresh_token"]}).status_code == 200


def test_stock_revocation_refuses_public_clients(http: httpx.Client) -> None:
    with McpServer(public_revocation=False) as server:
        client_id = register(http, server)
        tokens = sign_in(http, server, client_id)
        answer = http.post(server.issuer + "revoke", data={"token": tokens["refresh_token"], "client_id": client_id})
        assert answer.status_code == 400
        assert answer.json() == {"error": "invalid_request", "error_description": "client_secret: Field required"}
        assert server.token_info(tokens["access_token"]) is not None and server.revoked == []


def test_admin_echo_needs_a_step_up(server: McpServer, http: httpx.Client) -> None:
    client_id = register(http, server)
    token = sign_in(http, server, client_id, scope="mcp:tools")["access_token"]
    session = open_session(http, server, token)
    refused = call_tool(http, server, token, session, "admin_echo", message="hi")
    assert refused.status_code == 403
    assert refused.headers["www-authenticate"] == (
        'Bearer error="insufficient_scope", error_description="Required scope: mcp:admin", '
        f'resource_metadata="{server.resource_metadata_url}", scope="mcp:tools mcp:admin"')
    assert text_of(call_tool(http, server, token, session, "echo", message="still")) == "echo: still"
    admin = sign_in(http, server, client_id, scope="mcp:tools mcp:admin")["access_token"]
    session = open_session(http, server, admin)
    assert text_of(call_tool(http, server, admin, session, "admin_echo", message="hi")) == "admin echo: hi"


def test_forgotten_client(server: McpServer, http: httpx.Client) -> None:
    client_id = register(http, server)
    tokens = sign_in(http, server, client_id)
    server.forget_clients()
    assert server.clients == {} and server.token_info(tokens["access_token"]) is None
    answer = http.post(server.issuer + "token", data={"grant_type": "refresh_token", "client_id": client_id,
                                                      "refresh_token": tokens["refresh_token"]})
    assert answer.status_code == 401
    assert answer.json() == {"error": "invalid_client", "error_description": "Invalid client_id"}
    assert server.grants[-1] == ("refresh_token", 401)


def test_stop_frees_the_port(http: httpx.Client) -> None:
    """Promptly, even with a client's SSE stream (GET) open."""
    server = McpServer().start()
    port = int(server.url.split(":")[2].split("/")[0])
    token = sign_in(http, server, register(http, server))["access_token"]
    session = open_session(http, server, token)
    opened = threading.Event()

    def listen() -> None:
        headers = {"Authorization": f"Bearer {token}", "Accept": "text/event-stream", "mcp-session-id": session,
                   "mcp-protocol-version": PROTOCOL}
        try:
            with httpx.stream("GET", server.url, headers=headers, timeout=10) as stream:
                assert stream.status_code == 200
                opened.set()
                for _ in stream.iter_bytes():
                    pass
        except httpx.HTTPError:
            pass

    listener = threading.Thread(target=listen, daemon=True)
    listener.start()
    assert opened.wait(10)
    started = time.monotonic()
    server.stop()
    assert time.monotonic() - started < 0.9   # uvicorn's graceful timeout is 1 s: the sessions were ended first
    listener.join(10)
    with pytest.raises(httpx.ConnectError):
        http.get(server.issuer + ".well-known/oauth-authorization-server")
    with socket.socket() as probe:   # free for a new listener (the closed connections' TIME_WAIT aside)
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.bind(("127.0.0.1", port))
        probe.listen(1)


# ── the SDK's own client ────────────────────────────────────────────────────


def test_sdk_client_lists_and_calls(server: McpServer, http: httpx.Client) -> None:
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    token = sign_in(http, server, register(http, server))["access_token"]

    class Bearer(httpx2.Auth):
        def auth_flow(self, request: Any) -> Any:
            request.headers["Authorization"] = f"Bearer {token}"
            yield request

    async def run() -> tuple[set[str], str]:
        async with httpx2.AsyncClient(auth=Bearer(), timeout=10) as client:
            transport = streamable_http_client(server.url, http_client=client)
            async with Client(transport) as mcp:
                tools = await mcp.list_tools()
                echoed = await mcp.call_tool("echo", {"message": "sdk"})
                return {tool.name for tool in tools.tools}, echoed.content[0].text

    names, text = asyncio.run(asyncio.wait_for(run(), 20))
    assert names == {"echo", "whoami", "admin_echo"} and text == "echo: sdk"


# ── the command line ────────────────────────────────────────────────────────


def test_command_line(http: httpx.Client) -> None:
    """Serves until stdin closes, or until SIGTERM."""
    support = Path(__file__).resolve().parents[1] / "support"
    for ending in ("stdin", "sigterm"):
        child = subprocess.Popen([sys.executable, "-m", "authbridge_testkit.mcp_server", "--access-ttl", "60", "--no-challenge-scope"],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, env={"PYTHONPATH": str(support), "PATH": "/usr/bin:/bin"},
                                 text=True)
        try:
            line = json.loads(child.stdout.readline())
            assert line["url"].endswith("/mcp") and line["issuer"].endswith("/")
            answer = http.post(line["url"], json={}, headers={"Accept": ACCEPT})
            assert answer.status_code == 401 and "scope=" not in answer.headers["www-authenticate"]
            if ending == "stdin":
                child.stdin.close()
            else:
                child.terminate()
            assert child.wait(timeout=10) == 0
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
