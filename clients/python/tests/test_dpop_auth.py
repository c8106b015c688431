"""The auth objects for requests and httpx against servers that bind tokens to a key (RFC 9449
DPoP): glewlwyd and the idpyoidc OP of the test kit advertise it, so the profile's tokens are
DPoP-bound with no setting at all. Code written for bearer tokens — `auth=AuthBridgeAuth(…)` —
works unchanged: each request asks the host for its own proof (the request's method and URL go
along), and a server that wants its nonce in the proof (a 401 `use_dpop_nonce`) gets the request
once more with a proof that carries it. The key never leaves the host."""

from __future__ import annotations

import asyncio
import json
import urllib.request
from collections.abc import Iterator

import httpx
import pytest
import requests
from authbridge_testkit.openid_servers import make_server, server_fixture
from conftest import WAIT, sign_in_external_blocking

import authbridge
import authbridge.sync
from authbridge.httpx import AuthBridgeAuth as HttpxAuth
from authbridge.requests import AuthBridgeAuth as RequestsAuth


op = server_fixture(["glewlwyd", "idpyoidc"])


def userinfo(op) -> str:
    with urllib.request.urlopen(f"{op.issuer.rstrip('/')}/.well-known/openid-configuration", timeout=WAIT) as answer:
        return json.load(answer)["userinfo_endpoint"]


def test_requests_and_httpx_work_unchanged_against_a_dpop_server(host_options, op):
    with authbridge.sync.connect(**host_options(profiles={"p": {"plugin": "oidc", "settings": op.settings()}})) as bridge:
        sub = sign_in_external_blocking(bridge, "p", op.browse).account.id
        assert bridge.check_sign_in_status("p").token_type == "DPoP"
        url = userinfo(op)
        with requests.Session() as session:
            session.auth = RequestsAuth(bridge, "p")
            for _ in range(3):   # a proof per request: a replayed one would be refused
                answer = session.get(url, timeout=WAIT)
                assert (answer.status_code, answer.json()["sub"]) == (200, sub)
            assert answer.request.headers["Authorization"].startswith("DPoP ") and answer.request.headers["DPoP"]
        with httpx.Client(auth=HttpxAuth(bridge, "p"), timeout=WAIT) as client:
            answer = client.get(url, params={"q": "1"})
            assert (answer.status_code, answer.json()["sub"]) == (200, sub)
        # The header alone, as a thief would copy it from the request: refused.
        stolen = {"Authorization": answer.request.headers["Authorization"]}
        assert requests.get(url, headers=stolen, timeout=WAIT).status_code in (400, 401)


async def test_httpx_async_client_against_a_dpop_server(host_options, op):
    async with authbridge.connect(**host_options(profiles={"p": {"plugin": "oidc", "settings": op.settings()}})) as bridge:
        progress = bridge.events("signIn/progress")
        signing_in = asyncio.ensure_future(bridge.request_oauth_tokens("p", flow="external"))
        opened = await progress.next(timeout=WAIT)
        progress.close()
        callback = await asyncio.to_thread(op.browse, opened.url)
        assert await bridge.complete_sign_in("p", callback)
        status = await signing_in
        async with httpx.AsyncClient(auth=HttpxAuth(bridge, "p"), timeout=WAIT) as client:
            answers = await asyncio.gather(*(client.get(userinfo(op)) for _ in range(4)))
        assert {(answer.status_code, answer.json()["sub"]) for answer in answers} == {(200, status.account.id)}


@pytest.fixture(scope="module")
def nonce_op(tmp_path_factory) -> Iterator:
    """glewlwyd that wants its nonce in every proof, a nonce good for 2 uses (RFC 9449 §8–9)."""
    server = make_server("glewlwyd", tmp_path_factory.mktemp("glewlwyd-nonce"),
                         oidc_overrides={"oauth-dpop-nonce-mandatory": True, "oauth-dpop-nonce-counter": 2}).start()
    yield server
    server.stop()


def test_a_resource_servers_nonce_request_is_answered_with_a_new_proof(host_options, nonce_op):
    with authbridge.sync.connect(**host_options(profiles={"p": {"plugin": "oidc", "settings": nonce_op.settings()}})) as bridge:
        sub = sign_in_external_blocking(bridge, "p", nonce_op.browse).account.id
        url = userinfo(nonce_op)
        history = []
        with requests.Session() as session:
            session.auth = RequestsAuth(bridge, "p")
            for _ in range(6):
                answer = session.get(url, timeout=WAIT)
                assert (answer.status_code, answer.json()["sub"]) == (200, sub)
                history += [response.status_code for response in answer.history]
        with httpx.Client(auth=HttpxAuth(bridge, "p"), timeout=WAIT) as client:
            for _ in range(6):
                answer = client.get(url)
                assert answer.status_code == 200
        assert 401 in history, "the server asked for new nonces along the way, and each request was answered"
