"""Session methods through both test plugins (bridge-spec/README.md §4, §5).

Profiles of the `host` fixture: `c` → ctest (C), `s` → swifttest (Swift SDK). Their
deterministic behaviour (Tests/Plugins/…): a session sign-in with id SID yields access token
at-SID / sat-SID and refresh token rt-SID / srt-SID, valid one hour; a refresh yields
at2-SID / sat2-SID. Session id "bad" is refused (invalid_grant), "slow" waits for
cancellation; refresh tokens starting rt-revoked / srt-revoked are refused for good,
rt-transient / srt-transient transiently; swifttest's check_session fails transiently for
session id "transient".
"""

import urllib.parse

import pytest

from conftest import advance_clock, begin_sign_in, sign_in_session

HOUR = 3_600_000

PLUGINS = {
    "c": {"plugin": "ctest", "access": "at-{}", "refreshed": "at2-{}", "header": "X-CTest",
          "callback": "https://ctest.example/callback", "login": "https://ctest.example/login"},
    "s": {"plugin": "swifttest", "access": "sat-{}", "refreshed": "sat2-{}", "header": "X-SwiftTest",
          "callback": "https://swifttest.example/done", "login": "https://swifttest.example/login"},
}
BOTH = pytest.mark.parametrize("provider", ["c", "s"])


def with_state(callback: str, opened: dict) -> str:
    """The callback a provider sends back: it carries the sign-in's state (the host checks it
    before the plugin sees the callback, for plugins whose provider sends one: swifttest)."""
    state = urllib.parse.parse_qs(urllib.parse.urlsplit(opened["url"]).query)["state"][0]
    return f"{callback}&state={urllib.parse.quote(state)}"


def login_url(host, provider: str) -> str:
    """The URL `provider`'s external sign-in opens; the sign-in is then cancelled (-32800)."""
    request_id, opened = begin_sign_in(host, provider, flow="external")
    host.notify("$/cancelRequest", {"id": request_id})
    assert host.wait_response(request_id)["error"]["code"] == -32800
    return opened["url"]


def sign_in_then_expire(host, provider: str, session_id: str) -> int:
    """Signs `provider` in with `session_id`, then moves the test clock past the access token's
    hour; returns the frame mark from before the expiry."""
    sign_in_session(host, provider, session_id)
    mark = host.mark()
    advance_clock(host, 2 * HOUR)
    return mark


def refreshed_events(host, provider, since=0):
    return [p for p in host.notifications("session/changed", since) if p["provider"] == provider
            and p["state"] == "refreshed"]


# ── Session flow ─────────────────────────────────────────────────────────────


@BOTH
def test_session_sign_in_emits_progress_then_session_changed(host, provider):
    mark = host.mark()
    request_id = host.send_request("requestOAuthTokens", {"provider": provider, "flow": "session", "sessionId": "alice"})
    response = host.wait_response(request_id)
    status = response["result"]
    assert status["provider"] == provider
    assert status["state"] == "signedIn" and status["reason"] == "signedIn"
    assert status["account"]["id"] == "alice"
    assert isinstance(status["expiresAt"], int) and status["expiresAt"] > 0

    with host.cond:
        frames = host.frames[mark:]
    answer_index = frames.index(response)
    progress = [i for i, f in enumerate(frames) if f.get("method") == "signIn/progress"]
    assert progress, "no signIn/progress"
    assert all(frames[i]["params"]["requestId"] == request_id for i in progress)
    assert all(frames[i]["params"]["provider"] == provider for i in progress)
    assert "exchanging" in [frames[i]["params"]["stage"] for i in progress]
    assert max(progress) < answer_index, "signIn/progress after the request was answered"

    # README §5: "Events a request causes are written before that request's response."
    changed = [i for i, f in enumerate(frames) if f.get("method") == "session/changed"]
    assert len(changed) == 1 and changed[0] < answer_index, "session/changed missing or after the answer"
    params = frames[changed[0]]["params"]
    assert params["provider"] == provider
    assert params["state"] == "signedIn" and params["reason"] == "signedIn"
    assert params["account"]["id"] == "alice"


@BOTH
def test_check_sign_in_status_after_sign_in(host, provider):
    before = host.result("checkSignInStatus", {"provider": provider})
    assert (before["provider"], before["state"], before["account"], before["expiresAt"], before["reason"]) == \
        (provider, "notSignedIn", None, None, "noTokens")
    signed_in = sign_in_session(host, provider, "bob")
    status = host.result("checkSignInStatus", {"provider": provider})
    assert status["state"] == "signedIn" and status["reason"] == "valid"
    assert status["account"] == signed_in["account"]
    assert status["expiresAt"] == signed_in["expiresAt"]


@BOTH
def test_get_access_token_returns_token_and_request_decorations(host, provider):
    signed_in = sign_in_session(host, provider, "carol")
    token = host.result("getAccessToken", {"provider": provider})
    expected = PLUGINS[provider]["access"].format("carol")
    assert token["provider"] == provider
    assert token["accessToken"] == expected
    assert token["tokenType"].lower() == "bearer"
    assert token["expiresAt"] == signed_in["expiresAt"]
    headers = token["headers"]
    assert headers[PLUGINS[provider]["header"]] == "1"
    assert headers["Authorization"].split(" ", 1)[0].lower() == "bearer"
    assert headers["Authorization"].split(" ", 1)[1] == expected
    if provider == "s":
        assert token["cookies"] == [{"name": "swifttest_session", "value": expected, "domain": "swifttest.example",
                                     "path": "/", "maxAge": 2629743}]
    else:
        assert token["cookies"] == []


@BOTH
def test_get_access_token_when_not_signed_in(host, provider):
    error = host.error("getAccessToken", {"provider": provider})
    assert error["code"] == -32001
    assert error["data"] == {"provider": provider, "reason": "noTokens", "retryable": False}


def test_sign_in_replaces_the_previous_session(host):
    sign_in_session(host, "s", "first")
    sign_in_session(host, "s", "second")
    assert host.result("getAccessToken", {"provider": "s"})["accessToken"] == "sat-second"


def test_profiles_are_independent(host):
    sign_in_session(host, "c", "only-c")
    assert host.result("checkSignInStatus", {"provider": "s"})["state"] == "notSignedIn"
    assert host.result("getAccessToken", {"provider": "c"})["accessToken"] == "at-only-c"


@BOTH
def test_definitive_sign_in_failure_is_provider_refused(host, provider):
    mark = host.mark()
    error = host.error("requestOAuthTokens", {"provider": provider, "flow": "session", "sessionId": "bad"})
    assert error["code"] == -32004
    assert error["data"]["reason"] == "invalid_grant"
    assert error["data"]["provider"] == provider
    assert error["data"]["retryable"] is False
    for prefix in ("at-", "rt-", "sat-", "srt-"):
        assert prefix + "bad" not in error["message"]
    assert not [p for p in host.notifications("session/changed", mark) if p["provider"] == provider]
    assert host.result("checkSignInStatus", {"provider": provider})["state"] == "notSignedIn"


def test_session_flow_without_session_id_is_invalid_params(host):
    error = host.error("requestOAuthTokens", {"provider": "c", "flow": "session"})
    assert error["code"] == -32602
    assert error["data"]["field"] == "sessionId"


def test_flow_defaults_to_the_profiles_first_flow_and_other_flows_ignore_session_id(host):
    # README §4: "flow defaults to the profile's first flow" (external for both test plugins);
    # "sessionId is ignored by other flows".
    request_id, opened = begin_sign_in(host, "s", sessionId="ignored")
    assert opened["url"].startswith("https://swifttest.example/login?")
    host.result("completeSignIn", {"provider": "s",
                                   "callbackUrl": with_state("https://swifttest.example/done?session_token=S9&access_token=A9", opened)})
    assert host.wait_response(request_id)["result"]["state"] == "signedIn"
    assert host.result("getAccessToken", {"provider": "s"})["accessToken"] == "A9"


def test_flow_the_profile_does_not_list_is_unsupported(host):
    error = host.error("requestOAuthTokens", {"provider": "c", "flow": "device"})
    assert error["code"] == -32009
    assert error["data"]["reason"] == "unsupportedFlow"
    assert error["data"]["provider"] == "c"
    assert error["data"]["field"] == "flow"


# ── External flow ────────────────────────────────────────────────────────────


@BOTH
def test_external_flow_completes_with_complete_sign_in(host, provider):
    info = PLUGINS[provider]
    mark = host.mark()
    request_id, opened = begin_sign_in(host, provider, flow="external")
    assert opened["provider"] == provider
    assert opened["url"].startswith(info["login"] + "?state=")
    accepted = host.result("completeSignIn", {
        "provider": provider, "callbackUrl": with_state(f"{info['callback']}?session_token=S1-{provider}&access_token=A1-{provider}", opened)})
    assert accepted == {"accepted": True}
    status = host.wait_response(request_id)["result"]
    assert status["state"] == "signedIn" and status["reason"] == "signedIn" and status["provider"] == provider
    changed = host.wait_for_notification("session/changed", lambda p: p["provider"] == provider, since=mark)
    assert changed["state"] == "signedIn"
    assert host.result("getAccessToken", {"provider": provider})["accessToken"] == f"A1-{provider}"
    # The completed sign-in is no longer pending.
    again = host.error("completeSignIn", {"provider": provider, "callbackUrl": info["callback"] + "?x=1"})
    assert again["code"] == -32012


@BOTH
def test_external_flow_progress_follows_the_readme(host, provider):
    # README §4: external flow stages "openUrl (url, callbackPrefix), exchanging" — the frontend
    # must know which navigation to intercept.
    info = PLUGINS[provider]
    mark = host.mark()
    request_id, opened = begin_sign_in(host, provider, flow="external")
    host.result("completeSignIn", {"provider": provider, "callbackUrl": with_state(info["callback"] + "?session_token=S&access_token=A", opened)})
    host.wait_response(request_id)
    stages = [p["stage"] for p in host.notifications("signIn/progress", mark)
              if p["requestId"] == request_id and p["stage"] != "plugin"]
    assert stages == ["openUrl", "exchanging"], stages
    assert opened.get("callbackPrefix") == info["callback"], f"openUrl without the callbackPrefix: {opened}"


def test_complete_sign_in_without_pending_sign_in(host):
    error = host.error("completeSignIn", {"provider": "s",
                                          "callbackUrl": "https://swifttest.example/done?session_token=S1&access_token=A1"})
    assert error["code"] == -32012
    assert error["data"] == {"provider": "s", "reason": "noPendingSignIn", "retryable": False}


def test_complete_sign_in_with_a_foreign_url_is_refused_and_the_sign_in_stays_pending(host):
    request_id, opened = begin_sign_in(host, "s", flow="external")
    foreign = host.error("completeSignIn", {"provider": "s",
                                            "callbackUrl": "https://evil.example/done?session_token=S1&access_token=A1"})
    # The right callback still completes the sign-in.
    host.result("completeSignIn", {"provider": "s",
                                   "callbackUrl": with_state("https://swifttest.example/done?session_token=S1&access_token=A1", opened)})
    assert host.wait_response(request_id)["result"]["state"] == "signedIn"
    # README §4: "a URL that does not start with the sign-in's callbackPrefix → -32602 (field
    # "callbackUrl")".
    assert foreign["code"] == -32602, foreign
    assert foreign["data"]["field"] == "callbackUrl"


def test_new_sign_in_supersedes_a_pending_one(host):
    first, _ = begin_sign_in(host, "s", flow="external")
    second = host.send_request("requestOAuthTokens", {"provider": "s", "flow": "external"})
    superseded = host.wait_response(first)
    assert superseded["error"]["code"] == -32005
    assert superseded["error"]["data"]["reason"] == "superseded"
    opened = host.wait_for_notification("signIn/progress", lambda p: p["requestId"] == second and p["stage"] == "openUrl")
    host.result("completeSignIn", {"provider": "s",
                                   "callbackUrl": with_state("https://swifttest.example/done?session_token=S2&access_token=A2", opened)})
    assert host.wait_response(second)["result"]["state"] == "signedIn"


def test_sign_in_timeout(host):
    error = host.error("requestOAuthTokens", {"provider": "s", "flow": "external", "timeoutMs": 1000})
    assert error["code"] == -32006
    assert error["data"] == {"provider": "s", "reason": "timeout", "retryable": True}


def test_the_host_refuses_a_callback_from_another_sign_in_before_the_plugin_sees_it(host):
    # Issue 12 §4: swifttest's complete_sign_in does not check state itself; the host does, first.
    # Issue 27 §6: a callback with another state is refused to whoever handed it over and the
    # sign-in goes on, as the loopback listener ignores one (before, it ended the sign-in
    # -32004 stateMismatch: anyone who can call completeSignIn could cancel others' sign-ins).
    request_id, opened = begin_sign_in(host, "s", flow="external")
    for forged in ("https://swifttest.example/done?session_token=S&access_token=A&state=forged",
                   "https://swifttest.example/done?error=access_denied&state=forged",
                   "https://swifttest.example/done?error=access_denied"):
        refused = host.error("completeSignIn", {"provider": "s", "callbackUrl": forged})
        assert refused["code"] == -32602 and refused["data"]["field"] == "callbackUrl", refused
        assert refused["data"]["reason"] == "stateMismatch" and "still waiting" in refused["message"], refused
    assert host.result("listAccounts", {"provider": "s"})["accounts"] == [], "nothing was stored"
    with host.cond:
        assert not [f for f in host.frames if f.get("id") == request_id], "the sign-in is still waiting"
    # Its own callback still completes it.
    host.result("completeSignIn", {"provider": "s",
                                   "callbackUrl": with_state("https://swifttest.example/done?session_token=S2&access_token=A2", opened)})
    assert host.wait_response(request_id)["result"]["state"] == "signedIn"
    assert "state=" in opened["url"]


def test_sign_out_ends_a_pending_sign_in(host):
    pending, _ = begin_sign_in(host, "s", flow="external")
    assert host.result("signOut", {"provider": "s"})["revoked"] == []
    answer = host.wait_response(pending)
    assert answer["error"]["code"] == -32005
    assert answer["error"]["data"]["reason"] == "signedOut"


# ── signOut ──────────────────────────────────────────────────────────────────


@BOTH
def test_sign_out_revokes_and_notifies(host, provider):
    sign_in_session(host, provider, "dave")
    mark = host.mark()
    response = host.request("signOut", {"provider": provider})
    result = response["result"]
    assert result["provider"] == provider and result["signedOut"] is True
    assert result["revoked"] and all(isinstance(name, str) for name in result["revoked"])
    assert result["failures"] == []
    with host.cond:
        frames = host.frames[mark:]
    events = [f["params"] for f in frames[:frames.index(response)] if f.get("method") == "session/changed"]
    assert [(e["provider"], e["state"], e["reason"]) for e in events] == [(provider, "signedOut", "userSignedOut")], \
        "session/changed signedOut must precede the signOut answer"
    status = host.result("checkSignInStatus", {"provider": provider})
    assert status["state"] == "notSignedIn" and status["account"] is None and status["expiresAt"] is None
    assert host.error("getAccessToken", {"provider": provider})["code"] == -32001


def test_sign_out_when_not_signed_in(host):
    mark = host.mark()
    assert host.result("signOut", {"provider": "c"}) == {"provider": "c", "signedOut": True, "revoked": [],
                                                         "failures": []}
    assert host.notifications("session/changed", mark) == []


# ── Profiles ─────────────────────────────────────────────────────────────────


@pytest.mark.parametrize("method,params", [
    ("checkSignInStatus", {}),
    ("getAccessToken", {}),
    ("requestOAuthTokens", {"flow": "session", "sessionId": "x"}),
    ("signOut", {}),
    ("completeSignIn", {"callbackUrl": "https://x.example/cb"}),
    ("listAccounts", {}),
])
def test_unknown_profile_is_provider_unknown(host, method, params):
    error = host.error(method, {"provider": "nope", **params})
    assert error["code"] == -32003, error
    assert error["data"]["provider"] == "nope"
    assert error["data"]["retryable"] is False


def test_unknown_profile_reason(host):
    error = host.error("checkSignInStatus", {"provider": "nope"})
    assert error["data"]["reason"] == "unknownProfile", error


def test_configure_profile_at_runtime_then_use_it(host):
    profile = host.result("configureProfile", {"name": "c2", "plugin": "ctest",
                                               "settings": {"server": "https://other.example"}})
    assert profile == {"name": "c2", "plugin": "ctest", "status": "ready", "flows": ["external", "session"],
                       "source": "runtime"}
    listed = {p["name"]: p for p in host.result("listProviders", {})["profiles"]}
    assert listed["c2"] == profile and listed["c"]["source"] == "config"
    assert sign_in_session(host, "c2", "rt")["state"] == "signedIn"
    assert host.result("getAccessToken", {"provider": "c2"})["accessToken"] == "at-rt"
    assert host.result("checkSignInStatus", {"provider": "c"})["state"] == "notSignedIn"
    # The runtime profile's external sign-in uses its own server.
    assert login_url(host, "c2").startswith("https://other.example/login?")


def test_remove_profile(host):
    host.result("configureProfile", {"name": "gone", "plugin": "swifttest", "settings": {"clientId": "x"}})
    sign_in_session(host, "gone", "g")
    assert host.result("removeProfile", {"name": "gone"}) == {"removed": True}
    assert host.error("checkSignInStatus", {"provider": "gone"})["code"] == -32003
    assert host.result("removeProfile", {"name": "gone"}) == {"removed": False}
    assert "gone" not in host.profile_names()


@pytest.mark.parametrize("plugin,settings,field", [
    ("ctest", {}, "settings.server"),
    ("swifttest", {}, "settings.clientId"),
    ("ctest", {"server": 5}, "settings.server"),
    ("swifttest", {"clientId": "x", "apiBaseUrl": ["no"]}, "settings.apiBaseUrl"),
])
def test_configure_profile_with_invalid_settings_names_the_field(host, plugin, settings, field):
    error = host.error("configureProfile", {"name": "badcfg", "plugin": plugin, "settings": settings})
    # README §4: settings that fail the plugin's settings schema → -32013 invalidSettings
    # (data.field "settings.…").
    assert error["code"] == -32013, error
    assert error["data"]["reason"] == "invalidSettings"
    assert error["data"]["field"] == field, error
    assert "badcfg" not in host.profile_names()


def test_configure_profile_replaces_a_profile_of_the_same_name(host):
    # README §4: configureProfile "Adds or replaces the profile named name".
    profile = host.result("configureProfile", {"name": "c", "plugin": "ctest",
                                               "settings": {"server": "https://replaced.example"}})
    assert profile["name"] == "c" and profile["source"] == "runtime"
    assert [p for p in host.result("listProviders", {})["profiles"] if p["name"] == "c"] == [profile]
    assert login_url(host, "c").startswith("https://replaced.example/login?")


def test_failed_configure_profile_keeps_the_previous_profile(host):
    # README §4: "configure runs at once and, if it fails, the previous profile (if any) is restored".
    before = [p for p in host.result("listProviders", {})["profiles"] if p["name"] == "c"]
    error = host.error("configureProfile", {"name": "c", "plugin": "ctest", "settings": {"server": 42}})
    assert error["code"] == -32013
    assert [p for p in host.result("listProviders", {})["profiles"] if p["name"] == "c"] == before
    assert login_url(host, "c").startswith("https://ctest.example/login?")


def test_configure_profile_with_an_unknown_plugin(host):
    error = host.error("configureProfile", {"name": "x", "plugin": "no-such-plugin", "settings": {}})
    assert error["code"] == -32003
    assert error["data"]["reason"] == "unknownPlugin" and error["data"]["field"] == "plugin"
    assert "x" not in host.profile_names()


def test_profile_of_a_plugin_that_is_not_loaded(start_host, plugin_dir):
    host = start_host([plugin_dir], profiles={"ghost": {"plugin": "not-installed", "settings": {}}})
    info = [p for p in host.init_result["profiles"] if p["name"] == "ghost"]
    assert len(info) == 1 and info[0]["status"] == "error" and info[0]["message"], info
    error = host.error("checkSignInStatus", {"provider": "ghost"})
    assert error["code"] == -32008 and error["data"]["reason"] == "pluginNotLoaded"


def test_config_profile_with_invalid_settings(start_host, plugin_dir):
    host = start_host([plugin_dir], profiles={"broken": {"plugin": "ctest", "settings": {"probeUrl": "x"}}})
    info = [p for p in host.init_result["profiles"] if p["name"] == "broken"]
    assert len(info) == 1 and info[0]["status"] == "error" and info[0]["message"], info
    error = host.error("checkSignInStatus", {"provider": "broken"})
    assert error["code"] == -32013
    assert error["data"]["reason"] == "invalidSettings" and error["data"]["field"] == "settings.server"


def test_list_accounts_lists_profiles_holding_tokens(host):
    # README §4: "one SignInStatus per profile that holds tokens (state signedIn reason valid, or
    # licenseRevoked), or only provider's ([] when it holds none)".
    assert host.result("listAccounts", {}) == {"accounts": []}
    sign_in_session(host, "c", "acc")
    accounts = host.result("listAccounts", {})["accounts"]
    assert [(a["provider"], a["state"], a["reason"]) for a in accounts] == [("c", "signedIn", "valid")]
    assert accounts[0]["account"]["id"] == "acc"
    assert [a["provider"] for a in host.result("listAccounts", {"provider": "c"})["accounts"]] == ["c"]
    assert host.result("listAccounts", {"provider": "s"}) == {"accounts": []}


def test_list_accounts_after_expiry_is_still_signed_in(clock_host):
    # README §4: listAccounts entries are "state signedIn reason valid, or licenseRevoked"; an
    # access token past expiresAt with a refresh token "is still signedIn until renewal fails".
    # (SignInStatus allows only valid/refreshed/signedIn as reasons of signedIn.)
    host = clock_host
    sign_in_session(host, "s", "old")
    advance_clock(host, 2 * HOUR)
    accounts = host.result("listAccounts", {})["accounts"]
    assert [(a["provider"], a["state"], a["reason"]) for a in accounts] == [("s", "signedIn", "valid")], accounts


# ── Refresh (host run with --test-clock) ─────────────────────────────────────


def test_advance_clock_is_not_available_without_test_clock(host):
    error = host.error("$/test/advanceClock", {"milliseconds": 1})
    assert error["code"] == -32601


def test_check_refreshes_an_expired_session(clock_host):
    host = clock_host
    signed_in = sign_in_session(host, "s", "x")
    mark = host.mark()
    advance_clock(host, 2 * HOUR)
    status = host.result("checkSignInStatus", {"provider": "s"})
    assert status["state"] == "signedIn" and status["reason"] == "refreshed"
    assert status["expiresAt"] > signed_in["expiresAt"]
    events = refreshed_events(host, "s", mark)
    assert len(events) == 1, events
    assert host.result("getAccessToken", {"provider": "s"})["accessToken"] == "sat2-x"
    assert host.result("checkSignInStatus", {"provider": "s"})["reason"] == "valid"


@BOTH
def test_get_access_token_refreshes_an_expired_session(clock_host, provider):
    host = clock_host
    mark = sign_in_then_expire(host, provider, "y")
    token = host.result("getAccessToken", {"provider": provider})
    assert token["accessToken"] == PLUGINS[provider]["refreshed"].format("y")
    assert len(refreshed_events(host, provider, mark)) == 1


def test_get_access_token_refreshes_within_min_validity(clock_host):
    host = clock_host
    sign_in_session(host, "s", "early")
    assert host.result("getAccessToken", {"provider": "s", "minValidityMs": 60_000})["accessToken"] == "sat-early"
    # minValidityMs counts for at most half the token's own lifetime: a fresh one-hour token is kept.
    assert host.result("getAccessToken", {"provider": "s", "minValidityMs": 2 * HOUR})["accessToken"] == "sat-early"
    advance_clock(host, 40 * 60_000)                  # 20 minutes left
    token = host.result("getAccessToken", {"provider": "s", "minValidityMs": 25 * 60_000})
    assert token["accessToken"] == "sat2-early"


@BOTH
def test_concurrent_get_access_token_after_expiry_refreshes_once(clock_host, provider):
    host = clock_host
    mark = sign_in_then_expire(host, provider, "z")
    ids = [host.next_id() for _ in range(8)]
    host.send_lines([f'{{"jsonrpc":"2.0","id":{i},"method":"getAccessToken","params":{{"provider":"{provider}"}}}}'
                     for i in ids])
    tokens = {host.wait_response(i)["result"]["accessToken"] for i in ids}
    assert tokens == {PLUGINS[provider]["refreshed"].format("z")}
    assert len(refreshed_events(host, provider, mark)) == 1


def test_definitive_refresh_failure_signs_out_on_check(clock_host):
    host = clock_host
    mark = sign_in_then_expire(host, "s", "revoked")
    status = host.result("checkSignInStatus", {"provider": "s"})
    assert status["state"] == "notSignedIn" and status["reason"] == "revoked"
    assert status["account"] is None and status["expiresAt"] is None
    changed = host.wait_for_notification("session/changed", lambda p: p["provider"] == "s", since=mark)
    assert changed["state"] == "signedOut" and changed["reason"] == "revoked"
    assert host.error("getAccessToken", {"provider": "s"})["code"] == -32001
    assert host.result("checkSignInStatus", {"provider": "s"})["state"] == "notSignedIn"


@BOTH
def test_definitive_refresh_failure_on_get_access_token_is_not_signed_in(clock_host, provider):
    host = clock_host
    mark = sign_in_then_expire(host, provider, "revoked")
    error = host.error("getAccessToken", {"provider": provider})
    assert error["code"] == -32001
    assert error["data"]["reason"] == "revoked" and error["data"]["retryable"] is False
    changed = host.wait_for_notification("session/changed", lambda p: p["provider"] == provider, since=mark)
    assert changed["state"] == "signedOut" and changed["reason"] == "revoked"
    assert host.result("checkSignInStatus", {"provider": provider})["state"] == "notSignedIn"


def test_transient_failure_is_offline_and_keeps_the_session(clock_host):
    host = clock_host
    sign_in_session(host, "s", "transient")
    status = host.result("checkSignInStatus", {"provider": "s"})
    assert status["state"] == "offline" and status["reason"] == "transient" and status["message"]
    assert status["account"]["id"] == "transient"
    # While the token is unexpired it is still handed out.
    assert host.result("getAccessToken", {"provider": "s"})["accessToken"] == "sat-transient"
    mark = host.mark()
    advance_clock(host, 2 * HOUR)
    for _ in range(2):
        later = host.result("checkSignInStatus", {"provider": "s"})
        assert later["state"] == "offline", later
    error = host.error("getAccessToken", {"provider": "s"})
    assert error["code"] == -32007 and error["data"]["retryable"] is True
    assert [a["provider"] for a in host.result("listAccounts", {"provider": "s"})["accounts"]] == ["s"]
    assert not [p for p in host.notifications("session/changed", mark) if p["state"] == "signedOut"]


def test_transient_refresh_failure_keeps_the_session(clock_host):
    host = clock_host
    sign_in_session(host, "c", "transient")
    advance_clock(host, 2 * HOUR)
    for _ in range(2):
        error = host.error("getAccessToken", {"provider": "c"})
        assert error["code"] == -32007 and error["data"]["retryable"] is True
    assert [a["provider"] for a in host.result("listAccounts", {"provider": "c"})["accounts"]] == ["c"]


def test_check_session_expired_answer_refreshes(host):
    # ctest's check_session answers "expired" for session id "expired".
    sign_in_session(host, "c", "expired")
    mark = host.mark()
    status = host.result("checkSignInStatus", {"provider": "c"})
    assert status["state"] == "signedIn" and status["reason"] == "refreshed"
    assert len(refreshed_events(host, "c", mark)) == 1
    assert host.result("getAccessToken", {"provider": "c"})["accessToken"] == "at2-expired"


def test_configure_then_remove_at_once_never_crashes_the_host(start_host, oidc_plugin_dir):
    # Issue 12 §0: the two frames written in one go killed the host (SIGILL) in some runs.
    host = start_host([oidc_plugin_dir])
    settings = {"clientId": "c", "tokenEndpoint": "http://127.0.0.1:9/t"}
    for round in range(30):
        configured = host.send_request("configureProfile", {"name": "rt1", "plugin": "oidc", "settings": settings})
        removed = host.send_request("removeProfile", {"name": "rt1"})
        assert "result" in host.wait_response(configured)
        assert host.wait_response(removed)["result"]["removed"] in (True, False)
    assert {p["name"] for p in host.result("listProviders")["profiles"]} <= {"rt1"}
    assert host.proc.poll() is None, "the host is still running"
