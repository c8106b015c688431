"""Sign in to an MCP server by its URL alone, and step up on its 403 insufficient_scope: the
kit's MCP server (Tests/support/authbridge_testkit/mcp_server.py, its own authorization server)
through the real host, whose `oidc` profile of settings `{"resource": URL}` discovers the
authorization server (RFC 9728, RFC 8414) and registers itself (RFC 7591). The `mcp` SDK's client
speaks streamable HTTP over `httpx2.AsyncClient(auth=authbridge.httpx2.AuthBridgeAuth)`; requests
and httpx speak the JSON-RPC themselves. The user is the kit's, who approves at once: following
the authorization URL once (no redirects followed) gives the redirect, which the external flow
hands to `completeSignIn`. Also: parsing WWW-Authenticate challenges (no host needed)."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import httpx2
import pytest
import requests
from conftest import WAIT

import authbridge
import authbridge.sync
from authbridge._httpauth import Challenge, insufficient_scope, parse_challenges
from authbridge.httpx import AuthBridgeAuth as HttpxAuth
from authbridge.httpx2 import AuthBridgeAuth as Httpx2Auth
from authbridge.requests import AuthBridgeAuth as RequestsAuth

ACCEPT = "application/json, text/event-stream"


# ── WWW-Authenticate ─────────────────────────────────────────────────────────

def test_challenges_are_parsed_with_their_quoted_strings_and_token68s():
    assert parse_challenges('Basic realm="a, b", Bearer realm="x\\"y", error=insufficient_scope, scope="a b"') == [
        Challenge("Basic", {"realm": "a, b"}), Challenge("Bearer", {"realm": 'x"y', "error": "insufficient_scope", "scope": "a b"})]
    assert parse_challenges('Newauth realm="apps", type=1, title="Login to \\"apps\\"", Basic realm="simple"') == [
        Challenge("Newauth", {"realm": "apps", "type": "1", "title": 'Login to "apps"'}), Challenge("Basic", {"realm": "simple"})]
    assert parse_challenges("Negotiate abc==, Bearer") == [Challenge("Negotiate", {}, "abc=="), Challenge("Bearer", {})]
    assert parse_challenges(",, Bearer ,  Basic realm=x") == [Challenge("Bearer", {}), Challenge("Basic", {"realm": "x"})]
    assert parse_challenges('Bearer SCOPE="a", scope="b"') == [Challenge("Bearer", {"scope": "a"})]   # the first wins
    assert parse_challenges('Bearer realm="unterminated') == []
    assert parse_challenges('Basic realm="x", Bearer error="insufficient_scope" junk') == [Challenge("Basic", {"realm": "x"}),
                                                                                         Challenge("Bearer", {"error": "insufficient_scope"})]
    assert parse_challenges("") == []


def test_insufficient_scope_is_a_403_bearer_or_dpop_challenge_naming_scopes():
    step = 'Bearer error="insufficient_scope", scope="mcp:tools mcp:admin", resource_metadata="http://127.0.0.1/x"'
    assert insufficient_scope(403, {"WWW-Authenticate": step}) == ["mcp:tools", "mcp:admin"]
    assert insufficient_scope(403, {"WWW-Authenticate": f'Basic realm="scope=x", {step}'}) == ["mcp:tools", "mcp:admin"]
    assert insufficient_scope(403, {"WWW-Authenticate": 'DPoP error="insufficient_scope", scope="a  b a"'}) == ["a", "b"]
    assert insufficient_scope(401, {"WWW-Authenticate": step}) is None
    assert insufficient_scope(403, {"WWW-Authenticate": 'Bearer error="insufficient_scope"'}) is None      # no scope
    assert insufficient_scope(403, {"WWW-Authenticate": 'Basic error="insufficient_scope", scope="a"'}) is None
    assert insufficient_scope(403, {"WWW-Authenticate": 'Bearer error="invalid_token", scope="a"'}) is None
    assert insufficient_scope(403, {}) is None
    several = httpx.Headers([("WWW-Authenticate", 'Basic realm="x"'), ("WWW-Authenticate", step)])
    assert insufficient_scope(403, several) == ["mcp:tools", "mcp:admin"]


def test_profile_names_come_from_the_host_and_port():
    assert authbridge.profile_name_for_url("http://127.0.0.1:8080/mcp") == "127.0.0.1-8080"
    assert authbridge.profile_name_for_url("https://MCP.example.com:443/mcp") == "mcp.example.com"
    assert authbridge.profile_name_for_url("https://mcp.example.com:8443/") == "mcp.example.com-8443"
    with pytest.raises(ValueError):
        authbridge.profile_name_for_url("mailto:someone@example.com")


# ── Against the kit's MCP server and the real host ───────────────────────────

@pytest.fixture
def mcp_server() -> Iterator[Any]:
    from authbridge_testkit.mcp_server import McpServer
    server = McpServer().start()
    yield server
    server.stop()


def approve(url: str) -> str:
    """The kit's user at the authorization URL: its redirect, with code and state."""
    answer = httpx.get(url, follow_redirects=False, timeout=WAIT)
    assert answer.status_code == 302, answer.text[:300]
    return answer.headers["location"]


class External:
    """`on_progress` of the external flow, for an asyncio bridge: at openUrl the user approves, and
    the redirect goes to `complete_sign_in`. Counts the sign-ins it completed."""

    def __init__(self, bridge: authbridge.AuthBridge) -> None:
        self.bridge = bridge
        self.completed = 0

    def __call__(self, event: authbridge.SignInProgress) -> Any:
        if event.stage != "openUrl" or not event.url:
            return None
        url = event.url

        async def complete() -> None:
            location = await asyncio.to_thread(approve, url)
            assert await self.bridge.complete_sign_in(event.provider, location)
            self.completed += 1
        return complete()


def sent(frames, method: str) -> list[dict[str, Any]]:
    return [frame.get("params", {}) for frame in frames.sent_frames if frame.get("method") == method]


async def test_the_sdk_client_signs_in_by_the_url_alone_and_steps_up_for_admin_echo(host_options, mcp_server, frames):
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    async with authbridge.connect(**host_options()) as bridge:
        external = External(bridge)
        auth = await bridge.auth_for_url(mcp_server.url, library="httpx2", flow="external", on_progress=external)
        assert isinstance(auth, Httpx2Auth) and external.completed == 1
        profile = authbridge.profile_name_for_url(mcp_server.url)
        assert sent(frames, "configureProfile") == [{"name": profile, "plugin": "oidc", "settings": {"resource": mcp_server.url}}]
        assert len(mcp_server.clients) == 1, "the host registered itself once"
        async with httpx2.AsyncClient(auth=auth, timeout=WAIT) as http, \
                Client(streamable_http_client(mcp_server.url, http_client=http)) as mcp:
            tools = await mcp.list_tools()
            assert {tool.name for tool in tools.tools} == {"echo", "whoami", "admin_echo"}
            echoed = await mcp.call_tool("echo", {"message": "by URL"})
            assert [part.text for part in echoed.content] == ["echo: by URL"]
            who = json.loads((await mcp.call_tool("whoami", {})).content[0].text)
            assert who["sub"] == "mcp-user" and "mcp:admin" not in who["scopes"]

            admin = await mcp.call_tool("admin_echo", {"message": "stepped up"})
            assert [part.text for part in admin.content] == ["admin echo: stepped up"]
            assert external.completed == 2, "one step-up sign-in"
            step_ups = sent(frames, "requestOAuthTokens")[1:]
            assert step_ups == [{"provider": profile, "flow": "external", "scopes": ["mcp:tools", "mcp:admin"]}]
            who = json.loads((await mcp.call_tool("whoami", {})).content[0].text)
            assert {"mcp:tools", "mcp:admin"} <= set(who["scopes"])
        token = (await bridge.get_access_token(profile)).access_token
        info = mcp_server.token_info(token)
        assert info and info["resource"] == mcp_server.url and "mcp:admin" in info["scopes"]
        assert len(mcp_server.clients) == 1, "the step-up used the same registration"


async def test_without_step_up_the_403_is_the_answer(host_options, mcp_server, frames):
    async with authbridge.connect(**host_options()) as bridge:
        external = External(bridge)
        auth = await bridge.auth_for_url(mcp_server.url, flow="external", on_progress=external, step_up=False)
        assert isinstance(auth, HttpxAuth)
        async with httpx.AsyncClient(auth=auth, timeout=WAIT) as http:
            session = await initialize(http, mcp_server.url)
            answer = await http.post(mcp_server.url, json=call("admin_echo", {"message": "no"}), headers=session)
            assert answer.status_code == 403 and insufficient_scope(403, answer.headers) == ["mcp:tools", "mcp:admin"]
        assert external.completed == 1 and len(sent(frames, "requestOAuthTokens")) == 1


async def test_the_session_and_registration_outlive_the_host(host_options, mcp_server, frames):
    options = host_options()
    async with authbridge.connect(**options) as bridge:
        status = await bridge.sign_in_to_url(mcp_server.url, flow="external", on_progress=External(bridge))
        assert status.signed_in and status.provider == authbridge.profile_name_for_url(mcp_server.url)
        assert status.issuer == mcp_server.issuer and status.dynamic_client is True
        [profile] = [p for p in (await bridge.list_providers()).profiles if p.name == status.provider]
        assert profile.resource == mcp_server.url and profile.issuer == mcp_server.issuer and profile.dynamic_client
    async with authbridge.connect(**options) as bridge:
        again = await bridge.sign_in_to_url(mcp_server.url, on_progress=None)
        assert again.signed_in and again.account == status.account
        async with httpx.AsyncClient(auth=HttpxAuth(bridge, again.provider), timeout=WAIT) as http:
            session = await initialize(http, mcp_server.url)
            answer = await http.post(mcp_server.url, json=call("echo", {"message": "kept"}), headers=session)
            assert answer.status_code == 200 and "echo: kept" in answer.text
    assert len(sent(frames, "requestOAuthTokens")) == 1, "no second sign-in"
    assert len(mcp_server.clients) == 1, "the registration was kept in the vault"


def call(tool: str, arguments: dict[str, Any], number: int = 2) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": number, "method": "tools/call", "params": {"name": tool, "arguments": arguments}}


INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
              "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "test", "version": "1"}}}


async def initialize(http: httpx.AsyncClient, url: str) -> dict[str, str]:
    """initialize and notifications/initialized; the headers of the session's later requests."""
    answer = await http.post(url, json=INITIALIZE, headers={"Accept": ACCEPT})
    assert answer.status_code == 200, answer.text[:300]
    headers = {"Accept": ACCEPT, "mcp-session-id": answer.headers["mcp-session-id"]}
    done = await http.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=headers)
    assert done.status_code == 202
    return headers


def test_requests_and_blocking_httpx_step_up_through_a_blocking_bridge(host_options, mcp_server, frames):
    with authbridge.sync.connect(**host_options()) as bridge:
        completed: list[int] = []

        def on_progress(event: authbridge.SignInProgress) -> None:
            # Runs on the bridge's loop thread: the user and complete_sign_in on a thread of their own.
            if event.stage == "openUrl" and event.url:
                url = event.url

                def complete() -> None:
                    assert bridge.complete_sign_in(event.provider, approve(url))
                    completed.append(1)
                threading.Thread(target=complete, daemon=True).start()

        auth = bridge.auth_for_url(mcp_server.url, library="requests", flow="external", on_progress=on_progress)
        assert isinstance(auth, RequestsAuth) and len(completed) == 1
        with requests.Session() as session:
            session.auth = auth
            first = session.post(mcp_server.url, json=INITIALIZE, headers={"Accept": ACCEPT}, timeout=WAIT)
            headers = {"Accept": ACCEPT, "mcp-session-id": first.headers["mcp-session-id"]}
            assert session.post(mcp_server.url, json={"jsonrpc": "2.0", "method": "notifications/initialized"},
                                headers=headers, timeout=WAIT).status_code == 202
            admin = session.post(mcp_server.url, json=call("admin_echo", {"message": "requests"}), headers=headers, timeout=WAIT)
            assert admin.status_code == 200 and "admin echo: requests" in admin.text
            assert [r.status_code for r in admin.history] == [403] and len(completed) == 2

        # httpx.Client, the same profile: it holds mcp:admin now, so no further step-up.
        with httpx.Client(auth=HttpxAuth(bridge, auth._source.profile, flow="external", on_progress=on_progress),
                          timeout=WAIT) as http:
            answer = http.post(mcp_server.url, json=INITIALIZE, headers={"Accept": ACCEPT})
            assert answer.status_code == 200 and len(completed) == 2
    assert [p.get("scopes") for p in sent(frames, "requestOAuthTokens")] == [None, ["mcp:tools", "mcp:admin"]]


async def test_the_hosts_fetch_steps_up_too(host_options, mcp_server, frames):
    """`bridge.fetch` (the host makes the request): its step-up's sign-in reports to `on_progress`."""
    async with authbridge.connect(**host_options()) as bridge:
        external = External(bridge)
        profile = (await bridge.sign_in_to_url(mcp_server.url, flow="external", on_progress=external)).provider
        opened = await bridge.fetch(profile, mcp_server.url, method="POST", headers={"Accept": ACCEPT, "Content-Type": "application/json"},
                                    body=json.dumps(INITIALIZE))
        assert opened.status == 200
        headers = {"Accept": ACCEPT, "Content-Type": "application/json", "mcp-session-id": opened.headers["mcp-session-id"]}
        refused = await bridge.fetch(profile, mcp_server.url, method="POST", headers=headers, step_up=False,
                                     body=json.dumps(call("admin_echo", {"message": "no"})))
        assert refused.status == 403 and external.completed == 1
        answer = await bridge.fetch(profile, mcp_server.url, method="POST", headers=headers, on_progress=external,
                                    body=json.dumps(call("admin_echo", {"message": "host"}, 3)))
        assert answer.status == 200 and "admin echo: host" in answer.body and external.completed == 2


async def test_concurrent_403s_make_one_step_up(host_options, mcp_server, frames):
    async with authbridge.connect(**host_options()) as bridge:
        external = External(bridge)
        auth = await bridge.auth_for_url(mcp_server.url, flow="external", on_progress=external)
        async with httpx.AsyncClient(auth=auth, timeout=WAIT) as http:
            session = await initialize(http, mcp_server.url)
            answers = await asyncio.gather(*(http.post(mcp_server.url, json=call("admin_echo", {"message": str(n)}, 10 + n),
                                                       headers=session) for n in range(4)))
        assert [a.status_code for a in answers] == [200] * 4
        assert [[r.status_code for r in a.history] for a in answers] == [[403]] * 4
        assert external.completed == 2, "the sign-in and one step-up"
        assert len(sent(frames, "requestOAuthTokens")) == 2
