"""The duke plugin (C + jansson) through the real host, against a simulated Duke mobile
authorizer (simulators/sim_duke.py): the external web sign-in whose token URL is read by name, expiry from
the access token's JWT `exp`, refresh with X-Access-Token / X-Session-Token (both rotated), a
dead session (400) ending the session, 5xx and an unreachable server meaning offline, logout at
/ios/revoke, and the test / production base URLs.

Every test asserts the simulator saw no protocol violation (missing header, a body, a session
token sent to the API, a stale token…), and the suite-wide leak scan checks that no token the
simulator handed out reached the host's log or messages. Token values are compared into booleans
before asserting, so a failure never prints one.
"""

from __future__ import annotations

import shutil
import subprocess
import urllib.parse

import pytest

from conftest import REPO, advance_clock, begin_sign_in
from provider_fixtures import provider_fixtures
from simulators.sim_duke import DEFAULT_ORDER, DukeAuthorizer

HOUR_MS = 3600 * 1000
PROFILE = "duke"


# ── Fixtures and helpers ────────────────────────────────────────────────────


duke_plugin_dir, make_duke, duke = provider_fixtures("duke", DukeAuthorizer, "Duke's protocol", sim="duke")


@pytest.fixture
def start_duke_host(start_host, duke_plugin_dir, duke):
    """start_duke_host(**settings) → a host (test clock) with profile "duke" on the simulator."""
    def start(**settings):
        profiles = {PROFILE: {"plugin": "duke", "settings": duke.settings(**settings)}}
        return start_host([duke_plugin_dir], profiles=profiles, test_clock=True)
    return start


def advance(host, duke: DukeAuthorizer, milliseconds: int) -> None:
    """Moves the host's clock and the simulator's together."""
    advance_clock(host, milliseconds)
    duke.advance(milliseconds)


def begin(host, profile: str = PROFILE) -> tuple[int, dict]:
    """Starts the external sign-in; returns (request id, the openUrl progress event)."""
    return begin_sign_in(host, profile)


def sign_in(host, duke: DukeAuthorizer, netid: str = "ab123") -> dict:
    """The whole external sign-in, the test playing the web view; returns the answer frame."""
    request_id, opened = begin(host)
    assert opened["url"] == duke.login_url
    assert opened["callbackPrefix"] == duke.token_prefix
    location = duke.browse(opened["url"], netid=netid)
    assert location.startswith(opened["callbackPrefix"]), "the web view did not reach the token URL"
    assert host.result("completeSignIn", {"provider": PROFILE, "callbackUrl": location}) == {"accepted": True}
    return host.wait_response(request_id)


def signed_in(host, duke: DukeAuthorizer, netid: str = "ab123") -> dict:
    answer = sign_in(host, duke, netid)
    assert "result" in answer, answer.get("error")
    assert answer["result"]["state"] == "signedIn"
    return answer["result"]


def current_token(host, duke: DukeAuthorizer) -> tuple[str, dict]:
    """getAccessToken's token (checked to be the simulator's current one) and its result."""
    result = host.result("getAccessToken", {"provider": PROFILE})
    token = result["accessToken"]
    current = duke.is_current_access(token)
    bearer = result["headers"].get("Authorization") == "Bearer " + token
    assert current, "getAccessToken handed out a token the server no longer accepts"
    assert bearer, "getAccessToken's headers lack the Bearer authorization"
    return token, result


def token_url(duke: DukeAuthorizer, host) -> tuple[int, str]:
    """Begins a sign-in and lets the user sign in; returns (request id, the token URL)."""
    request_id, opened = begin(host)
    return request_id, duke.browse(opened["url"])


# ── Sign-in ─────────────────────────────────────────────────────────────────


def test_external_sign_in_end_to_end(start_duke_host, duke):
    host = start_duke_host()
    mark = host.mark()
    status = signed_in(host, duke)
    # expiresAt is the access token's JWT exp; the account comes from its claims.
    token, result = current_token(host, duke)
    exp = duke.claims(token)["exp"]
    assert status["expiresAt"] == exp * 1000 == result["expiresAt"]
    assert status["account"] == {"id": "ab123", "name": "Alex Blue", "email": "alex.blue@duke.edu"}
    assert status["reason"] == "signedIn"
    changed = host.wait_for_notification("session/changed", lambda p: p["state"] == "signedIn", since=mark)
    assert changed["account"]["id"] == "ab123"
    stages = [p["stage"] for p in host.notifications("signIn/progress", since=mark)]
    assert stages == ["openUrl", "exchanging"]
    # An API call: relative URL against apiBaseUrl, Bearer header, no session token.
    answer = host.result("fetch", {"provider": PROFILE, "url": "/me"})
    assert answer["status"] == 200 and '"ab123"' in answer["body"]
    assert host.result("checkSignInStatus", {"provider": PROFILE})["state"] == "signedIn"
    counts = duke.snapshot()
    assert counts["logins"] == 1 and counts["refreshes"] == 0 and counts["api_calls"] == 1


@pytest.mark.parametrize("order, extras", [
    # The tokens last, after a parameter whose name starts like one of them.
    (("access_token_type", "x_session_token", "lang", "session_token", "expires_in", "access_token"),
     {"access_token_type": "JWT", "x_session_token": "decoy-not-a-session", "lang": "en-US"}),
    # The session token first, an empty parameter and a name without a value in between.
    (("session_token", "empty", "flag", "netid", "access_token", "token_type"), {"empty": "", "flag": None}),
], ids=["tokens-last-with-lookalikes", "session-first-with-empty-params"])
def test_the_token_url_is_read_by_name_whatever_the_order(start_duke_host, duke, order, extras):
    host = start_duke_host()
    flag_names = {name for name, value in extras.items() if value is None}
    duke.set_callback(order=tuple(n for n in order if n not in flag_names),
                      extras={k: v for k, v in extras.items() if v is not None})
    request_id, location = token_url(duke, host)
    for name in flag_names:   # a bare name without '=' (…&flag&…)
        location = location.replace("&netid=", f"&{name}&netid=")
    names = [name for name, _ in urllib.parse.parse_qsl(urllib.parse.urlsplit(location).query, keep_blank_values=True)]
    assert names[:2] != ["access_token", "session_token"], "the layout must defeat reading by position"
    host.result("completeSignIn", {"provider": PROFILE, "callbackUrl": location})
    answer = host.wait_response(request_id)
    assert answer["result"]["state"] == "signedIn", answer
    current_token(host, duke)
    # A refresh proves the session token was read (and percent-decoded: it holds '+', '/', '=').
    advance(host, duke, HOUR_MS + 60_000)
    current_token(host, duke)
    assert duke.snapshot()["refreshes"] == 1


@pytest.mark.parametrize("missing", ["session_token", "access_token"])
def test_a_token_url_without_a_token_is_a_clear_refusal_and_nothing_is_stored(start_duke_host, duke, missing):
    host = start_duke_host()
    duke.set_callback(omit=(missing,))
    mark = host.mark()
    request_id, location = token_url(duke, host)
    host.result("completeSignIn", {"provider": PROFILE, "callbackUrl": location})
    error = host.wait_response(request_id)["error"]
    assert error["code"] == -32004 and error["data"]["reason"] == "missingToken"
    assert missing in error["message"] and "Sign in again" in error["message"]
    assert not [p for p in host.notifications("session/changed", since=mark) if p["state"] == "signedIn"]
    status = host.result("checkSignInStatus", {"provider": PROFILE})
    assert status["state"] == "notSignedIn" and status["reason"] == "noTokens"
    assert host.result("listAccounts", {}) == {"accounts": []}
    # The host and the plugin are fine: the next, complete sign-in works.
    duke.set_callback()
    signed_in(host, duke)


def test_a_token_url_from_another_path_is_refused(start_duke_host, duke):
    host = start_duke_host()
    request_id, location = token_url(duke, host)
    # Starts with the callback prefix (the host accepts it) but is not the token page itself.
    forged = location.replace("/ios/token?", "/ios/token-elsewhere?", 1)
    host.result("completeSignIn", {"provider": PROFILE, "callbackUrl": forged})
    error = host.wait_response(request_id)["error"]
    assert error["code"] == -32004 and error["data"]["reason"] == "invalidCallback"
    assert host.result("checkSignInStatus", {"provider": PROFILE})["state"] == "notSignedIn"


@pytest.mark.parametrize("name, value", [
    ("access_token", "ab%ZZcd"),      # '%' followed by something that is not hex
    ("session_token", "abc%4"),       # an escape cut short at the end of the value
    ("lang", "en%2"),                 # broken in a parameter the plugin does not read: not Duke's page either
], ids=["invalid-escape", "truncated-escape", "elsewhere-in-the-query"])
def test_a_token_url_with_a_malformed_escape_is_refused_and_nothing_is_stored(start_duke_host, duke, name, value):
    host = start_duke_host()
    duke.set_callback(order=DEFAULT_ORDER + ("lang",), extras={"lang": "en"})
    mark = host.mark()
    request_id, location = token_url(duke, host)
    parts = urllib.parse.urlsplit(location)
    # Rebuilt by hand: urlencode would escape the '%' and make the URL well formed again.
    pairs = [pair.split("=", 1) for pair in parts.query.split("&")]
    assert name in [key for key, _ in pairs]
    query = "&".join(f"{key}={value if key == name else rest}" for key, rest in pairs)
    broken = urllib.parse.urlunsplit(parts._replace(query=query))
    host.result("completeSignIn", {"provider": PROFILE, "callbackUrl": broken})
    error = host.wait_response(request_id)["error"]
    assert error["code"] == -32004 and error["data"]["reason"] == "invalidCallback"
    assert "not well formed" in error["message"] and "nothing was stored" in error["message"]
    assert not [p for p in host.notifications("session/changed", since=mark) if p["state"] == "signedIn"]
    assert host.result("checkSignInStatus", {"provider": PROFILE})["state"] == "notSignedIn"
    assert host.result("listAccounts", {}) == {"accounts": []}
    # The next, well-formed sign-in works.
    duke.set_callback()
    signed_in(host, duke)


# ── Refresh ─────────────────────────────────────────────────────────────────


def test_expiry_refreshes_with_both_headers_and_both_tokens_are_replaced(start_duke_host, duke):
    host = start_duke_host()
    signed_in(host, duke)
    first, _ = current_token(host, duke)
    mark = host.mark()
    # Within getAccessToken's minimum validity (60 s) of the JWT's exp: refresh first.
    advance(host, duke, HOUR_MS - 30_000)
    second, result = current_token(host, duke)
    assert first != second
    assert result["expiresAt"] == duke.claims(second)["exp"] * 1000
    changed = host.wait_for_notification("session/changed", lambda p: p["state"] == "refreshed", since=mark)
    assert changed["account"]["id"] == "ab123"
    # The next refresh must use the NEW session token (the old one died with the first refresh),
    # here through checkSignInStatus once the token has expired.
    advance(host, duke, HOUR_MS + 60_000)
    status = host.result("checkSignInStatus", {"provider": PROFILE})
    assert status["state"] == "signedIn" and status["reason"] == "refreshed"
    third, _ = current_token(host, duke)
    assert third not in (first, second)
    counts = duke.snapshot()
    assert counts["refreshes"] == 2 and counts["refused_refreshes"] == 0


def test_a_401_from_the_api_refreshes_and_replays(start_duke_host, duke):
    host = start_duke_host()
    signed_in(host, duke)
    first, _ = current_token(host, duke)
    duke.advance(HOUR_MS + 1_000)             # only the server's clock: the host still thinks the JWT is valid
    # The API's 401 (standard classify_response) → refresh → replay.
    answer = host.result("fetch", {"provider": PROFILE, "url": duke.api_url})
    assert answer["status"] == 200
    counts = duke.snapshot()
    assert counts["api_refusals"] == 1 and counts["api_calls"] == 2 and counts["refreshes"] == 1
    second, _ = current_token(host, duke)
    assert second != first


def test_a_token_known_to_be_expired_is_renewed_before_the_request(start_duke_host, duke):
    host = start_duke_host()
    signed_in(host, duke)
    advance(host, duke, HOUR_MS + 1_000)      # both clocks: the host knows the JWT's exp has passed
    answer = host.result("fetch", {"provider": PROFILE, "url": duke.api_url})
    assert answer["status"] == 200
    counts = duke.snapshot()
    assert counts["api_refusals"] == 0 and counts["api_calls"] == 1 and counts["refreshes"] == 1, "no 401 spent"


def test_a_server_error_on_refresh_is_offline_keeps_the_tokens_and_recovers(start_duke_host, duke):
    host = start_duke_host()
    signed_in(host, duke)
    mark = host.mark()
    duke.fail(503)
    advance(host, duke, HOUR_MS + 60_000)
    status = host.result("checkSignInStatus", {"provider": PROFILE})
    assert status["state"] == "offline" and status["reason"] == "transient"
    assert "503" in status["message"]
    error = host.error("getAccessToken", {"provider": PROFILE})
    assert error["code"] == -32007 and error["data"]["reason"] == "serverError"
    assert error["data"]["retryable"] is True
    assert host.result("listAccounts", {})["accounts"], "the session was kept"
    assert not [p for p in host.notifications("session/changed", since=mark) if p["state"] == "signedOut"]
    duke.recover()
    status = host.result("checkSignInStatus", {"provider": PROFILE})
    assert status["state"] == "signedIn" and status["reason"] == "refreshed"
    current_token(host, duke)
    counts = duke.snapshot()
    assert counts["failed_requests"] == 2 and counts["refreshes"] == 1


def test_a_server_error_on_refresh_reports_the_providers_status(start_duke_host, duke):
    host = start_duke_host()
    signed_in(host, duke)
    duke.fail(503)
    advance(host, duke, HOUR_MS + 60_000)
    error = host.error("getAccessToken", {"provider": PROFILE})
    assert error["code"] == -32007 and error["data"].get("status") == 503


def test_an_unreachable_server_is_offline_not_a_hang(start_duke_host, duke):
    host = start_duke_host()
    signed_in(host, duke)
    duke.stop()
    try:
        advance(host, duke, HOUR_MS + 60_000)
        status = host.result("checkSignInStatus", {"provider": PROFILE})
        assert status["state"] == "offline" and "could not be reached" in status["message"]
        error = host.error("getAccessToken", {"provider": PROFILE})
        assert error["code"] == -32007 and error["data"]["retryable"] is True
    finally:
        duke.start()                       # back on the same port, with the same sessions
    assert host.result("checkSignInStatus", {"provider": PROFILE})["state"] == "signedIn"
    current_token(host, duke)


@pytest.mark.parametrize("noticed_by", ["fetch", "checkSignInStatus"])
def test_an_ended_session_signs_the_user_out_with_a_reason(start_duke_host, duke, noticed_by):
    host = start_duke_host()
    signed_in(host, duke)
    assert duke.end_session("ab123") == 1         # an administrator ends the user's session
    mark = host.mark()
    if noticed_by == "fetch":
        # The API refuses the access token (401) → refresh → 400: the session is dead.
        error = host.error("fetch", {"provider": PROFILE, "url": "/me"})
        assert error["code"] == -32001 and error["data"]["reason"] == "revoked"
    else:
        advance(host, duke, HOUR_MS + 60_000)
        status = host.result("checkSignInStatus", {"provider": PROFILE})
        assert status["state"] == "notSignedIn" and status["reason"] == "revoked"
        assert "Duke session has ended" in status["message"]
    changed = host.wait_for_notification("session/changed", lambda p: p["state"] == "signedOut", since=mark)
    assert changed["reason"] == "revoked" and "sign in again" in changed["message"]
    assert changed["account"]["id"] == "ab123"
    assert host.result("checkSignInStatus", {"provider": PROFILE})["state"] == "notSignedIn"
    assert host.result("listAccounts", {}) == {"accounts": []}
    error = host.error("getAccessToken", {"provider": PROFILE})
    assert error["code"] == -32001 and error["data"]["reason"] == "noTokens"
    assert duke.snapshot()["refused_refreshes"] == 1


# ── Sign-out ────────────────────────────────────────────────────────────────


def test_sign_out_logs_out_at_duke_with_both_headers(start_duke_host, duke):
    host = start_duke_host()
    signed_in(host, duke)
    assert duke.live_sessions("ab123") == 1
    mark = host.mark()
    result = host.result("signOut", {"provider": PROFILE})
    assert result["revoked"] == ["access_token", "session_token"] and result["failures"] == []
    assert duke.snapshot()["revokes"] == 1 and duke.live_sessions("ab123") == 0
    changed = host.wait_for_notification("session/changed", lambda p: p["state"] == "signedOut", since=mark)
    assert changed["reason"] == "userSignedOut"
    status = host.result("checkSignInStatus", {"provider": PROFILE})
    assert status["state"] == "notSignedIn" and status["reason"] == "noTokens"


def test_sign_out_wipes_the_session_even_when_duke_fails(start_duke_host, duke):
    host = start_duke_host()
    signed_in(host, duke)
    duke.fail(502)
    result = host.result("signOut", {"provider": PROFILE})
    assert result["signedOut"] is True and result["revoked"] == []
    assert [(f["token"], f["reason"]) for f in result["failures"]] == [("all", "httpStatus")]
    assert "502" in result["failures"][0]["message"]
    assert host.result("checkSignInStatus", {"provider": PROFILE})["state"] == "notSignedIn"


# ── Environments and settings ───────────────────────────────────────────────


@pytest.mark.parametrize("environment, base", [
    (None, "https://mobile-authorizer.api.oit.duke.edu/"),
    ("production", "https://mobile-authorizer.api.oit.duke.edu/"),
    ("test", "https://mobile-authorizer-test.oit.duke.edu/"),
])
def test_environments_map_to_dukes_base_urls(start_host, duke_plugin_dir, environment, base):
    settings = {"clientName": "campus-app"}
    if environment is not None:
        settings["environment"] = environment
    host = start_host([duke_plugin_dir], profiles={PROFILE: {"plugin": "duke", "settings": settings}})
    request_id, opened = begin(host)
    assert opened["url"] == f"{base}campus-app/ios/login"
    assert opened["callbackPrefix"] == f"{base}campus-app/ios/token"
    host.notify("$/cancelRequest", {"id": request_id})   # nobody signs in at the real Duke
    assert host.wait_response(request_id)["error"]["code"] == -32800


@pytest.mark.parametrize("settings, reason, words", [
    ({"clientName": "app", "baseUrl": "http://mobile-authorizer.example/"}, "insecureUrl", "baseUrl"),
    # User info: the host is evil.example, not the loopback address before the '@'.
    ({"clientName": "app", "baseUrl": "http://127.0.0.1:1@evil.example/"}, "insecureUrl", "baseUrl"),
    ({"clientName": "app", "baseUrl": "https://someone@mobile-authorizer.example/"}, "insecureUrl", "baseUrl"),
    ({"clientName": "app", "environment": "staging"}, "invalidSettings", "environment"),
    ({"clientName": "app/ios"}, "invalidSettings", "clientName"),
    ({"environment": "test"}, "invalidSettings", "clientName"),
])
def test_bad_settings_are_configuration_errors(start_host, duke_plugin_dir, settings, reason, words):
    host = start_host([duke_plugin_dir], profiles={PROFILE: {"plugin": "duke", "settings": settings}})
    error = host.error("checkSignInStatus", {"provider": PROFILE})
    assert error["code"] == -32013 and error["data"]["reason"] == reason
    assert words in error["message"]


def test_the_plugin_describes_itself(start_host, duke_plugin_dir):
    host = start_host([duke_plugin_dir], profiles={})
    plugin = next(p for p in host.request("listProviders")["result"]["plugins"] if p["id"] == "duke")
    assert plugin["status"] == "loaded" and plugin["flows"] == ["external"]
    assert plugin["settings"]["required"] == ["clientName"]
    assert set(plugin["settings"]["properties"]) == {"clientName", "environment", "baseUrl", "apiBaseUrl"}


# ── The simulator checks what a client sends ────────────────────────────────


def test_the_simulator_records_a_client_that_breaks_dukes_protocol(duke):
    # Its checks are live: a refresh without the session-token header, and one with a body.
    status, _, _ = duke._request("POST", f"/{duke.client}/ios/refresh", headers={"X-Access-Token": "a.b.c"})
    assert status == 400
    status, _, _ = duke._request("POST", f"/{duke.client}/ios/revoke", body="token=x",
                                 headers={"X-Access-Token": "a", "X-Session-Token": "b",
                                          "Content-Type": "application/x-www-form-urlencoded"})
    assert status == 400
    assert duke.violations == ["refresh: missing header X-Session-Token",
                               "revoke: the request has a body (Duke's revoke takes none)"]
    duke.violations.clear()


# ── Memory ──────────────────────────────────────────────────────────────────


@pytest.mark.skipif(shutil.which("valgrind") is None or shutil.which("gcc") is None,
                    reason="needs valgrind and gcc")
def test_the_plugin_frees_what_it_allocates_under_valgrind(tmp_path):
    # Every hook, on success and failure paths, through a stand-in host that frees what it lent
    # when the hook returns (Tests/memcheck/duke/): no leak, no invalid access.
    script = REPO / "Tests" / "memcheck" / "duke" / "run.sh"
    done = subprocess.run(["sh", str(script), str(tmp_path)], capture_output=True, text=True, timeout=300)
    # valgrind exits 3 on any memory error or leak; the harness exits 1 when a hook answered wrongly.
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert done.stdout.strip().endswith(" 0 failed") and done.stderr == "", done.stderr[-3000:]
