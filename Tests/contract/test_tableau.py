"""The `tableau` plugin through the real host against the Tableau Server simulator (simulators/sim_tableau.py):
the connected-client session grant from a web sign-in's `workgroup_session_id`, this installation
as a device (stable id, a name the administrator sees), silent renewal with the site, the session
check with `X-XSRF-TOKEN`, credentials as Tableau's two cookies, sign-out with `token_hint` that
clears only this server's cookies, and the server's policies and administrator actions.

Every simulator checks what the client sent; its violations fail the test (fixture teardown)."""

from __future__ import annotations

import socket
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from selenium.webdriver.common.by import By

from authbridge_testkit.host import Host, advance_clock, sign_in_session
from provider_fixtures import provider_fixtures
from simulators.sim_tableau import DAY_MS, REVOKE_PATH, TOKEN_PATH, VIEW_PAGE, VIEWS_PATH, TableauServer
from test_browser import chromium, evidence_on_failure, wait_for  # noqa: F401 - chromium is a fixture

MAX_AGE = 2_629_743
COOKIE_NAMES = ["tableau_access_token", "XSRF-TOKEN"]
VIEWS = {"method": "POST", "url": VIEWS_PATH, "headers": {"Content-Type": "application/json"},
         "body": '{"method":"getViews","params":{}}'}


tableau_plugin_dir, make_tableau, tableau = provider_fixtures("tableau", TableauServer, "the Tableau protocol",
                                                              sim="tableau")


@pytest.fixture
def tableau_b(make_tableau):
    """A second Tableau Server, on another loopback host (cookies do not tell ports apart)."""
    return make_tableau(address="127.0.0.2")


def profile(server: TableauServer, **settings: Any) -> dict[str, Any]:
    return {"plugin": "tableau", "settings": {"server": server.base, **settings}}


def installation_id(data_home: Path) -> str:
    return (data_home / "authbridge" / "installation-id").read_text().strip()


def data_home_of(host: Host) -> Path:
    return host.workdir / "xdg-data"


#: The UUID namespace of the host's `installation.profileId` (InstallationIdentity.profileNamespace),
#: which the plugin uses as the device id.
DEVICE_NAMESPACE = uuid.UUID("a76442dd-5984-4aa8-af48-b2576fc7c7a2")


def device_id(data_home: Path, profile_name: str) -> str:
    """The device a profile registers, the host's `installation.profileId`: a name-based UUID (v5)
    of the installation id and the profile name, so two profiles on one server are two devices."""
    return str(uuid.uuid5(DEVICE_NAMESPACE, installation_id(data_home) + "\0" + profile_name))


def sign_in(host: Host, server: TableauServer, provider: str = "tab", user: str = "alice") -> dict[str, Any]:
    """The frontend's part: the user signs in on the server's page in its web view, which yields
    the workgroup_session_id; the host trades it for the device's tokens."""
    return sign_in_session(host, provider, server.web_sign_in(user))


def expected_cookies(server: TableauServer, access: str, xsrf: str) -> list[dict[str, Any]]:
    common = {"domain": server.host, "path": "/", "maxAge": MAX_AGE, "secure": False}
    return [{"name": "tableau_access_token", "value": access, **common}, {"name": "XSRF-TOKEN", "value": xsrf, **common}]


def clear_list(server: TableauServer) -> list[dict[str, str]]:
    return [{"name": name, "domain": server.host, "path": "/"} for name in COOKIE_NAMES]


def signed_out(host: Host, since: int) -> list[dict[str, Any]]:
    return [n for n in host.notifications("session/changed", since=since) if n["state"] == "signedOut"]


# ── Sign-in, device, cookies ──────────────────────────────────────────────────


def test_sign_in_with_a_session_id_registers_this_installation_and_hands_out_the_cookies(start_host, tableau_plugin_dir, tableau):
    host = start_host([tableau_plugin_dir], profiles={"tab": profile(tableau)})
    described = next(p for p in host.init_result["providers"] if p["id"] == "tableau")
    assert described["flows"] == ["session"]
    mark = host.mark()
    request_id = host.send_request("requestOAuthTokens", {"provider": "tab", "sessionId": tableau.web_sign_in("alice")})
    status = host.wait_response(request_id)["result"]
    assert status["state"] == "signedIn" and status["reason"] == "signedIn" and status["expiresAt"] is None
    # The account comes from getSessionInfo: the user name identifies it.
    assert status["account"] == {"id": "alice", "name": "Alice Analyst", "email": "alice@example.com"}
    assert host.wait_for_notification("signIn/progress", lambda p: p["requestId"] == request_id)["stage"] == "exchanging"
    assert host.wait_for_notification("session/changed", since=mark)["state"] == "signedIn"

    # The device: derived from the installation's stable id and the profile's name, the host
    # name by default (what an admin sees).
    device = device_id(data_home_of(host), "tab")
    assert tableau.devices() == [{"id": device, "name": socket.gethostname(), "user": "alice", "site": ""}]
    grant = tableau.snapshot().grant_forms[-1]
    assert grant == {"grant_type": "session", "client_id": device, "device_id": device, "device_name": socket.gethostname()}

    # The credentials: Tableau's two cookies for the server's host, and the XSRF header.
    token = host.result("getAccessToken", {"provider": "tab"})
    issued = tableau.token_set(device)
    assert token["accessToken"] == issued.access and token["expiresAt"] is None
    assert token["headers"] == {"X-XSRF-TOKEN": issued.xsrf}
    assert token["cookies"] == expected_cookies(tableau, issued.access, issued.xsrf)

    # The session check (getSessionInfo with X-XSRF-TOKEN) says valid; a request carries the cookies.
    before = tableau.snapshot().session_checks
    assert host.result("checkSignInStatus", {"provider": "tab"})["reason"] == "valid"
    assert tableau.snapshot().session_checks == before + 1
    answer = host.result("fetch", {"provider": "tab", **VIEWS})
    assert answer["status"] == 200 and '"Overview"' in answer["body"]


# Both isolations: the two revocations go out at once on the SDK's threads (AuthBridgeSystem's,
# linked into the plugin's library), in a runner and inside the host.
@pytest.mark.parametrize("isolation", ["process", "none"])
def test_sign_out_revokes_both_tokens_with_token_hint_and_clears_only_its_cookies(start_host, tableau_plugin_dir, tableau,
                                                                                isolation):
    host = start_host([tableau_plugin_dir], profiles={"tab": profile(tableau)},
                      extra_args=["--plugin-isolation", f"tableau={isolation}"])
    sign_in(host, tableau)
    mark = host.mark()
    result = host.result("signOut", {"provider": "tab"})
    assert result["revoked"] == ["access_token", "refresh_token"] and result["failures"] == []
    assert result["clearCookies"] == clear_list(tableau)
    ended = signed_out(host, mark)
    assert [(n["reason"], n["clearCookies"]) for n in ended] == [("userSignedOut", clear_list(tableau))]
    # Two POSTs to /oauth2/v1/revoke with token_hint (the simulator records token_type_hint as a violation).
    assert sorted(tableau.snapshot().revocations) == ["access_token", "refresh_token"]   # sent at once: any order
    assert tableau.devices() == [], "the device's grant ended at the server"
    assert host.result("checkSignInStatus", {"provider": "tab"})["reason"] == "noTokens"
    error = host.error("getAccessToken", {"provider": "tab"})
    assert error["code"] == -32001 and error["data"]["reason"] == "noTokens"
    assert host.error("fetch", {"provider": "tab", **VIEWS})["code"] == -32001
    assert tableau.snapshot().api_calls == 0, "nothing was sent without a session"


def test_the_device_id_survives_a_host_restart(start_host, tableau_plugin_dir, tableau, tmp_path):
    data_home = tmp_path / "data-home"            # one user's data folder, several runs of the host
    first = start_host([tableau_plugin_dir], profiles={"tab": profile(tableau)}, env={"XDG_DATA_HOME": str(data_home)})
    sign_in(first, tableau)
    device = device_id(data_home, "tab")
    first.stop()

    second = start_host([tableau_plugin_dir], profiles={"tab": profile(tableau)}, env={"XDG_DATA_HOME": str(data_home)})
    assert second.result("checkSignInStatus", {"provider": "tab"})["reason"] == "valid"   # from the vault
    tableau.expire_sessions()
    assert second.result("checkSignInStatus", {"provider": "tab"})["reason"] == "refreshed"
    renewal = tableau.snapshot().refresh_forms[-1]
    assert renewal["device_id"] == renewal["client_id"] == device
    # Signing in again from the restarted host is the same device: its token set is replaced.
    sign_in(second, tableau)
    assert device_id(data_home, "tab") == device
    assert [d["id"] for d in tableau.devices()] == [device]
    assert tableau.snapshot().grant_forms[-1]["device_id"] == device


def test_the_device_name_is_what_the_administrator_sees_and_can_be_set(start_host, tableau_plugin_dir, tableau):
    host = start_host([tableau_plugin_dir], profiles={"tab": profile(tableau, deviceName="Kiosk 7 – lobby")})
    sign_in(host, tableau)
    assert [d["name"] for d in tableau.devices()] == ["Kiosk 7 – lobby"]
    assert tableau.snapshot().grant_forms[-1]["device_name"] == "Kiosk 7 – lobby"   # url-encoded on the wire
    assert tableau.revoke_device("Kiosk 7 – lobby") == 1


# ── Renewal and the session check ─────────────────────────────────────────────


@pytest.mark.parametrize("site, over_status", [("", 401), ("finance", 200)])
def test_an_expired_server_session_is_renewed_silently_with_the_site(start_host, tableau_plugin_dir, tableau, site, over_status):
    tableau.session_over_status = over_status                  # result.errors, whatever the status
    settings = {"site": site} if site else {}
    host = start_host([tableau_plugin_dir], profiles={"tab": profile(tableau, **settings)})
    sign_in(host, tableau)
    old = host.result("getAccessToken", {"provider": "tab"})
    device = device_id(data_home_of(host), "tab")
    old_refresh = tableau.token_set(device).refresh

    tableau.expire_sessions()                                   # the admin ends every server session
    mark = host.mark()
    status = host.result("checkSignInStatus", {"provider": "tab"})
    assert status["state"] == "signedIn" and status["reason"] == "refreshed"
    assert host.wait_for_notification("session/changed", since=mark)["state"] == "refreshed"
    renewal = tableau.snapshot().refresh_forms[-1]
    assert renewal == {"grant_type": "refresh_token", "client_id": device, "device_id": device, "site_namespace": site}
    issued = tableau.token_set(device)
    assert issued.refresh != old_refresh and issued.site == site     # rotated, on the profile's site
    token = host.result("getAccessToken", {"provider": "tab"})
    assert token["accessToken"] == issued.access != old["accessToken"]
    assert token["cookies"] == expected_cookies(tableau, issued.access, issued.xsrf)

    # The same through a request: 401 with result.errors → renewal → the request is replayed once.
    tableau.expire_sessions()
    refreshes = tableau.snapshot().refreshes
    answer = host.result("fetch", {"provider": "tab", **VIEWS})
    assert answer["status"] == 200 and f'"site": "{site}"' in answer["body"]
    assert tableau.snapshot().refreshes == refreshes + 1


def test_concurrent_checks_of_an_expired_session_renew_once(start_host, tableau_plugin_dir, tableau):
    """Refresh tokens rotate: a second renewal with the spent one would sign the user out. Every
    caller is answered (the original's second caller never was) and the server sees one renewal."""
    host = start_host([tableau_plugin_dir], profiles={"tab": profile(tableau)})
    sign_in(host, tableau)
    tableau.expire_sessions()
    # Many callers at once: the host starts a hook thread for each (HookThreads), so all of
    # them meet the expired session together.
    ids = [host.send_request("checkSignInStatus", {"provider": "tab"}) for _ in range(16)]
    ids += [host.send_request("fetch", {"provider": "tab", **VIEWS}) for _ in range(8)]
    answers = [host.wait_response(request_id, timeout=20)["result"] for request_id in ids]
    assert {a["state"] for a in answers[:16]} == {"signedIn"}
    assert {a["status"] for a in answers[16:]} == {200}
    assert tableau.snapshot().refreshes == 1 and tableau.snapshot().rejected == 0


@pytest.mark.parametrize("noticed_by", ["checkSignInStatus", "fetch"])
def test_an_administrator_revoking_the_device_signs_out_with_a_reason(start_host, tableau_plugin_dir, tableau, noticed_by):
    host = start_host([tableau_plugin_dir], profiles={"tab": profile(tableau)})
    sign_in(host, tableau)
    assert tableau.revoke_device(socket.gethostname()) == 1    # the admin picks the device by its name
    mark = host.mark()
    if noticed_by == "checkSignInStatus":
        status = host.result("checkSignInStatus", {"provider": "tab"})
        assert status["state"] == "notSignedIn" and status["reason"] == "revoked" and status["message"]
    else:
        error = host.error("fetch", {"provider": "tab", **VIEWS})
        assert error["code"] == -32001 and error["data"]["reason"] == "revoked"
    ended = signed_out(host, mark)
    assert [n["reason"] for n in ended] == ["revoked"] and "invalid_grant" in ended[0]["message"]
    assert host.error("getAccessToken", {"provider": "tab"})["data"]["reason"] == "noTokens"


def test_a_revoked_session_names_its_cookies_for_deletion(start_host, tableau_plugin_dir, tableau):
    host = start_host([tableau_plugin_dir], profiles={"tab": profile(tableau)})
    sign_in(host, tableau)
    tableau.revoke_device(socket.gethostname())
    mark = host.mark()
    assert host.result("checkSignInStatus", {"provider": "tab"})["reason"] == "revoked"
    assert signed_out(host, mark)[0].get("clearCookies") == clear_list(tableau)


def test_a_refresh_token_unused_for_fourteen_days_signs_out(start_host, tableau_plugin_dir, tableau):
    host = start_host([tableau_plugin_dir], profiles={"tab": profile(tableau)}, test_clock=True)
    sign_in(host, tableau)

    def later(days: int) -> dict[str, Any]:
        advance_clock(host, days * DAY_MS)                      # the host's clock and the server's, together
        tableau.advance(days * DAY_MS)
        return host.result("checkSignInStatus", {"provider": "tab"})

    # Used within 14 days, the refresh token is renewed (rotated) and its 14 days start again.
    assert later(13)["reason"] == "refreshed"
    assert later(13)["reason"] == "refreshed"
    mark = host.mark()
    status = later(15)
    assert status["state"] == "notSignedIn" and status["reason"] == "revoked" and "expired" in status["message"]
    assert [n["reason"] for n in signed_out(host, mark)] == ["revoked"]
    assert tableau.devices() == []


def test_a_refresh_token_ends_one_year_after_the_sign_in_however_often_it_is_used(start_host, tableau_plugin_dir, tableau):
    host = start_host([tableau_plugin_dir], profiles={"tab": profile(tableau)}, test_clock=True)
    sign_in(host, tableau)
    mark = host.mark()
    days = 0
    while True:                                                 # renewed every 13 days: never idle for 14
        days += 13
        advance_clock(host, 13 * DAY_MS)
        tableau.advance(13 * DAY_MS)
        status = host.result("checkSignInStatus", {"provider": "tab"})
        if status["reason"] != "refreshed":
            break
        assert days <= 365, "renewed past the refresh token's absolute lifetime"
    # The first renewal after the year ends the session, with the server's words.
    assert days == 377 and tableau.snapshot().refreshes == 28
    assert status["state"] == "notSignedIn" and status["reason"] == "revoked" and "expired" in status["message"]
    assert [n["reason"] for n in signed_out(host, mark)] == ["revoked"]
    assert tableau.devices() == []


def test_a_renewal_without_an_xsrf_token_keeps_the_new_tokens_and_the_previous_xsrf_token(start_host, tableau_plugin_dir, tableau):
    """The refresh token rotated with that answer: throwing it away would sign the user out at
    the next renewal (the spent token is refused)."""
    host = start_host([tableau_plugin_dir], profiles={"tab": profile(tableau)})
    sign_in(host, tableau)
    [device] = [d["id"] for d in tableau.devices()]
    xsrf = tableau.token_set(device).xsrf
    tableau.omit_xsrf_on_refresh = True
    mark = host.mark()
    for _ in range(2):
        tableau.expire_sessions()
        assert host.result("checkSignInStatus", {"provider": "tab"})["reason"] == "refreshed"
        issued = tableau.token_set(device)
        token = host.result("getAccessToken", {"provider": "tab"})
        assert token["accessToken"] == issued.access and token["headers"] == {"X-XSRF-TOKEN": xsrf}
        assert token["cookies"] == expected_cookies(tableau, issued.access, xsrf)
        assert host.result("fetch", {"provider": "tab", **VIEWS})["status"] == 200
    assert tableau.snapshot().refreshes == 2 and tableau.snapshot().rejected == 0
    assert signed_out(host, mark) == []


def test_a_server_outage_is_offline_and_keeps_the_tokens(start_host, tableau_plugin_dir, tableau):
    host = start_host([tableau_plugin_dir], profiles={"tab": profile(tableau)})
    sign_in(host, tableau)
    device = device_id(data_home_of(host), "tab")
    mark = host.mark()
    # 503 (whose body even carries an `error` key) is not a refusal: the tokens stay.
    with tableau.outage(503):
        status = host.result("checkSignInStatus", {"provider": "tab"})
        assert status["state"] == "offline" and status["reason"] == "transient" and "503" in status["message"]
    tableau.expire_sessions()
    with tableau.outage(503, paths=(TOKEN_PATH,)):              # the session ended and renewal is down
        status = host.result("checkSignInStatus", {"provider": "tab"})
        assert status["state"] == "offline" and "503" in status["message"]
        error = host.error("fetch", {"provider": "tab", **VIEWS})
        assert error["code"] == -32007 and error["data"]["retryable"] is True and "503" in error["message"]
    assert signed_out(host, mark) == []
    assert tableau.snapshot().outage_hits >= 3
    assert host.result("checkSignInStatus", {"provider": "tab"})["reason"] == "refreshed"   # back: renewed
    assert tableau.token_set(device) is not None


@pytest.mark.parametrize("status", [400, 401])
def test_a_renewal_refused_without_an_error_key_signs_out(start_host, tableau_plugin_dir, tableau, status):
    # Issue 25 §2.2: a 400 or 401 to a refresh is the server's answer about these tokens even with
    # no body (before: -32007 badResponse, retryable forever, and the session sat offline).
    host = start_host([tableau_plugin_dir], profiles={"tab": profile(tableau)})
    sign_in(host, tableau)
    tableau.expire_sessions()
    mark = host.mark()
    with tableau.outage(status, paths=(TOKEN_PATH,), bare=True):
        answer = host.result("checkSignInStatus", {"provider": "tab"})
    assert (answer["state"], answer["reason"]) == ("notSignedIn", "refreshRefused"), answer
    assert f"HTTP {status}" in answer["message"]
    assert [e["reason"] for e in signed_out(host, mark)] == ["refreshRefused"]


def test_an_unreachable_server_is_offline_and_sign_out_still_clears_its_cookies(start_host, tableau_plugin_dir):
    server = TableauServer().start()
    host = start_host([tableau_plugin_dir], profiles={"tab": profile(server)})
    try:
        sign_in(host, server)
    finally:
        server.stop()                                           # the server goes away
    assert server.violations == []
    status = host.result("checkSignInStatus", {"provider": "tab"})
    assert status["state"] == "offline" and status["message"]
    result = host.result("signOut", {"provider": "tab"})       # answered, never hangs
    assert result["revoked"] == [] and sorted(f["token"] for f in result["failures"]) == ["access_token", "refresh_token"]
    assert result["clearCookies"] == clear_list(server)
    assert host.result("checkSignInStatus", {"provider": "tab"})["reason"] == "noTokens"


def test_sign_out_against_a_server_that_does_not_answer_waits_one_bound_and_still_signs_out(
        start_host, tableau_plugin_dir, tableau):
    host = start_host([tableau_plugin_dir], profiles={"tab": profile(tableau)})
    sign_in(host, tableau)
    mark = host.mark()
    with tableau.stall(paths=(REVOKE_PATH,)) as stalled:
        request_id = host.send_request("signOut", {"provider": "tab"})
        # Both revocations wait at the server at the same time: one after the other, the second
        # would only be sent once the first had timed out (10 s).
        assert stalled.wait_until_waiting(2, timeout=8), \
            f"the revocations were not sent at once ({stalled.arrived} arrived within 8 s)"
        # One bound (10 s each, concurrently) and some slack; sequential revocations took 20 s.
        answer = host.wait_response(request_id, timeout=30)
    result = answer["result"]
    assert result["revoked"] == []
    assert sorted((f["token"], f["reason"]) for f in result["failures"]) == [
        ("access_token", "timeout"), ("refresh_token", "timeout")]
    assert result["clearCookies"] == clear_list(tableau)
    assert [n["reason"] for n in signed_out(host, mark)] == ["userSignedOut"]
    # Wiped locally whatever the server did.
    assert host.result("checkSignInStatus", {"provider": "tab"})["reason"] == "noTokens"
    assert host.error("getAccessToken", {"provider": "tab"})["data"]["reason"] == "noTokens"
    assert stalled.arrived == 2 and tableau.snapshot().revocations == []


# ── Refusals ─────────────────────────────────────────────────────────────────


def test_refused_sign_ins_store_nothing(start_host, tableau_plugin_dir, tableau):
    host = start_host([tableau_plugin_dir], profiles={"tab": profile(tableau)})
    error = host.error("requestOAuthTokens", {"provider": "tab", "flow": "session", "sessionId": "no-such-session-id"})
    assert error["code"] == -32004 and error["data"]["reason"] == "invalid_grant"
    tableau.disable_connected_clients()
    error = host.error("requestOAuthTokens", {"provider": "tab", "flow": "session", "sessionId": tableau.web_sign_in()})
    assert error["code"] == -32004 and error["data"]["reason"] == "connected_clients_disabled"
    assert "disabled" in error["message"]
    assert host.result("checkSignInStatus", {"provider": "tab"})["reason"] == "noTokens"
    assert host.error("requestOAuthTokens", {"provider": "tab", "flow": "external"})["code"] == -32009


def test_connected_clients_disabled_after_sign_in_ends_the_session_on_renewal(start_host, tableau_plugin_dir, tableau):
    host = start_host([tableau_plugin_dir], profiles={"tab": profile(tableau)})
    sign_in(host, tableau)
    tableau.disable_connected_clients()
    assert host.result("checkSignInStatus", {"provider": "tab"})["reason"] == "valid"   # the session still holds
    tableau.expire_sessions()
    mark = host.mark()
    status = host.result("checkSignInStatus", {"provider": "tab"})
    assert status["state"] == "notSignedIn" and status["reason"] == "connectedClientsDisabled"
    assert [n["reason"] for n in signed_out(host, mark)] == ["invalidGrant"]


# ── Several servers ──────────────────────────────────────────────────────────


def test_two_servers_at_once_signing_out_of_one_leaves_the_other_alone(start_host, tableau_plugin_dir, tableau, tableau_b):
    host = start_host([tableau_plugin_dir], profiles={"north": profile(tableau), "south": profile(tableau_b, site="finance")})
    sign_in(host, tableau, "north", user="alice")
    sign_in(host, tableau_b, "south", user="bob")
    north = host.result("getAccessToken", {"provider": "north"})
    south = host.result("getAccessToken", {"provider": "south"})
    assert {c["domain"] for c in north["cookies"]} == {"127.0.0.1"}
    assert {c["domain"] for c in south["cookies"]} == {"127.0.0.2"}

    mark = host.mark()
    result = host.result("signOut", {"provider": "north"})
    assert result["clearCookies"] == clear_list(tableau)        # only north's two cookies
    assert [n["provider"] for n in signed_out(host, mark)] == ["north"]
    assert sorted(tableau.snapshot().revocations) == ["access_token", "refresh_token"]   # sent at once: any order
    assert tableau_b.snapshot().revocations == []

    status = host.result("checkSignInStatus", {"provider": "south"})
    assert status["reason"] == "valid" and status["account"]["id"] == "bob"
    assert host.result("getAccessToken", {"provider": "south"})["cookies"] == south["cookies"]
    assert tableau_b.access_valid(south["accessToken"])
    assert host.result("fetch", {"provider": "south", **VIEWS})["status"] == 200
    assert host.result("checkSignInStatus", {"provider": "north"})["reason"] == "noTokens"


def test_two_profiles_on_one_server_are_two_devices_and_both_stay_signed_in(start_host, tableau_plugin_dir, tableau):
    """One token set per device per server: were both profiles one device, the second sign-in
    would end the first profile's grant, and its next renewal would sign it out."""
    profiles = {"sales": profile(tableau), "finance": profile(tableau, site="finance")}
    host = start_host([tableau_plugin_dir], profiles=profiles)
    sign_in(host, tableau, "sales", user="alice")
    sign_in(host, tableau, "finance", user="alice")
    mark = host.mark()
    for _ in range(3):                                          # renewals, each rotating both refresh tokens
        tableau.expire_sessions()
        for name in profiles:
            assert host.result("checkSignInStatus", {"provider": name})["reason"] == "refreshed", name
    assert signed_out(host, mark) == [] and tableau.snapshot().rejected == 0
    devices = {name: device_id(data_home_of(host), name) for name in profiles}
    assert devices["sales"] != devices["finance"]
    assert sorted(d["id"] for d in tableau.devices()) == sorted(devices.values())
    renewals = tableau.snapshot().refresh_forms
    assert {(f["device_id"], f["site_namespace"]) for f in renewals} == {(devices["sales"], ""), (devices["finance"], "finance")}
    for name, site in (("sales", ""), ("finance", "finance")):
        answer = host.result("fetch", {"provider": name, **VIEWS})
        assert answer["status"] == 200 and f'"site": "{site}"' in answer["body"]
    # Both profiles' cookies have the same names on the same host: a web view holds one of them.
    names = {name: [(c["name"], c["domain"]) for c in host.result("getAccessToken", {"provider": name})["cookies"]]
             for name in profiles}
    assert names["sales"] == names["finance"]


def test_credentials_are_only_sent_to_the_profiles_server(start_host, tableau_plugin_dir, tableau, tableau_b):
    host = start_host([tableau_plugin_dir], profiles={"tab": profile(tableau)})
    sign_in(host, tableau)
    error = host.error("fetch", {"provider": "tab", **VIEWS, "url": tableau_b.base + VIEWS_PATH})
    assert error["code"] == -32013 and error["data"]["reason"] == "foreignUrl"
    assert tableau_b.snapshot().api_calls == 0
    answer = host.result("fetch", {"provider": "tab", **VIEWS, "url": tableau.base + VIEWS_PATH})
    assert answer["status"] == 200
    # A path whose query holds a URL is still a path on the profile's server.
    answer = host.result("fetch", {"provider": "tab", **VIEWS, "url": f"{VIEWS_PATH}?next={tableau_b.base}/x"})
    assert answer["status"] == 200 and tableau.snapshot().api_calls == 2


def test_settings_are_checked(start_host, tableau_plugin_dir):
    profiles = {"plain": {"plugin": "tableau", "settings": {"server": "http://tableau.example.com"}},
                "none": {"plugin": "tableau", "settings": {}},
                "path": {"plugin": "tableau", "settings": {"server": "https://tableau.example.com/?x=1"}},
                "site": {"plugin": "tableau", "settings": {"server": "https://tableau.example.com", "site": "a/b"}}}
    host = start_host([tableau_plugin_dir], profiles=profiles)
    assert host.error("checkSignInStatus", {"provider": "plain"})["data"]["reason"] == "insecureUrl"
    assert host.error("checkSignInStatus", {"provider": "none"})["data"]["reason"] == "invalidSettings"
    assert host.error("checkSignInStatus", {"provider": "path"})["data"]["reason"] == "invalidSettings"
    assert host.error("checkSignInStatus", {"provider": "site"})["data"]["reason"] == "invalidSettings"


def test_another_user_on_the_same_device_replaces_the_first_at_the_server(start_host, tableau_plugin_dir, tableau):
    """One token set per device per server: bob's sign-in ends alice's grant. The host keeps
    alice's record (accounts are separate), and her next check finds it revoked."""
    host = start_host([tableau_plugin_dir], profiles={"tab": profile(tableau)})
    sign_in(host, tableau, user="alice")
    sign_in(host, tableau, user="bob")
    assert [d["user"] for d in tableau.devices()] == ["bob"]
    assert host.result("checkSignInStatus", {"provider": "tab"})["account"]["id"] == "bob"
    status = host.result("checkSignInStatus", {"provider": "tab", "account": "alice"})
    assert status["state"] == "notSignedIn" and status["reason"] == "revoked"
    assert host.result("checkSignInStatus", {"provider": "tab"})["reason"] == "valid"


# ── Details for frontends ───────────────────────────────────────────────────


def test_frontends_see_the_server_site_and_device(start_host, tableau_plugin_dir, tableau):
    host = start_host([tableau_plugin_dir], profiles={"tab": profile(tableau, site="finance", deviceName="Kiosk 7")})
    status = sign_in(host, tableau)
    expected = {"server": tableau.base, "site": "finance", "deviceId": device_id(data_home_of(host), "tab"),
                "deviceName": "Kiosk 7"}
    assert status["details"] == expected
    assert host.result("checkSignInStatus", {"provider": "tab"})["details"] == expected
    assert host.result("getAccessToken", {"provider": "tab"})["details"] == expected
    tableau.expire_sessions()                                   # a renewal keeps what it does not resend
    status = host.result("checkSignInStatus", {"provider": "tab"})
    assert status["reason"] == "refreshed" and status["details"] == expected


# ── A real web view ─────────────────────────────────────────────────────────


def set_cookies(driver, cookies: list[dict[str, Any]]) -> None:
    """What a frontend does with getAccessToken's cookies: each into its web view's cookie store
    with the name, value, domain, path, lifetime and secure flag given."""
    for cookie in cookies:
        answer = driver.execute_cdp_cmd("Network.setCookie", {
            "name": cookie["name"], "value": cookie["value"], "domain": cookie["domain"], "path": cookie["path"],
            "secure": cookie.get("secure", False), "httpOnly": cookie.get("httpOnly", False),
            "expires": time.time() + cookie["maxAge"]})
        assert answer.get("success") is True, f"the web view refused the cookie {cookie['name']}"


def stored_cookies(driver) -> set[tuple[str, str, str]]:
    """(name, domain, path) of every cookie in the web view's store (never values)."""
    return {(c["name"], c["domain"], c["path"]) for c in driver.execute_cdp_cmd("Storage.getCookies", {})["cookies"]}


def view_page_status(driver, url: str) -> str:
    """Loads the view page and waits for its script's getViews call: "loaded" or "refused <status>"."""
    driver.get(url)
    if driver.title != "Overview":
        return driver.title
    status = wait_for(driver, lambda d: d.find_element(By.ID, "status").text not in ("", "loading")
                      and d.find_element(By.ID, "status").text, "the page's getViews call")
    return status


def test_a_web_view_shows_tableau_content_with_the_cookies_and_forgets_only_them_at_sign_out(
        start_host, tableau_plugin_dir, tableau, chromium, tmp_path):
    """Headless Chromium as the frontend's web view: the cookies exactly as getAccessToken gives
    them load a page that needs them (its script sends the XSRF-TOKEN cookie back as the
    X-XSRF-TOKEN header, which the simulator checks); after signOut, deleting exactly the
    cookies named in clearCookies leaves other sites' cookies alone and the page is refused."""
    host = start_host([tableau_plugin_dir], profiles={"tab": profile(tableau)})
    sign_in(host, tableau)
    page = tableau.base + VIEW_PAGE
    with evidence_on_failure(chromium, tmp_path / "browser"):
        assert view_page_status(chromium, page) == "Sign In", "the page loaded without the cookies"
        set_cookies(chromium, host.result("getAccessToken", {"provider": "tab"})["cookies"])
        # Other sites' cookies: the same name on another Tableau host, and another cookie on this one.
        set_cookies(chromium, [{"name": "tableau_access_token", "value": "another-site", "domain": "127.0.0.2",
                                "path": "/", "maxAge": 3600},
                               {"name": "theme", "value": "dark", "domain": tableau.host, "path": "/", "maxAge": 3600}])
        assert view_page_status(chromium, page) == "loaded"
        assert [item.text for item in chromium.find_elements(By.CSS_SELECTOR, "#views li")] == ["Overview", "Forecast"]
        assert tableau.snapshot().api_calls == 1

        result = host.result("signOut", {"provider": "tab"})
        for cookie in result["clearCookies"]:
            chromium.execute_cdp_cmd("Network.deleteCookies", {"name": cookie["name"], "domain": cookie["domain"],
                                                               "path": cookie["path"]})
        assert stored_cookies(chromium) == {("tableau_access_token", "127.0.0.2", "/"), ("theme", tableau.host, "/")}
        assert view_page_status(chromium, page) == "Sign In"
    assert tableau.snapshot().page_loads == [401, 200, 401]
