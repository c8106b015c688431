"""The whole life of a session through the asyncio API, against django-oauth-toolkit."""

from __future__ import annotations

import asyncio
import urllib.error
import urllib.request

from conftest import WAIT, dot_settings, sign_in

import authbridge


def userinfo_status(dot, access_token: str) -> int:
    request = urllib.request.Request(f"{dot.base}/o/userinfo/", headers={"Authorization": f"Bearer {access_token}"})
    try:
        with urllib.request.urlopen(request, timeout=WAIT) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


async def test_sign_in_status_token_fetch_events_and_sign_out(host_options, dot, frames, logs):
    changes_by_callback: list[authbridge.SessionChanged] = []
    async with authbridge.connect(**host_options()) as bridge:
        assert bridge.info.server_info.name == "authbridge"
        # A --plugins folder is the user's: its plugins run in a runner process.
        assert any(p.id == "oidc" and p.loaded and p.isolation == "process" for p in bridge.info.providers)

        profile = await bridge.configure_profile("dot", "oidc", dot_settings(dot))
        assert profile.status == "ready" and "browser" in profile.flows and profile.source == "runtime"
        assert [p.name for p in (await bridge.list_providers()).profiles] == ["dot"]

        status = await bridge.check_sign_in_status("dot")
        assert (status.state, status.reason, status.signed_in) == ("notSignedIn", "noTokens", False)

        unsubscribe = bridge.on("session/changed", changes_by_callback.append)
        async with bridge.events("session/changed") as stream:
            signed_in = await sign_in(bridge, dot)
            assert signed_in.state == "signedIn" and signed_in.reason == "signedIn"
            assert signed_in.account is not None and signed_in.account.id
            # The event came before the answer (spec §5): the callback already has it, and the
            # iterator yields it at once.
            assert [(c.state, c.reason) for c in changes_by_callback] == [("signedIn", "signedIn")]
            event = await stream.next(timeout=WAIT)
            assert isinstance(event, authbridge.SessionChanged)
            assert (event.provider, event.state, event.account) == ("dot", "signedIn", signed_in.account)

            status = await bridge.check_sign_in_status("dot")
            assert (status.state, status.reason) == ("signedIn", "valid")
            assert status.expires_at and status.storage.backend == "encrypted-file"
            assert status.account == signed_in.account

            accounts = await bridge.list_accounts()
            assert [(a.provider, a.current, a.account) for a in accounts] == [("dot", True, signed_in.account)]

            # Many calls at once: answers come back out of order and each finds its caller.
            many = await asyncio.gather(*(bridge.get_access_token("dot") if i % 2 else bridge.check_sign_in_status("dot")
                                          for i in range(100)))
            assert {type(result).__name__ for result in many} == {"AccessTokenResult", "SignInStatus"}
            assert len({result.access_token for result in many[1::2]}) == 1
            token = await bridge.get_access_token("dot")
            assert dot.is_issued(token.access_token) and token.access_token == many[1].access_token
            assert token.headers == {"Authorization": f"Bearer {token.access_token}"}
            assert token.access_token not in repr(token), "tokens stay out of reprs"

            userinfo = await bridge.fetch("dot", f"{dot.base}/o/userinfo/")
            assert userinfo.ok and userinfo.status == 200
            assert userinfo.json()["sub"] == signed_in.account.id
            assert userinfo.headers["content-type"].startswith("application/json")

            result = await bridge.sign_out("dot")
            assert result.signed_out and sorted(result.revoked) == ["access_token", "refresh_token"]
            assert result.failures == []
            event = await stream.next(timeout=WAIT)
            assert (event.state, event.reason) == ("signedOut", "userSignedOut")
        assert [c.state for c in changes_by_callback] == ["signedIn", "signedOut"]
        unsubscribe()

        status = await bridge.check_sign_in_status("dot")
        assert status.state == "notSignedIn" and status.account is None
        # Revoked at DOT: the old token no longer opens userinfo (asked without the host).
        assert await asyncio.to_thread(userinfo_status, dot, token.access_token) == 401
        assert await bridge.remove_profile("dot") is True
        assert await bridge.remove_profile("dot") is False
    assert bridge.returncode == 0, "a clean shutdown: shutdown answered, then exit"
    assert not bridge.running
    # The tap saw the end of the lifecycle: `shutdown` answered null (then `exit`).
    shutdown = next(i for i, method in frames.sent.items() if method == "shutdown")
    assert {"jsonrpc": "2.0", "id": shutdown, "result": None} in frames.frames()
    assert frames.sent_frames[-1] == {"jsonrpc": "2.0", "method": "exit"}
    # The host's log reached the logging module (debug), through the drained stderr.
    assert logs.text("authbridge.host"), "the host's stderr is forwarded to logging"


async def test_progress_stages_reach_every_listener(host_options, dot):
    async with authbridge.connect(**host_options(profiles={"dot": {"plugin": "oidc", "settings": dot_settings(dot)}})) as bridge:
        seen_by_on: list[str] = []
        bridge.on("signIn/progress", lambda event: seen_by_on.append(event.stage))
        stream = bridge.events()
        await sign_in(bridge, dot)
        stages = []
        while len(stages) < 4:
            event = await stream.next(timeout=WAIT)
            stages.append(event.stage if isinstance(event, authbridge.SignInProgress) else event.method)
        stream.close()
        assert stages[:2] == ["openUrl", "waiting"] and "session/changed" in stages
        assert seen_by_on[:2] == ["openUrl", "waiting"]
        await bridge.sign_out("dot")


async def test_sign_out_asking_to_end_the_providers_session(host_options, dot):
    """django-oauth-toolkit advertises no end_session_endpoint: the revocation alone, and the
    result says so (glewlwyd and idpyoidc end theirs: Tests/contract/test_par_and_logout.py)."""
    async with authbridge.connect(**host_options()) as bridge:
        await bridge.configure_profile("dot", "oidc", dot_settings(dot))
        await sign_in(bridge, dot)
        result = await bridge.sign_out("dot", end_session=True, flow="external")
        assert result.signed_out and sorted(result.revoked) == ["access_token", "refresh_token"]
        assert result.end_session is not None and result.end_session.state == "unsupported" and result.end_session.url is None
        assert (await bridge.sign_out("dot")).end_session is None, "not asked, not said"
