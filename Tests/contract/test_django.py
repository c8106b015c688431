"""The bundled `oidc` plugin against the real django-oauth-toolkit: discovery, sign-in with
PKCE through DOT's login page, tokens, an authorized request and revocation."""

from __future__ import annotations

import urllib.parse
import urllib.request

import pytest

from conftest import begin_sign_in, sign_in_external
from authbridge_testkit.dot_auth import DotAuthServer, dot_fixture


dot = dot_fixture("module")


def test_discovery_sign_in_fetch_and_revocation(start_host, oidc_plugin_dir, dot):
    # Only the issuer: the endpoints come from its discovery document.
    settings = {"issuer": f"{dot.base}/o", "clientId": "authbridge-test", "redirectUri": dot.redirect_uri,
                "scopes": ["openid", "read"], "apiBaseUrl": f"{dot.base}/o"}
    host = start_host([oidc_plugin_dir], profiles={"dot": {"plugin": "oidc", "settings": settings}})
    status = sign_in_external(host, dot, "dot")
    assert status["state"] == "signedIn" and status["expiresAt"]
    token = host.result("getAccessToken", {"provider": "dot"})
    assert token["headers"]["Authorization"] == f"Bearer {token['accessToken']}"
    assert dot.is_issued(token["accessToken"])
    # An authorized request through the host to DOT's userinfo endpoint.
    answer = host.result("fetch", {"provider": "dot", "url": "/userinfo/"})
    assert answer["status"] == 200 and '"sub"' in answer["body"]
    # Sign-out revokes both tokens at DOT (RFC 7009): the access token stops working.
    stderr = host.stderr_text()
    assert token["accessToken"] not in stderr, "an access token reached the log"
    result = host.result("signOut", {"provider": "dot"})
    assert sorted(result["revoked"]) == ["access_token", "refresh_token"], result
    request = urllib.request.Request(f"{dot.base}/o/userinfo/", headers={"Authorization": f"Bearer {token['accessToken']}"})
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=10)
    assert refused.value.code == 401


def test_a_discovery_document_naming_another_issuer_is_refused(start_host, oidc_plugin_dir, dot):
    # "…/o/" is not "…/o": the issuer must match exactly (OpenID Connect Discovery §4.3).
    settings = {"issuer": f"{dot.base}/o/", "clientId": "authbridge-test", "redirectUri": dot.redirect_uri}
    host = start_host([oidc_plugin_dir], profiles={"dot": {"plugin": "oidc", "settings": settings}})
    error = host.error("checkSignInStatus", {"provider": "dot"})
    assert error["code"] == -32013 and error["data"]["reason"] == "issuerMismatch"


def listening_addresses(port: int) -> list[str]:
    """Local addresses of the sockets listening on `port`, from /proc/net/tcp{,6}."""
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = open(table).read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            address, hex_port = fields[1].split(":")
            if int(hex_port, 16) == port and fields[3] == "0A":  # LISTEN
                if len(address) == 8:
                    found.append(".".join(str(int(address[i:i + 2], 16)) for i in (6, 4, 2, 0)))
                else:
                    found.append(address)
    return found


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def test_browser_flow_with_a_loopback_listener(start_host, oidc_plugin_dir, dot):
    # RFC 8252: the host listens on 127.0.0.1 (an IP literal, ephemeral port) for the redirect.
    settings = {"issuer": f"{dot.base}/o", "clientId": "authbridge-test", "scopes": ["openid", "read"]}
    host = start_host([oidc_plugin_dir], profiles={"dot": {"plugin": "oidc", "settings": settings}})
    pending = host.send_request("requestOAuthTokens", {"provider": "dot", "flow": "browser"})
    opened = host.wait_for_notification("signIn/progress", lambda p: p["requestId"] == pending and p["stage"] == "openUrl")
    host.wait_for_notification("signIn/progress", lambda p: p["requestId"] == pending and p["stage"] == "waiting")
    query = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(opened["url"]).query))
    assert query["redirect_uri"].startswith("http://127.0.0.1:") and query["redirect_uri"].endswith("/callback")
    assert query["code_challenge_method"] == "S256" and query["state"]
    callback = dot.browse(opened["url"])               # the user signs in at DOT
    listener = urllib.parse.urlsplit(callback)
    origin = f"http://127.0.0.1:{listener.port}"
    assert listening_addresses(listener.port) == ["127.0.0.1"], "the listener binds loopback only"
    # Other requests are answered and ignored: a favicon, and a callback with another state.
    assert get(origin + "/favicon.ico")[0] == 404
    forged = callback.replace(f"state={urllib.parse.quote(query['state'])}", "state=forged")
    assert forged != callback and get(forged)[0] == 400
    status, page = get(callback)                        # the browser follows the redirect
    assert status == 200 and "close this window" in page
    answer = host.wait_response(pending)
    assert answer["result"]["state"] == "signedIn", answer
    # One-shot: the listener is gone.
    with pytest.raises(OSError):
        urllib.request.urlopen(origin + "/callback", timeout=5)
    assert host.result("getAccessToken", {"provider": "dot"})["accessToken"]


def test_browser_flow_times_out_and_can_be_cancelled(start_host, oidc_plugin_dir, dot):
    settings = {"issuer": f"{dot.base}/o", "clientId": "authbridge-test"}
    host = start_host([oidc_plugin_dir], profiles={"dot": {"plugin": "oidc", "settings": settings}})
    pending = host.send_request("requestOAuthTokens", {"provider": "dot", "flow": "browser", "timeoutMs": 1000})
    opened = host.wait_for_notification("signIn/progress", lambda p: p["requestId"] == pending and p["stage"] == "openUrl")
    answer = host.wait_response(pending)
    assert answer["error"]["code"] == -32006
    redirect = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(opened["url"]).query))["redirect_uri"]
    with pytest.raises(OSError):
        urllib.request.urlopen(redirect, timeout=5)    # the listener closed with the timeout

    pending = host.send_request("requestOAuthTokens", {"provider": "dot", "flow": "browser"})
    host.wait_for_notification("signIn/progress", lambda p: p["requestId"] == pending and p["stage"] == "waiting")
    host.notify("$/cancelRequest", {"id": pending})
    assert host.wait_response(pending)["error"]["code"] == -32800


def test_two_hundred_concurrent_callers_cause_one_refresh(start_host, oidc_plugin_dir, dot):
    settings = {"issuer": f"{dot.base}/o", "clientId": "authbridge-test", "redirectUri": dot.redirect_uri}
    host = start_host([oidc_plugin_dir], profiles={"dot": {"plugin": "oidc", "settings": settings}}, test_clock=True)
    sign_in_external(host, dot, "dot")
    before = dot.snapshot()["refreshes"]
    host.result("$/test/advanceClock", {"milliseconds": 2 * 3600 * 1000})   # the access token has expired
    ids = [host.send_request("getAccessToken", {"provider": "dot"}) for _ in range(200)]
    tokens = {host.wait_response(request_id)["result"]["accessToken"] for request_id in ids}
    assert len(tokens) == 1, "every caller gets the one refreshed token"
    assert dot.snapshot()["refreshes"] - before == 1, "exactly one refresh reached the server"
    assert dot.is_issued(tokens.pop())


def test_a_stopped_server_means_offline_not_signed_out(start_host, oidc_plugin_dir, tmp_path):
    server = DotAuthServer(tmp_path / "dot-restart", access_lifetime=3600).start()
    settings = {"issuer": f"{server.base}/o", "clientId": "authbridge-test", "redirectUri": server.redirect_uri}
    host = start_host([oidc_plugin_dir], profiles={"dot": {"plugin": "oidc", "settings": settings}}, test_clock=True)
    try:
        sign_in_external(host, server, "dot")
        server.stop()                                                          # the server goes away
        host.result("$/test/advanceClock", {"milliseconds": 2 * 3600 * 1000})  # and the token expires
        status = host.result("checkSignInStatus", {"provider": "dot"})
        assert status["state"] == "offline" and status["message"], status      # not signed out
        error = host.error("getAccessToken", {"provider": "dot"})
        assert error["code"] == -32007 and error["data"]["retryable"] is True
        server.start()                                                         # back, same port and database
        assert host.result("checkSignInStatus", {"provider": "dot"})["state"] == "signedIn"
        assert server.is_issued(host.result("getAccessToken", {"provider": "dot"})["accessToken"])
    finally:
        server.stop()


def test_the_callback_issuer_is_checked_before_the_code_is_redeemed(start_host, oidc_plugin_dir, dot):
    # DOT advertises authorization_response_iss_parameter_supported (RFC 9207): a callback whose
    # `iss` names another server (a mix-up attack) is refused, and its code is never redeemed.
    settings = {"issuer": f"{dot.base}/o", "clientId": "authbridge-test", "redirectUri": dot.redirect_uri}
    host = start_host([oidc_plugin_dir], profiles={"dot": {"plugin": "oidc", "settings": settings}})
    pending, opened = begin_sign_in(host, "dot", flow="external")
    callback = dot.browse(opened["url"])
    query = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(callback).query))
    assert query.get("iss") == f"{dot.base}/o", "DOT sends iss"
    redeemed = dot._get_json("/test/stats")["codes_redeemed"]
    forged = callback.replace(urllib.parse.quote(query["iss"], safe=""), urllib.parse.quote("https://evil.example", safe=""))
    assert forged != callback
    host.result("completeSignIn", {"provider": "dot", "callbackUrl": forged})
    error = host.wait_response(pending)["error"]
    assert error["code"] == -32004 and error["data"]["reason"] == "issuerMismatch"
    assert dot._get_json("/test/stats")["codes_redeemed"] == redeemed, "the code was not redeemed"
    assert host.result("checkSignInStatus", {"provider": "dot"})["state"] == "notSignedIn"


def test_an_administrator_revoking_the_grant_signs_the_user_out_with_reason_revoked(start_host, oidc_plugin_dir, dot):
    settings = {"issuer": f"{dot.base}/o", "clientId": "authbridge-test", "redirectUri": dot.redirect_uri,
                "scopes": ["openid", "read"], "apiBaseUrl": f"{dot.base}/o"}
    host = start_host([oidc_plugin_dir], profiles={"dot": {"plugin": "oidc", "settings": settings}})
    sign_in_external(host, dot, "dot", user="grace", password="hopper-test")
    assert host.result("fetch", {"provider": "dot", "url": "/userinfo/"})["status"] == 200
    assert dot.admin_revoke("grace") >= 1                  # in DOT's admin: revoke grace's tokens
    mark = host.mark()
    # The next call: 401 → one refresh → invalid_grant, a definitive answer → signed out.
    error = host.error("fetch", {"provider": "dot", "url": "/userinfo/"})
    assert error["code"] == -32001 and error["data"]["reason"] == "revoked", error
    changed = host.wait_for_notification("session/changed", lambda p: p["state"] == "signedOut", since=mark)
    assert changed["reason"] == "revoked" and changed["provider"] == "dot"
    assert host.result("checkSignInStatus", {"provider": "dot"})["state"] == "notSignedIn"
    assert host.result("listAccounts") == {"accounts": []}


def test_refresh_ahead_hands_out_the_valid_token_and_renews_in_the_background(start_host, oidc_plugin_dir, dot):
    settings = {"issuer": f"{dot.base}/o", "clientId": "authbridge-test", "redirectUri": dot.redirect_uri}
    host = start_host([oidc_plugin_dir], profiles={"dot": {"plugin": "oidc", "settings": settings}}, test_clock=True)
    sign_in_external(host, dot, "dot")
    first = host.result("getAccessToken", {"provider": "dot"})["accessToken"]
    before = dot.snapshot()["refreshes"]
    mark = host.mark()
    host.result("$/test/advanceClock", {"milliseconds": 50 * 60 * 1000})   # 50 of 60 minutes: past 3/4
    assert host.result("getAccessToken", {"provider": "dot"})["accessToken"] == first, "still valid: no wait"
    changed = host.wait_for_notification("session/changed", lambda p: p["state"] == "refreshed", since=mark)
    assert changed["reason"] == "refreshed"
    second = host.result("getAccessToken", {"provider": "dot"})["accessToken"]
    assert second != first and dot.is_issued(second)
    assert dot.snapshot()["refreshes"] - before == 1


def test_two_accounts_of_one_profile_are_signed_in_at_once(start_host, oidc_plugin_dir, dot):
    settings = {"issuer": f"{dot.base}/o", "clientId": "authbridge-test", "redirectUri": dot.redirect_uri,
                "scopes": ["openid", "read"]}
    host = start_host([oidc_plugin_dir], profiles={"dot": {"plugin": "oidc", "settings": settings}})
    ada = sign_in_external(host, dot, "dot")["account"]["id"]
    grace = sign_in_external(host, dot, "dot", user="grace", password="hopper-test")["account"]["id"]
    assert ada != grace
    accounts = host.result("listAccounts", {"provider": "dot"})["accounts"]
    assert [(a["account"]["id"], a["current"]) for a in accounts] == [(grace, True), (ada, False)]
    # No account named: the current one (the latest sign-in). Named: that one.
    assert host.result("getAccessToken", {"provider": "dot"})["account"]["id"] == grace
    ada_token = host.result("getAccessToken", {"provider": "dot", "account": ada})
    assert ada_token["account"]["id"] == ada
    userinfo = host.result("fetch", {"provider": "dot", "account": ada, "url": f"{dot.base}/o/userinfo/"})
    assert f'"sub": "{ada}"' in userinfo["body"] or f'"sub":"{ada}"' in userinfo["body"]
    # Signing ada out revokes ada's tokens only; grace stays signed in.
    result = host.result("signOut", {"provider": "dot", "account": ada})
    assert result["account"]["id"] == ada and "refresh_token" in result["revoked"]
    assert get_with_token(f"{dot.base}/o/userinfo/", ada_token["accessToken"]) == 401
    status = host.result("checkSignInStatus", {"provider": "dot"})
    assert status["state"] == "signedIn" and status["account"]["id"] == grace
    assert host.result("checkSignInStatus", {"provider": "dot", "account": ada})["state"] == "notSignedIn"
    assert host.error("getAccessToken", {"provider": "dot", "account": ada})["code"] == -32001
    # Signing in as the same user again replaces that account's session, not adds one.
    sign_in_external(host, dot, "dot", user="grace", password="hopper-test")
    assert [a["account"]["id"] for a in host.result("listAccounts")["accounts"]] == [grace]


def get_with_token(url: str, token: str) -> int:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


FAKE_XDG_OPEN = """#!{python}
# A stand-in for xdg-open: says things on stdout and stderr (the host must keep them off the
# protocol), then plays the user in a browser: signs in at DOT and follows the redirect.
import sys, urllib.request
sys.path.insert(0, {support!r})
from authbridge_testkit.dot_auth import DotAuthServer
print("xdg-open: opening a browser (noise on stdout)")
print("xdg-open: noise on stderr", file=sys.stderr)
open({record!r}, "w").write(sys.argv[1])
callback = DotAuthServer.browse(None, sys.argv[1])
urllib.request.urlopen(callback, timeout=30).read()
"""


def test_open_browser_starts_xdg_open_with_the_sign_in_url(start_host, oidc_plugin_dir, dot, tmp_path):
    import os
    import sys
    from pathlib import Path
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    record = tmp_path / "opened-url"
    script = bin_dir / "xdg-open"
    script.write_text(FAKE_XDG_OPEN.format(python=sys.executable, support=str(Path(__file__).resolve().parents[1] / "support"), record=str(record)))
    script.chmod(0o755)
    settings = {"issuer": f"{dot.base}/o", "clientId": "authbridge-test", "scopes": ["openid"]}
    host = start_host([oidc_plugin_dir], profiles={"dot": {"plugin": "oidc", "settings": settings}},
                      extra_args=["--open-browser"], env={"PATH": f"{bin_dir}:{os.environ['PATH']}"})
    pending = host.send_request("requestOAuthTokens", {"provider": "dot", "flow": "browser"})
    opened = host.wait_for_notification("signIn/progress", lambda p: p["requestId"] == pending and p["stage"] == "openUrl")
    answer = host.wait_response(pending)                  # the fake browser completes the sign-in
    assert answer["result"]["state"] == "signedIn", answer
    assert record.read_text() == opened["url"], "xdg-open got exactly the URL the frontend was told"
    assert "noise on stderr" not in host.stderr_text(), "the browser's output does not reach the host's log"


def test_a_fixed_loopback_port_for_providers_that_match_redirects_exactly(start_host, oidc_plugin_dir, dot):
    import socket
    with socket.socket() as probe:                 # a port free right now
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    settings = {"issuer": f"{dot.base}/o", "clientId": "authbridge-test", "scopes": ["openid"], "loopbackPort": port}
    host = start_host([oidc_plugin_dir], profiles={"dot": {"plugin": "oidc", "settings": settings}})
    pending = host.send_request("requestOAuthTokens", {"provider": "dot", "flow": "browser"})
    opened = host.wait_for_notification("signIn/progress", lambda p: p["requestId"] == pending and p["stage"] == "openUrl")
    query = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(opened["url"]).query))
    assert query["redirect_uri"] == f"http://127.0.0.1:{port}/callback"
    assert get(dot.browse(opened["url"]))[0] == 200
    assert host.wait_response(pending)["result"]["state"] == "signedIn"


def test_force_refresh_renews_a_token_the_caller_saw_rejected(start_host, oidc_plugin_dir, dot):
    settings = {"issuer": f"{dot.base}/o", "clientId": "authbridge-test", "redirectUri": dot.redirect_uri}
    host = start_host([oidc_plugin_dir], profiles={"dot": {"plugin": "oidc", "settings": settings}})
    sign_in_external(host, dot, "dot")
    first = host.result("getAccessToken", {"provider": "dot"})["accessToken"]
    before = dot.snapshot()["refreshes"]
    second = host.result("getAccessToken", {"provider": "dot", "forceRefresh": True})["accessToken"]
    assert second != first and dot.is_issued(second)
    assert dot.snapshot()["refreshes"] - before == 1
    assert host.error("getAccessToken", {"provider": "dot", "forceRefresh": "yes"})["code"] == -32602


def test_an_unknown_client_id_times_out_with_what_to_check(start_host, oidc_plugin_dir, dot):
    # Issue 27 §6 (a): DOT shows its own error page for a client id it does not know and never
    # redirects, so the wait ends at the timeout; its message names the profile, the client id,
    # the redirect URI to register and the usual causes. Before: "The sign-in timed out after 2 s
    # without a callback."
    settings = {"issuer": f"{dot.base}/o", "clientId": "no-such-client", "clientSecret": "not-a-real-secret-0123456789",
                "scopes": ["openid"]}
    host = start_host([oidc_plugin_dir], profiles={"dot": {"plugin": "oidc", "settings": settings}})
    pending = host.send_request("requestOAuthTokens", {"provider": "dot", "flow": "browser", "timeoutMs": 2000})
    opened = host.wait_for_notification("signIn/progress", lambda p: p["requestId"] == pending and p["stage"] == "openUrl")
    redirect = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(opened["url"]).query))["redirect_uri"]
    status, location, page = dot.after_sign_in(opened["url"])   # the user signs in; DOT shows its own error page
    assert status == 400 and not location and "Invalid client_id" in page, page[:500]   # DOT: "Error: invalid_request"
    error = host.wait_response(pending)["error"]
    assert error["code"] == -32006 and error["data"]["reason"] == "timeout", error
    message = error["message"]
    assert message.startswith(f'The sign-in to "dot" was not completed within 2 s: nothing came back to {redirect}.'), message
    assert 'the client id "no-such-client"' in message and "invalid_client" in message, message
    assert 'the redirect URI "http://127.0.0.1/callback" on any port' in message and "loopbackPort" in message, message
    assert message.endswith("Otherwise the sign-in was not finished in the browser."), message
    assert settings["clientSecret"] not in message


def test_an_error_redirect_in_the_external_flow_ends_the_sign_in_once_its_state_matches(start_host, oidc_plugin_dir, dot):
    # Issue 27 §6 (b), the external flow: DOT redirects an invalid scope back with its error and
    # the sign-in's state. Handed over with another state it is refused and the sign-in goes on
    # (before: that ended it, -32004 stateMismatch); with its own, it ends the sign-in at once.
    settings = {"issuer": f"{dot.base}/o", "clientId": "authbridge-test", "redirectUri": dot.redirect_uri,
                "scopes": ["openid", "no-such-scope"]}
    host = start_host([oidc_plugin_dir], profiles={"dot": {"plugin": "oidc", "settings": settings}})
    request_id, opened = begin_sign_in(host, "dot", flow="external", timeoutMs=600_000)
    callback = dot.browse(opened["url"])
    query = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(callback).query))
    assert query["error"] == "invalid_scope" and query["state"] and "code" not in query, callback
    forged = callback.replace(f"state={urllib.parse.quote(query['state'])}", "state=forged")
    assert forged != callback
    refused = host.error("completeSignIn", {"provider": "dot", "callbackUrl": forged})
    assert refused["code"] == -32602 and refused["data"]["reason"] == "stateMismatch", refused
    host.result("completeSignIn", {"provider": "dot", "callbackUrl": callback})
    error = host.wait_response(request_id, timeout=10)["error"]
    assert error["code"] == -32004 and error["data"]["reason"] == "invalid_scope", error
    assert error["message"].startswith("The provider refused the sign-in (invalid_scope)"), error
