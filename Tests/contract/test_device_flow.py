"""The device authorization grant (RFC 8628) against the real django-oauth-toolkit.

The host asks DOT for a device code, tells the frontend the user code and the verification
URI (`signIn/progress` stage `deviceCode`), and polls the token endpoint at DOT's interval
(1 s here) while the test, as the user on another device, signs in at DOT's verification page,
types the code and accepts or denies.
"""

from __future__ import annotations

import time

import pytest

from authbridge_testkit.dot_auth import dot_fixture

USER_CANCELLED = -32005


dot = dot_fixture("module")


@pytest.fixture
def host(start_host, oidc_plugin_dir, dot):
    # DOT does not list its device endpoint in discovery: the profile names it.
    settings = {"issuer": f"{dot.base}/o", "clientId": "authbridge-device", "scopes": ["openid", "read"],
                "deviceAuthorizationEndpoint": f"{dot.base}/o/device-authorization/"}
    return start_host([oidc_plugin_dir], profiles={"tv": {"plugin": "oidc", "settings": settings}})


def start_device_sign_in(host) -> tuple[object, dict]:
    pending = host.send_request("requestOAuthTokens", {"provider": "tv", "flow": "device"})
    shown = host.wait_for_notification("signIn/progress", lambda p: p["requestId"] == pending and p["stage"] == "deviceCode")
    return pending, shown


def test_device_sign_in_polls_until_the_user_approves(host, dot):
    before = dot._get_json("/test/stats")
    started = time.monotonic()
    pending, shown = start_device_sign_in(host)
    assert shown["userCode"] and shown["verificationUri"] == f"{dot.base}/o/device/"
    assert shown["verificationUriComplete"].endswith(f"user_code={shown['userCode']}")
    assert shown["expiresAt"] > 0 and shown["userCode"] in shown["message"]
    dot.approve_device(shown["userCode"], shown["verificationUri"])     # the user, on another device
    answer = host.wait_response(pending)
    elapsed = time.monotonic() - started
    result = answer["result"]
    assert result["state"] == "signedIn"
    # DOT's device answer has no ID token: the account comes from the userinfo endpoint.
    assert result["account"]["id"] == dot._get_json("/test/user?name=ada")["sub"]
    after = dot._get_json("/test/stats")
    polls = after["device_polls"] - before["device_polls"]
    assert after["device_codes_redeemed"] - before["device_codes_redeemed"] == 1
    # The host waits the interval (1 s) before every poll: never more polls than seconds elapsed.
    assert 1 <= polls <= elapsed + 0.5, (polls, elapsed)
    answer = host.result("fetch", {"provider": "tv", "url": f"{dot.base}/o/userinfo/"})
    assert answer["status"] == 200
    assert dot.is_issued(host.result("getAccessToken", {"provider": "tv"})["accessToken"])


def test_the_user_denying_the_device_cancels_the_sign_in(host, dot):
    pending, shown = start_device_sign_in(host)
    dot.approve_device(shown["userCode"], shown["verificationUri"], action="deny")
    error = host.wait_response(pending)["error"]
    assert error["code"] == USER_CANCELLED and error["data"]["reason"] == "access_denied", error
    assert host.result("checkSignInStatus", {"provider": "tv"})["state"] == "notSignedIn"


def test_a_device_sign_in_can_be_cancelled_while_polling(host, dot):
    pending, shown = start_device_sign_in(host)
    host.notify("$/cancelRequest", {"id": pending})
    assert host.wait_response(pending)["error"]["code"] == -32800
    # Approving afterwards changes nothing: nobody is polling for that code any more.
    dot.approve_device(shown["userCode"], shown["verificationUri"])
    assert host.result("checkSignInStatus", {"provider": "tv"})["state"] == "notSignedIn"
