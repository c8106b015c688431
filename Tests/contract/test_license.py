"""A license revoked while signed in (MarketSharp's named licenses, plugins/marketsharp/README.md): the host announces
it with the provider's message, hands out no token, and signs the account out by itself after
the profile's grace period (`licenseGracePeriodMs`), revoking at the provider."""

from __future__ import annotations

import pytest

from conftest import sign_in_session
from simulators.sim_http import Handler, Served


class _LicenseGone(Handler):
    def do_GET(self) -> None:  # noqa: N802 - http.server naming
        self.send(403, b'{"errorCode":"LICENSE_REVOKED"}', "application/json")


@pytest.fixture
def api():
    served = Served(_LicenseGone)
    yield served.base
    served.stop()


def test_a_revoked_license_is_announced_then_signed_out_after_the_grace_period(start_host, plugin_dir, api):
    profiles = {"c": {"plugin": "ctest", "settings": {"server": "https://ctest.example", "licenseGracePeriodMs": 200}}}
    host = start_host([plugin_dir], profiles=profiles)
    sign_in_session(host, "c", "licensed")
    mark = host.mark()
    answer = host.result("fetch", {"provider": "c", "url": f"{api}/companies/1/customers"})
    assert answer["status"] == 403                       # the provider's answer is still the result
    announced = host.wait_for_notification("session/changed", lambda p: p["state"] == "licenseRevoked", since=mark)
    assert announced["message"] == "license removed"
    status = host.result("checkSignInStatus", {"provider": "c"})
    assert status["state"] == "licenseRevoked" and status["reason"] == "licenseRevoked"
    error = host.error("getAccessToken", {"provider": "c"})
    assert error["code"] == -32001 and error["data"]["reason"] == "licenseRevoked", "no token while unlicensed"
    # After the grace period the host signs the account out itself (once), revoking its tokens.
    ended = host.wait_for_notification("session/changed", lambda p: p["state"] == "signedOut", since=mark)
    assert ended["reason"] == "licenseRevoked" and ended["message"] == "license removed"
    assert host.result("checkSignInStatus", {"provider": "c"})["state"] == "notSignedIn"
    # The plugin's revoke hook ran: the cookies it names for deletion ride on the event.
    assert ended["clearCookies"] == [{"name": "ctest_session", "domain": "ctest.example", "path": "/"}]
    assert len([n for n in host.notifications("session/changed", since=mark) if n["state"] == "signedOut"]) == 1


def test_signing_out_during_the_grace_period_is_not_repeated(start_host, plugin_dir, api):
    profiles = {"c": {"plugin": "ctest", "settings": {"server": "https://ctest.example", "licenseGracePeriodMs": 300}}}
    host = start_host([plugin_dir], profiles=profiles)
    sign_in_session(host, "c", "licensed")
    mark = host.mark()
    host.result("fetch", {"provider": "c", "url": f"{api}/x"})
    host.wait_for_notification("session/changed", lambda p: p["state"] == "licenseRevoked", since=mark)
    host.result("signOut", {"provider": "c"})            # the user acts first
    sign_in_session(host, "c", "relicensed")            # and signs in again (a license was assigned)
    assert host.result("checkSignInStatus", {"provider": "c"})["state"] == "signedIn"
    ends = [n["reason"] for n in host.notifications("session/changed", since=mark) if n["state"] == "signedOut"]
    assert ends == ["userSignedOut"]
