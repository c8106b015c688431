"""Provider-specific results through the Python client, against the provider simulators of
Tests/contract (started by the contract suites' own fixtures, which fail the test when the host
broke the provider's protocol): Tableau's cookies and the cookies to clear at sign-out, a session
that is `offline` when the server is gone, MarketSharp's `licenseRevoked` state and
session/changed events with the provider's message, and each plugin's `details`."""

from __future__ import annotations

import asyncio
import socket
import sys
from pathlib import Path

import pytest
from conftest import REPO, WAIT, plugin_folder

import authbridge
from authbridge import Account, Cookie, CookieRef, SessionChanged

# The contract suites' provider modules (simulators and their fixtures, over the test kit).
sys.path.insert(0, str(REPO / "Tests" / "contract"))
import test_marketsharp as marketsharp_tests  # noqa: E402
import test_tableau as tableau_tests  # noqa: E402

MESSAGE_NO_LICENSE = marketsharp_tests.MESSAGE_NO_LICENSE

# The simulators, as the contract suites start them (each checks for violations at teardown).
make_tableau, tableau = tableau_tests.make_tableau, tableau_tests.tableau
make_sim, sim = marketsharp_tests.make_sim, marketsharp_tests.sim


async def test_tableau_cookies_offline_and_the_cookies_to_clear(host_options, tmp_path, tableau):
    folder = plugin_folder(tmp_path / "tableau-plugins", "tableau")
    profiles = {"tab": tableau_tests.profile(tableau)}
    options = host_options(profiles=profiles, plugins=[folder])
    bridge_env = options["env"]
    async with authbridge.connect(**options) as bridge:
        changes: list[SessionChanged] = []
        bridge.on("session/changed", changes.append)
        session_id = await asyncio.to_thread(tableau.web_sign_in, "alice")   # the app's web view
        status = await bridge.request_oauth_tokens("tab", flow="session", session_id=session_id)
        assert status.signed_in and status.account == Account(id="alice", name="Alice Analyst", email="alice@example.com")

        token = await bridge.get_access_token("tab")
        device = tableau_tests.device_id(Path(bridge_env["XDG_DATA_HOME"]), "tab")
        assert [d["id"] for d in tableau.devices()] == [device]
        issued = tableau.token_set(device)
        details = {"server": tableau.base, "site": "", "deviceId": device, "deviceName": socket.gethostname()}
        assert status.details == details and token.details == details
        expected = tableau_tests.expected_cookies(tableau, issued.access, issued.xsrf)
        assert token.cookies == [Cookie.from_wire(c) for c in expected]
        assert (token.cookies[0].name, token.cookies[0].domain, token.cookies[0].max_age, token.cookies[0].secure) == \
            ("tableau_access_token", tableau.host, tableau_tests.MAX_AGE, False)
        assert token.access_token == issued.access and token.headers == {"X-XSRF-TOKEN": issued.xsrf}
        assert issued.access not in repr(token) and issued.xsrf not in repr(token.cookies), "cookie values stay out of reprs"

        tableau.stop()                                           # the server goes away
        status = await bridge.check_sign_in_status("tab")
        assert (status.state, status.signed_in) == ("offline", False) and status.message
        assert status.account is not None and status.account.id == "alice", "offline keeps the session"
        assert status.details == details

        result = await bridge.sign_out("tab")                    # the provider is gone: still signed out
        to_clear = [CookieRef.from_wire(c) for c in tableau_tests.clear_list(tableau)]
        assert result.signed_out and result.clear_cookies == to_clear
        assert sorted(f.token for f in result.failures) == ["access_token", "refresh_token"]
        assert [(c.state, c.reason, c.clear_cookies) for c in changes] == \
            [("signedIn", "signedIn", []), ("signedOut", "userSignedOut", to_clear)]


async def sign_in_external(bridge: authbridge.AuthBridge, sim, provider: str, user: str) -> authbridge.SignInStatus:
    """The external flow: the app shows the URL, the user signs in, the app hands the redirect over."""
    opened: asyncio.Future[authbridge.SignInProgress] = asyncio.get_running_loop().create_future()

    def on_progress(event: authbridge.SignInProgress) -> None:
        if event.stage == "openUrl" and not opened.done():
            opened.set_result(event)

    signing_in = asyncio.ensure_future(bridge.request_oauth_tokens(provider, flow="external", on_progress=on_progress))
    event = await asyncio.wait_for(opened, WAIT)
    assert event.url and event.url.startswith(sim.authorize_prefix)
    location = await asyncio.to_thread(sim.browse, event.url, user)
    assert location.startswith(event.callback_prefix or sim.redirect_uri)
    assert await bridge.complete_sign_in(provider, location) is True
    return await asyncio.wait_for(signing_in, WAIT)


async def test_marketsharp_license_revoked_state_and_events_carry_the_message(host_options, tmp_path, sim):
    folder = plugin_folder(tmp_path / "marketsharp-plugins", "marketsharp")
    grace_ms = marketsharp_tests.GRACE_MS
    profiles = {"ms": {"plugin": "marketsharp", "settings": sim.settings(licenseGracePeriodMs=grace_ms)}}
    alice = Account(**marketsharp_tests.ALICE)
    async with authbridge.connect(**host_options(profiles=profiles, plugins=[folder])) as bridge:
        status = await sign_in_external(bridge, sim, "ms", "alice")
        assert status.signed_in and status.account == alice
        assert status.details == {"companyId": "4711"} and (await bridge.get_access_token("ms")).details == status.details
        async with bridge.events("session/changed") as changes:
            sim.remove_license("alice")                         # an administrator takes the license away
            status = await bridge.check_sign_in_status("ms")
            assert (status.state, status.reason, status.message) == ("licenseRevoked", "licenseRevoked", MESSAGE_NO_LICENSE)
            assert not status.signed_in
            revoked = await changes.next(WAIT)
            assert (revoked.state, revoked.reason, revoked.message, revoked.account) == \
                ("licenseRevoked", "licenseRevoked", MESSAGE_NO_LICENSE, alice)
            with pytest.raises(authbridge.NotSignedIn) as raised:   # during the grace period: no token
                await bridge.get_access_token("ms")
            assert raised.value.reason == "licenseRevoked" and raised.value.provider == "ms"
            ended = await changes.next(WAIT)                     # then the host signs the account out
            assert (ended.state, ended.reason, ended.message) == ("signedOut", "licenseRevoked", MESSAGE_NO_LICENSE)
        assert (await bridge.check_sign_in_status("ms")).reason == "noTokens"
