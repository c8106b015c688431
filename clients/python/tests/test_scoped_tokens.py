"""Issue 30 from the Python client: `scopes` and `resource` on `get_access_token`, `fetch` and the
HTTP auth objects, `resource` and the "clientCredentials" flow on `request_oauth_tokens`,
`exchange_token` (async and blocking), and `missing_scopes` on -32004 "insufficientScope".

What the provider does with them is the host's (Tests/contract, the test kit's glewlwyd and
idpyoidc); here: each name reaches the wire as bridge-spec spells it, is accepted by the host's
params check, and DOT's downscoped refresh comes back as a token."""

from __future__ import annotations

import httpx
import pytest
import requests
from conftest import WAIT, dot_profiles, sign_in_blocking

import authbridge
import authbridge.sync
from authbridge.errors import error_from_wire
from authbridge.httpx import AuthBridgeAuth as HttpxAuth
from authbridge.requests import AuthBridgeAuth as RequestsAuth

API = "https://api.example.test/v1"


def sent(frames, method: str) -> list[dict]:
    return [f["params"] for f in frames.sent_frames if f.get("method") == method]


def test_missing_scopes_of_an_insufficient_scope_refusal():
    error = error_from_wire({"code": -32004, "message": "The grant does not cover these scopes",
                             "data": {"provider": "dot", "reason": "insufficientScope", "retryable": False,
                                      "missingScopes": ["write", "admin"]}}, "getAccessToken")
    assert isinstance(error, authbridge.ProviderRefused)
    assert error.reason == "insufficientScope"
    assert error.missing_scopes == ("write", "admin")
    assert error_from_wire({"code": -32004, "message": "no", "data": {"reason": "invalid_grant"}}).missing_scopes == ()


def test_a_downscoped_token_and_the_names_on_the_wire(host_options, dot, frames):
    with authbridge.sync.connect(**host_options(profiles=dot_profiles(dot))) as bridge:
        sign_in_blocking(bridge, dot)
        whole = bridge.get_access_token("dot")
        narrow = bridge.get_access_token("dot", scopes=["read"])
        assert narrow.access_token and narrow.access_token != whole.access_token
        assert bridge.get_access_token("dot", scopes=["read"]).access_token == narrow.access_token, "kept per scopes"
        assert sent(frames, "getAccessToken")[-2:] == [{"provider": "dot", "scopes": ["read"]}] * 2

        # A lone resource goes as a string, several as an array (a string is never split).
        for resource in (API, [API, "https://other.example.test/"], (API,)):
            try:
                bridge.get_access_token("dot", scopes=["read"], resource=resource)
            except authbridge.InvalidParams:
                raise
            except authbridge.AuthBridgeError:
                pass        # what DOT answers to a resource is the host's and DOT's affair
        assert [p["resource"] for p in sent(frames, "getAccessToken")[-3:]] == [
            API, [API, "https://other.example.test/"], [API]]

        with pytest.raises(authbridge.AuthBridgeError) as refused:
            bridge.exchange_token("dot", audience="billing", resource=API, scopes=["read"],
                                  requested_token_type="accessToken", subject_token_type="idToken",
                                  min_validity_ms=30_000, timeout=WAIT)
        assert not isinstance(refused.value, authbridge.InvalidParams), refused.value
        assert sent(frames, "exchangeToken")[-1] == {
            "provider": "dot", "audience": "billing", "resource": API, "scopes": ["read"],
            "requestedTokenType": "accessToken", "subjectTokenType": "idToken", "minValidityMs": 30_000}


def test_the_auth_objects_and_fetch_pass_scopes_and_resource(host_options, dot, frames):
    with authbridge.sync.connect(**host_options(profiles=dot_profiles(dot))) as bridge, requests.Session() as session:
        sign_in_blocking(bridge, dot)
        userinfo = f"{dot.base}/o/userinfo/"
        auth = RequestsAuth(bridge, "dot", scopes=["openid", "read"])
        assert session.get(userinfo, auth=auth, timeout=WAIT).status_code == 200
        assert sent(frames, "getAccessToken")[-1] == {"provider": "dot", "scopes": ["openid", "read"], "method": "GET",
                                                      "url": userinfo}
        assert repr(auth) == "authbridge.requests.AuthBridgeAuth(profile='dot', account=None, scopes=('openid', 'read'))"
        result = bridge.fetch("dot", userinfo, scopes=["openid", "read"], timeout=WAIT)
        assert result.status == 200
        assert sent(frames, "fetch")[-1] == {"provider": "dot", "url": userinfo, "scopes": ["openid", "read"]}
        # DOT revokes a refresh token's earlier access tokens when it is used again: the token of
        # another key (the resource's, next) ends this one, so the fetch comes first.
        with httpx.Client(auth=HttpxAuth(bridge, "dot", scopes=["openid", "read"], resource=[API])) as client:
            try:
                client.get(userinfo)
            except authbridge.InvalidParams:
                raise
            except authbridge.AuthBridgeError:
                pass
        with_resource = [p for p in sent(frames, "getAccessToken") if "resource" in p]
        # (Then, if DOT's userinfo refused that token, its renewal with forceRefresh: the same scopes and resource.)
        assert with_resource[0] == {"provider": "dot", "scopes": ["openid", "read"], "resource": [API], "method": "GET",
                                    "url": userinfo}
        assert all(p["scopes"] == ["openid", "read"] and p["resource"] == [API] for p in with_resource)


def test_client_credentials_flow_and_resource_on_sign_in_reach_the_host(host_options, dot, frames):
    with authbridge.sync.connect(**host_options(profiles=dot_profiles(dot))) as bridge:
        with pytest.raises(authbridge.AuthBridgeError) as refused:
            bridge.request_oauth_tokens("dot", flow="clientCredentials", resource=API, timeout=WAIT)
        assert not isinstance(refused.value, authbridge.InvalidParams), refused.value
        assert sent(frames, "requestOAuthTokens")[-1] == {"provider": "dot", "flow": "clientCredentials", "resource": API}
