"""How sessions end, when other things happen at the same time (bridge-spec §4 signOut, §5).

- A sign-out racing a refresh: the refresh finishes first, its rotated tokens are the ones
  revoked, and nothing brings the session back.
- Web-view cookies: only the ended account's, never those the profile's current account uses;
  a changed or removed profile names its cookies too.
- A license sign-out pending when the host stops happens at its next start.
- Session details: non-secret provider facts reach frontends; secrets never do.
"""

from __future__ import annotations

import threading

import pytest

from conftest import HostError, make_plugin_dir, sign_in_external, sign_in_session
from simulators.rotating_server import RotatingAuthServer
from test_license import api  # noqa: F401 - the fixture: an API that answers "license revoked"

SWIFT_COOKIE = {"name": "swifttest_session", "domain": "swifttest.example", "path": "/"}


def session_events(host, provider, since=0):
    return [(event["state"], event["reason"]) for event in host.notifications("session/changed", since)
            if event["provider"] == provider]


# ── Sign-out against a refresh in flight ─────────────────────────────────────


@pytest.fixture
def rotating():
    server = RotatingAuthServer(access_lifetime=1, reuse_protection=True).start()
    yield server
    server.refresh_gate = None
    server.stop()


def test_sign_out_during_a_refresh_revokes_the_rotated_tokens_and_nothing_comes_back(start_host, oidc_plugin_dir, rotating):
    host = start_host([oidc_plugin_dir], profiles={"p": {"plugin": "oidc", "settings": rotating.settings()}})
    sign_in_external(host, rotating, "p")
    mark = host.mark()
    # This call refreshes; the server rotates and holds its answer until the sign-out has been sent.
    gate = rotating.refresh_gate = threading.Event()
    token_id = host.send_request("getAccessToken", {"provider": "p", "forceRefresh": True})
    assert rotating.refresh_rotated.wait(10), "the refresh never reached the server"
    sign_out_id = host.send_request("signOut", {"provider": "p"})
    # The sign-out waits for the refresh in flight (else it would revoke and wipe the old tokens
    # and the refresh would then store new ones: a session back from the dead).
    with pytest.raises(HostError, match="timed out"):
        host.wait_response(sign_out_id, timeout=2.0)
    gate.set()
    token = host.wait_response(token_id)
    signed_out = host.wait_response(sign_out_id)["result"]
    assert signed_out["signedOut"] is True and "refresh_token" in signed_out["revoked"]
    # The caller of getAccessToken got the renewed token: it was valid when handed out.
    assert "result" in token and rotating.is_issued(token["result"]["accessToken"])
    # Nothing came back: no stored session, and the grant is dead at the server.
    assert host.result("listAccounts", {"provider": "p"})["accounts"] == []
    assert host.result("checkSignInStatus", {"provider": "p"})["state"] == "notSignedIn"
    snapshot = rotating.snapshot()
    assert snapshot["refreshes"] == 1 and snapshot["revoked_families"] == snapshot["families"] == 1, snapshot
    assert session_events(host, "p", mark) == [("refreshed", "refreshed"), ("signedOut", "userSignedOut")]


# ── Cookies of ended sessions ────────────────────────────────────────────────


def test_signing_out_an_earlier_account_keeps_the_current_accounts_cookies(host):
    sign_in_session(host, "s", "alice")
    sign_in_session(host, "s", "bob")          # bob is now the current account: his cookie is in the web view
    mark = host.mark()
    alice = host.result("signOut", {"provider": "s", "account": "alice"})
    assert "clearCookies" not in alice, "alice's cookie has the name, domain and path of bob's live one"
    ended = host.wait_for_notification("session/changed", lambda p: p["state"] == "signedOut", since=mark)
    assert ended["account"]["id"] == "alice" and "clearCookies" not in ended
    assert host.result("getAccessToken", {"provider": "s"})["accessToken"] == "sat-bob"
    bob = host.result("signOut", {"provider": "s"})
    assert bob["clearCookies"] == [SWIFT_COOKIE]


def test_signing_out_the_current_account_clears_its_cookies_though_another_remains(host):
    sign_in_session(host, "s", "alice")
    sign_in_session(host, "s", "bob")
    mark = host.mark()
    host.result("signOut", {"provider": "s", "account": "bob"})
    ended = host.wait_for_notification("session/changed", lambda p: p["state"] == "signedOut", since=mark)
    assert ended["account"]["id"] == "bob" and ended["clearCookies"] == [SWIFT_COOKIE]
    assert host.result("getAccessToken", {"provider": "s"})["accessToken"] == "sat-alice"


@pytest.mark.parametrize("change", ["configure", "remove"])
def test_a_changed_or_removed_profile_names_its_cookies(host, change):
    sign_in_session(host, "s", "alice")
    mark = host.mark()
    if change == "configure":
        host.result("configureProfile", {"name": "s", "plugin": "swifttest", "settings": {"clientId": "another-app"}})
    else:
        assert host.result("removeProfile", {"name": "s"}) == {"removed": True}
    ended = host.wait_for_notification("session/changed", lambda p: p["state"] == "signedOut", since=mark)
    assert ended["reason"] == "profileChanged" and ended["clearCookies"] == [SWIFT_COOKIE]


# ── A license sign-out that outlives the host ────────────────────────────────


def lose_the_license(start_host, tmp_path, api, grace_ms):
    """A host whose signed-in ctest account just lost its license (the grace period running),
    and how to start another host on the same vault."""
    plugins = make_plugin_dir(tmp_path / "license-plugins")
    profiles = {"c": {"plugin": "ctest", "settings": {"server": "https://ctest.example", "licenseGracePeriodMs": grace_ms}}}
    data_home = {"XDG_DATA_HOME": str(tmp_path / "data")}
    first = start_host([plugins], profiles=profiles, env=data_home)
    sign_in_session(first, "c", "licensed")
    first.result("fetch", {"provider": "c", "url": f"{api}/companies/1/customers"})
    first.wait_for_notification("session/changed", lambda p: p["state"] == "licenseRevoked")
    return first, lambda **options: start_host([plugins], profiles=profiles, env=data_home, **options)


def test_a_license_sign_out_pending_at_exit_happens_at_the_next_start(start_host, tmp_path, api):  # noqa: F811
    first, start_next = lose_the_license(start_host, tmp_path, api, grace_ms=1500)
    error = first.error("getAccessToken", {"provider": "c"})
    assert error["data"]["reason"] == "licenseRevoked" and "license removed" in error["message"], \
        "the user keeps seeing the provider's words"
    first.stop()                                 # inside the grace period

    second = start_next()
    # The new host's first look at the vault finds the pending sign-out; it then happens by
    # itself when the grace period ends, without anyone asking again.
    [pending] = second.result("listAccounts", {"provider": "c"})["accounts"]
    assert pending["state"] == "licenseRevoked" and pending["message"] == "license removed"
    ended = second.wait_for_notification("session/changed", lambda p: p["state"] == "signedOut")
    assert ended["reason"] == "licenseRevoked" and ended["message"] == "license removed"
    assert ended["clearCookies"] == [{"name": "ctest_session", "domain": "ctest.example", "path": "/"}], \
        "the revoke hook ran (its answer names that cookie)"
    assert second.result("listAccounts", {"provider": "c"})["accounts"] == []


def test_a_license_sign_out_overdue_at_start_happens_before_any_answer(start_host, tmp_path, api):  # noqa: F811
    first, start_next = lose_the_license(start_host, tmp_path, api, grace_ms=60_000)
    first.proc.kill()                            # a crash: its timer dies with it
    first.stop()
    second = start_next(test_clock=True)
    second.result("$/test/advanceClock", {"milliseconds": 61_000})    # past the stored deadline
    status = second.result("checkSignInStatus", {"provider": "c"})
    assert status["state"] == "notSignedIn" and status["reason"] == "licenseRevoked", status
    ended = second.wait_for_notification("session/changed", lambda p: p["state"] == "signedOut")
    assert ended["reason"] == "licenseRevoked" and ended["message"] == "license removed"


# ── Session details ──────────────────────────────────────────────────────────


def test_details_reach_frontends_without_secrets_and_follow_refreshes(clock_host):
    host = clock_host
    signed_in = sign_in_session(host, "s", "alice")
    # Secret-named (sessionId: a web session id is a credential; accessToken), token-bearing, nested: dropped.
    expected = {"generation": 1, "tier": "test"}
    assert signed_in["details"] == expected
    assert host.result("checkSignInStatus", {"provider": "s"})["details"] == expected
    assert host.result("getAccessToken", {"provider": "s"})["details"] == expected
    assert host.result("listAccounts", {"provider": "s"})["accounts"][0]["details"] == expected
    host.result("$/test/advanceClock", {"milliseconds": 2 * 3_600_000})
    assert host.result("checkSignInStatus", {"provider": "s"})["details"] == {**expected, "generation": 2}
    host.result("signOut", {"provider": "s"})
    assert "details" not in host.result("checkSignInStatus", {"provider": "s"})
    # The ctest plugin reports none: the member is absent, not empty.
    sign_in_session(host, "c", "bob")
    assert "details" not in host.result("getAccessToken", {"provider": "c"})
