"""The Python client ends the provider's session too (OpenID Connect RP-Initiated Logout 1.0),
against glewlwyd: `sign_out(end_session=True, flow="external")`, the "signOut/progress" event with
the page to open (a `SignOutProgress`), and `complete_sign_out` with the provider's redirect,
after which the sign-out answers "confirmed" and the browser that signed in must type the
password again."""

from __future__ import annotations

import concurrent.futures
from collections.abc import Iterator

import pytest
from conftest import WAIT

import authbridge
import authbridge.sync


@pytest.fixture(scope="module")
def glewlwyd(tmp_path_factory) -> Iterator:
    from authbridge_testkit.openid_servers import make_server
    server = make_server("glewlwyd", tmp_path_factory.mktemp("glewlwyd")).start()
    yield server
    server.stop()


def test_an_external_end_session_is_confirmed_with_complete_sign_out(host_options, glewlwyd):
    settings = glewlwyd.settings(confidential=True, postLogoutRedirectUri=glewlwyd.post_logout_redirect_uri)
    tab = glewlwyd.new_tab()
    with authbridge.sync.connect(**host_options(profiles={"p": {"plugin": "oidc", "settings": settings}})) as bridge:
        with bridge.events("signIn/progress") as progress, concurrent.futures.ThreadPoolExecutor(1) as pool:
            signing_in = pool.submit(bridge.request_oauth_tokens, "p", flow="external")
            opened = progress.get(timeout=WAIT)
            assert bridge.complete_sign_in("p", glewlwyd.browse(opened.url, tab=tab))
            assert signing_in.result(WAIT).signed_in
        with bridge.events("signOut/progress") as progress, concurrent.futures.ThreadPoolExecutor(1) as pool:
            signing_out = pool.submit(bridge.sign_out, "p", end_session=True, flow="external")
            event = progress.get(timeout=WAIT)
            assert isinstance(event, authbridge.SignOutProgress) and event.stage == "openUrl"
            assert event.callback_prefix == glewlwyd.post_logout_redirect_uri and "url=" not in repr(event)
            back = glewlwyd.end_session(event.url, tab)
            assert back.startswith(event.callback_prefix)
            assert bridge.complete_sign_out("p", back)
            result = signing_out.result(WAIT)
        assert result.end_session is not None and result.end_session.state == "confirmed", result
        assert bridge.list_accounts("p") == []
        with bridge.events("signIn/progress") as progress, concurrent.futures.ThreadPoolExecutor(1) as pool:
            again = pool.submit(bridge.request_oauth_tokens, "p", flow="external", timeout_ms=2_000)
            assert glewlwyd.authorize_silently(progress.get(timeout=WAIT).url, tab) is None, "the password is asked again"
            with pytest.raises(authbridge.AuthBridgeError):
                again.result(WAIT)
