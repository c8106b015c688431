"""Token hygiene (bridge-spec/README.md §8 Security).

A scenario drives both test plugins through sign-ins (session and external), token reads,
refreshes, definitive and transient refresh failures, sign-outs and bad callbacks, with the
host logging at `trace`. Then: token values appear on the wire only in getAccessToken results;
refresh tokens never leave the host; nothing secret reaches stderr; no notification or error
carries anything token-shaped.
"""

import json
import re

import urllib.parse

import pytest

from conftest import DEFAULT_PROFILES, advance_clock, id_key, short, sign_in_session

HOUR = 3_600_000

# Prefixes of the test plugins' tokens: at-/rt- (ctest), sat-/srt- (swifttest), at2-/sat2- refreshed.
TOKEN_SHAPED = re.compile(r"(?<![A-Za-z0-9])(?:s?at2?|s?rt)-[A-Za-z0-9]")

EXTERNAL_ACCESS = "ext-access-5150"
EXTERNAL_REFRESH = "ext-session-5150"
LEAKY_CALLBACK_SECRET = "leak-access-3131"


class Scenario:
    def __init__(self, host):
        self.host = host
        self.access_tokens: set[str] = set()
        self.refresh_tokens: set[str] = set()
        self.inbound_secrets: set[str] = set()

    def token(self, provider):
        result = self.host.result("getAccessToken", {"provider": provider})
        self.access_tokens.add(result["accessToken"])
        return result

    def sign_in(self, provider, session_id):
        self.inbound_secrets.add(session_id)
        prefix = "rt-" if provider == "c" else "srt-"
        self.refresh_tokens.update({prefix + session_id, prefix + session_id + "+"})
        self.access_tokens.add(("at-" if provider == "c" else "sat-") + session_id)
        self.access_tokens.add(("at2-" if provider == "c" else "sat2-") + session_id)
        return sign_in_session(self.host, provider, session_id)

    def run(self):
        host = self.host
        # Session sign-ins, tokens, a refresh after expiry, sign-out.
        for provider in ("c", "s"):
            self.sign_in(provider, f"sec-{provider}-4711")
            self.token(provider)
            host.result("checkSignInStatus", {"provider": provider})
            host.result("listAccounts", {})
        advance_clock(host, 2 * HOUR)
        for provider in ("c", "s"):
            self.token(provider)
            host.result("checkSignInStatus", {"provider": provider})
            host.result("signOut", {"provider": provider})

        # External sign-in: the callback URL carries the tokens (inbound secrets).
        callback = f"https://swifttest.example/done?session_token={EXTERNAL_REFRESH}&access_token={EXTERNAL_ACCESS}"
        self.inbound_secrets.update({EXTERNAL_ACCESS, EXTERNAL_REFRESH})
        self.access_tokens.add(EXTERNAL_ACCESS)
        self.refresh_tokens.add(EXTERNAL_REFRESH)
        request_id = host.send_request("requestOAuthTokens", {"provider": "s", "flow": "external"})
        opened = host.wait_for_notification("signIn/progress", lambda p: p["requestId"] == request_id and p["stage"] == "openUrl")
        callback += "&state=" + urllib.parse.quote(urllib.parse.parse_qs(urllib.parse.urlsplit(opened["url"]).query)["state"][0])
        host.request("completeSignIn", {"provider": "s", "callbackUrl": callback.replace("swifttest.example", "evil.example")})
        host.result("completeSignIn", {"provider": "s", "callbackUrl": callback})
        host.wait_response(request_id)
        self.token("s")
        host.result("checkSignInStatus", {"provider": "s"})
        host.result("signOut", {"provider": "s"})

        # A callback with a token and no pending sign-in.
        self.inbound_secrets.add(LEAKY_CALLBACK_SECRET)
        host.request("completeSignIn", {"provider": "c",
                                        "callbackUrl": f"https://ctest.example/callback?access_token={LEAKY_CALLBACK_SECRET}"})

        # Definitive sign-in failure; definitive and transient refresh failures.
        host.request("requestOAuthTokens", {"provider": "c", "flow": "session", "sessionId": "bad"})
        for provider in ("c", "s"):
            self.sign_in(provider, "revoked-9931")
        advance_clock(host, 2 * HOUR)
        for provider in ("c", "s"):
            host.request("getAccessToken", {"provider": provider})
            host.request("checkSignInStatus", {"provider": provider})
        self.sign_in("s", "transient-2024")
        self.token("s")
        advance_clock(host, 2 * HOUR)
        host.request("getAccessToken", {"provider": "s"})
        host.request("checkSignInStatus", {"provider": "s"})
        host.request("signOut", {"provider": "s"})

        host.result("shutdown")
        host.notify("exit")
        assert host.wait_exit() == 0
        return self


@pytest.fixture
def scenario(start_host, plugin_dir):
    host = start_host([plugin_dir], profiles=DEFAULT_PROFILES, log_level="trace", test_clock=True)
    return Scenario(host).run()


def frames_except_get_access_token_results(host):
    for frame in host.frames:
        if "result" in frame and host.sent.get(id_key(frame["id"])) == "getAccessToken":
            continue
        yield frame


def test_scenario_exercised_tokens(scenario):
    # Guards the other tests against passing vacuously.
    assert {"at-sec-c-4711", "sat-sec-s-4711", "at2-sec-c-4711", "sat2-sec-s-4711", EXTERNAL_ACCESS} <= \
        scenario.access_tokens
    seen = {f["result"]["accessToken"] for f in scenario.host.frames
            if "result" in f and isinstance(f["result"], dict) and "accessToken" in f["result"]}
    assert {"at-sec-c-4711", "sat-sec-s-4711", "at2-sec-c-4711", "sat2-sec-s-4711", EXTERNAL_ACCESS} <= seen
    assert scenario.host.notifications("session/changed")
    assert len(scenario.host.stderr_text()) > 0


def test_no_secret_in_stderr_at_trace_level(scenario):
    stderr = scenario.host.stderr_text()
    secrets = scenario.access_tokens | scenario.refresh_tokens | scenario.inbound_secrets
    leaked = sorted(s for s in secrets if s in stderr)
    assert not leaked, f"secrets in the host's stderr: {leaked}"
    assert not TOKEN_SHAPED.search(stderr), TOKEN_SHAPED.search(stderr).group(0)


def test_access_tokens_only_in_get_access_token_results(scenario):
    tokens = scenario.access_tokens | scenario.refresh_tokens
    for frame in frames_except_get_access_token_results(scenario.host):
        text = json.dumps(frame, ensure_ascii=False)
        leaked = sorted(t for t in tokens if t in text)
        assert not leaked, f"token values {leaked} in {short(text, 300)}"


def test_refresh_tokens_never_leave_the_host(scenario):
    stdout = scenario.host.all_output_text()
    leaked = sorted(t for t in scenario.refresh_tokens if t in stdout)
    assert not leaked, f"refresh tokens on stdout: {leaked}"


def test_notifications_and_errors_carry_nothing_token_shaped(scenario):
    callback_secrets = {EXTERNAL_ACCESS, EXTERNAL_REFRESH, LEAKY_CALLBACK_SECRET}
    for frame in scenario.host.frames:
        if "method" in frame or "error" in frame:
            text = json.dumps(frame.get("params", frame.get("error")), ensure_ascii=False)
            match = TOKEN_SHAPED.search(text)
            assert match is None, f"token-shaped {match.group(0)!r} in {short(frame, 300)}"
            leaked = sorted(secret for secret in callback_secrets if secret in text)
            assert not leaked, f"callback secrets {leaked} echoed in {short(frame, 300)}"


def test_the_suite_wide_leak_scan_finds_a_token_where_it_must_not_be():
    """Every host of the suite is scanned at teardown (conftest); the scan itself must be able to fail."""
    import leak_scan
    secret = "at-0123456789abcdef"
    source = lambda: [secret]  # noqa: E731
    leak_scan.register(source)
    try:
        assert leak_scan.leaks(f"debug: refreshed with {secret}\n", []) == ["stderr line 1"]
        notification = {"jsonrpc": "2.0", "method": "session/changed", "params": {"message": secret}}
        assert leak_scan.leaks("", [notification]) == ["frame 0 (session/changed)"]
        token_result = {"jsonrpc": "2.0", "id": 1, "result": {"accessToken": secret}}
        assert leak_scan.leaks("", [token_result]) == [], "getAccessToken's result carries it by contract"
        error = {"jsonrpc": "2.0", "id": 2, "error": {"code": -32004, "message": f"bad token {secret}"}}
        assert leak_scan.leaks("", [token_result, error]) == ["frame 1 (error)"]
    finally:
        leak_scan.unregister(source)
