"""The auth objects for HTTP libraries (`authbridge.requests`, `authbridge.httpx`) with the real
requests and httpx packages, against django-oauth-toolkit's userinfo endpoint: the token on every
request; an access token the server stopped honouring mid-run (DOT ends it early; the host does
not know) → 401 → one `forceRefresh` → the request sent again; many threads or tasks meeting one
dead token → one refresh; bodies that cannot be sent twice; a grant the provider revoked (RFC
7009 at DOT, or an administrator) → `NotSignedIn`; no token over plain http to a named host; and,
with the Salesforce simulator, a token Salesforce ended (it gives no expiry: a 401
`INVALID_SESSION_ID` is how a client learns) at the session's `instanceUrl`; with the Tableau
simulator, a provider whose token travels in cookies and a header."""

from __future__ import annotations

import asyncio
import concurrent.futures
import io
import subprocess
import sys
import threading
from collections.abc import Iterator

import httpx
import pytest
import requests
from conftest import (CLIENT_DIR, CLIENT_README, REPO, WAIT, code_blocks, dot_profiles, play_user, plugin_folder,
                      sign_in_blocking, sign_in_external_blocking)

import authbridge
import authbridge.sync
from authbridge import AccessTokenResult, Cookie
from authbridge._httpauth import authorize
from authbridge.httpx import AuthBridgeAuth as HttpxAuth
from authbridge.requests import AuthBridgeAuth as RequestsAuth

sys.path.insert(0, str(REPO / "Tests" / "contract"))
import test_tableau as tableau_tests  # noqa: E402
from simulators.sim_http import simulators  # noqa: E402
from simulators.sim_salesforce import SalesforceSim  # noqa: E402

make_tableau, tableau = tableau_tests.make_tableau, tableau_tests.tableau


@pytest.fixture
def salesforce():
    """The Salesforce simulator; the test fails if it saw the client break Salesforce's protocol."""
    with simulators(SalesforceSim, "Salesforce's protocol") as make:
        yield make()

THREADS = 8


async def sign_in_async(bridge: authbridge.AuthBridge, dot) -> authbridge.SignInStatus:
    users: list[asyncio.Future[int]] = []

    def on_progress(event: authbridge.SignInProgress) -> None:
        if event.stage == "openUrl":
            users.append(asyncio.ensure_future(asyncio.to_thread(play_user, dot, event.url)))

    status = await bridge.request_oauth_tokens("dot", flow="browser", on_progress=on_progress, timeout=WAIT * 2)
    assert [await asyncio.wait_for(user, WAIT) for user in users] == [200]
    return status


def refreshes(dot) -> int:
    return dot.snapshot()["refreshes"]


def end_current_token(bridge: authbridge.sync.SyncAuthBridge, dot) -> str:
    """Ends the session's access token at DOT, unknown to the host (its refresh token still works).
    Returns the ended token (to compare, never to print)."""
    token = bridge.get_access_token("dot").access_token
    dot.end_access_token(token)
    assert requests.get(userinfo(dot), headers={"Authorization": f"Bearer {token}"}, timeout=WAIT).status_code == 401
    return token


def userinfo(dot) -> str:
    return f"{dot.base}/o/userinfo/"


def test_requests_replays_once_after_the_server_ended_the_token(host_options, dot):
    with authbridge.sync.connect(**host_options(profiles=dot_profiles(dot))) as bridge, requests.Session() as session:
        sub = sign_in_blocking(bridge, dot).account.id
        session.auth = RequestsAuth(bridge, "dot")
        answer = session.get(userinfo(dot), timeout=WAIT)
        assert (answer.status_code, answer.json()["sub"], answer.history) == (200, sub, [])

        before = refreshes(dot)
        ended = end_current_token(bridge, dot)
        answer = session.get(userinfo(dot), timeout=WAIT)
        assert answer.status_code == 200 and answer.json()["sub"] == sub
        assert [r.status_code for r in answer.history] == [401], "the 401, then the replay"
        assert refreshes(dot) == before + 1
        assert bridge.get_access_token("dot").access_token != ended

        # Bodies requests can send again: bytes (a form), and a file it can rewind.
        for body in ({"note": "form"}, io.BytesIO(b"a file body")):
            end_current_token(bridge, dot)
            answer = session.post(userinfo(dot), data=body, timeout=WAIT)
            assert (answer.status_code, [r.status_code for r in answer.history]) == (200, [401])
        assert refreshes(dot) == before + 3

        # A generator cannot be sent twice: the 401 is the answer, and the token is renewed for
        # the caller's own retry, which goes through at once.
        end_current_token(bridge, dot)

        def chunks() -> Iterator[bytes]:
            yield b"note=streamed"

        answer = session.post(userinfo(dot), data=chunks(), timeout=WAIT)
        assert (answer.status_code, answer.history) == (401, [])
        assert refreshes(dot) == before + 4
        answer = session.get(userinfo(dot), timeout=WAIT)
        assert (answer.status_code, answer.history) == (200, []) and refreshes(dot) == before + 4


def test_many_threads_meeting_a_dead_token_make_one_refresh(host_options, dot):
    with authbridge.sync.connect(**host_options(profiles=dot_profiles(dot))) as bridge, requests.Session() as session:
        sub = sign_in_blocking(bridge, dot).account.id
        session.auth = RequestsAuth(bridge, "dot")
        adapter = requests.adapters.HTTPAdapter(pool_maxsize=THREADS)
        session.mount("http://", adapter)
        start = threading.Barrier(THREADS)

        def call(_: int) -> tuple[int, str, list[int]]:
            start.wait(WAIT)
            answer = session.get(userinfo(dot), timeout=WAIT)
            return answer.status_code, answer.json().get("sub"), [r.status_code for r in answer.history]

        with concurrent.futures.ThreadPoolExecutor(THREADS) as pool:
            assert {result[:2] for result in pool.map(call, range(THREADS))} == {(200, sub)}
            before = refreshes(dot)
            end_current_token(bridge, dot)
            results = list(pool.map(call, range(THREADS)))
        assert {result[:2] for result in results} == {(200, sub)}, results
        assert refreshes(dot) == before + 1, "one refresh for every thread that met the dead token"
        assert any(history == [401] for _, _, history in results)


def test_a_session_the_provider_ended_raises_not_signed_in(host_options, dot):
    with authbridge.sync.connect(**host_options(profiles=dot_profiles(dot))) as bridge, requests.Session() as session:
        sign_in_blocking(bridge, dot)
        token = bridge.get_access_token("dot").access_token
        auth = RequestsAuth(bridge, "dot")
        session.auth = auth
        assert session.get(userinfo(dot), timeout=WAIT).status_code == 200
        assert dot.admin_revoke("ada") >= 1          # in DOT's admin: ada's grants revoked

        with pytest.raises(authbridge.NotSignedIn) as raised:
            session.get(userinfo(dot), timeout=WAIT)
        error = raised.value
        assert (error.reason, error.provider, error.request_method) == ("revoked", "dot", "getAccessToken")
        assert error.message == (f"GET {dot.base}/o/userinfo/ answered 401 (the access token was refused) and the "
                                 "session could not be renewed: invalid_grant; sign in to 'dot' again"), error.message
        assert isinstance(error.__cause__, authbridge.NotSignedIn), "the bridge's own error is the cause"
        for text in (str(error), repr(error), repr(auth), repr(session.auth)):
            assert token not in text
        assert bridge.check_sign_in_status("dot").state == "notSignedIn"
        with pytest.raises(authbridge.NotSignedIn):                       # and so does the next request
            session.get(userinfo(dot), timeout=WAIT)
        with httpx.Client(auth=HttpxAuth(bridge, "dot")) as client, pytest.raises(authbridge.NotSignedIn):
            client.get(userinfo(dot))


def test_an_account_of_the_profile_and_a_minimum_validity(host_options, dot, frames):
    with authbridge.sync.connect(**host_options(profiles=dot_profiles(dot))) as bridge, requests.Session() as session:
        ada = sign_in_blocking(bridge, dot).account.id
        with concurrent.futures.ThreadPoolExecutor(1) as pool:      # then grace, who becomes the current account
            def grace(event: authbridge.SignInProgress) -> None:
                if event.stage == "openUrl":
                    pool.submit(play_user, dot, event.url, user="grace", password="hopper-test")
            grace_sub = bridge.request_oauth_tokens("dot", flow="browser", on_progress=grace, timeout=WAIT * 2).account.id
        assert ada != grace_sub
        assert session.get(userinfo(dot), auth=RequestsAuth(bridge, "dot"), timeout=WAIT).json()["sub"] == grace_sub
        auth = RequestsAuth(bridge, "dot", account=ada, min_validity_ms=45_000)
        assert session.get(userinfo(dot), auth=auth, timeout=WAIT).json()["sub"] == ada
        with httpx.Client(auth=HttpxAuth(bridge, "dot", account=ada, min_validity_ms=45_000)) as client:
            assert client.get(userinfo(dot)).json()["sub"] == ada
        asked = [f["params"] for f in frames.sent_frames if f.get("method") == "getAccessToken"]
        # The request's method and URL go along (a DPoP-bound session's proof is for them).
        assert asked[-2:] == [{"provider": "dot", "account": ada, "minValidityMs": 45_000, "method": "GET", "url": userinfo(dot)}] * 2
        assert repr(auth) == f"authbridge.requests.AuthBridgeAuth(profile='dot', account={ada!r})"


def test_httpx_client_replays_bytes_and_json_but_not_a_stream(host_options, dot):
    with authbridge.sync.connect(**host_options(profiles=dot_profiles(dot))) as bridge:
        sub = sign_in_blocking(bridge, dot).account.id
        with httpx.Client(auth=HttpxAuth(bridge, "dot", min_validity_ms=30_000), timeout=WAIT) as client:
            assert client.get(userinfo(dot)).json()["sub"] == sub
            before = refreshes(dot)
            for send in (lambda: client.get(userinfo(dot)), lambda: client.post(userinfo(dot), json={"a": 1}),
                         lambda: client.post(userinfo(dot), content=b"raw bytes")):
                end_current_token(bridge, dot)
                answer = send()
                assert (answer.status_code, answer.json()["sub"]) == (200, sub)
                assert [r.status_code for r in answer.history] == [401]
            assert refreshes(dot) == before + 3

            end_current_token(bridge, dot)
            answer = client.post(userinfo(dot), content=iter([b"streamed"]))
            assert (answer.status_code, answer.history) == (401, [])
            answer = client.get(userinfo(dot))
            assert (answer.status_code, answer.history) == (200, []) and refreshes(dot) == before + 4

            # RFC 7009 at DOT: revoking the access token revokes its grant; the refresh fails.
            dot.revoke(bridge.get_access_token("dot").access_token)
            with pytest.raises(authbridge.NotSignedIn) as raised:
                client.get(userinfo(dot))
            assert raised.value.reason == "revoked"


async def test_httpx_async_client_with_either_bridge(host_options, dot):
    async with authbridge.connect(**host_options(profiles=dot_profiles(dot))) as bridge:
        sub = (await sign_in_async(bridge, dot)).account.id
        auth = HttpxAuth(bridge, "dot")
        async with httpx.AsyncClient(auth=auth, timeout=WAIT) as client:
            assert (await client.get(userinfo(dot))).json()["sub"] == sub
            before = await asyncio.to_thread(refreshes, dot)
            token = (await bridge.get_access_token("dot")).access_token
            await asyncio.to_thread(dot.end_access_token, token)
            answers = await asyncio.gather(*(client.get(userinfo(dot)) for _ in range(THREADS)))
            assert {(a.status_code, a.json()["sub"]) for a in answers} == {(200, sub)}
            assert await asyncio.to_thread(refreshes, dot) == before + 1, "one refresh for every task"

        # httpx.Client blocks: with an asyncio bridge its flow would wait on its own loop.
        with httpx.Client(auth=auth) as blocking, pytest.raises(TypeError, match="authbridge.sync.connect"):
            blocking.get(userinfo(dot))
        with pytest.raises(TypeError, match="authbridge.sync.connect"):
            RequestsAuth(bridge, "dot")   # type: ignore[arg-type]

    # A blocking bridge serves an AsyncClient too, from its own loop thread.
    options = host_options(profiles=dot_profiles(dot), data_home=None, name="host")
    bridge_sync = await asyncio.to_thread(authbridge.sync.connect, **options)
    try:
        await asyncio.to_thread(bridge_sync.start)
        async with httpx.AsyncClient(auth=HttpxAuth(bridge_sync, "dot"), timeout=WAIT) as client:
            answer = await client.get(userinfo(dot))
            assert (answer.status_code, answer.json()["sub"]) == (200, sub)
    finally:
        await asyncio.to_thread(bridge_sync.close)


def test_no_token_goes_over_plain_http_to_a_named_host(host_options, dot):
    with authbridge.sync.connect(**host_options(profiles=dot_profiles(dot))) as bridge, requests.Session() as session:
        auth = RequestsAuth(bridge, "dot")
        session.auth = auth
        for url in ("http://example.com/me?api_key=secret", "http://localhost:1/me", "ftp://127.0.0.1/me"):
            with pytest.raises(authbridge.InsecureURL) as raised:
                session.get(url, timeout=WAIT)
            assert "secret" not in str(raised.value) and "/me" not in str(raised.value)
            assert raised.value.reason == "insecureUrl" and isinstance(raised.value, ValueError)
            with httpx.Client(auth=HttpxAuth(bridge, "dot")) as client, pytest.raises(authbridge.InsecureURL):
                client.get(url)
        assert raised.value.message == "refusing to send a token to ftp://127.0.0.1: use https (plain http only to 127.0.0.1 or [::1])"
        assert repr(auth) == "authbridge.requests.AuthBridgeAuth(profile='dot', account=None)"
        # Nothing was asked of the host: not signed in, and no error about that.
        assert bridge.check_sign_in_status("dot").state == "notSignedIn"


def test_cookies_go_to_their_host_and_path_and_replace_those_of_the_same_name():
    def cookie(name: str, path: str = "/", secure: bool | None = None, domain: str = "tableau.example.com") -> Cookie:
        return Cookie(name=name, value=f"{name}-value", domain=domain, path=path, secure=secure)

    token = AccessTokenResult(provider="t", access_token="secret-token", token_type="Bearer", expires_at=None,
                              headers={"X-XSRF-TOKEN": "x1", "Authorization": "Bearer secret-token"},
                              cookies=[cookie("access"), cookie("api", path="/api"), cookie("tls", secure=True),
                                       cookie("other", domain="other.example.com")])
    cases = {
        "https://tableau.example.com/api/x": "keep=1; access=access-value; api=api-value; tls=tls-value",
        "https://tableau.example.com/api": "keep=1; access=access-value; api=api-value; tls=tls-value",
        "https://tableau.example.com/apix": "keep=1; access=access-value; tls=tls-value",
        "http://127.0.0.1/api": None,
        "https://TABLEAU.example.com/": "keep=1; access=access-value; tls=tls-value",
        "https://sub.tableau.example.com/": None,
    }
    for url, expected in cases.items():
        headers = httpx.Headers({"cookie": "access=stale; keep=1", "authorization": "Basic old"})
        authorize(headers, token, url)
        assert headers["Authorization"] == "Bearer secret-token" and headers["x-xsrf-token"] == "x1"
        assert headers["Cookie"] == (expected or "access=stale; keep=1"), url
    plain = requests.structures.CaseInsensitiveDict()
    authorize(plain, token, "http://tableau.example.com/api/x")       # not secure: no `tls`
    assert plain["cookie"] == "access=access-value; api=api-value"


async def test_tableau_cookies_and_header_renewed_after_the_server_ended_the_session(host_options, tmp_path, tableau):
    folder = plugin_folder(tmp_path / "tableau-plugins", "tableau")
    options = host_options(profiles={"tab": tableau_tests.profile(tableau)}, plugins=[folder])
    views = f"{tableau.base}{tableau_tests.VIEWS_PATH}"
    body = {"method": "getViews", "params": {}}
    async with authbridge.connect(**options) as bridge:
        session_id = await asyncio.to_thread(tableau.web_sign_in, "alice")
        assert (await bridge.request_oauth_tokens("tab", flow="session", session_id=session_id)).signed_in
        async with httpx.AsyncClient(auth=HttpxAuth(bridge, "tab"), timeout=WAIT) as client:
            answer = await client.post(views, json=body)
            assert answer.status_code == 200 and answer.json()["result"]["totalCount"] == 2
            assert len(client.cookies) == 0, "nothing went into the client's cookie jar"
            tableau.expire_sessions()                           # Tableau ends the server session
            answer = await client.post(views, json=body)
            assert answer.status_code == 200 and [r.status_code for r in answer.history] == [401]
        assert tableau.snapshot().refreshes == 1


def test_salesforce_rest_at_the_instance_url_renews_on_invalid_session_id(host_options, tmp_path, salesforce):
    folder = plugin_folder(tmp_path / "salesforce-plugins", "salesforce")
    options = host_options(profiles={"sf": {"plugin": "salesforce", "settings": salesforce.settings()}}, plugins=[folder])
    with authbridge.sync.connect(**options) as bridge, requests.Session() as session:
        status = sign_in_external_blocking(bridge, "sf", lambda url: salesforce.browse(url, "jane"))
        instance = status.details["instanceUrl"]
        assert instance == salesforce.instance_url and status.expires_at is None
        session.auth = RequestsAuth(bridge, "sf")
        records = f"{instance}/services/data/v60.0/query"
        answer = session.get(records, params={"q": "SELECT Id, Name FROM Account"}, timeout=WAIT)
        assert (answer.status_code, answer.json()["records"][0]["Name"]) == (200, "Acme")

        salesforce.expire_sessions()       # Setup > Session Management: the token dies, the grant lives
        answer = session.post(f"{instance}/services/data/v60.0/sobjects/Account", json={"Name": "Initech"}, timeout=WAIT)
        assert (answer.status_code, answer.json()["success"]) == (201, True)
        assert [(r.status_code, r.json()[0]["errorCode"]) for r in answer.history] == [(401, "INVALID_SESSION_ID")]
        snapshot = salesforce.snapshot()
        assert snapshot["refreshes"] == 1
        assert [status for _, _, status in snapshot["api_calls"][-2:]] == [401, 201]

        salesforce.revoke_app()            # the user's OAuth Connected Apps > Revoke: the grant dies too
        with pytest.raises(authbridge.NotSignedIn) as raised:
            session.get(records, params={"q": "SELECT Id FROM Account"}, timeout=WAIT)
        assert raised.value.reason == "revoked" and "sign in to 'sf' again" in raised.value.message


def test_the_client_readme_example_for_requests_and_httpx_runs(host_options, dot, frame_tap, tmp_path):
    """The README's block as a reader runs it, after the quick start signed `corp` in: its own hosts
    (the build's, through the frame tap, with the bundled plugins), the user's folders."""
    corp = {"issuer": f"{dot.base}/o", "clientId": "authbridge-test", "scopes": ["openid"]}
    options = host_options()
    with authbridge.sync.connect(**options) as bridge:        # the quick start's sign-in
        bridge.configure_profile("corp", "oidc", corp)
        sub = sign_in_blocking(bridge, dot, "corp").account.id
    [block] = [b for b in code_blocks(CLIENT_README.read_text(encoding="utf-8"), "python") if "AuthBridgeAuth" in b]
    (tmp_path / "readme_http.py").write_text(block, encoding="utf-8")
    env = dict(options["env"], **frame_tap.env, ISSUER=corp["issuer"], CLIENT_ID=corp["clientId"],
               USERINFO_URL=userinfo(dot), PYTHONPATH=str(CLIENT_DIR))
    done = subprocess.run([sys.executable, "readme_http.py"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=WAIT * 4)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines() == [f"requests: {sub}", f"httpx: {sub}"], done.stdout + done.stderr
