"""The bundled `oidc` plugin against the real django-oauth-toolkit: discovery, sign-in with
PKCE through DOT's login page, tokens, an authorized request and revocation."""

from __future__ import annotations

import urllib.request

import pytest

from conftest import Host, host_command, sign_in_external
from dot_auth import DotAuthServer


@pytest.fixture(scope="module")
def dot(tmp_path_factory):
    server = DotAuthServer(tmp_path_factory.mktemp("dot"), access_lifetime=3600).start()
    yield server
    server.stop()


def start(tmp_path, plugin_dir, profiles) -> Host:
    argv, env = host_command(tmp_path / "host", [plugin_dir], profiles=profiles)
    host = Host(argv, env, tmp_path / "host")
    host.initialize()
    return host


def test_discovery_sign_in_fetch_and_revocation(tmp_path, oidc_plugin_dir, dot):
    # Only the issuer: the endpoints come from its discovery document.
    settings = {"issuer": f"{dot.base}/o", "clientId": "authbridge-test", "redirectUri": dot.redirect_uri,
                "scopes": ["openid", "read"], "apiBaseUrl": f"{dot.base}/o"}
    host = start(tmp_path, oidc_plugin_dir, {"dot": {"plugin": "oidc", "settings": settings}})
    try:
        status = sign_in_external(host, dot, "dot")
        assert status["state"] == "signedIn" and status["expiresAt"]
        token = host.result("getAccessToken", {"provider": "dot"})
        assert token["headers"]["Authorization"] == f"Bearer {token['accessToken']}"
        assert dot.is_issued(token["accessToken"])
        # An authorized request through the host to DOT's userinfo endpoint.
        answer = host.result("fetch", {"provider": "dot", "url": "/userinfo/"})
        assert answer["status"] == 200 and '"sub"' in answer["body"]
        # Sign-out revokes both tokens at DOT (RFC 7009): the access token stops working.
        result = host.result("signOut", {"provider": "dot"})
        assert sorted(result["revoked"]) == ["access_token", "refresh_token"], result
        request = urllib.request.Request(f"{dot.base}/o/userinfo/", headers={"Authorization": f"Bearer {token['accessToken']}"})
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=10)
        assert refused.value.code == 401
    finally:
        host.stop()
    assert not host.violations, host.violations


def test_a_discovery_document_naming_another_issuer_is_refused(tmp_path, oidc_plugin_dir, dot):
    # "…/o/" is not "…/o": the issuer must match exactly (OpenID Connect Discovery §4.3).
    settings = {"issuer": f"{dot.base}/o/", "clientId": "authbridge-test", "redirectUri": dot.redirect_uri}
    host = start(tmp_path, oidc_plugin_dir, {"dot": {"plugin": "oidc", "settings": settings}})
    try:
        error = host.error("checkSignInStatus", {"provider": "dot"})
        assert error["code"] == -32013 and error["data"]["reason"] == "issuerMismatch"
    finally:
        host.stop()
    assert not host.violations, host.violations
