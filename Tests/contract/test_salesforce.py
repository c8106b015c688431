"""The `salesforce` plugin through the real host against the Salesforce simulator (simulators/sim_salesforce.py):
the scenarios of plugins/salesforce/README.md (a session outliving its 24 hours, an administrator revoking the app, a removed
server session, an inactive user) and the provider's particulars (login hosts, instance_url, the
identity URL, the refresh token Salesforce does not resend, revocation, one refresh at a time).

Every test ends by checking that the simulator saw no protocol deviation from the client
(`violations`) and, through the conftest harness, that every frame met the bridge contract and that
no code or token leaked into the host's log or messages.
"""

from __future__ import annotations

import json
import socket
import urllib.parse
import urllib.request

import pytest

from conftest import advance_clock, begin_sign_in, sign_in_external
from provider_fixtures import provider_fixtures
from simulators.sim_http import Handler, Served
from simulators.sim_salesforce import CLIENT_ID, EXTERNAL_REDIRECT_URI, SalesforceSim

DAY_MS = 24 * 3600 * 1000
NOT_SIGNED_IN, PROVIDER_UNAVAILABLE, CONFIGURATION_ERROR, USER_CANCELLED, CANCELLED = -32001, -32007, -32013, -32005, -32800
API = "/services/data/v60.0"


salesforce_plugin_dir, make_sim, sim = provider_fixtures("salesforce", SalesforceSim, "Salesforce's protocol")


@pytest.fixture
def start_sf(start_host, salesforce_plugin_dir):
    """start_sf(sim, **settings) → a host (test clock on) with profile "sf" logging in at the simulator."""
    def start(sim: SalesforceSim, **settings):
        profiles = {"sf": {"plugin": "salesforce", "settings": sim.settings(**settings)}}
        return start_host([salesforce_plugin_dir], profiles=profiles, test_clock=True)
    return start


def advance(host, sim: SalesforceSim, milliseconds: int) -> None:
    """Moves the host's clock and the simulator's together."""
    advance_clock(host, milliseconds)
    sim.advance(milliseconds)


def fetch(host, path: str = f"{API}/sobjects", **params):
    return host.result("fetch", {"provider": "sf", "url": path, **params})


def events(host, since: int, state: str | None = None) -> list[dict]:
    return [n for n in host.notifications("session/changed", since=since) if state is None or n["state"] == state]


# ── Sign-in ──────────────────────────────────────────────────────────────────


def test_external_sign_in_with_pkce_names_the_account_from_the_identity_url(start_sf, sim):
    host = start_sf(sim)
    mark = host.mark()
    status = sign_in_external(host, sim, "sf")
    assert status["account"] == {"id": sim.account_id(), "name": "Jane Doe", "email": "jane.doe@acme.example"}
    assert status["expiresAt"] is None, "Salesforce sends no expires_in: expiry is learnt from a 401"
    sent = sim.authorize_requests[-1]
    assert sent["scope"] == "api refresh_token" and sent["code_challenge_method"] == "S256"
    assert sent["client_id"] == CLIENT_ID and sent["redirect_uri"] == EXTERNAL_REDIRECT_URI
    snap = sim.snapshot()
    assert snap["sign_ins"] == 1 and snap["identity_calls"] == [200]
    signed_in = events(host, mark, "signedIn")
    assert len(signed_in) == 1 and signed_in[0]["account"]["id"] == sim.account_id()
    # The token handed out is the org's live session; the header is all a frontend needs.
    token = host.result("getAccessToken", {"provider": "sf"})
    assert token["expiresAt"] is None and token["cookies"] == []
    assert token["headers"] == {"Authorization": f"Bearer {token['accessToken']}"}
    assert sim.session_alive(token["accessToken"])


def free_port() -> int:
    """A loopback port nobody listens on right now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_browser_flow_comes_back_to_the_registered_loopback_callback(start_sf, make_sim):
    # A connected app matches callback URLs exactly: the profile fixes the listener's port and
    # path (host-level settings) to the one registered, e.g. the Salesforce CLI's.
    callback = f"http://127.0.0.1:{free_port()}/OauthRedirect"
    sim = make_sim(callback_urls=[EXTERNAL_REDIRECT_URI, callback])
    port = urllib.parse.urlsplit(callback).port
    host = start_sf(sim, loopbackPort=port, loopbackPath="/OauthRedirect")
    request_id = host.send_request("requestOAuthTokens", {"provider": "sf", "flow": "browser"})
    progress = host.wait_for_notification(
        "signIn/progress", lambda p: p.get("stage") == "openUrl" and p.get("requestId") == request_id)
    assert progress["url"].startswith(sim.authorize_prefix)
    location = sim.browse(progress["url"])
    assert location.startswith(callback + "?")
    # The browser follows the redirect; the listener answers once the session is stored.
    with urllib.request.urlopen(location, timeout=10) as page:
        assert page.status == 200
    answer = host.wait_response(request_id)
    assert answer["result"]["state"] == "signedIn" and answer["result"]["account"]["id"] == sim.account_id()
    assert sim.authorize_requests[-1]["redirect_uri"] == callback


def test_a_private_use_scheme_callback_works_in_the_external_flow(start_sf, make_sim):
    # RFC 8252 §7.1, as the Mobile SDK registers them (scheme:/path, no host).
    sim = make_sim(redirect_uri="com.acme.crm:/oauth2/done")
    host = start_sf(sim)
    status = sign_in_external(host, sim, "sf")
    assert status["account"]["id"] == sim.account_id()
    assert sim.authorize_requests[-1]["redirect_uri"] == "com.acme.crm:/oauth2/done"


def test_a_connected_app_with_a_consumer_secret(start_sf, make_sim):
    sim = make_sim(client_secret="8A3B9F2C1D4E5F60718293A4B5C6D7E8F90A1B2C3D4E5F6071829")
    host = start_sf(sim, clientSecret="8A3B9F2C1D4E5F60718293A4B5C6D7E8F90A1B2C3D4E5F6071829")
    sign_in_external(host, sim, "sf")                    # the simulator refuses an exchange without the secret
    advance(host, sim, DAY_MS + 60_000)
    assert fetch(host)["status"] == 200                  # and a refresh without it
    assert sim.snapshot()["sign_ins"] == 1 and sim.snapshot()["refreshes"] == 1


def test_a_user_who_denies_access_cancels_the_sign_in(start_sf, sim):
    host = start_sf(sim)
    request_id, progress = begin_sign_in(host, "sf", flow="external")
    location = sim.browse(progress["url"], deny=True)
    assert host.result("completeSignIn", {"provider": "sf", "callbackUrl": location}) == {"accepted": True}
    error = host.wait_response(request_id)["error"]
    assert error["code"] == USER_CANCELLED and error["data"]["reason"] == "access_denied"
    assert host.result("checkSignInStatus", {"provider": "sf"})["reason"] == "noTokens"


def test_scopes_always_include_refresh_token(start_sf, sim):
    host = start_sf(sim, scopes=["api", "id"])
    sign_in_external(host, sim, "sf")
    assert sim.authorize_requests[-1]["scope"] == "api id refresh_token"
    # Scopes asked for by one request get it too; signed in, they come on top of the account's
    # (incremental consent, issue 30: nothing the session held is lost by asking for more).
    request_id, progress = begin_sign_in(host, "sf", flow="external", scopes=["web"])
    query = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(progress["url"]).query))
    assert sorted(query["scope"].split()) == ["api", "id", "refresh_token", "web"]
    host.notify("$/cancelRequest", {"id": request_id})
    assert host.wait_response(request_id)["error"]["code"] == CANCELLED


def test_two_users_of_one_org_are_two_accounts(start_sf, sim):
    host = start_sf(sim)
    sign_in_external(host, sim, "sf", user="jane")
    sign_in_external(host, sim, "sf", user="raj")
    accounts = host.result("listAccounts", {"provider": "sf"})["accounts"]
    assert {a["account"]["id"] for a in accounts} == {sim.account_id("jane"), sim.account_id("raj")}
    assert [a["account"]["name"] for a in accounts if a["current"]] == ["Raj Patel"]


# ── Login hosts ──────────────────────────────────────────────────────────────


@pytest.mark.parametrize("login_host, authorize_url", [
    ("production", "https://login.salesforce.com/services/oauth2/authorize?"),
    ("sandbox", "https://test.salesforce.com/services/oauth2/authorize?"),
    ("https://acme.my.salesforce.com", "https://acme.my.salesforce.com/services/oauth2/authorize?"),
    ("acme--uat.sandbox.my.salesforce.com", "https://acme--uat.sandbox.my.salesforce.com/services/oauth2/authorize?"),
    ("https://acme.my.site.com/partners/", "https://acme.my.site.com/partners/services/oauth2/authorize?"),
])
def test_the_login_host_decides_where_the_user_signs_in(start_host, salesforce_plugin_dir, login_host, authorize_url):
    # Real Salesforce hosts are not contacted: the sign-in is cancelled once its URL is known.
    # (The simulator, a loopback My Domain URL, is followed by every other test.)
    settings = {"clientId": CLIENT_ID, "loginHost": login_host, "redirectUri": EXTERNAL_REDIRECT_URI}
    host = start_host([salesforce_plugin_dir], profiles={"sf": {"plugin": "salesforce", "settings": settings}})
    request_id, progress = begin_sign_in(host, "sf", flow="external")
    assert progress["url"].startswith(authorize_url)
    assert progress["callbackPrefix"] == EXTERNAL_REDIRECT_URI
    query = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(progress["url"]).query))
    assert query["response_type"] == "code" and query["client_id"] == CLIENT_ID
    assert query["redirect_uri"] == EXTERNAL_REDIRECT_URI and query["scope"] == "api refresh_token"
    assert query["code_challenge_method"] == "S256" and len(query["code_challenge"]) == 43 and query["state"]
    host.notify("$/cancelRequest", {"id": request_id})
    assert host.wait_response(request_id)["error"]["code"] == CANCELLED


@pytest.mark.parametrize("login_host, reason", [
    ("http://acme.my.salesforce.com", "insecureUrl"),
    ("https://acme.my.salesforce.com/?next=1", "invalidSettings"),
    ("https://someone@acme.my.salesforce.com", "invalidSettings"),
    ("https://", "invalidSettings"),
])
def test_an_unusable_login_host_is_a_configuration_error(start_host, salesforce_plugin_dir, login_host, reason):
    settings = {"clientId": CLIENT_ID, "loginHost": login_host}
    host = start_host([salesforce_plugin_dir], profiles={"sf": {"plugin": "salesforce", "settings": settings}})
    error = host.error("checkSignInStatus", {"provider": "sf"})
    assert error["code"] == CONFIGURATION_ERROR and error["data"]["reason"] == reason


def test_the_external_flow_needs_the_connected_apps_callback_url(start_host, salesforce_plugin_dir):
    settings = {"clientId": CLIENT_ID}
    host = start_host([salesforce_plugin_dir], profiles={"sf": {"plugin": "salesforce", "settings": settings}})
    error = host.error("requestOAuthTokens", {"provider": "sf", "flow": "external"})
    assert error["code"] == CONFIGURATION_ERROR and error["data"]["reason"] == "missingSetting"
    assert "redirectUri" in error["message"]


# ── Sessions, refresh and replay (the scenarios of plugins/salesforce/README.md) ──────────────────────


def test_a_session_outlives_its_24_hours_through_one_silent_refresh(start_sf, sim):
    host = start_sf(sim)
    sign_in_external(host, sim, "sf")
    assert fetch(host)["status"] == 200
    advance(host, sim, DAY_MS + 60_000)                  # the org's 24-hour session is over
    mark = host.mark()
    answer = fetch(host)                                 # 401 INVALID_SESSION_ID → refresh → replay
    assert answer["status"] == 200 and json.loads(answer["body"])["sobjects"][0]["name"] == "Account"
    snap = sim.snapshot()
    assert snap["api_statuses"] == [200, 401, 200]
    assert snap["refresh_requests"] == 1 and snap["refreshes"] == 1
    assert [e["reason"] for e in events(host, mark)] == ["refreshed"]
    status = host.result("checkSignInStatus", {"provider": "sf"})
    assert status["state"] == "signedIn" and status["reason"] == "valid" and status["expiresAt"] is None


@pytest.mark.parametrize("rotation", [False, True], ids=["salesforce-default", "refresh-token-rotation"])
def test_refreshes_keep_the_refresh_token_salesforce_does_not_resend(start_sf, make_sim, rotation):
    sim = make_sim(rotate_refresh_tokens=rotation)
    host = start_sf(sim)
    sign_in_external(host, sim, "sf")
    issued = [sim.grant_refresh_token()]
    for _ in range(3):
        advance(host, sim, DAY_MS + 60_000)
        assert fetch(host)["status"] == 200
        issued.append(sim.grant_refresh_token())
    presented = sim.presented_refresh_tokens
    assert sim.snapshot()["refreshes"] == 3
    if rotation:
        # A connected app with rotation: each refresh brings a new token, used by the next one.
        assert presented == issued[:3] and len(set(issued)) == 4
    else:
        # Salesforce sends no refresh token back: the one from the sign-in is used every time.
        assert presented == [issued[0]] * 3 and len(set(issued)) == 1


def test_a_removed_server_session_is_renewed_silently(start_sf, sim):
    host = start_sf(sim)
    sign_in_external(host, sim, "sf")
    assert fetch(host)["status"] == 200
    sim.expire_sessions()                                # Setup > Session Management > Remove
    mark = host.mark()
    assert fetch(host)["status"] == 200
    assert sim.snapshot()["api_statuses"] == [200, 401, 200] and sim.snapshot()["refreshes"] == 1
    assert [e["state"] for e in events(host, mark)] == ["refreshed"]
    assert host.result("checkSignInStatus", {"provider": "sf"})["state"] == "signedIn"


def test_the_admin_revoking_the_app_signs_the_user_out_at_the_next_data_call(start_sf, sim):
    host = start_sf(sim)
    sign_in_external(host, sim, "sf")
    assert fetch(host)["status"] == 200
    sim.revoke_app()                                     # Setup > Users > OAuth Connected Apps > Revoke
    mark = host.mark()
    error = host.error("fetch", {"provider": "sf", "url": f"{API}/sobjects"})
    assert error["code"] == NOT_SIGNED_IN and error["data"]["reason"] == "revoked"
    assert "expired access/refresh token" in error["message"]
    ended = host.wait_for_notification("session/changed", lambda p: p["state"] == "signedOut", since=mark)
    assert ended["reason"] == "revoked" and ended["message"] == "invalid_grant: expired access/refresh token"
    assert ended["account"]["id"] == sim.account_id()
    assert sim.snapshot()["refused_refreshes"] == ["expired access/refresh token"]
    status = host.result("checkSignInStatus", {"provider": "sf"})
    assert status["state"] == "notSignedIn" and status["reason"] == "noTokens"


@pytest.mark.parametrize("action, reason, words", [
    ("deactivate_user", "inactiveUser", "inactive user"),
    ("deactivate_org", "inactiveOrg", "inactive org"),
])
def test_an_inactive_user_or_org_is_signed_out_with_salesforces_words(start_sf, sim, action, reason, words):
    host = start_sf(sim)
    sign_in_external(host, sim, "sf")
    getattr(sim, action)()
    mark = host.mark()
    error = host.error("fetch", {"provider": "sf", "url": f"{API}/sobjects"})
    assert error["code"] == NOT_SIGNED_IN and error["data"]["reason"] == reason and words in error["message"]
    ended = host.wait_for_notification("session/changed", lambda p: p["state"] == "signedOut", since=mark)
    # session/changed reasons are a closed set: a definitive refusal other than a revoked grant is invalidGrant.
    assert ended["reason"] == "invalidGrant" and ended["message"] == f"invalid_grant: {words}"
    assert host.result("checkSignInStatus", {"provider": "sf"})["state"] == "notSignedIn"


def test_an_identity_service_answering_inactive_leads_to_the_refresh_that_says_why(start_sf, sim):
    # The identity service still recognises the session of a deactivated user: 404 Inactive is not
    # the end by itself (check_session says expired); the refresh endpoint then refuses, in its words.
    host = start_sf(sim)
    sign_in_external(host, sim, "sf")
    sim.deactivate_user(end_sessions=False)
    mark = host.mark()
    status = host.result("checkSignInStatus", {"provider": "sf"})
    assert (status["state"], status["reason"]) == ("notSignedIn", "inactiveUser")
    assert status["message"] == "invalid_grant: inactive user"
    assert sim.snapshot()["identity_calls"][-1] == 404 and sim.snapshot()["refused_refreshes"] == ["inactive user"]
    assert [(e["state"], e["reason"]) for e in events(host, mark)] == [("signedOut", "invalidGrant")]


@pytest.mark.parametrize("status, content_type, body, reason", [
    (503, "text/html", b"<html><body>Service Unavailable</body></html>", "serverError"),
    (429, "text/plain", b"Too Many Requests", "rateLimited"),
    (408, "text/html", b"<html><body>Request Timeout</body></html>", "badResponse"),
], ids=["503", "429", "408"])
def test_a_refresh_that_fails_for_now_keeps_the_user_signed_in(start_sf, sim, status, content_type, body, reason):
    host = start_sf(sim)
    sign_in_external(host, sim, "sf")
    advance(host, sim, DAY_MS + 60_000)                  # the org's session is over: the next call refreshes
    sim.refresh_failure = (status, content_type, body)
    mark = host.mark()
    error = host.error("fetch", {"provider": "sf", "url": f"{API}/sobjects"})
    assert error["code"] == PROVIDER_UNAVAILABLE and error["data"]["retryable"] is True
    assert error["data"]["reason"] == reason
    offline = host.result("checkSignInStatus", {"provider": "sf"})
    assert (offline["state"], offline["reason"]) == ("offline", "transient") and str(status) in offline["message"]
    assert events(host, mark, "signedOut") == []
    sim.refresh_failure = None                           # Salesforce is back
    assert fetch(host)["status"] == 200
    assert sim.snapshot()["failed_refreshes"] == [status, status] and sim.snapshot()["refreshes"] == 1
    assert [e["state"] for e in events(host, mark)] == ["refreshed"]


@pytest.mark.parametrize("content_type, body", [("text/html", b"<html><body>Bad Request</body></html>"), ("text/plain", b"")],
                         ids=["html", "empty"])
def test_a_refresh_answered_400_without_an_oauth_error_signs_the_user_out(start_sf, sim, content_type, body):
    # Issue 25 §2.2: a 400 from the token endpoint to a refresh is the provider's answer about the
    # grant, whatever its body. Before, it was -32007 badResponse, retryable forever.
    host = start_sf(sim)
    sign_in_external(host, sim, "sf")
    advance(host, sim, DAY_MS + 60_000)                  # the org's session is over: the next call refreshes
    sim.refresh_failure = (400, content_type, body)
    mark = host.mark()
    error = host.error("fetch", {"provider": "sf", "url": f"{API}/sobjects"})
    assert error["code"] == -32001 and error["data"]["reason"] == "refreshRefused", error
    assert error["data"]["status"] == 400 and "oauthError" not in error["data"] and "HTTP 400" in error["message"]
    assert [(e["state"], e["reason"]) for e in events(host, mark)] == [("signedOut", "refreshRefused")]
    assert host.result("checkSignInStatus", {"provider": "sf"})["state"] == "notSignedIn"


def test_a_refresh_refused_as_already_being_processed_is_tried_again_once(start_sf, sim):
    # Salesforce answers invalid_grant "token request is already being processed" while another
    # request with the same refresh token runs (another device): that request ends in a moment, so
    # the plugin tries once more after a short wait, and the caller sees the working session.
    host = start_sf(sim)
    sign_in_external(host, sim, "sf")
    sim.expire_sessions()
    sim.hold_next_refresh()
    mark = host.mark()
    assert fetch(host)["status"] == 200
    snap = sim.snapshot()
    assert snap["held_refreshes"] == 1 and snap["refresh_requests"] == 2 and snap["refreshes"] == 1
    assert snap["concurrent_refreshes"] == 0
    gaps = sim.refresh_gaps()
    assert len(gaps) == 1 and gaps[0] >= 0.5, f"the second try came {gaps[0]:.3f} s after the refusal"
    assert [e["state"] for e in events(host, mark)] == ["refreshed"]


def test_a_refresh_refused_as_already_being_processed_twice_keeps_the_session(start_sf, sim):
    # Still busy on the second try: the caller gets a retryable error, and the session stays.
    host = start_sf(sim)
    sign_in_external(host, sim, "sf")
    sim.expire_sessions()
    sim.hold_next_refresh()
    sim.hold_next_refresh()
    mark = host.mark()
    error = host.error("fetch", {"provider": "sf", "url": f"{API}/sobjects"})
    assert error["code"] == PROVIDER_UNAVAILABLE and error["data"]["reason"] == "requestInProgress"
    assert error["data"]["retryable"] is True
    assert sim.snapshot()["refresh_requests"] == 2, "one retry, not more"
    assert events(host, mark, "signedOut") == []
    assert fetch(host)["status"] == 200                  # the next call refreshes
    snap = sim.snapshot()
    assert snap["held_refreshes"] == 2 and snap["refreshes"] == 1 and snap["concurrent_refreshes"] == 0


def test_concurrent_fetches_after_expiry_share_one_refresh(start_sf, sim):
    host = start_sf(sim)
    sign_in_external(host, sim, "sf")
    advance(host, sim, DAY_MS + 60_000)
    mark = host.mark()
    ids = [host.send_request("fetch", {"provider": "sf", "url": f"{API}/query?q=SELECT+Id+FROM+Account"})
           for _ in range(8)]
    answers = [host.wait_response(request_id) for request_id in ids]
    assert [a["result"]["status"] for a in answers] == [200] * 8
    snap = sim.snapshot()
    assert snap["refresh_requests"] == 1 and snap["concurrent_refreshes"] == 0
    assert len(events(host, mark, "refreshed")) == 1


def test_check_sign_in_status_asks_the_identity_service(start_sf, sim):
    host = start_sf(sim)
    sign_in_external(host, sim, "sf")
    status = host.result("checkSignInStatus", {"provider": "sf"})
    assert (status["state"], status["reason"]) == ("signedIn", "valid")
    sim.expire_sessions()                                # identity answers 403 Bad_OAuth_Token → refresh
    status = host.result("checkSignInStatus", {"provider": "sf"})
    assert (status["state"], status["reason"]) == ("signedIn", "refreshed")
    advance(host, sim, DAY_MS)                           # the org's session timeout → refresh again
    assert host.result("checkSignInStatus", {"provider": "sf"})["reason"] == "refreshed"
    sim.revoke_app()
    status = host.result("checkSignInStatus", {"provider": "sf"})
    assert (status["state"], status["reason"]) == ("notSignedIn", "revoked")
    assert status["message"] == "invalid_grant: expired access/refresh token"
    assert sim.snapshot()["identity_calls"] == [200, 200, 403, 403, 403]


def test_a_frontend_with_a_rejected_token_renews_it_through_check_sign_in_status(start_sf, sim):
    # expiresAt is null, so getAccessToken cannot know a token died; the frontend that called the
    # API itself and got 401 asks checkSignInStatus, whose identity-URL check renews the session.
    host = start_sf(sim)
    sign_in_external(host, sim, "sf")
    old = host.result("getAccessToken", {"provider": "sf"})["accessToken"]
    advance(host, sim, DAY_MS + 60_000)
    assert not sim.session_alive(old)
    assert host.result("checkSignInStatus", {"provider": "sf"})["reason"] == "refreshed"
    new = host.result("getAccessToken", {"provider": "sf"})
    assert new["accessToken"] != old and sim.session_alive(new["accessToken"])
    request = urllib.request.Request(f"{sim.instance_url}{API}/sobjects", headers=new["headers"])
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 200


def test_an_unreachable_identity_service_leaves_the_user_signed_in_offline(start_sf, sim):
    host = start_sf(sim)
    sign_in_external(host, sim, "sf")
    sim.identity_unavailable = True
    status = host.result("checkSignInStatus", {"provider": "sf"})
    assert (status["state"], status["reason"]) == ("offline", "transient") and "HTTP 503" in status["message"]
    sim.identity_unavailable = False
    assert host.result("checkSignInStatus", {"provider": "sf"})["reason"] == "valid"
    assert sim.snapshot()["refresh_requests"] == 0


# ── Requests ─────────────────────────────────────────────────────────────────


class _Recorder(Handler):
    hits: list[str]

    def do_GET(self) -> None:  # noqa: N802 - http.server naming
        self.hits.append(self.path)
        self.send(200)


@pytest.fixture
def foreign_server():
    handler = type("Recorder", (_Recorder,), {"hits": []})
    served = Served(handler)
    yield served.base, handler.hits
    served.stop()


def test_paths_go_to_the_instance_url_and_the_token_to_no_other_host(start_sf, sim, foreign_server):
    host = start_sf(sim)
    sign_in_external(host, sim, "sf")
    answer = fetch(host, f"{API}/query?q=SELECT+Id,Name+FROM+Account")
    assert answer["status"] == 200 and json.loads(answer["body"])["records"][0]["Name"] == "Acme"
    created = fetch(host, f"{API}/sobjects/Account", method="POST", headers={"Content-Type": "application/json"},
                    body=json.dumps({"Name": "Globex"}))
    assert created["status"] == 201 and json.loads(created["body"])["success"] is True
    assert fetch(host, f"{sim.instance_url}{API}/sobjects/Account/0015g00000SiMuAAAA")["status"] == 200
    # The identity URL (on the login host) may be fetched too.
    me = fetch(host, sim.identity_url())
    assert me["status"] == 200 and json.loads(me["body"])["username"] == "jane.doe@acme.example"
    snap = sim.snapshot()
    assert [(m, p) for m, p, _ in snap["api_calls"]] == [
        ("GET", f"{API}/query"), ("POST", f"{API}/sobjects/Account"), ("GET", f"{API}/sobjects/Account/0015g00000SiMuAAAA")]
    assert snap["login_host_api_calls"] == 0
    # A dead session seen by the identity service (403 Bad_OAuth_Token) is refreshed and replayed too.
    sim.expire_sessions()
    assert fetch(host, sim.identity_url())["status"] == 200
    assert sim.snapshot()["identity_calls"][-3:] == [200, 403, 200] and sim.snapshot()["refreshes"] == 1
    # Any other host: refused before anything is sent.
    base, hits = foreign_server
    error = host.error("fetch", {"provider": "sf", "url": f"{base}/collect"})
    assert error["code"] == CONFIGURATION_ERROR and error["data"]["reason"] == "foreignUrl"
    assert hits == []


@pytest.mark.parametrize("path", [
    f"{API}/query?q=SELECT+Id+FROM+Account+WHERE+Website='https://acme.com'",
    f"{API}/query?q=SELECT+Id+FROM+Account&next=https://acme.example/x",
    f"{API[1:]}/query?q=SELECT+Id+FROM+Account+WHERE+Website='http://acme.com'",
])
def test_a_path_whose_query_holds_a_url_goes_to_the_instance(start_sf, sim, path):
    host = start_sf(sim)
    sign_in_external(host, sim, "sf")
    answer = fetch(host, path)
    assert answer["status"] == 200 and json.loads(answer["body"])["records"][0]["Name"] == "Acme"
    assert [(m, p) for m, p, _ in sim.snapshot()["api_calls"]] == [("GET", f"{API}/query")]


def test_sign_out_revokes_the_grant_at_the_revoke_endpoint(start_sf, sim):
    host = start_sf(sim)
    sign_in_external(host, sim, "sf")
    token = host.result("getAccessToken", {"provider": "sf"})["accessToken"]
    mark = host.mark()
    result = host.result("signOut", {"provider": "sf"})
    assert result["revoked"] == ["refresh_token", "access_token"] and result["failures"] == []
    snap = sim.snapshot()
    assert snap["revocations"] == ["refresh_token"] and snap["revoked_grants"] == 1
    assert not sim.session_alive(token), "revoking the refresh token ends its access tokens"
    assert [(e["state"], e["reason"]) for e in events(host, mark)] == [("signedOut", "userSignedOut")]
    assert host.result("checkSignInStatus", {"provider": "sf"})["reason"] == "noTokens"


def test_sign_out_with_the_revoke_endpoint_down_still_signs_out_and_says_so(start_sf, sim):
    host = start_sf(sim)
    sign_in_external(host, sim, "sf")
    sim.revoke_failure = 503
    mark = host.mark()
    result = host.result("signOut", {"provider": "sf"})
    assert result["revoked"] == []
    [failure] = result["failures"]
    assert failure["token"] == "refresh_token" and failure["reason"] == "httpStatus" and "503" in failure["message"]
    assert [(e["state"], e["reason"]) for e in events(host, mark)] == [("signedOut", "userSignedOut")]
    assert host.result("checkSignInStatus", {"provider": "sf"})["reason"] == "noTokens"
    assert host.error("getAccessToken", {"provider": "sf"})["code"] == NOT_SIGNED_IN
    assert sim.snapshot()["revocations"] == ["failed 503"]


@pytest.mark.parametrize("edit, code, reason", [
    (lambda answer: answer.pop("instance_url"), PROVIDER_UNAVAILABLE, "badResponse"),
    (lambda answer: answer.update(instance_url="http://acme.my.salesforce.example"), CONFIGURATION_ERROR, "insecureUrl"),
    (lambda answer: answer.update(instance_url="https://evil.example.com"), CONFIGURATION_ERROR, "untrustedInstance"),
    (lambda answer: answer.update(instance_url="https://na1.salesforce.com.evil.example"), CONFIGURATION_ERROR, "untrustedInstance"),
    (lambda answer: answer.update(instance_url="https://acme.my.salesforce.com@evil.example.com"), CONFIGURATION_ERROR, "untrustedInstance"),
], ids=["no-instance-url", "http-instance-url", "foreign-instance-url", "lookalike-instance-url", "user-info-instance-url"])
def test_a_sign_in_that_cannot_be_used_leaves_no_live_grant(start_sf, sim, edit, code, reason):
    host = start_sf(sim)
    sim.edit_sign_in_answer = edit
    request_id, progress = begin_sign_in(host, "sf", flow="external")
    assert host.result("completeSignIn", {"provider": "sf", "callbackUrl": sim.browse(progress["url"])}) == {"accepted": True}
    error = host.wait_response(request_id)["error"]
    assert error["code"] == code and error["data"]["reason"] == reason
    snap = sim.snapshot()
    assert snap["sign_ins"] == 1 and snap["revocations"] == ["refresh_token"] and snap["revoked_grants"] == 1
    assert host.result("checkSignInStatus", {"provider": "sf"})["reason"] == "noTokens"


class _Collector(Handler):
    hits: list[str]

    def do_GET(self) -> None:  # noqa: N802 - http.server naming
        self.hits.append(self.path)
        self.send(200, b"[]", "application/json")

    do_POST = do_GET  # noqa: N815


@pytest.fixture
def other_host():
    """A server on another loopback host (127.0.0.2): not the login host, not Salesforce's."""
    handler = type("Collector", (_Collector,), {"hits": []})
    served = Served(handler, "127.0.0.2")
    yield served.base, handler.hits
    served.stop()


def test_an_instance_url_elsewhere_fails_the_sign_in_revokes_the_grant_and_gets_no_request(start_sf, sim, other_host):
    base, hits = other_host
    host = start_sf(sim)
    sim.edit_sign_in_answer = lambda answer: answer.update(instance_url=base)
    mark = host.mark()
    request_id, progress = begin_sign_in(host, "sf", flow="external")
    host.result("completeSignIn", {"provider": "sf", "callbackUrl": sim.browse(progress["url"])})
    error = host.wait_response(request_id)["error"]
    assert error["code"] == CONFIGURATION_ERROR and error["data"]["reason"] == "untrustedInstance"
    assert "127.0.0.2" in error["message"] and "instanceDomains" in error["message"]
    snap = sim.snapshot()
    assert snap["revocations"] == ["refresh_token"] and snap["revoked_grants"] == 1
    assert events(host, mark, "signedIn") == []
    assert host.error("fetch", {"provider": "sf", "url": f"{API}/sobjects"})["code"] == NOT_SIGNED_IN
    assert hits == [], "a request went to the foreign instance_url"


def test_a_refresh_naming_an_instance_elsewhere_is_refused_and_the_old_instance_kept(start_sf, sim, other_host):
    base, hits = other_host
    host = start_sf(sim)
    sign_in_external(host, sim, "sf")
    sim.expire_sessions()
    sim.edit_refresh_answer = lambda answer: answer.update(instance_url=base)
    error = host.error("fetch", {"provider": "sf", "url": f"{API}/sobjects"})
    assert error["code"] == CONFIGURATION_ERROR and error["data"]["reason"] == "untrustedInstance"
    assert hits == []
    assert host.result("getAccessToken", {"provider": "sf"})["details"]["instanceUrl"] == sim.instance_url
    sim.edit_refresh_answer = None                       # Salesforce answers as it should again
    assert fetch(host)["status"] == 200 and hits == []


@pytest.mark.parametrize("instance, settings, allowed", [
    ("https://acme.my.salesforce.com", {}, True),
    ("https://acme--uat.sandbox.my.salesforce.com", {}, True),
    ("https://na1.salesforce.com", {}, True),
    ("https://acme.lightning.force.com", {}, True),
    ("https://acme.cloudforce.com", {}, True),
    ("https://acme.my.salesforce.mil", {}, True),
    ("https://api.agency.example.gov", {}, False),
    ("https://api.agency.example.gov", {"instanceDomains": ["agency.example.gov"]}, True),
    ("https://api.agency.example.gov", {"instanceDomains": ["*.example.gov"]}, True),
    ("https://agency.example.gov.evil.example", {"instanceDomains": ["example.gov"]}, False),
], ids=["my-domain", "sandbox", "instance", "lightning", "cloudforce", "government-defense", "other",
        "widened", "widened-wildcard", "widened-lookalike"])
def test_the_instance_url_must_be_on_salesforces_domains_or_those_the_profile_adds(start_sf, sim, instance, settings, allowed):
    host = start_sf(sim, **settings)
    sim.edit_sign_in_answer = lambda answer: answer.update(instance_url=instance)
    request_id, progress = begin_sign_in(host, "sf", flow="external")
    host.result("completeSignIn", {"provider": "sf", "callbackUrl": sim.browse(progress["url"])})
    answer = host.wait_response(request_id)
    if allowed:
        assert answer["result"]["state"] == "signedIn" and answer["result"]["details"]["instanceUrl"] == instance
    else:
        assert answer["error"]["data"]["reason"] == "untrustedInstance"
        assert sim.snapshot()["revoked_grants"] == 1


@pytest.mark.parametrize("domains", [["127.0.0.2"], "example.gov", [""], ["exa mple.gov"], ["gov"]])
def test_instance_domains_must_be_domain_names(start_host, salesforce_plugin_dir, domains):
    host = start_host([salesforce_plugin_dir])
    error = host.error("configureProfile", {"name": "sf", "plugin": "salesforce",
                                            "settings": {"clientId": CLIENT_ID, "instanceDomains": domains}})
    assert error["code"] == CONFIGURATION_ERROR and error["data"]["reason"] == "invalidSettings"
    assert "instanceDomains" in error["message"]


def test_frontends_see_the_instance_and_identity(start_sf, make_sim):
    sim = make_sim(rotate_refresh_tokens=True)
    host = start_sf(sim)
    status = sign_in_external(host, sim, "sf")
    org_id, user_id = sim.account_id().split("/")

    def expected() -> dict:
        return {"instanceUrl": sim.instance_url, "identityUrl": sim.identity_url(), "orgId": org_id, "userId": user_id,
                "issuedAt": sim.last_issued_at}
    assert status["details"] == expected() and isinstance(status["details"]["issuedAt"], int)
    assert host.result("checkSignInStatus", {"provider": "sf"})["details"] == expected()
    first = host.result("getAccessToken", {"provider": "sf"})["details"]
    assert first == expected()
    advance(host, sim, DAY_MS + 60_000)
    assert fetch(host)["status"] == 200                  # refreshed: a new issued_at (and instance_url)
    renewed = host.result("getAccessToken", {"provider": "sf"})["details"]
    assert renewed == expected() and renewed["issuedAt"] > first["issuedAt"]
