"""The blocking wrapper: same API, its own event-loop thread."""

from __future__ import annotations

import concurrent.futures
import threading

import pytest
from conftest import WAIT, dot_profiles, play_user

import authbridge
import authbridge.sync


def test_blocking_api_signs_in_fetches_and_signs_out(host_options, dot, frames):
    changes: list[tuple[str, str]] = []
    threads: set[str] = set()

    def on_change(event):
        changes.append((event.state, event.reason))
        threads.add(threading.current_thread().name)

    with authbridge.sync.connect(**host_options(profiles=dot_profiles(dot))) as bridge:
        assert bridge.running and bridge.info.server_info.name == "authbridge"
        assert [p.name for p in bridge.list_providers().profiles] == ["dot"]
        with pytest.raises(authbridge.ProviderUnknown):
            bridge.check_sign_in_status("nope")
        assert bridge.check_sign_in_status("dot").state == "notSignedIn"

        bridge.on("session/changed", on_change)
        with bridge.events() as events, concurrent.futures.ThreadPoolExecutor(1) as pool:
            # The sign-in blocks its caller, so it runs in a worker while this thread watches
            # the events and plays the user, as an application's UI thread would.
            signing_in = pool.submit(bridge.request_oauth_tokens, "dot", flow="browser", timeout=WAIT * 2)
            event = events.get(timeout=WAIT)
            assert isinstance(event, authbridge.SignInProgress) and event.stage == "openUrl"
            assert play_user(dot, event.url) == 200
            status = signing_in.result(timeout=WAIT)
            assert status.state == "signedIn"
            seen = [events.get(timeout=WAIT) for _ in range(3)]   # waiting, exchanging, session/changed
            assert seen[-1].method == "session/changed" and seen[-1].state == "signedIn"
        assert changes == [("signedIn", "signedIn")] and threads == {"authbridge-loop"}

        assert bridge.fetch("dot", f"{dot.base}/o/userinfo/").json()["sub"] == status.account.id
        assert bridge.get_access_token("dot").token_type == "Bearer"

        # A deadline: TimeoutError, and the request is cancelled at the host.
        with pytest.raises(TimeoutError):
            bridge.request_oauth_tokens("dot", flow="browser", timeout=0.3)
        request_id = max(i for i, m in frames.sent.items() if m == "requestOAuthTokens")
        frames.wait_for_blocking(lambda f: f.get("id") == request_id and f.get("error", {}).get("code") == -32800)

        assert bridge.sign_out("dot").revoked
        assert changes[-1] == ("signedOut", "userSignedOut")
    assert bridge.returncode == 0 and not bridge.running
    with pytest.raises(authbridge.BridgeClosed):
        bridge.list_providers()


def test_a_failed_start_stops_the_loop_thread(host_options):
    before = {t.name for t in threading.enumerate()}
    bridge = authbridge.sync.connect(**host_options(protocol_version="9.0"))
    with pytest.raises(authbridge.UnsupportedProtocolVersion), bridge:
        pass
    assert bridge.returncode is not None
    assert "authbridge-loop" not in {t.name for t in threading.enumerate()} - before
