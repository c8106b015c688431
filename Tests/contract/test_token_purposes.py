"""Tokens for exactly what a caller calls (issue 30), end to end through the host against the real
servers of the test kit: glewlwyd (Debian's package) and the idpyoidc OP (PyPI), with the kit's
resource server, which serves each resource only to a token whose audience it is (it asks the
authorization server by RFC 7662 introspection).

- per-request resources (RFC 8707 §2.2) and scopes (RFC 6749 §6): `getAccessToken` and `fetch` with
  `resource`/`scopes` get a token for that purpose, kept per purpose in the session's record, one
  grant for any number of callers;
- incremental consent: scopes the grant lacks are an answer that names them, and
  `requestOAuthTokens` with them asks the user again, keeping the account;
- token exchange (RFC 8693, idpyoidc: glewlwyd has none): `exchangeToken`;
- machine identities: the client credentials grant with `client_secret_basic` and with
  `private_key_jwt` (RFC 7523), a tampered assertion refused by the server, a fleet of hosts on one
  PostgreSQL vault sharing one grant.

Before issue 30 `getAccessToken` with `scopes` or `resource` was refused -32602, `resource` was
never sent on a token request, there was no `clientCredentials` flow and no client assertion.

What the servers do differently, and how the host copes (the kit's test_kit_token_grants.py
measures each):
- glewlwyd issues a token for one resource only: several `resource` on one token request are
  refused. The host names every resource on the authorization request and, on a token request,
  only one: the purpose's, or the profile's when it has one.
- glewlwyd ignores a refresh's `scope` (the grant's scopes come back), idpyoidc narrows or refuses
  (`invalid_request`). The host refuses scopes beyond what the server said the grant holds itself.
- client assertions: both want `aud` = the token endpoint (the host's default); glewlwyd answers a
  bad one 403 without a body, idpyoidc 401 `invalid_client`: both are the client refused.
"""

from __future__ import annotations

import base64
import json
import os
import threading
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from conftest import sign_in_external
from authbridge_testkit.host import advance_clock
from postgres_fixtures import FleetDatabase, fleet_db, machines, postgres  # noqa: F401 - fixtures
from authbridge_testkit.openid_servers import (CONFIDENTIAL_CLIENT, CONFIDENTIAL_SECRET, JWT_CLIENT, TokenEndpointRecorder,
                                               make_server, server_fixture)

@pytest.fixture(scope="module", params=["glewlwyd", "idpyoidc"])
def op(request, tmp_path_factory):
    """glewlwyd without refresh-token rotation: it binds a rotated refresh token to the one
    resource of the refresh that issued it, so a session with rotation gets tokens for one
    resource only (test_glewlwyd_binds_a_rotated_refresh_token_to_one_resource)."""
    options = {"oidc_overrides": {"refresh-token-one-use": "never"}} if request.param == "glewlwyd" else {}
    server = make_server(request.param, tmp_path_factory.mktemp(request.param), **options).start()
    yield server
    server.stop()


rotating_glewlwyd = server_fixture(["glewlwyd"])


def claims(token: str) -> dict[str, Any]:
    payload = token.split(".")[1]
    return json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))


def audiences(op, token: str) -> list[str]:
    aud = op.introspection(token).get("aud")
    return [] if aud is None else [aud] if isinstance(aud, str) else list(aud)


def call(url: str, token: str) -> int:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


def profile(op, **settings) -> dict:
    # Bearer tokens: the kit's resource server introspects plain bearer tokens (DPoP is issue 29's).
    return {"p": {"plugin": "oidc", "settings": op.settings(**{"dpop": False, **settings})}}


def test_two_resources_give_two_tokens_each_served_only_by_its_own(start_host, oidc_plugin_dir, op):
    a, b = op.resources
    recorder = TokenEndpointRecorder(op.token_endpoint)
    try:
        host = start_host([oidc_plugin_dir], profiles=profile(op, resources=[a, b], tokenEndpoint=recorder.url))
        sign_in_external(host, op, "p")
        token_a = host.result("getAccessToken", {"provider": "p", "resource": a})
        token_b = host.result("getAccessToken", {"provider": "p", "resource": [b]})
        assert token_a["accessToken"] != token_b["accessToken"]
        assert a in audiences(op, token_a["accessToken"]) and b not in audiences(op, token_a["accessToken"])
        assert b in audiences(op, token_b["accessToken"]) and a not in audiences(op, token_b["accessToken"])
        assert call(a, token_a["accessToken"]) == 200 and call(b, token_a["accessToken"]) == 401
        assert call(b, token_b["accessToken"]) == 200 and call(a, token_b["accessToken"]) == 401
        # Each token request named one resource: the one it was for (RFC 8707 §2.2).
        refreshes = recorder.grants("refresh_token")
        assert [e["form"].get("resource") for e in refreshes] == [a, b], refreshes
        # Kept per purpose: asked again, the same token, no grant.
        again = host.result("getAccessToken", {"provider": "p", "resource": a})
        assert again["accessToken"] == token_a["accessToken"] and len(recorder.grants("refresh_token")) == 2
        # fetch to a URL under a configured resource uses that resource's token.
        assert host.result("fetch", {"provider": "p", "url": b})["status"] == 200
        assert host.result("fetch", {"provider": "p", "url": a + "/items?x=1"})["status"] in (200, 404)
        served = host.result("fetch", {"provider": "p", "url": a})
        assert served["status"] == 200 and json.loads(served["body"])["resource"] == a
        # The session's own token is still the session's, and its refresh token the one.
        assert host.result("checkSignInStatus", {"provider": "p"})["state"] == "signedIn"
        text = host.all_output_text()
        assert recorder.issued_refresh_token() not in text
    finally:
        recorder.close()


def test_glewlwyd_binds_a_rotated_refresh_token_to_one_resource(start_host, oidc_plugin_dir, rotating_glewlwyd):
    """glewlwyd with rotation: after a refresh for resource B, the rotated refresh token is good for
    B only, and a refresh for A (the session's own token's) is refused invalid_target. A careful
    client keeps the session (the server refused a resource, not the grant) and says so."""
    op = rotating_glewlwyd
    a, b = op.resources
    host = start_host([oidc_plugin_dir], profiles=profile(op, resources=[a, b]))
    sign_in_external(host, op, "p")
    token_b = host.result("getAccessToken", {"provider": "p", "resource": b})
    assert call(b, token_b["accessToken"]) == 200
    error = host.error("getAccessToken", {"provider": "p", "forceRefresh": True})
    assert error["code"] == -32004 and error["data"]["reason"] == "invalid_target", error
    assert host.result("checkSignInStatus", {"provider": "p"})["state"] == "signedIn"
    assert host.result("getAccessToken", {"provider": "p", "resource": b})["accessToken"] == token_b["accessToken"]


def test_a_purpose_token_is_refreshed_ahead_of_its_expiry(start_host, oidc_plugin_dir, op):
    """Past three quarters of its lifetime (the host's test clock moved there), the caller gets the
    kept token at once and the next one is fetched in the background, once."""
    a, b = op.resources
    recorder = TokenEndpointRecorder(op.token_endpoint)
    try:
        host = start_host([oidc_plugin_dir], profiles=profile(op, resources=[a, b], tokenEndpoint=recorder.url), test_clock=True)
        sign_in_external(host, op, "p")
        first = host.result("getAccessToken", {"provider": "p", "resource": b})
        advance_clock(host, 2_800_000)   # the kit's tokens live an hour: past three quarters, 800 s left
        ahead = host.result("getAccessToken", {"provider": "p", "resource": b, "minValidityMs": 0})
        assert ahead["accessToken"] == first["accessToken"], "handed out at once"
        def for_b() -> list:
            return [e for e in recorder.grants("refresh_token") if e["form"].get("resource") == b]
        # The server answering is not the host having stored it: ask until the kept token is the new
        # one (bounded round trips, no sleep); the host's test clock says which is newer.
        renewed, rounds = ahead, 500
        while renewed["expiresAt"] == first["expiresAt"] and rounds:
            renewed = host.result("getAccessToken", {"provider": "p", "resource": b, "minValidityMs": 0})
            rounds -= 1
        assert len(for_b()) == 2, "one refresh ahead, in the background, for any number of calls"
        assert renewed["expiresAt"] > first["expiresAt"] and call(b, renewed["accessToken"]) == 200
    finally:
        recorder.close()


def test_twenty_callers_for_one_purpose_cause_one_grant(start_host, oidc_plugin_dir, op):
    a, b = op.resources
    recorder = TokenEndpointRecorder(op.token_endpoint)
    try:
        host = start_host([oidc_plugin_dir], profiles=profile(op, resources=[a, b], tokenEndpoint=recorder.url))
        sign_in_external(host, op, "p")
        ids = [host.send_request("getAccessToken", {"provider": "p", "resource": a if i % 2 else b}) for i in range(40)]
        answers = [host.wait_response(i) for i in ids]
        assert all("result" in answer for answer in answers), [a for a in answers if "error" in a][:2]
        tokens = {answer["result"]["accessToken"] for answer in answers}
        assert len(tokens) == 2, "one token per purpose"
        assert len(recorder.grants("refresh_token", status=None)) == 2, "one grant per purpose, whatever the callers"
    finally:
        recorder.close()


def test_a_downscoped_token_and_scopes_the_grant_lacks(start_host, oidc_plugin_dir, op):
    host = start_host([oidc_plugin_dir], profiles=profile(op))
    sign_in_external(host, op, "p")
    granted = set(op.settings()["scopes"])
    narrow = sorted(granted - {"offline_access"})[:1]
    token = host.result("getAccessToken", {"provider": "p", "scopes": narrow})
    scope = set((op.introspection(token["accessToken"]).get("scope") or "").split())
    if op.name == "idpyoidc":
        assert scope == set(narrow), scope   # idpyoidc narrows; glewlwyd answers with the grant's scopes
    assert set(narrow) <= scope
    error = host.error("getAccessToken", {"provider": "p", "scopes": [*narrow, "write"]})
    assert error["code"] == -32004 and error["data"]["reason"] == "insufficientScope", error
    assert error["data"]["missingScopes"] == ["write"] and "requestOAuthTokens" in error["message"]
    # The session is kept: a refusal of scopes is no refusal of the grant.
    assert host.result("checkSignInStatus", {"provider": "p"})["state"] == "signedIn"
    assert host.result("getAccessToken", {"provider": "p"})["accessToken"]


def test_incremental_consent_keeps_the_account(start_host, oidc_plugin_dir, op):
    extra = "email" if op.name == "idpyoidc" else "g_profile"
    base = [scope for scope in op.settings()["scopes"] if scope != extra]
    host = start_host([oidc_plugin_dir], profiles=profile(op, scopes=base))
    first = sign_in_external(host, op, "p")
    error = host.error("getAccessToken", {"provider": "p", "scopes": [extra]})
    assert error["data"]["reason"] == "insufficientScope" and error["data"]["missingScopes"] == [extra]
    again = sign_in_external(host, op, "p", params={"scopes": error["data"]["missingScopes"]})
    assert again["account"]["id"] == first["account"]["id"]
    accounts = host.result("listAccounts", {"provider": "p"})["accounts"]
    assert len(accounts) == 1, "the same account, its session replaced"
    token = host.result("getAccessToken", {"provider": "p", "scopes": [extra]})
    assert extra in (op.introspection(token["accessToken"]).get("scope") or "").split()


def test_client_credentials_with_client_secret_basic(start_host, oidc_plugin_dir, op):
    recorder = TokenEndpointRecorder(op.token_endpoint)
    try:
        settings = {"issuer": op.issuer, "clientId": CONFIDENTIAL_CLIENT, "clientSecret": CONFIDENTIAL_SECRET,
                    "clientAuthentication": "client_secret_basic", "scopes": op.client_credentials_scopes[:1],
                    "tokenEndpoint": recorder.url, "dpop": False}
        host = start_host([oidc_plugin_dir], profiles={"m": {"plugin": "oidc", "settings": settings}})
        status = host.result("requestOAuthTokens", {"provider": "m", "flow": "clientCredentials"})
        assert status["state"] == "signedIn" and status["account"]["id"] == CONFIDENTIAL_CLIENT
        token = host.result("getAccessToken", {"provider": "m"})
        assert op.introspection(token["accessToken"])["active"] is True
        grant = recorder.grants("client_credentials")[-1]
        assert "client_secret" not in grant["form"] and "client_assertion" not in grant["form"]
        # No refresh token: renewed by a new grant.
        renewed = host.result("getAccessToken", {"provider": "m", "forceRefresh": True})
        assert renewed["accessToken"] != token["accessToken"] and len(recorder.grants("client_credentials")) == 2
        assert not any(e["answer"] and e["answer"].get("refresh_token") and e["answer"]["refresh_token"] in host.all_output_text()
                       for e in recorder.exchanges)
    finally:
        recorder.close()


def write_key(path: Path, text: str, mode: int) -> Path:
    path.write_text(text)
    os.chmod(path, mode)
    return path


def test_private_key_jwt_client_with_no_user(start_host, oidc_plugin_dir, op, tmp_path):
    """A fleet worker: the profile signs its client in itself (`clientCredentials`), authenticated
    by an assertion signed with its private key; getAccessToken works with no sign-in at all."""
    key = write_key(tmp_path / "client.pem", Path(op.jwt_client_key_file).read_text(), 0o600)
    settings = {"issuer": op.issuer, "clientId": JWT_CLIENT, "privateKeyFile": str(key), "privateKeyId": op.jwt_client_key_id,
                "clientCredentials": True, "scopes": op.client_credentials_scopes[:1], "dpop": False}
    host = start_host([oidc_plugin_dir], profiles={"m": {"plugin": "oidc", "settings": settings}})
    token = host.result("getAccessToken", {"provider": "m"})
    assert op.introspection(token["accessToken"])["active"] is True and token["account"]["id"] == JWT_CLIENT
    assert host.result("checkSignInStatus", {"provider": "m"})["account"]["id"] == JWT_CLIENT
    # A key file others can read is refused with the fix in the message.
    os.chmod(key, 0o644)
    loose = start_host([oidc_plugin_dir], profiles={"m": {"plugin": "oidc", "settings": settings}})
    error = loose.error("getAccessToken", {"provider": "m"})
    assert error["data"]["reason"] == "insecurePermissions" and "chmod 600" in error["message"], error


def test_a_tampered_assertion_is_refused_by_the_server(start_host, oidc_plugin_dir, op, tmp_path):
    """The host signs with another key than the one registered: the server refuses the client."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()).decode()
    key = write_key(tmp_path / "other.pem", other, 0o600)
    settings = {"issuer": op.issuer, "clientId": JWT_CLIENT, "privateKeyFile": str(key), "privateKeyId": op.jwt_client_key_id,
                "scopes": op.client_credentials_scopes[:1], "dpop": False}
    host = start_host([oidc_plugin_dir], profiles={"m": {"plugin": "oidc", "settings": settings}})
    error = host.error("requestOAuthTokens", {"provider": "m", "flow": "clientCredentials"})
    assert error["code"] == -32004 and error["data"]["reason"] in ("invalid_client", "clientRefused"), error
    assert host.result("checkSignInStatus", {"provider": "m"})["state"] == "notSignedIn"


def test_token_exchange(start_host, oidc_plugin_dir, op):
    if op.name != "idpyoidc":
        pytest.skip("glewlwyd has no token exchange (RFC 8693)")
    a, b = op.resources
    host = start_host([oidc_plugin_dir], profiles=profile(op, confidential=True, resources=[a]))
    sign_in_external(host, op, "p")
    exchanged = host.result("exchangeToken", {"provider": "p", "resource": b, "scopes": ["openid", "profile"]})
    assert exchanged["tokenType"] == "Bearer" and exchanged["details"]["issuedTokenType"] == "accessToken"
    assert audiences(op, exchanged["accessToken"]) == [b]
    assert call(b, exchanged["accessToken"]) == 200
    # Kept and reused while valid.
    assert host.result("exchangeToken", {"provider": "p", "resource": b, "scopes": ["openid", "profile"]})["accessToken"] == exchanged["accessToken"]
    audience = host.result("exchangeToken", {"provider": "p", "audience": op.exchange_audience})
    assert audiences(op, audience["accessToken"]) == [op.exchange_audience]
    by_id_token = host.result("exchangeToken", {"provider": "p", "resource": b, "subjectTokenType": "idToken"})
    assert op.introspection(by_id_token["accessToken"])["active"] is True
    # A refusal is an answer; the session stays.
    error = host.error("exchangeToken", {"provider": "p", "audience": "nobody-knows-this"})
    assert error["code"] == -32004 and error["data"]["reason"] == "invalid_target", error
    assert host.result("checkSignInStatus", {"provider": "p"})["state"] == "signedIn"
    error = host.error("exchangeToken", {"provider": "p", "requestedTokenType": "refreshToken"})
    assert error["code"] == -32602


def test_a_fleet_on_postgres_shares_one_client_credentials_grant(machines, op):
    recorder = TokenEndpointRecorder(op.token_endpoint)
    try:
        settings = {"issuer": op.issuer, "clientId": CONFIDENTIAL_CLIENT, "clientSecret": CONFIDENTIAL_SECRET,
                    "clientCredentials": True, "scopes": op.client_credentials_scopes[:1], "tokenEndpoint": recorder.url,
                    "dpop": False}
        fleet = machines({"m": {"plugin": "oidc", "settings": settings}})
        hosts = [fleet.start(f"m{i}") for i in range(3)]
        answers: list[Any] = [None] * 15
        def ask(index: int) -> None:
            answers[index] = hosts[index % 3].request("getAccessToken", {"provider": "m"})
        threads = [threading.Thread(target=ask, args=(i,)) for i in range(15)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
        assert all(answer and "result" in answer for answer in answers), answers
        assert len({answer["result"]["accessToken"] for answer in answers}) == 1
        assert len(recorder.grants("client_credentials", status=None)) == 1, "one grant for the whole fleet"
    finally:
        recorder.close()
