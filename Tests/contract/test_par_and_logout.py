"""Issue 29 §2 and §3, against real servers: pushed authorization requests (RFC 9126) and
RP-initiated logout (OpenID Connect RP-Initiated Logout 1.0).

glewlwyd and the idpyoidc OP advertise `pushed_authorization_request_endpoint` and
`end_session_endpoint`; django-oauth-toolkit ("dot") advertises neither, which is what the refusals
and the "revocation alone" answers are shown against.

- PAR: with `par` "auto" (the default) the host pushes the authorization parameters and the
  browser URL carries only `client_id` and `request_uri` (before: every parameter in the URL);
  `par: false` sends the classic URL; `par: true` against a server without PAR is refused when the
  profile is configured; a `request_uri` that expires while the user has not come back is pushed
  again and the new URL announced (`openUrl` with `expiresAt`), never left stale.
- Logout: `signOut` with `endSession` hands out (external flow) or opens (browser flow) the
  end-session URL with the session's ID token as `id_token_hint`; the scripted browser follows it
  in the tab that signed in, and afterwards a new authorization request in that tab needs the
  password again (before, it went straight back with a code). The browser flow is `confirmed` by
  the provider's redirect with the right `state`; a server without the endpoint gets the
  revocation alone (`unsupported`); local data is wiped whatever the provider does.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import threading
import urllib.error
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from conftest import begin_sign_in, sign_in_external
from authbridge_testkit.openid_servers import make_server, server_fixture
from test_openid_servers import get_status

#: The servers with PAR and an end-session endpoint.
SERVERS = ["glewlwyd", "idpyoidc"]


op = server_fixture(SERVERS)


@pytest.fixture(scope="module")
def dot(tmp_path_factory):
    server = make_server("dot", tmp_path_factory.mktemp("dot")).start()
    yield server
    server.stop()


def discovery(server) -> dict[str, Any]:
    with urllib.request.urlopen(server.issuer.rstrip("/") + "/.well-known/openid-configuration", timeout=10) as response:
        return json.loads(response.read())


def query_of(url: str) -> dict[str, str]:
    return dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(url).query))


def profile(server, **settings) -> dict:
    return {"p": {"plugin": "oidc", "settings": server.settings(**settings)}}


def sign_in_in(tab, host, server, **params) -> dict[str, Any]:
    """An external sign-in whose browser is `tab` (its cookies are the provider's session)."""
    pending, opened = begin_sign_in(host, "p", flow="external", **params)
    location = server.browse(opened["url"], tab=tab)
    assert host.result("completeSignIn", {"provider": "p", "callbackUrl": location}) == {"accepted": True}
    answer = host.wait_response(pending)
    assert answer.get("result", {}).get("state") == "signedIn", answer
    return answer["result"]


def signs_in_without_password(host, server, tab) -> bool:
    """Whether a new authorization request in `tab` goes straight back to the app (the provider
    still knows the user) rather than asking for the password. The sign-in it starts is cancelled."""
    pending, opened = begin_sign_in(host, "p", flow="external")
    came_back = server.authorize_silently(opened["url"], tab) is not None
    host.notify("$/cancelRequest", {"id": pending})
    assert host.wait_response(pending)["error"]["code"] == -32800
    return came_back


# ── PAR (RFC 9126) ──────────────────────────────────────────────────────────


@pytest.mark.parametrize("confidential", [False, True], ids=["public", "confidential"])
def test_a_pushed_sign_in_puts_only_client_id_and_request_uri_in_the_browser_url(start_host, oidc_plugin_dir, op, confidential):
    """Before, every parameter (redirect_uri, state, nonce, PKCE's challenge, scope) was in the URL."""
    host = start_host([oidc_plugin_dir], profiles=profile(op, confidential=confidential))
    pending, opened = begin_sign_in(host, "p", flow="external")
    query = query_of(opened["url"])
    assert opened["url"].startswith(op.authorize_prefix)
    assert sorted(query) == ["client_id", "request_uri"], f"the browser URL carries {sorted(query)}"
    assert opened["expiresAt"] > 0, "openUrl says when the pushed request expires"
    location = op.browse(opened["url"])
    assert query_of(location).get("code"), "the server redirected with a code"
    assert host.result("completeSignIn", {"provider": "p", "callbackUrl": location}) == {"accepted": True}
    answer = host.wait_response(pending)
    assert answer.get("result", {}).get("state") == "signedIn", answer
    assert op.introspect(host.result("getAccessToken", {"provider": "p"})["accessToken"])


def test_par_false_sends_the_classic_url(start_host, oidc_plugin_dir, op):
    host = start_host([oidc_plugin_dir], profiles=profile(op, par=False))
    status = sign_in_external(host, op, "p")   # checks PKCE S256 in the URL
    assert status["state"] == "signedIn"
    pending, opened = begin_sign_in(host, "p", flow="external")
    query = query_of(opened["url"])
    assert "request_uri" not in query and query["redirect_uri"] == op.redirect_uri and query["state"] and query["nonce"]
    assert "expiresAt" not in opened
    host.notify("$/cancelRequest", {"id": pending})


def test_par_true_against_a_server_without_par_is_refused_when_configured(start_host, oidc_plugin_dir, dot):
    host = start_host([oidc_plugin_dir])
    answer = host.request("configureProfile", {"name": "p", "plugin": "oidc", "settings": dot.settings(par=True)})
    error = answer["error"]
    assert error["code"] == -32013 and error["data"]["reason"] == "missingSetting", error
    assert "pushed authorization request endpoint" in error["message"], error
    # "auto" against the same server signs in the classic way.
    assert host.result("configureProfile", {"name": "p", "plugin": "oidc", "settings": dot.settings(par="auto")})["status"] == "ready"
    assert sign_in_external(host, dot, "p")["state"] == "signedIn"


def test_par_must_be_auto_true_or_false(start_host, oidc_plugin_dir, op):
    host = start_host([oidc_plugin_dir])
    error = host.request("configureProfile", {"name": "p", "plugin": "oidc", "settings": op.settings(par="always")})["error"]
    assert error["code"] == -32013 and error["data"]["reason"] == "invalidSettings", error


class PushRelay:
    """A loopback relay in front of a server's PAR endpoint that passes every push on and answers
    with the server's request_uri, but says it expires in `expires_in` seconds (a server with short
    request_uri lifetimes, without waiting the real servers' minutes)."""

    def __init__(self, target: str, expires_in: int = 1) -> None:
        self.target, self.expires_in, self.pushes = target, expires_in, []
        relay = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *arguments: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802 - http.server naming
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                headers = {name: self.headers[name] for name in ("Content-Type", "Authorization") if self.headers.get(name)}
                request = urllib.request.Request(relay.target, data=body, headers=headers, method="POST")
                try:
                    with urllib.request.urlopen(request, timeout=30) as response:
                        status, answer = response.status, json.loads(response.read())
                except urllib.error.HTTPError as error:
                    status, answer = error.code, json.loads(error.read() or b"{}")
                if status == 201:
                    answer["expires_in"] = relay.expires_in
                relay.pushes.append(dict(urllib.parse.parse_qsl(body.decode())))
                data = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/par"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_an_expired_request_uri_is_pushed_again_not_handed_out(start_host, oidc_plugin_dir, op):
    """RFC 9126 §2.2: a request_uri works for expires_in only. Before, the one URL of the sign-in
    stayed the only one: a frontend that opened it late sent the server an expired request_uri."""
    relay = PushRelay(discovery(op)["pushed_authorization_request_endpoint"])
    try:
        host = start_host([oidc_plugin_dir], profiles=profile(op, pushedAuthorizationRequestEndpoint=relay.url))
        pending, first = begin_sign_in(host, "p", flow="external")
        renewed = host.wait_for_notification(
            "signIn/progress", lambda p: p["requestId"] == pending and p["stage"] == "openUrl" and p["url"] != first["url"], timeout=15)
        assert query_of(renewed["url"])["request_uri"] != query_of(first["url"])["request_uri"]
        assert renewed["expiresAt"] > first["expiresAt"] and len(relay.pushes) >= 2
        assert relay.pushes[0]["state"] == relay.pushes[1]["state"], "the same sign-in, pushed again"
        location = op.browse(renewed["url"])
        assert host.result("completeSignIn", {"provider": "p", "callbackUrl": location}) == {"accepted": True}
        answer = host.wait_response(pending)
        assert answer.get("result", {}).get("state") == "signedIn", answer
    finally:
        relay.close()


# ── RP-initiated logout ─────────────────────────────────────────────────────


def test_sign_out_with_end_session_ends_the_providers_session(start_host, oidc_plugin_dir, op):
    """External flow: the frontend gets the end-session URL (signOut/progress openUrl), opens it in
    the browser that signed in, and hands the provider's redirect back with completeSignOut, as
    completeSignIn does for a sign-in. Before, signOut only revoked: the provider's session stayed
    and the next sign-in in that browser went straight back as the same user."""
    host = start_host([oidc_plugin_dir], profiles=profile(op, confidential=True, postLogoutRedirectUri=op.post_logout_redirect_uri))
    tab = op.new_tab()
    sign_in_in(tab, host, op)
    assert signs_in_without_password(host, op, tab), "the provider keeps its session after a sign-in"
    request = host.send_request("signOut", {"provider": "p", "endSession": True, "flow": "external"})
    opened = host.wait_for_notification("signOut/progress", lambda p: p["requestId"] == request and p["stage"] == "openUrl")
    assert opened["url"].startswith(discovery(op)["end_session_endpoint"] + "?")
    assert opened["callbackPrefix"] == op.post_logout_redirect_uri
    query = query_of(opened["url"])
    assert query["id_token_hint"].count(".") == 2 and query["client_id"] and query["state"]
    assert query["post_logout_redirect_uri"] == op.post_logout_redirect_uri
    assert host.result("listAccounts", {"provider": "p"}) == {"accounts": []}, "wiped before the provider is asked"
    back = op.end_session(opened["url"], tab)
    assert back.startswith(op.post_logout_redirect_uri) and query_of(back).get("state") == query["state"]
    # A redirect with another state (stale, or forged by whoever can call the bridge) is refused; the wait goes on.
    forged = back.replace("state=" + urllib.parse.quote(query["state"], safe=""), "state=forged")
    error = host.request("completeSignOut", {"provider": "p", "callbackUrl": forged})["error"]
    assert error["code"] == -32602 and error["data"]["reason"] == "stateMismatch", error
    assert host.result("completeSignOut", {"provider": "p", "callbackUrl": back}) == {"accepted": True}
    result = host.wait_response(request)["result"]
    assert result["endSession"] == {"state": "confirmed"}, result
    assert not signs_in_without_password(host, op, tab), "after the end session, a sign-in needs the password again"
    error = host.request("completeSignOut", {"provider": "p", "callbackUrl": back})["error"]
    assert error["code"] == -32012 and error["data"]["reason"] == "noPendingSignOut", error


def test_an_external_end_session_nobody_completes_is_requested(start_host, oidc_plugin_dir, op):
    """No redirect handed back within timeoutMs: asked, not confirmed (the URL in the result). With
    no post-logout redirect URI at all, nothing can come back: the URL is the answer at once."""
    host = start_host([oidc_plugin_dir], profiles=profile(op, confidential=True))
    sign_in_external(host, op, "p")
    result = host.result("signOut", {"provider": "p", "endSession": True, "flow": "external", "timeoutMs": 1000})
    assert result["endSession"]["state"] == "requested" and result["endSession"]["url"], result
    assert "completeSignOut" in result["endSession"]["message"]
    settings = op.settings(confidential=True)
    del settings["redirectUri"]
    host = start_host([oidc_plugin_dir], profiles={"p": {"plugin": "oidc", "settings": settings}})
    pending, opened = begin_sign_in(host, "p", flow="external", redirectUri=op.redirect_uri)
    host.result("completeSignIn", {"provider": "p", "callbackUrl": op.browse(opened["url"])})
    assert host.wait_response(pending)["result"]["state"] == "signedIn"
    ended = host.result("signOut", {"provider": "p", "endSession": True, "flow": "external"})["endSession"]
    assert ended["state"] == "requested" and "post_logout_redirect_uri" not in query_of(ended["url"]), ended
    assert "No post-logout redirect URI" in ended["message"]


def test_the_browser_flow_is_confirmed_by_the_providers_redirect(start_host, oidc_plugin_dir, op):
    """Browser flow: the host opens the end-session page (signOut/progress openUrl) and waits on its
    loopback listener (the sign-in's redirect URI) for the provider's redirect with its state."""
    host = start_host([oidc_plugin_dir], profiles=profile(op, confidential=True, loopbackPort=op.loopback_port))
    tab = op.new_tab()
    sign_in_in(tab, host, op)
    request = host.send_request("signOut", {"provider": "p", "endSession": True, "flow": "browser"})
    opened = host.wait_for_notification("signOut/progress", lambda p: p["requestId"] == request and p["stage"] == "openUrl")
    host.wait_for_notification("signOut/progress", lambda p: p["requestId"] == request and p["stage"] == "waiting")
    assert query_of(opened["url"])["post_logout_redirect_uri"] == op.post_logout_redirect_uri
    back = op.end_session(opened["url"], tab)
    assert get_status(back) == 200, "the browser follows the redirect to the host's listener"
    result = host.wait_response(request)["result"]
    assert result["endSession"] == {"state": "confirmed"}, result
    assert host.result("listAccounts", {"provider": "p"}) == {"accounts": []}
    assert not signs_in_without_password(host, op, tab)


def test_no_redirect_within_the_wait_is_requested_and_the_session_is_wiped(start_host, oidc_plugin_dir, op):
    host = start_host([oidc_plugin_dir], profiles=profile(op, confidential=True, loopbackPort=op.loopback_port))
    sign_in_external(host, op, "p")
    result = host.result("signOut", {"provider": "p", "endSession": True, "flow": "browser", "timeoutMs": 1000})
    assert result["endSession"]["state"] == "requested" and "did not come back" in result["endSession"]["message"], result
    assert host.result("checkSignInStatus", {"provider": "p"})["state"] == "notSignedIn"


def test_local_data_is_wiped_when_the_provider_is_down(start_host, oidc_plugin_dir, op):
    """The seeds' rule: the provider failing changes nothing locally (revocation failures listed)."""
    host = start_host([oidc_plugin_dir], profiles=profile(op, confidential=True, endSession=True))
    sign_in_external(host, op, "p")
    op.stop()
    try:
        result = host.result("signOut", {"provider": "p", "flow": "external", "timeoutMs": 1000})   # endSession from the profile
    finally:
        op.start()
    assert result["failures"] and not result["revoked"], result
    assert result["endSession"]["state"] == "requested" and result["endSession"]["url"]
    assert host.result("listAccounts", {"provider": "p"}) == {"accounts": []}


def test_end_session_is_off_unless_asked(start_host, oidc_plugin_dir, op):
    host = start_host([oidc_plugin_dir], profiles=profile(op, confidential=True))
    sign_in_external(host, op, "p")
    result = host.result("signOut", {"provider": "p"})
    assert "endSession" not in result and result["revoked"], result


def test_a_flow_that_cannot_open_a_page_is_refused_before_anything_is_revoked(start_host, oidc_plugin_dir, op):
    host = start_host([oidc_plugin_dir], profiles=profile(op, confidential=True))
    sign_in_external(host, op, "p")
    error = host.request("signOut", {"provider": "p", "endSession": True, "flow": "device"})["error"]
    assert error["code"] == -32009 and error["data"]["reason"] == "unsupportedFlow" and error["data"]["field"] == "flow", error
    assert host.result("checkSignInStatus", {"provider": "p"})["state"] == "signedIn"


def test_a_server_without_end_session_gets_the_revocation_alone(start_host, oidc_plugin_dir, dot):
    host = start_host([oidc_plugin_dir], profiles=profile(dot, confidential=True))
    sign_in_external(host, dot, "p")
    result = host.result("signOut", {"provider": "p", "endSession": True})
    assert result["endSession"]["state"] == "unsupported" and "url" not in result["endSession"], result
    assert result["revoked"], "revoked all the same"
    assert host.result("listAccounts", {"provider": "p"}) == {"accounts": []}


# ── authbridge logout --end-session ─────────────────────────────────────────


def read_until(stream, pattern: str, seen: list[str]) -> re.Match:
    """Lines of a command's stderr until one matches `pattern` (the command blocks meanwhile, so
    a bounded wait is its own timeout)."""
    regex = re.compile(pattern)
    for line in stream:
        seen.append(line)
        if found := regex.search(line):
            return found
    pytest.fail(f"{pattern!r} never appeared:\n{''.join(seen)}")


def test_logout_end_session_on_the_command_line(op, tmp_path, oidc_plugin_dir):
    """`authbridge logout PROFILE --end-session`: the end-session page (printed with --no-browser),
    the provider's redirect back to the loopback listener, and what happened, said."""
    from authbridge_testkit.paths import HOST_BIN
    for name in ("config/authbridge", "data", "home"):
        (tmp_path / name).mkdir(parents=True)
    settings = op.settings(confidential=True, loopbackPort=op.loopback_port)
    (tmp_path / "config/authbridge/config.json").write_text(json.dumps({"profiles": {"p": {"plugin": "oidc", "settings": settings}}}))
    env = {k: v for k, v in os.environ.items() if k not in ("DBUS_SESSION_BUS_ADDRESS", "AUTHBRIDGE_VAULT_KEY", "NO_COLOR")}
    env.update(XDG_CONFIG_HOME=str(tmp_path / "config"), XDG_DATA_HOME=str(tmp_path / "data"), HOME=str(tmp_path / "home"))
    common = ["--no-default-plugins", "--plugins", str(oidc_plugin_dir), "--no-agent"]
    tab = op.new_tab()

    def run(*args: str) -> tuple[subprocess.Popen, list[str]]:
        return subprocess.Popen([str(HOST_BIN), *args, *common], env=env, text=True, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE), []

    login, seen = run("login", "p", "--no-browser", "--timeout", "60")
    url = read_until(login.stderr, r"^\s+(http\S+)", seen).group(1)
    assert get_status(op.browse(url, tab=tab)) == 200, "the browser comes back to the login's listener"
    out, err = login.communicate(timeout=60)
    assert login.returncode == 0 and out.startswith("✓ Signed in to p"), "".join(seen) + err

    logout, seen = run("logout", "p", "--end-session", "--no-browser", "--timeout", "60")
    url = read_until(logout.stderr, r"^\s+(http\S+end_session\S+)", seen).group(1)
    assert get_status(op.end_session(url, tab)) == 200, "the provider sends the browser back to the listener"
    out, err = logout.communicate(timeout=60)
    assert logout.returncode == 0, "".join(seen) + err
    assert out.splitlines()[0].startswith("✓ Signed out of p") and out.splitlines()[1] == "✓ The provider ended its session too", out
    id_token = query_of(url)["id_token_hint"]
    assert id_token not in out + err, "the ID token is printed only in the URL a person opens"

    again, seen = run("logout", "p", "--end-session", "--no-browser")
    out, err = again.communicate(timeout=60)
    assert again.returncode == 0 and out.strip() == "p was not signed in.", out + err


def test_through_the_agent_the_progress_goes_only_to_the_connection_that_signs_out(op, oidc_plugin_dir):
    """signOut/progress is routed as signIn/progress: to the connection whose signOut it serves,
    under that connection's id; the signedOut event reaches every connection."""
    import shutil
    import tempfile
    from authbridge_testkit.agent import Agent
    folder = Path(tempfile.mkdtemp(prefix="ab-par-"))   # a socket path must stay short
    agent = Agent(folder / "agent", [oidc_plugin_dir], profile(op, confidential=True, loopbackPort=op.loopback_port))
    try:
        a, b = agent.connect(name="a"), agent.connect(name="b")
        tab = op.new_tab()
        sign_in_in(tab, a, op)
        a.send_request("signOut", {"provider": "p", "endSession": True, "flow": "browser"}, id=7)
        opened = a.wait_for_notification("signOut/progress", lambda p: p["stage"] == "openUrl")
        assert opened["requestId"] == 7
        assert get_status(op.end_session(opened["url"], tab)) == 200
        assert a.wait_response(7)["result"]["endSession"] == {"state": "confirmed"}
        b.wait_for_notification("session/changed", lambda p: p["state"] == "signedOut")
        assert not b.notifications("signOut/progress"), "only the connection that signs out hears its progress"
        for client in (a, b):
            assert not client.violations, client.violations
            client.close()
    finally:
        agent.stop()
        shutil.rmtree(folder, ignore_errors=True)


def test_a_session_without_an_id_token_gets_the_revocation_alone(start_host, oidc_plugin_dir, op):
    """No `openid` scope, no ID token: nothing can name the session to the provider (id_token_hint)."""
    if op.name != "glewlwyd":
        pytest.skip("idpyoidc is an OpenID provider only: it refuses a request without openid")
    host = start_host([oidc_plugin_dir], profiles=profile(op, confidential=True, scopes=["read"]))
    sign_in_external(host, op, "p")
    result = host.result("signOut", {"provider": "p", "endSession": True, "flow": "external"})
    assert result["endSession"]["state"] == "noIdToken" and "url" not in result["endSession"], result
    assert result["revoked"] and host.result("listAccounts", {"provider": "p"}) == {"accounts": []}
