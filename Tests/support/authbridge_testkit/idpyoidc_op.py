"""The tests' own OpenID Provider on idpyoidc, driven from pytest.

`IdpyOIDCServer` starts `Tests/support/idpyoidc_server.py` in the venv and implements
`OpenIDServer` (openid_servers.py): settings for an `oidc` profile, `browse` (the user at the OP's
password page), RFC 7662 introspection as a resource server, an administrator's revocation, and
stop/start as a real restart (the OP reloads its dumped sessions, so earlier tokens still work).

What differs from the other servers, as idpyoidc 5.0.0 does it:
- redirect URIs match exactly (both clients get EXTERNAL_REDIRECT and the pinned loopback one);
- `offline_access` (hence a refresh token) needs prompt=consent: without it the authorization
  request is refused outright (400 at the OP, nothing redirected back). The host adds the prompt
  itself to an openid + offline_access request (the settings leave it to the host, so the
  scenarios hold it to that). The OP shows no consent page;
- a refresh token already used (or revoked) is refused with `invalid_request` ("Refresh token
  inactive"), not `invalid_grant`; refresh tokens rotate, the old one dies;
- `iss` comes with every authorization response but is not advertised (no
  authorization_response_iss_parameter_supported); `none` is missing from
  token_endpoint_auth_methods_supported although the public client uses it;
- DPoP (RFC 9449) is optional: a token request with a proof binds the grant, whose tokens then
  need a proof of that key (the OP's corrections of the library's add-on);
- no device flow;
- resource indicators (RFC 8707) for `resources` (the kit's ResourceServer): the OP checks them
  itself (the library's policy wants client ids) and gives the access token aud = the resources
  asked for at the token endpoint, else those of the authorization request; an unknown resource
  is refused with invalid_target;
- client credentials for CONFIDENTIAL_CLIENT and JWT_CLIENT: the library grants every allowed scope
  of the client, whatever `scope` asks (`client_credentials_scopes`);
- client assertions (client_secret_jwt, private_key_jwt): `aud` must contain the issuer or the
  token endpoint URL; a jti, when there is one, is refused the second time;
- a refresh `scope` outside the grant is refused 400 invalid_request "Invalid refresh scopes"; a
  narrower one narrows the new access token; one without offline_access brings no new refresh
  token, and the one spent dies all the same (rotation);
- client assertions: the jti is optional, exp not bounded, the kid optional; any fault (a bad
  signature, an audience without the token endpoint, an expired or replayed assertion) is 401
  {"error": "invalid_client", "error_description": "Authorization failed"};
- dynamic client registration (RFC 7591) only with `registration=True` (idpyoidc_server.py
  --registration; other suites see no registration_endpoint): the library's endpoint, corrected so
  that a public native client registers at all (5.0.0 failed every registration without keys) and
  keeps `none` without a secret; `registration="as-is"` leaves the library's answers (a secret for
  every client, no method echoed). Redirect URIs match exactly; the requested `scope` is dropped;
  registrations are forgotten by a restart. `registered_clients()` lists them;
- token exchange (RFC 8693) for CONFIDENTIAL_CLIENT and JWT_CLIENT (the public client: 400
  invalid_request "Unsupported grant_type: …"): a subject access token (or refresh or ID token)
  of any client, `resource` among `resources`, `audience` among `resources` and
  EXCHANGE_AUDIENCE, `scope` intersected with the subject token's (silently), an access or
  refresh token requested; refusals are 400 (invalid_target "Unknown audience" / "Unknown
  resource", invalid_request "Subject token invalid" / "BadSignature" / "Actor token not
  supported").
"""

from __future__ import annotations

import base64
import http.cookiejar
import json
import re
import selectors
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from html import unescape
from pathlib import Path
from typing import Any

from . import leak_scan
from .openid_servers import (CONFIDENTIAL_CLIENT, CONFIDENTIAL_SECRET, EXTERNAL_REDIRECT, JWT_CLIENT_KID, PASSWORD,
                             PUBLIC_CLIENT, USER, free_port, jwt_client_key)
from .resource_server import ResourceServer
from .paths import REPO

SERVER = REPO / "Tests" / "support" / "idpyoidc_server.py"
#: Start-up takes half a second (key derivations, the first one makes keys); far more means it is stuck.
START_TIMEOUT = 30
STOP_TIMEOUT = 10
#: The logical audience (not a URI) a token exchange may name besides the resources.
EXCHANGE_AUDIENCE = "authbridge-downstream"


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):  # the test looks at every Location itself
        return None


class IdpyOIDCServer:
    name = "idpyoidc"
    has_device_flow = False

    def __init__(self, state: Path, access_lifetime: int = 3600, dpop_algs: list[str] | None = None,
                 registration: bool | str = False) -> None:
        self.state = state
        #: Dynamic client registration (RFC 7591) at the OP's /registration (discovery's
        #: registration_endpoint): True — a public client gets no secret and keeps `none`; "as-is" —
        #: the library's answers unchanged (a secret for every client, no method echoed).
        self.registration = registration
        self.access_lifetime = access_lifetime
        #: What the OP advertises as dpop_signing_alg_values_supported (None: its default list).
        self.dpop_algs = dpop_algs
        self.process: subprocess.Popen | None = None
        self.port = 0                      # chosen by the first start, kept by restarts
        self.loopback_port = free_port()   # registered as http://127.0.0.1:<it>/callback
        self.redirect_uri = EXTERNAL_REDIRECT
        self.base = self.issuer = self.token_endpoint = ""
        self.metadata: dict[str, Any] = {}
        self._handed_out: list[str] = []
        self._registered = False
        #: Bound now: the OP is started with its resource URIs.
        self.resource_server = ResourceServer(self.introspection)
        self.resources = self.resource_server.resources
        self.jwt_client_key_file = jwt_client_key(state)
        self.jwt_client_key_id = JWT_CLIENT_KID
        self.client_credentials_scopes = ["openid", "offline_access", "profile", "email"]
        self.exchange_audience = EXCHANGE_AUDIENCE

    # ---- life cycle ---------------------------------------------------------------------------

    def start(self) -> "IdpyOIDCServer":
        if self.process and self.process.poll() is None:
            return self
        self.state.mkdir(parents=True, exist_ok=True)
        log = open(self.state / "server.log", "ab")  # appended: a restart keeps the earlier runs' log
        self.process = subprocess.Popen(
            [sys.executable, str(SERVER), "--state", str(self.state), "--access-lifetime", str(int(self.access_lifetime)),
             "--port", str(self.port), "--loopback-port", str(self.loopback_port),
             "--resources", " ".join(self.resources), "--jwt-client-key", str(self.jwt_client_key_file),
             "--jwt-client-kid", self.jwt_client_key_id,
             *(["--dpop-algs", " ".join(self.dpop_algs)] if self.dpop_algs else []),
             *(["--registration"] if self.registration else []),
             *(["--registration-as-is"] if self.registration == "as-is" else [])],
            stdout=subprocess.PIPE, stderr=log)
        log.close()
        line = self._ready_line()
        if not line.startswith("READY "):
            self.stop()
            raise RuntimeError(f"the idpyoidc OP did not start: {(self.state / 'server.log').read_text()[-2000:]}")
        self.port = int(line.split()[1])
        self.base = f"http://127.0.0.1:{self.port}"
        self.metadata = self._get_json("/.well-known/openid-configuration")
        self.issuer = self.metadata["issuer"]
        self.token_endpoint = self.metadata["token_endpoint"]
        self.introspection_endpoint = self.metadata["introspection_endpoint"]
        self.resource_server.start()
        if not self._registered:
            leak_scan.register(self.handed_out)
            self._registered = True
        return self

    def _ready_line(self) -> str:
        """The first line of stdout, waited for at most START_TIMEOUT (the process exits on a set-up
        error, but a hang must not hang the suite)."""
        with selectors.DefaultSelector() as selector:
            selector.register(self.process.stdout, selectors.EVENT_READ)
            if not selector.select(timeout=START_TIMEOUT):
                return ""
        return self.process.stdout.readline().decode()

    def stop(self) -> None:
        """SIGTERM: the OP stops accepting, writes its state (what the next start loads) and exits;
        killed if it does not within STOP_TIMEOUT (its state then lost). The port refuses
        connections after (and the resource server's)."""
        self.resource_server.stop()
        if self.process and self.process.poll() is None:
            try:
                self._handed_out = self.handed_out()   # kept for scans while the server is down
            except (OSError, ValueError):              # not answering (or never started)
                pass
            self.process.terminate()
            try:
                self.process.wait(timeout=STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=STOP_TIMEOUT)
        if self.process and self.process.stdout:
            self.process.stdout.close()

    # ---- what scenarios use -------------------------------------------------------------------

    @property
    def authorize_prefix(self) -> str:
        return f"{self.metadata['authorization_endpoint']}?"

    def settings(self, confidential: bool = False, **extra: Any) -> dict[str, Any]:
        """Scopes: `offline_access` brings the refresh token (idpyoidc refuses the whole request
        unless it comes with prompt=consent, which the host adds itself, OpenID Connect Core §11),
        `profile` and `email` name the user in the ID token and userinfo."""
        settings: dict[str, Any] = {
            "issuer": self.issuer, "clientId": CONFIDENTIAL_CLIENT if confidential else PUBLIC_CLIENT,
            "redirectUri": self.redirect_uri, "scopes": ["openid", "offline_access", "profile", "email"]}
        if confidential:
            settings["clientSecret"] = CONFIDENTIAL_SECRET
        return {**settings, **extra}

    @property
    def post_logout_redirect_uri(self) -> str:
        """A post-logout redirect URI both clients have (RP-initiated logout): the browser flow's."""
        return f"http://127.0.0.1:{self.loopback_port}/callback"

    @staticmethod
    def new_tab():
        """A browser tab whose cookies (the OP's session) last across `browse`, `authorize_silently`
        and `end_session` calls given it."""
        return urllib.request.build_opener(urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()), _NoRedirect)

    def browse(self, url: str, user: str = USER, password: str = PASSWORD, tab=None) -> str:
        """A browser signing in as `user`: authorization endpoint → password page → its form →
        the redirect to the app's callback, whose URL is returned (never followed). Uses nothing of
        `self`, so a stand-in browser can call it unbound."""
        opener = tab or IdpyOIDCServer.new_tab()
        status, location, page = _open(opener, url)
        assert status == 200, f"the authorization endpoint answered {status} → {location or page[:300]}"
        form = re.search(r'<form[^>]*action="([^"]+)"', page)
        token = re.search(r'name="token" value="([^"]+)"', page)
        assert form and token, f"no sign-in form at the authorization endpoint: {page[:300]}"
        fields = urllib.parse.urlencode({"token": unescape(token.group(1)), "username": user, "password": password})
        status, location, page = _open(opener, urllib.parse.urljoin(url, unescape(form.group(1))), fields.encode())
        assert status == 302 and location.startswith("http://127.0.0.1:"), f"the sign-in answered {status} → {location or page[:300]}"
        return location

    def authorize_silently(self, url: str, tab) -> str | None:
        """The authorization URL opened in `tab` by someone who types nothing: the redirect back to
        the app (with a code) when the OP still knows the tab's user, None when it shows its
        password page."""
        status, location, page = _open(tab, url)
        if status == 302 and location.startswith("http://127.0.0.1:") and "code=" in location:
            return location
        assert status == 200 and 'name="password"' in page, f"the authorization endpoint answered {status} → {location or page[:300]}"
        return None

    def end_session(self, url: str, tab) -> str:
        """An end-session URL (RP-initiated logout) in `tab`: the end-session endpoint sends the
        browser to its confirmation page, the user confirms (its form), and the OP ends its session
        and redirects to the post-logout redirect URI, whose URL is returned (never followed)."""
        status, location, page = _open(tab, url)
        assert status == 302 and location, f"the end-session endpoint answered {status}: {page[:300]}"
        status, _, page = _open(tab, urllib.parse.urljoin(url, location))
        form = re.search(r'<form[^>]*action="([^"]+)"', page)
        sjwt = re.search(r'name="sjwt" value="([^"]+)"', page)
        assert status == 200 and form and sjwt, f"no confirmation page after end_session ({status}): {page[:300]}"
        fields = urllib.parse.urlencode({"sjwt": unescape(sjwt.group(1))}).encode()
        status, location, page = _open(tab, urllib.parse.urljoin(url, unescape(form.group(1))), fields)
        assert status == 302 and location, f"confirming the sign-out answered {status}: {page[:300]}"
        return location

    def approve_device(self, user_code: str, verification_uri: str, user: str = USER, password: str = PASSWORD) -> None:
        raise NotImplementedError("idpyoidc 5.0.0 has no device authorization grant (has_device_flow is False)")

    def introspect(self, token: str) -> bool:
        """RFC 7662, asked as the confidential client (client_secret_basic), the resource server."""
        return self.introspection(token).get("active") is True

    def introspection(self, token: str) -> dict[str, Any]:
        """The whole RFC 7662 answer (active, sub, scope, aud, client_id, exp...), asked as the
        confidential client."""
        credentials = base64.b64encode(f"{CONFIDENTIAL_CLIENT}:{CONFIDENTIAL_SECRET}".encode()).decode()
        request = urllib.request.Request(self.metadata["introspection_endpoint"],
                                         data=urllib.parse.urlencode({"token": token}).encode(),
                                         headers={"Authorization": f"Basic {credentials}"})
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.loads(response.read())

    def revoke(self, token: str, confidential: bool = False) -> None:
        """RFC 7009 at the OP's revocation endpoint, as the client the token was issued to. Only
        that token dies (a revoked access token leaves its refresh token working)."""
        form = {"token": token, "client_id": CONFIDENTIAL_CLIENT if confidential else PUBLIC_CLIENT}
        if confidential:
            form["client_secret"] = CONFIDENTIAL_SECRET
        request = urllib.request.Request(self.metadata["revocation_endpoint"], data=urllib.parse.urlencode(form).encode())
        with urllib.request.urlopen(request, timeout=10) as response:
            assert response.status == 200, f"the revocation endpoint answered {response.status}"

    def admin_revoke(self, user: str = USER) -> int:
        """Every grant of `user` revoked with its tokens; how many refresh tokens were still live."""
        return self._get_json("/test/admin-revoke?" + urllib.parse.urlencode({"user": user}))["revoked"]

    def handed_out(self) -> list[str]:
        """Every code and token this OP handed out (for the suite's leak scan)."""
        if self.process is None or self.process.poll() is not None:
            return self._handed_out
        return self._get_json("/test/secrets")["secrets"]

    def stats(self) -> dict[str, int]:
        """refreshes (answered), refresh_errors, codes_redeemed, revocations — since the first start."""
        return self._get_json("/test/stats")

    def registered_clients(self) -> dict[str, dict[str, Any]]:
        """The clients registered dynamically (RFC 7591), by id: what the OP's client db keeps of
        each (redirect_uris as [uri, query] pairs; no secret, no registration access token)."""
        return self._get_json("/test/clients")["clients"]

    def sub(self, user: str = USER) -> str:
        """The `sub` the OP gives `user` in ID tokens and userinfo."""
        return self._get_json("/test/user?" + urllib.parse.urlencode({"name": user}))["sub"]

    def _get_json(self, path: str) -> dict[str, Any]:
        with urllib.request.urlopen(self.base + path, timeout=10) as response:
            return json.loads(response.read())


def _open(opener, url: str, data: bytes | None = None) -> tuple[int, str, str]:
    try:
        with opener.open(url, data=data, timeout=10) as response:
            return response.status, response.headers.get("Location", ""), response.read().decode()
    except urllib.error.HTTPError as answer:  # redirects and refusals alike: the caller judges
        return answer.code, answer.headers.get("Location", ""), answer.read().decode()
