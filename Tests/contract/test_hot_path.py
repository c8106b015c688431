"""Answers given at once (issue 15): getAccessToken and checkSignInStatus for a session that
needs nothing done are answered on the host's reader thread from what the engine answered
before — and never after something changed: a refresh or a sign-out in another process (two
hosts on one vault), the clock past the caller's minimum validity.

The host logs each such answer at debug level as "answered at once": the tests read that to
know the fast path was taken, then check that every answer is the one the engine would give.
"""

from __future__ import annotations

import time

from conftest import start_on_data_home, stop_cleanly
from authbridge_testkit.host import DEFAULT_PROFILES

AT_ONCE = "answered at once"
IN_PROCESS = ("--plugin-isolation", "none")


def at_once_count(host, method: str) -> int:
    return sum(1 for line in host.stderr_text().splitlines() if AT_ONCE in line and f"method={method}" in line)


def until_answered_at_once(host, method: str, params: dict, limit: float = 10.0) -> dict:
    """Asks until an answer comes at once (bounded): a record written moments ago is vouched
    for only once its file times have settled (a few ms). Returns that answer."""
    end = time.monotonic() + limit
    while time.monotonic() < end:
        before = at_once_count(host, method)
        answer = host.result(method, params)
        if at_once_count(host, method) > before:
            return answer
    raise AssertionError(f"{method} was never answered at once within {limit} s")


def test_another_processs_refresh_and_sign_out_are_seen_by_the_next_answer(tmp_path, plugin_dir):
    data = tmp_path / "data"
    # In-process (a plugin folder's plugins run isolated by default): its inline check_session can answer at once.
    here = start_on_data_home(tmp_path, plugin_dir, "here", data, *IN_PROCESS)
    there = start_on_data_home(tmp_path, plugin_dir, "there", data, *IN_PROCESS)
    try:
        assert here.result("requestOAuthTokens", {"provider": "c", "flow": "session", "sessionId": "x"})["state"] == "signedIn"
        assert until_answered_at_once(here, "getAccessToken", {"provider": "c"})["accessToken"] == "at-x"
        assert until_answered_at_once(here, "checkSignInStatus", {"provider": "c"})["state"] == "signedIn"

        assert there.result("getAccessToken", {"provider": "c", "forceRefresh": True})["accessToken"] == "at2-x"
        # The very next call: the record's file is another one now, so the engine reads it.
        assert here.result("getAccessToken", {"provider": "c"})["accessToken"] == "at2-x"
        assert until_answered_at_once(here, "getAccessToken", {"provider": "c"})["accessToken"] == "at2-x"

        assert there.result("signOut", {"provider": "c"})["signedOut"] is True
        error = here.error("getAccessToken", {"provider": "c"})
        assert error["data"]["reason"] == "noTokens", error
        assert here.result("checkSignInStatus", {"provider": "c"})["state"] == "notSignedIn"
    finally:
        stop_cleanly(here)
        stop_cleanly(there)


def test_the_clock_past_the_minimum_validity_refreshes_instead(clock_host):
    # ctest's tokens live an hour: 59.5 minutes later, less than the default 60 s remain.
    clock_host.result("requestOAuthTokens", {"provider": "c", "flow": "session", "sessionId": "x"})
    assert until_answered_at_once(clock_host, "getAccessToken", {"provider": "c"})["accessToken"] == "at-x"
    clock_host.result("$/test/advanceClock", {"milliseconds": 59 * 60_000 + 30_000})
    assert clock_host.result("getAccessToken", {"provider": "c"})["accessToken"] == "at2-x"
    assert clock_host.notifications("session/changed")[-1]["state"] == "refreshed"


def test_a_pipelined_stream_is_answered_once_per_id_and_alike(start_host, plugin_dir):
    # Both methods, interleaved, 2,000 of them written at once: each id answered once, each
    # answer the same as the engine's own (the first ones come from the engine).
    host = start_host([plugin_dir], profiles=DEFAULT_PROFILES, extra_args=IN_PROCESS)
    host.result("requestOAuthTokens", {"provider": "c", "flow": "session", "sessionId": "x"})
    engine_token = host.result("getAccessToken", {"provider": "c"})
    engine_status = host.result("checkSignInStatus", {"provider": "c"})
    ids = []
    for i in range(1000):
        ids.append(host.send_request("getAccessToken", {"provider": "c"}))
        ids.append(host.send_request("checkSignInStatus", {"provider": "c"}))
    answers = [host.wait_response(id_) for id_ in ids]
    for index, answer in enumerate(answers):
        assert answer.get("result") == (engine_token if index % 2 == 0 else engine_status), answer
    # Statuses too: ctest's inline check_session runs on the reader (a blocking one is handed over:
    # test_isolation.py).
    assert at_once_count(host, "getAccessToken") > 0 and at_once_count(host, "checkSignInStatus") > 0


def test_params_the_engine_refuses_are_refused_alike(host):
    host.result("requestOAuthTokens", {"provider": "c", "flow": "session", "sessionId": "x"})
    until_answered_at_once(host, "getAccessToken", {"provider": "c"})
    for params, field in (({"provider": "c", "minValidityMs": -1}, "minValidityMs"),
                          ({"provider": "c", "extra": 1}, "extra"),
                          ({"provider": "c", "account": ""}, "account")):
        error = host.error("getAccessToken", params)
        assert error["code"] == -32602 and field in error["data"]["field"], error
    assert host.error("checkSignInStatus", {"provider": "c", "extra": True})["code"] == -32602
    assert host.error("getAccessToken", {"provider": "nobody"})["data"]["reason"] == "unknownProfile"


def test_an_isolated_plugins_check_session_runs_in_its_runner_and_its_valid_stands_a_second(host):
    # The `host` fixture's ctest runs in a runner process: its check_session never runs on the
    # reader; the first status is the engine's (asked in the runner), and since ctest lists
    # check_session in inlineHooks (quick, no HTTP), its `valid` answers the next ones at once for
    # a second of the host's clock (test_isolation.py stops the runner to show it).
    host.result("requestOAuthTokens", {"provider": "c", "flow": "session", "sessionId": "x"})
    until_answered_at_once(host, "getAccessToken", {"provider": "c"})
    for _ in range(20):
        assert host.result("checkSignInStatus", {"provider": "c"})["state"] == "signedIn"
    assert 1 <= at_once_count(host, "checkSignInStatus") < 20


def test_an_inline_check_session_sees_each_sessions_own_input(start_host, plugin_dir):
    # ctest reads its check_session input through ab_input_view, which parses an input once and
    # hands the same object to calls with byte-for-byte the same input. Two sessions whose
    # statuses interleave must each be judged on their own input: "c" stays valid (never
    # refreshed), "c2" (ctest's session id "expired") is expired at every check and refreshed.
    # (A view keyed on anything less than the whole input would swap their answers.)
    profiles = dict(DEFAULT_PROFILES, c2=DEFAULT_PROFILES["c"])
    host = start_host([plugin_dir], profiles=profiles, extra_args=IN_PROCESS)
    host.result("requestOAuthTokens", {"provider": "c", "flow": "session", "sessionId": "x"})
    host.result("requestOAuthTokens", {"provider": "c2", "flow": "session", "sessionId": "expired"})
    until_answered_at_once(host, "checkSignInStatus", {"provider": "c"})
    mark = host.mark()
    ids = []
    for _ in range(50):
        ids.append(host.send_request("checkSignInStatus", {"provider": "c"}))
        ids.append(host.send_request("checkSignInStatus", {"provider": "c2"}))
    answers = [host.wait_response(id_)["result"] for id_ in ids]
    assert all(a["state"] == "signedIn" and a.get("reason") != "refreshed" for a in answers[0::2]), answers[0::2]
    assert all(a["state"] == "signedIn" and a["reason"] == "refreshed" for a in answers[1::2]), answers[1::2]
    refreshed = [p["provider"] for p in host.notifications("session/changed", mark) if p["state"] == "refreshed"]
    # Checks in one burst share a refresh (single flight): at least one, all of them c2's.
    assert refreshed and set(refreshed) == {"c2"}, refreshed
    assert host.result("getAccessToken", {"provider": "c"})["accessToken"] == "at-x"
    assert at_once_count(host, "checkSignInStatus") > 0
