"""The bundled `oidc` plugin end to end against three real OpenID providers nobody here wrote:
django-oauth-toolkit, glewlwyd (Debian's package, C) and an OP built on idpyoidc (PyPI).

Each scenario is written once and runs against every server (the parametrized `op` fixture,
Tests/support/authbridge_testkit/openid_servers.py says what each server offers and how it differs);
the servers are started by the suite itself on 127.0.0.1. Where a scenario must see what crossed
the wire (how many refresh grants reached the server, which refresh token a refresh spent), the
profile's token endpoint is a `TokenEndpointRecorder` relaying to the server's own.

What the servers do differently, and the host must cope with (issue 25):
- glewlwyd and idpyoidc send `iss` in the authorization response without advertising
  `authorization_response_iss_parameter_supported`: a present `iss` is checked all the same
  (RFC 9207 §2.4), or a mix-up attacker's code would be redeemed;
- glewlwyd refuses a revoked refresh token with a bodyless 400, idpyoidc with `invalid_request`:
  either is the provider's definitive answer (`-32001` `refreshRefused`), never "offline" forever;
- glewlwyd and idpyoidc match redirect URIs exactly: the browser flow pins `loopbackPort`, and a
  second sign-in right after the first must find that port free (TIME-WAIT);
- glewlwyd refuses revocation by a public client (401): sign-out revokes as the confidential client.
"""

from __future__ import annotations

import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from conftest import begin_sign_in, sign_in_external
from authbridge_testkit.openid_servers import TokenEndpointRecorder, server_fixture

#: Every server of the scenarios; the device flow only where the server has it.
SERVERS = ["dot", "glewlwyd", "idpyoidc"]
DEVICE_SERVERS = ["dot", "glewlwyd"]

#: How each server refuses a refresh whose grant an administrator revoked: the `-32001` reason the
#: host reports, and the OAuth error the server sent (None: none, e.g. glewlwyd's bodyless 400).
ADMIN_REVOCATION = {"dot": ("revoked", "invalid_grant"), "glewlwyd": ("refreshRefused", None),
                    "idpyoidc": ("refreshRefused", "invalid_request")}


#: One real OpenID provider per parameter, started once for the module.
op = server_fixture(SERVERS)


@pytest.fixture
def recorder(op):
    relay = TokenEndpointRecorder(op.token_endpoint)
    yield relay
    relay.close()


def profile(op, **settings) -> dict:
    """A profile of `op`. Through the recorder (an explicit tokenEndpoint), DPoP is off: a proof
    names the URL it was made for (RFC 9449 `htu`), which is the relay's, not the server's; DPoP
    itself is proven in test_dpop.py."""
    if "tokenEndpoint" in settings:
        settings.setdefault("dpop", False)
    return {"p": {"plugin": "oidc", "settings": op.settings(**settings)}}


def get_status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


def refresh_at_server(op, refresh_token: str, confidential: bool = False) -> int:
    """A refresh grant sent to the server directly (as a thief replaying a spent token would)."""
    from authbridge_testkit.openid_servers import CONFIDENTIAL_CLIENT, CONFIDENTIAL_SECRET, PUBLIC_CLIENT
    form = {"grant_type": "refresh_token", "refresh_token": refresh_token,
            "client_id": CONFIDENTIAL_CLIENT if confidential else PUBLIC_CLIENT}
    if confidential:
        form["client_secret"] = CONFIDENTIAL_SECRET
    request = urllib.request.Request(op.token_endpoint, data=urllib.parse.urlencode(form).encode(),
                                     headers={"Accept": "application/json"})
    return get_status(request)


# ── Sign-in ─────────────────────────────────────────────────────────────────


def test_external_sign_in_names_the_account_from_a_verified_id_token(start_host, oidc_plugin_dir, op, recorder):
    host = start_host([oidc_plugin_dir], profiles=profile(op, tokenEndpoint=recorder.url))
    status = sign_in_external(host, op, "p")
    claims = recorder.id_token_claims()
    assert claims["iss"] == op.issuer
    assert status["account"]["id"] == claims["sub"], "the account is the verified ID token's subject"
    token = host.result("getAccessToken", {"provider": "p"})
    assert token["headers"]["Authorization"] == f"Bearer {token['accessToken']}"
    assert op.introspect(token["accessToken"]), "the server knows the token the host hands out"


def test_an_id_token_with_a_broken_signature_is_refused_and_nothing_is_kept(start_host, oidc_plugin_dir, op, recorder):
    host = start_host([oidc_plugin_dir], profiles=profile(op, tokenEndpoint=recorder.url))
    recorder.tamper_id_token = True
    pending, opened = begin_sign_in(host, "p", flow="external")
    assert host.result("completeSignIn", {"provider": "p", "callbackUrl": op.browse(opened["url"])}) == {"accepted": True}
    error = host.wait_response(pending)["error"]
    assert error["code"] == -32004 and error["data"]["reason"] == "invalidSignature", error
    assert host.result("listAccounts", {"provider": "p"}) == {"accounts": []}


def test_a_callback_naming_another_issuer_is_refused_before_its_code_is_redeemed(start_host, oidc_plugin_dir, op, recorder):
    """RFC 9207 §2.4 (issue 25 §2.1): glewlwyd and idpyoidc send `iss` without advertising it.
    Before, the host compared it only where advertised: against them a mix-up callback naming
    https://attacker.example/ was answered {"accepted": true} and its code redeemed."""
    host = start_host([oidc_plugin_dir], profiles=profile(op, tokenEndpoint=recorder.url))
    pending, opened = begin_sign_in(host, "p", flow="external")
    callback = op.browse(opened["url"])
    query = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(callback).query))
    assert query.get("iss") == op.issuer, "the server sends iss in its authorization response"
    forged = callback.replace("iss=" + urllib.parse.quote(query["iss"], safe=""),
                              "iss=" + urllib.parse.quote("https://attacker.example/", safe=""))
    assert forged != callback
    host.result("completeSignIn", {"provider": "p", "callbackUrl": forged})
    error = host.wait_response(pending)["error"]
    assert error["code"] == -32004 and error["data"]["reason"] == "issuerMismatch", error
    assert recorder.codes_redeemed == 0 and not recorder.grants("authorization_code", status=None), "the code was not redeemed"
    assert host.result("checkSignInStatus", {"provider": "p"})["state"] == "notSignedIn"


def test_browser_sign_ins_one_after_another_on_the_pinned_port(start_host, oidc_plugin_dir, op):
    """Servers that match redirect URIs exactly need a pinned loopbackPort (issue 25 §2.3). Before,
    the second sign-in within a minute answered -32007 "port … is in use" (the first one's served
    connection sat in TIME-WAIT), without data.provider."""
    host = start_host([oidc_plugin_dir], profiles=profile(op, loopbackPort=op.loopback_port))
    for user, password in [("ada", "lovelace-test"), ("grace", "hopper-test")]:
        pending = host.send_request("requestOAuthTokens", {"provider": "p", "flow": "browser"})
        opened = host.wait_for_notification("signIn/progress", lambda p: p["requestId"] == pending and p["stage"] == "openUrl")
        query = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(opened["url"]).query))
        if "request_uri" not in query:   # pushed (RFC 9126, glewlwyd and idpyoidc): the redirect URI went with it
            assert query["redirect_uri"] == f"http://127.0.0.1:{op.loopback_port}/callback"
        host.wait_for_notification("signIn/progress", lambda p: p["requestId"] == pending and p["stage"] == "waiting")
        location = op.browse(opened["url"], user=user, password=password)
        assert location.startswith(f"http://127.0.0.1:{op.loopback_port}/callback?")
        assert get_status(location) == 200   # the browser follows the redirect
        answer = host.wait_response(pending)
        assert answer.get("result", {}).get("state") == "signedIn", answer
    assert len(host.result("listAccounts", {"provider": "p"})["accounts"]) == 2


@pytest.mark.parametrize("op", DEVICE_SERVERS, indirect=True)
def test_device_sign_in(start_host, oidc_plugin_dir, op):
    settings = op.device_settings() if hasattr(op, "device_settings") else op.settings()
    host = start_host([oidc_plugin_dir], profiles={"tv": {"plugin": "oidc", "settings": settings}})
    pending = host.send_request("requestOAuthTokens", {"provider": "tv", "flow": "device"})
    shown = host.wait_for_notification("signIn/progress", lambda p: p["requestId"] == pending and p["stage"] == "deviceCode")
    assert shown["userCode"] and shown["verificationUri"].startswith(op.base)
    op.approve_device(shown["userCode"], shown["verificationUri"])           # the user, on another device
    answer = host.wait_response(pending)
    assert answer.get("result", {}).get("state") == "signedIn", answer
    assert op.introspect(host.result("getAccessToken", {"provider": "tv"})["accessToken"])


# ── Refresh ─────────────────────────────────────────────────────────────────


def test_rotation_retires_the_spent_refresh_token_at_the_server(start_host, oidc_plugin_dir, op, recorder):
    host = start_host([oidc_plugin_dir], profiles=profile(op, tokenEndpoint=recorder.url))
    sign_in_external(host, op, "p")
    first = host.result("getAccessToken", {"provider": "p"})["accessToken"]
    second = host.result("getAccessToken", {"provider": "p", "forceRefresh": True})["accessToken"]
    assert second != first and op.introspect(second)
    spent, fresh = recorder.last_refresh()
    assert fresh and fresh != spent, "the server rotated the refresh token"
    assert not op.introspect(spent), "the spent refresh token is retired at the server"
    # The host goes on with the new one.
    third = host.result("getAccessToken", {"provider": "p", "forceRefresh": True})["accessToken"]
    assert third not in (first, second) and recorder.refreshes == 2
    # A thief replaying the first spent token is refused at the server. (Servers with reuse
    # protection — DOT, glewlwyd — end the whole chain; the host then must not report "offline".)
    assert refresh_at_server(op, spent) in (400, 401)
    answer = host.request("getAccessToken", {"provider": "p", "forceRefresh": True})
    if "error" in answer:
        assert answer["error"]["code"] == -32001, answer
        assert host.result("checkSignInStatus", {"provider": "p"})["state"] == "notSignedIn"


def test_two_hundred_callers_of_an_expired_token_cause_one_refresh(start_host, oidc_plugin_dir, op, recorder):
    host = start_host([oidc_plugin_dir], profiles=profile(op, tokenEndpoint=recorder.url), test_clock=True)
    sign_in_external(host, op, "p")
    host.result("$/test/advanceClock", {"milliseconds": 2 * 3600 * 1000})   # the access token has expired
    ids = [host.send_request("getAccessToken", {"provider": "p"}) for _ in range(200)]
    tokens = {host.wait_response(request_id)["result"]["accessToken"] for request_id in ids}
    assert len(tokens) == 1, "every caller gets the one refreshed token"
    assert recorder.refreshes == 1, "exactly one refresh reached the server"
    assert op.introspect(tokens.pop())


# ── Endings ─────────────────────────────────────────────────────────────────


def test_sign_out_revokes_at_the_server(start_host, oidc_plugin_dir, op, recorder):
    # As the confidential client: glewlwyd refuses a public client's revocation (401).
    host = start_host([oidc_plugin_dir], profiles=profile(op, confidential=True, tokenEndpoint=recorder.url))
    sign_in_external(host, op, "p")
    access = host.result("getAccessToken", {"provider": "p"})["accessToken"]
    refresh = recorder.issued_refresh_token()
    assert op.introspect(access) and op.introspect(refresh)
    result = host.result("signOut", {"provider": "p"})
    assert "refresh_token" in result["revoked"], result
    assert not op.introspect(refresh), "the refresh token is revoked at the server"
    assert not op.introspect(access), "and so is the access token"
    assert host.result("checkSignInStatus", {"provider": "p"})["state"] == "notSignedIn"


def test_sign_out_ends_the_session_even_where_revocation_is_refused(start_host, oidc_plugin_dir, op):
    host = start_host([oidc_plugin_dir], profiles=profile(op))
    sign_in_external(host, op, "p")
    result = host.result("signOut", {"provider": "p"})
    # glewlwyd answers a public client's revocation 401: listed as a failure, never kept signed in.
    assert set(result["revoked"]) | {f["token"] for f in result.get("failures", [])} >= {"refresh_token"}, result
    assert host.result("checkSignInStatus", {"provider": "p"})["state"] == "notSignedIn"
    assert host.result("listAccounts", {"provider": "p"}) == {"accounts": []}


def test_an_administrators_revocation_ends_the_session(start_host, oidc_plugin_dir, op):
    """Issue 25 §2.2: glewlwyd refuses the revoked refresh token with a bodyless 400, idpyoidc with
    `invalid_request`. Before, both were `-32007 badResponse`, retryable forever, and the session sat
    `offline`: the frontend never learnt the user must sign in again."""
    host = start_host([oidc_plugin_dir], profiles=profile(op), test_clock=True)
    sign_in_external(host, op, "p", user="grace", password="hopper-test")
    op.admin_revoke("grace")
    host.result("$/test/advanceClock", {"milliseconds": 2 * 3600 * 1000})   # the access token has expired
    mark = host.mark()
    error = host.error("getAccessToken", {"provider": "p"})
    reason, oauth_error = ADMIN_REVOCATION[op.name]
    assert error["code"] == -32001 and error["data"]["reason"] == reason, error
    assert error["data"]["retryable"] is False and error["data"].get("status") in (400, 401), error
    if reason == "refreshRefused":
        assert error["data"].get("oauthError") == oauth_error, error
        assert str(error["data"]["status"]) in error["message"], error
    changed = host.wait_for_notification("session/changed", lambda p: p["state"] == "signedOut", since=mark)
    assert changed["reason"] == reason and changed["provider"] == "p"
    assert host.result("checkSignInStatus", {"provider": "p"})["state"] == "notSignedIn"
    assert host.result("listAccounts") == {"accounts": []}


def test_a_stopped_server_leaves_the_user_signed_in(start_host, oidc_plugin_dir, op):
    host = start_host([oidc_plugin_dir], profiles=profile(op), test_clock=True)
    sign_in_external(host, op, "p")
    held = host.result("getAccessToken", {"provider": "p"})["accessToken"]
    op.stop()
    try:
        # The held token is still valid: served without the server.
        assert host.result("getAccessToken", {"provider": "p"})["accessToken"] == held
        host.result("$/test/advanceClock", {"milliseconds": 2 * 3600 * 1000})   # and now it has expired
        status = host.result("checkSignInStatus", {"provider": "p"})
        assert status["state"] == "offline" and status["message"], status        # not signed out
        error = host.error("getAccessToken", {"provider": "p"})
        assert error["code"] == -32007 and error["data"]["retryable"] is True, error
    finally:
        op.start()                                                                # back, same port and state
    assert host.result("checkSignInStatus", {"provider": "p"})["state"] == "signedIn"
    assert op.introspect(host.result("getAccessToken", {"provider": "p"})["accessToken"])
