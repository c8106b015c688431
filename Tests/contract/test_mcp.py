"""Signing in to a protected API by its URL alone (issue 31), end to end through the host against the
kit's own MCP server (`authbridge_testkit.mcp_server`: the `mcp` SDK 2.3.0's auth routes over an
in-memory authorization server of the kit's, auto-approving a test user):

- RFC 9728: the host asks the resource without a token, follows the 401's `resource_metadata`,
  checks that the document is about that very resource, and takes its authorization server
  (RFC 8414 metadata, PKCE S256 required);
- RFC 7591: with no `clientId`, the host registers a public native client with exact loopback
  redirect URIs, keeps the registration in the vault per authorization server, reuses it for
  other profiles and after a restart, and registers again when the server has forgotten it;
- RFC 8707: the resource is on the authorization request and every grant — the server accepts
  a token at the MCP endpoint only when it is bound to exactly that URL;
- the MCP step-up: a 403 `insufficient_scope` on `fetch` asks the user once for the scopes it
  names (incremental consent) and replays the request.

Before issue 31 a profile `{"resource": URL}` was refused -32013 (clientId required), and with an
`issuer` of the MCP URL discovery failed -32007.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from authbridge_testkit.mcp_server import McpServer
from conftest import HOST_BIN, sign_in_external
from test_browser import chromium  # noqa: F401 - the headless Chromium fixture

CONFIGURATION_ERROR = -32013
NOT_SIGNED_IN = -32001

ACCEPT = "application/json, text/event-stream"


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):  # the test reads each Location itself
        return None


class McpBrowser:
    """The kit's MCP server as `sign_in_external` drives a server: the authorization URL's
    prefix, and a browser that follows it (the test user approves at once) to the redirect."""

    def __init__(self, server: McpServer) -> None:
        self.server = server
        self.authorize_prefix = server.issuer + "authorize"
        self.redirect_uri = None

    def browse(self, url: str, **_: str) -> str:
        opener = urllib.request.build_opener(_NoRedirect)
        try:
            opener.open(url, timeout=30)
        except urllib.error.HTTPError as answer:
            if answer.code in (302, 303, 307):
                return answer.headers["Location"]
            raise AssertionError(f"/authorize answered {answer.code}: {answer.read()[:300]!r}") from None
        raise AssertionError("/authorize did not redirect")


@pytest.fixture
def mcp():
    servers: list[McpServer] = []

    def start(**options: Any) -> McpServer:
        server = McpServer(**options).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


def mcp_call(host, profile: str, url: str, method: str, params: dict | None = None, session: str | None = None,
             request_id: int = 1) -> tuple[int, dict[str, str], Any]:
    """One MCP JSON-RPC request through the host's `fetch`; (status, headers, the JSON-RPC answer)."""
    headers = {"Accept": ACCEPT, "Content-Type": "application/json"}
    if session:
        headers["mcp-session-id"] = session
    body = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params or {}}
    answer = host.result("fetch", {"provider": profile, "url": url, "method": "POST", "headers": headers,
                                   "body": json.dumps(body)})
    text = answer["body"]
    message = None
    if answer["status"] == 200:
        if text.lstrip().startswith("{"):
            message = json.loads(text)
        else:   # one SSE event
            data = [line[5:].strip() for line in text.splitlines() if line.startswith("data:")]
            message = json.loads(data[-1]) if data else None
    return answer["status"], answer["headers"], message


def initialize_mcp(host, profile: str, url: str) -> str:
    status, headers, message = mcp_call(host, profile, url, "initialize", {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "contract-tests", "version": "1"}})
    assert status == 200 and message and "result" in message, (status, message)
    session = headers.get("mcp-session-id")
    assert session, headers
    host.result("fetch", {"provider": profile, "url": url, "method": "POST", "headers": {
        "Accept": ACCEPT, "Content-Type": "application/json", "mcp-session-id": session},
        "body": json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"})})
    return session


def access_token(host, profile: str, **params: Any) -> str:
    return host.result("getAccessToken", {"provider": profile, **params})["accessToken"]


def test_a_profile_with_only_the_resource_url_signs_in_registers_itself_and_calls_tools(start_host, oidc_plugin_dir, mcp):
    server = mcp()
    host = start_host([oidc_plugin_dir], profiles={"tools": {"plugin": "oidc", "settings": {"resource": server.url}}})
    info = host.result("configureProfile", {"name": "tools2", "plugin": "oidc", "settings": {"resource": server.url}})
    assert info["status"] == "ready" and info["issuer"] == server.issuer and info["resource"] == server.url
    assert "dynamicClient" not in info, "nothing is registered before a sign-in"
    assert server.clients == {}

    status = sign_in_external(host, McpBrowser(server), "tools")
    assert status["issuer"] == server.issuer and status["dynamicClient"] is True

    # RFC 7591: one public native client, exact loopback redirect URIs, the app's name, the 401's scope.
    (client_id, registration), = server.clients.items()
    assert registration["token_endpoint_auth_method"] == "none"
    assert sorted(registration["grant_types"]) == ["authorization_code", "refresh_token"]
    assert registration["client_name"] == "contract-tests"
    uris = registration["redirect_uris"]
    assert len(uris) == 3 and all(uri.startswith("http://127.0.0.1:") and uri.endswith("/callback") for uri in uris)
    assert len({urllib.parse.urlsplit(uri).port for uri in uris}) == 3
    assert set(registration["scope"].split()) >= {"mcp:tools", "mcp:admin"}, "every scope the resource knows (for step-ups)"

    # RFC 8707: the token is bound to the MCP URL; only the 401's scope was asked for.
    info = server.token_info(access_token(host, "tools"))
    assert info["resource"] == server.url and info["client_id"] == client_id and info["scopes"] == ["mcp:tools"]

    session = initialize_mcp(host, "tools", server.url)
    status_code, _, listed = mcp_call(host, "tools", server.url, "tools/list", session=session, request_id=2)
    assert status_code == 200 and {tool["name"] for tool in listed["result"]["tools"]} >= {"echo", "whoami", "admin_echo"}
    status_code, _, called = mcp_call(host, "tools", server.url, "tools/call", {"name": "echo", "arguments": {"message": "hi"}},
                                      session=session, request_id=3)
    assert status_code == 200 and called["result"]["content"][0]["text"] == "echo: hi"

    # The profile info now says how the client came to be.
    profiles = {p["name"]: p for p in host.result("listProviders")["profiles"]}
    assert profiles["tools"]["issuer"] == server.issuer and profiles["tools"]["dynamicClient"] is True


def test_refresh_rotates_and_keeps_the_resource_and_sign_out_revokes_at_the_server(start_host, oidc_plugin_dir, mcp):
    server = mcp()
    host = start_host([oidc_plugin_dir], profiles={"tools": {"plugin": "oidc", "settings": {"resource": server.url}}})
    sign_in_external(host, McpBrowser(server), "tools")
    first = access_token(host, "tools")
    second = host.result("getAccessToken", {"provider": "tools", "forceRefresh": True})["accessToken"]
    assert second != first and ("refresh_token", 200) in server.grants
    assert server.token_info(second)["resource"] == server.url, "the refreshed token is still for the MCP URL"
    session = initialize_mcp(host, "tools", server.url)
    assert session

    answer = host.result("signOut", {"provider": "tools"})
    assert ("refresh", next(iter(server.clients))) in server.revoked, answer
    assert server.token_info(second) is None, "revoking the refresh token ended its grant"
    assert host.result("checkSignInStatus", {"provider": "tools"})["state"] == "notSignedIn"


def test_the_sdk_s_stock_revocation_refusing_a_public_client_still_signs_the_user_out(start_host, oidc_plugin_dir, mcp):
    server = mcp(public_revocation=False)
    host = start_host([oidc_plugin_dir], profiles={"tools": {"plugin": "oidc", "settings": {"resource": server.url}}})
    sign_in_external(host, McpBrowser(server), "tools")
    token = access_token(host, "tools")
    answer = host.result("signOut", {"provider": "tools"})
    assert server.revoked == [] and answer.get("revoked") is not True, answer
    assert host.result("checkSignInStatus", {"provider": "tools"})["state"] == "notSignedIn"
    assert server.token_info(token) is not None, "the server kept its token: the host says so rather than pretending"


def test_the_registration_is_reused_by_other_profiles_and_across_restarts(start_host, oidc_plugin_dir, mcp, tmp_path):
    server = mcp()
    data_home = tmp_path / "data-home"
    profiles = {"a": {"plugin": "oidc", "settings": {"resource": server.url}},
                "b": {"plugin": "oidc", "settings": {"resource": server.url}}}
    host = start_host([oidc_plugin_dir], profiles=profiles, env={"XDG_DATA_HOME": str(data_home)})
    sign_in_external(host, McpBrowser(server), "a")
    sign_in_external(host, McpBrowser(server), "b")
    assert len(server.clients) == 1, "the second profile used the stored registration"
    host.stop()

    again = start_host([oidc_plugin_dir], profiles=profiles, env={"XDG_DATA_HOME": str(data_home)})
    status = again.result("checkSignInStatus", {"provider": "a"})
    assert status["state"] == "signedIn" and status["dynamicClient"] is True
    session = initialize_mcp(again, "b", server.url)
    assert session and len(server.clients) == 1


def test_a_registration_the_server_forgot_is_made_again(start_host, oidc_plugin_dir, mcp):
    server = mcp()
    host = start_host([oidc_plugin_dir], profiles={"a": {"plugin": "oidc", "settings": {"resource": server.url}},
                                                   "b": {"plugin": "oidc", "settings": {"resource": server.url}}})
    sign_in_external(host, McpBrowser(server), "a")
    (old_client, _), = server.clients.items()
    server.forget_clients()   # an in-memory server restarted

    # A new sign-in does not send the user to an error page: the host notices and registers again.
    sign_in_external(host, McpBrowser(server), "b")
    (new_client, _), = server.clients.items()
    assert new_client != old_client
    assert server.token_info(access_token(host, "b"))["client_id"] == new_client

    # The session of the forgotten client ends on the server's invalid_client, and the next sign-in works.
    error = host.error("getAccessToken", {"provider": "a", "forceRefresh": True})
    assert error["code"] == NOT_SIGNED_IN, error
    sign_in_external(host, McpBrowser(server), "a")
    assert server.token_info(access_token(host, "a"))["client_id"] in server.clients


def test_insufficient_scope_asks_the_user_once_and_replays(start_host, oidc_plugin_dir, mcp):
    server = mcp()
    host = start_host([oidc_plugin_dir], profiles={"tools": {"plugin": "oidc", "settings": {"resource": server.url}}})
    sign_in_external(host, McpBrowser(server), "tools")
    account = host.result("checkSignInStatus", {"provider": "tools"})["account"]
    session = initialize_mcp(host, "tools", server.url)
    body = json.dumps({"jsonrpc": "2.0", "id": 9, "method": "tools/call",
                       "params": {"name": "admin_echo", "arguments": {"message": "up"}}})
    request_id = host.send_request("fetch", {
        "provider": "tools", "url": server.url, "method": "POST", "body": body,
        "headers": {"Accept": ACCEPT, "Content-Type": "application/json", "mcp-session-id": session}})
    opened = host.wait_for_notification(
        "signIn/progress", lambda p: p.get("stage") == "openUrl" and p.get("requestId") == request_id)
    query = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(opened["url"]).query))
    assert set(query["scope"].split()) == {"mcp:tools", "mcp:admin"}, "the account's scopes plus the challenge's"
    assert query["resource"] == server.url
    location = McpBrowser(server).browse(opened["url"])
    assert host.result("completeSignIn", {"provider": "tools", "callbackUrl": location}) == {"accepted": True}
    answer = host.wait_response(request_id)
    assert "result" in answer, answer
    assert answer["result"]["status"] == 200 and "admin echo: up" in answer["result"]["body"]
    assert host.result("checkSignInStatus", {"provider": "tools"})["account"] == account, "the same account"
    assert set(server.token_info(access_token(host, "tools"))["scopes"]) == {"mcp:tools", "mcp:admin"}

    # stepUp false: the 403 is the answer.
    other = mcp()
    host.result("configureProfile", {"name": "plain", "plugin": "oidc", "settings": {"resource": other.url}})
    sign_in_external(host, McpBrowser(other), "plain")
    session = initialize_mcp(host, "plain", other.url)
    answer = host.result("fetch", {
        "provider": "plain", "url": other.url, "method": "POST", "body": body, "stepUp": False,
        "headers": {"Accept": ACCEPT, "Content-Type": "application/json", "mcp-session-id": session}})
    assert answer["status"] == 403 and "insufficient_scope" in answer["headers"]["www-authenticate"]


@pytest.mark.parametrize("options, reason", [
    ({"prm_resource": "http://127.0.0.1:9/other"}, "resourceMismatch"),
    ({"pkce_methods": ["plain"]}, "pkceUnsupported"),
    ({"pkce_methods": None}, "pkceUnsupported"),
    ({"registration": False}, "missingSetting"),
], ids=["metadata-for-another-resource", "no-S256", "no-PKCE-listed", "no-registration"])
def test_a_resource_the_host_cannot_trust_or_use_is_refused_before_any_sign_in(start_host, oidc_plugin_dir, mcp, options, reason):
    server = mcp(**options)
    host = start_host([oidc_plugin_dir])
    error = host.error("configureProfile", {"name": "tools", "plugin": "oidc", "settings": {"resource": server.url}})
    assert error["code"] == CONFIGURATION_ERROR and error["data"]["reason"] == reason, error
    assert server.clients == {} and server.grants == []


def test_without_a_scope_in_the_challenge_the_resource_s_scopes_are_asked_for(start_host, oidc_plugin_dir, mcp):
    server = mcp(challenge_scope=None)
    host = start_host([oidc_plugin_dir], profiles={"tools": {"plugin": "oidc", "settings": {"resource": server.url}}})
    sign_in_external(host, McpBrowser(server), "tools")
    assert set(server.token_info(access_token(host, "tools"))["scopes"]) == {"mcp:read", "mcp:tools", "mcp:admin"}


BROWSER = """#!{python}
import sys, urllib.request
urllib.request.urlopen(sys.argv[1], timeout=30).read()   # the test user approves at once; the redirect reaches the listener
"""


def test_authbridge_login_with_only_the_url_makes_a_profile_and_signs_in(tmp_path, oidc_plugin_dir, mcp):

    server = mcp()
    for name in ("config", "data", "home", "bin"):
        (tmp_path / name).mkdir()
    browser = tmp_path / "bin" / "xdg-open"
    browser.write_text(BROWSER.format(python=sys.executable))
    browser.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in ("DBUS_SESSION_BUS_ADDRESS", "AUTHBRIDGE_VAULT_KEY", "NO_COLOR")}
    env.update(XDG_CONFIG_HOME=str(tmp_path / "config"), XDG_DATA_HOME=str(tmp_path / "data"), HOME=str(tmp_path / "home"),
               PATH=f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    common = ["--no-default-plugins", "--plugins", str(oidc_plugin_dir)]

    def authbridge(command: str, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(HOST_BIN), command, *common, *args], env=env, capture_output=True, text=True, timeout=120,
                              stdin=subprocess.DEVNULL)

    login = authbridge("login", server.url)
    assert login.returncode == 0, login.stderr
    name = f"127.0.0.1-{urllib.parse.urlsplit(server.url).port}"
    assert login.stdout.startswith(f"✓ Signed in to {name}"), login.stdout
    config = tmp_path / "config" / "authbridge" / "config.json"
    assert json.loads(config.read_text())["profiles"] == {name: {"plugin": "oidc", "settings": {"resource": server.url}}}
    assert stat.S_IMODE(config.stat().st_mode) == 0o600 and stat.S_IMODE(config.parent.stat().st_mode) == 0o700
    (client_id, registration), = server.clients.items()
    assert registration["client_name"] == "authbridge-cli"

    status, = json.loads(authbridge("status", name, "--json").stdout)
    assert status["state"] == "signedIn" and status["issuer"] == server.issuer and status["dynamicClient"] is True
    assert "registered there (RFC 7591)" in authbridge("status").stdout
    token = authbridge("token", name)
    assert token.returncode == 0 and server.token_info(token.stdout.strip())["resource"] == server.url

    # A second profile of the same server by name: the registration is reused; the file keeps both.
    second = authbridge("login", server.url, "--profile", "work-mcp")
    assert second.returncode == 0, second.stderr
    assert len(server.clients) == 1
    assert set(json.loads(config.read_text())["profiles"]) == {name, "work-mcp"}
    # A name already used for something else is refused, and nothing changes.
    other = mcp()
    clash = authbridge("login", other.url, "--profile", "work-mcp")
    assert clash.returncode == 78 and "already" in clash.stderr and "--profile" in clash.stderr
    assert json.loads(config.read_text())["profiles"]["work-mcp"]["settings"]["resource"] == server.url
    assert authbridge("status", "work-mcp").returncode == 0, "the clash signed nobody out"


def test_the_browser_flow_in_headless_chromium_comes_back_to_a_registered_port(start_host, oidc_plugin_dir, mcp, chromium):
    server = mcp()
    host = start_host([oidc_plugin_dir], profiles={"tools": {"plugin": "oidc", "settings": {"resource": server.url}}})
    request_id = host.send_request("requestOAuthTokens", {"provider": "tools", "flow": "browser"})
    opened = host.wait_for_notification(
        "signIn/progress", lambda p: p.get("stage") == "openUrl" and p.get("requestId") == request_id)
    redirect = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(opened["url"]).query))["redirect_uri"]
    (_, registration), = server.clients.items()
    assert redirect == registration["redirect_uris"][0], "the first registered port, exactly"
    chromium.get(opened["url"])   # the test user approves at once: straight back to the host's listener
    answer = host.wait_response(request_id)
    assert "result" in answer and answer["result"]["state"] == "signedIn", answer
    assert chromium.current_url.startswith(redirect.rsplit("/", 1)[0])
    assert server.token_info(access_token(host, "tools"))["resource"] == server.url
