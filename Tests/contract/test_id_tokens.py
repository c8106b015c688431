"""ID tokens from the real django-oauth-toolkit: verified before anything is stored.

DOT signs ID tokens with RS256 and publishes its key at jwks_uri. Its test endpoint
`/test/tamper` alters the next ID tokens the token endpoint hands out: a flipped signature,
or re-signed with DOT's own key but naming another audience, an `exp` in the past, or another
`nonce`. Each must fail the sign-in with -32004 and the check's name, and leave nothing behind:
no session, no account, no vault record, and the tokens DOT issued never reach the frontend.
"""

from __future__ import annotations

import json

import pytest

from conftest import begin_sign_in, session_records
from authbridge_testkit.dot_auth import dot_fixture

PROVIDER_REFUSED = -32004


dot = dot_fixture("module")


@pytest.fixture
def host(start_host, oidc_plugin_dir, dot):
    settings = {"issuer": f"{dot.base}/o", "clientId": "authbridge-test", "redirectUri": dot.redirect_uri,
                "scopes": ["openid", "read"]}
    yield start_host([oidc_plugin_dir], profiles={"dot": {"plugin": "oidc", "settings": settings}})
    dot.tamper_id_tokens("none")


def sign_in(host, dot) -> dict:
    """The external flow with DOT's scripted user; the raw answer (result or error)."""
    pending, opened = begin_sign_in(host, "dot", flow="external")
    assert host.result("completeSignIn", {"provider": "dot", "callbackUrl": dot.browse(opened["url"])}) == {"accepted": True}
    return host.wait_response(pending)


def subject_of(dot, user: str = "ada") -> str:
    return dot._get_json(f"/test/user?name={user}")["sub"]


def test_a_verified_id_token_names_the_account(host, dot):
    answer = sign_in(host, dot)
    assert answer["result"]["state"] == "signedIn"
    assert answer["result"]["account"]["id"] == subject_of(dot), "the account is the ID token's sub"
    changed = host.notifications("session/changed")[-1]
    assert changed["state"] == "signedIn" and changed["account"]["id"] == subject_of(dot)
    # The ID token itself stays in the host: a frontend gets the access token only.
    token = host.result("getAccessToken", {"provider": "dot"})
    assert "idToken" not in json.dumps(token) and token["account"]["id"] == subject_of(dot)


@pytest.mark.parametrize("mode, reason", [
    ("signature", "invalidSignature"),
    ("aud", "audienceMismatch"),
    ("exp", "expired"),
    ("nonce", "nonceMismatch"),
])
def test_a_bad_id_token_is_refused_before_anything_is_stored(host, dot, mode, reason):
    dot.tamper_id_tokens(mode)
    mark = host.mark()
    answer = sign_in(host, dot)
    error = answer.get("error")
    assert error and error["code"] == PROVIDER_REFUSED and error["data"]["reason"] == reason, answer
    assert error["data"]["retryable"] is False
    assert host.result("checkSignInStatus", {"provider": "dot"})["state"] == "notSignedIn"
    assert host.result("listAccounts", {"provider": "dot"}) == {"accounts": []}
    assert not [n for n in host.notifications("session/changed", since=mark)], "no session was announced"
    vault = host.workdir / "xdg-data" / "authbridge" / "vault"
    assert not session_records(vault), "no session was written to the vault"


def test_the_id_token_is_checked_against_the_host_clock(start_host, oidc_plugin_dir, dot):
    """DOT's ID tokens live 10 hours: with the host's clock 11 hours ahead the same token is expired."""
    settings = {"issuer": f"{dot.base}/o", "clientId": "authbridge-test", "redirectUri": dot.redirect_uri,
                "scopes": ["openid"], "clockSkewSeconds": 60}
    host = start_host([oidc_plugin_dir], profiles={"dot": {"plugin": "oidc", "settings": settings}}, test_clock=True)
    host.result("$/test/advanceClock", {"milliseconds": 11 * 3600 * 1000})
    error = sign_in(host, dot).get("error")
    assert error and error["data"]["reason"] == "expired", error
    host.result("$/test/advanceClock", {"milliseconds": -11 * 3600 * 1000})
    assert sign_in(host, dot)["result"]["state"] == "signedIn"
