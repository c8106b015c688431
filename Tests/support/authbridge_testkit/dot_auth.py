"""django-oauth-toolkit, the real authorization server of the tests, driven from pytest.

`DotAuthServer` starts `Tests/support/dot_server.py` in the venv and offers the same interface as
`RotatingAuthServer` (settings for an `oidc` profile, counters, `is_issued`, and `browse`, which
plays the browser through DOT's login page).
"""

from __future__ import annotations

import http.cookiejar
import json
import re
import subprocess
import sys
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from . import leak_scan
from .paths import REPO

SERVER = REPO / "Tests" / "support" / "dot_server.py"
USER, PASSWORD = "ada", "lovelace-test"
CLIENT_ID = "authbridge-test"


#: A stand-in for xdg-open (`install_fake_browser`): the user signs in at DOT in a scripted
#: browser, whose redirect reaches the host's loopback listener; each call is recorded.
FAKE_BROWSER = """#!{python}
import sys, urllib.request
open({calls!r}, "a").write("called\\n")
sys.path.insert(0, {support!r})
from authbridge_testkit.dot_auth import DotAuthServer
urllib.request.urlopen(DotAuthServer.browse(None, sys.argv[1]), timeout=30).read()
"""


def install_fake_browser(folder: Path, calls: Path) -> Path:
    """`folder/xdg-open`, the stand-in browser (put `folder` first on PATH); it appends a line
    to `calls` each time it runs."""
    folder.mkdir(parents=True, exist_ok=True)
    browser = folder / "xdg-open"
    browser.write_text(FAKE_BROWSER.format(python=sys.executable, calls=str(calls), support=str(REPO / "Tests" / "support")))
    browser.chmod(0o755)
    return browser


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):  # the test looks at every Location itself
        return None


class DotAuthServer:
    def __init__(self, state: Path, access_lifetime: int = 3600, grace_period: int = 0, port: int = 0,
                 extra_scopes: tuple[str, ...] = ()) -> None:
        self.state = state
        self.extra_scopes = extra_scopes   # scopes DOT also accepts (dot_server.py --extra-scope)
        self.port = port
        self.access_lifetime = access_lifetime
        self.grace_period = grace_period
        self.process: subprocess.Popen | None = None
        self.base = ""
        # Registered as http://127.0.0.1/callback: DOT accepts any port on loopback (RFC 8252 §7.3).
        self.redirect_uri = "http://127.0.0.1:53682/callback"

    def start(self) -> "DotAuthServer":
        self.state.mkdir(parents=True, exist_ok=True)
        self.process = subprocess.Popen(
            [sys.executable, str(SERVER), "--state", str(self.state), "--access-lifetime", str(int(self.access_lifetime)),
             "--grace", str(max(1, round(self.grace_period)) if self.grace_period else 0), "--port", str(self.port),
             *(arg for scope in self.extra_scopes for arg in ("--extra-scope", scope))],
            stdout=subprocess.PIPE, stderr=open(self.state / "server.log", "wb"))
        line = self.process.stdout.readline().decode()  # bounded: the process exits on any set-up error
        if not line.startswith("READY "):
            self.stop()
            raise RuntimeError(f"django-oauth-toolkit did not start: {(self.state / 'server.log').read_text()[-2000:]}")
        self.port = int(line.split()[1])  # a restart comes back on the same port
        self.base = f"http://127.0.0.1:{self.port}"
        leak_scan.register(self.handed_out)
        return self

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self._handed_out = self.handed_out()   # kept for scans after the server is gone
            self.process.kill()
            self.process.wait(timeout=10)

    def handed_out(self) -> list[str]:
        """Every code and token this server handed out (for the suite's leak scan)."""
        if self.process is None or self.process.poll() is not None:
            return getattr(self, "_handed_out", [])
        return self._get_json("/test/secrets")["secrets"]

    @property
    def authorize_prefix(self) -> str:
        return f"{self.base}/o/authorize/?"

    def settings(self, **extra: Any) -> dict[str, Any]:
        return {"clientId": CLIENT_ID, "authorizationEndpoint": f"{self.base}/o/authorize/",
                "tokenEndpoint": f"{self.base}/o/token/", "revocationEndpoint": f"{self.base}/o/revoke_token/",
                "redirectUri": self.redirect_uri, "scopes": ["openid", "read"], **extra}

    def _get_json(self, path: str) -> dict[str, Any]:
        with urllib.request.urlopen(self.base + path, timeout=10) as response:
            return json.loads(response.read())

    def snapshot(self) -> dict[str, Any]:
        stats = self._get_json("/test/stats")
        return {"refreshes": stats["refreshes"], "revocations": stats["revocations"],
                "rejected_refreshes": stats["refresh_errors"], "reuse_within_grace": None}

    def is_issued(self, access_token: str) -> bool:
        return self._get_json("/test/issued?" + urllib.parse.urlencode({"token": access_token}))["issued"]

    def play_user(self, url: str, user: str = USER, password: str = PASSWORD, timeout: float = 30) -> int:
        """The user in a browser (blocking): signs in at DOT's login page, then follows the redirect
        to the host's loopback listener, which holds the request until the session is stored;
        the listener's HTTP status."""
        with urllib.request.urlopen(self.browse(url, user=user, password=password), timeout=timeout) as response:
            return response.status

    def browse(self, url: str, user: str = USER, password: str = PASSWORD) -> str:
        """A browser signing in as `user`: authorize → login page → login → authorize → the redirect
        to the app's callback, whose URL is returned (never followed)."""
        status, location, _ = DotAuthServer.after_sign_in(url, user, password)
        assert status == 302 and location.startswith("http://127.0.0.1:"), f"authorize after login answered {status} → {location}"
        return location

    @staticmethod   # as browse, usable without a server object (a stand-in xdg-open calls it so)
    def after_sign_in(url: str, user: str = USER, password: str = PASSWORD) -> tuple[int, str, str]:
        """A browser signing in as `user` at the authorization URL: what DOT answers after its login
        page, as (status, Location, page) — a redirect, or its own error page (an unknown client id)."""
        browser = _ScriptedBrowser()
        status, location, _ = browser.get(url)
        assert status == 302 and "/accounts/login/" in location, f"authorize answered {status} → {location}"
        status, location = browser.log_in(urllib.parse.urljoin(url, location), user, password)
        assert status == 302, f"login answered {status}"
        return browser.get(urllib.parse.urljoin(url, location))

    def approve_device(self, user_code: str, verification_uri: str, action: str = "accept",
                       user: str = USER, password: str = PASSWORD) -> None:
        """The user on another device (RFC 8628 §3.3): opens the verification URI, signs in, types the
        code and accepts (or denies) on DOT's pages."""
        browser = _ScriptedBrowser()
        status, location, _ = browser.get(verification_uri)
        assert status == 302 and "/accounts/login/" in location, f"verification page answered {status}"
        status, location = browser.log_in(urllib.parse.urljoin(verification_uri, location), user, password)
        assert status == 302, f"login answered {status}"
        code_page = urllib.parse.urljoin(verification_uri, location)
        status, location = browser.submit(code_page, {"user_code": user_code})
        assert status == 302 and "/device-confirm/" in location, f"the user code was refused ({status})"
        confirm_page = urllib.parse.urljoin(code_page, location)
        status, _ = browser.submit(confirm_page, {"action": action})
        assert status == 302, f"the decision was refused ({status})"

    def revoke(self, token: str) -> None:
        """RFC 7009 at DOT's revocation endpoint: the token stops working at once, and so does the
        rest of its grant (DOT revokes an access token's refresh token too, as §2.1 allows)."""
        form = urllib.parse.urlencode({"token": token, "client_id": CLIENT_ID}).encode()
        with urllib.request.urlopen(self.base + "/o/revoke_token/", data=form, timeout=10) as response:
            assert response.status == 200, f"DOT's revocation endpoint answered {response.status}"

    def end_access_token(self, token: str) -> None:
        """The access token stops working now, at the server only (as a server does that ends
        sessions early); its refresh token still works."""
        assert self._get_json("/test/end-access?" + urllib.parse.urlencode({"token": token}))["ended"] == 1

    def admin_revoke(self, user: str = USER) -> int:
        """What an administrator does in DOT's admin: revoke every refresh token of `user`."""
        return self._get_json("/test/admin-revoke?" + urllib.parse.urlencode({"user": user}))["revoked"]

    def tamper_id_tokens(self, mode: str) -> None:
        """ID tokens from now on are altered: signature | aud | exp | nonce | none (stop)."""
        assert self._get_json("/test/tamper?" + urllib.parse.urlencode({"mode": mode}))["mode"] == mode


class _ScriptedBrowser:
    """Cookies, CSRF tokens and no automatic redirects: each step checks where DOT sends it."""

    def __init__(self) -> None:
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()), _NoRedirect)

    def get(self, target: str) -> tuple[int, str, str]:
        try:
            with self.opener.open(target, timeout=10) as response:
                return response.status, response.headers.get("Location", ""), response.read().decode()
        except urllib.error.HTTPError as redirect:
            return redirect.code, redirect.headers.get("Location", ""), redirect.read().decode()

    def submit(self, page_url: str, fields: dict[str, str]) -> tuple[int, str]:
        """GETs the page, then POSTs its form with the CSRF token and `fields`."""
        status, _, page = self.get(page_url)
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page)
        assert status == 200 and token, f"no form at {urllib.parse.urlsplit(page_url).path} ({status})"
        form = urllib.parse.urlencode({**fields, "csrfmiddlewaretoken": token.group(1)}).encode()
        request = urllib.request.Request(page_url, data=form, headers={"Referer": page_url})
        try:
            with self.opener.open(request, timeout=10) as response:
                return response.status, response.headers.get("Location", "")
        except urllib.error.HTTPError as redirect:
            return redirect.code, redirect.headers.get("Location", "")

    def log_in(self, login_url: str, user: str, password: str) -> tuple[int, str]:
        next_url = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(login_url).query))["next"]
        return self.submit(login_url, {"username": user, "password": password, "next": next_url})


def dot_fixture(scope: str = "module", **options: Any):
    """A pytest fixture `dot`: django-oauth-toolkit started once per `scope` (access tokens of an
    hour unless `options` say otherwise), stopped at its end. In a conftest or test module:
    `dot = dot_fixture("session")`."""
    @pytest.fixture(scope=scope)
    def dot(tmp_path_factory):
        server = DotAuthServer(tmp_path_factory.mktemp("dot"), **{"access_lifetime": 3600, **options}).start()
        yield server
        server.stop()
    return dot


class DotOpenIDServer(DotAuthServer):
    """django-oauth-toolkit as an `OpenIDServer` (openid_servers), for the scenarios every server
    runs: profiles by discovery (`settings` here names the issuer, not DOT's endpoints as
    `DotAuthServer.settings` does for the older suites), a confidential client, introspection."""

    name = "dot"
    has_device_flow = True

    def __init__(self, state: Path, access_lifetime: int = 3600, extra_scopes: tuple[str, ...] = ()) -> None:
        from .openid_servers import EXTERNAL_REDIRECT, free_port
        super().__init__(state, access_lifetime=access_lifetime, extra_scopes=extra_scopes)
        self.redirect_uri = EXTERNAL_REDIRECT
        # DOT accepts any port of a loopback redirect (RFC 8252 §7.3); a pinned one works too.
        self.loopback_port = free_port()

    @property
    def issuer(self) -> str:
        return f"{self.base}/o"

    @property
    def token_endpoint(self) -> str:
        return f"{self.base}/o/token/"

    def settings(self, confidential: bool = False, **extra: Any) -> dict[str, Any]:
        from .openid_servers import CONFIDENTIAL_CLIENT, CONFIDENTIAL_SECRET
        client = {"clientId": CONFIDENTIAL_CLIENT, "clientSecret": CONFIDENTIAL_SECRET} if confidential else {"clientId": CLIENT_ID}
        return {"issuer": self.issuer, **client, "redirectUri": self.redirect_uri, "scopes": ["openid", "read"], **extra}

    def device_settings(self, **extra: Any) -> dict[str, Any]:
        # As DOT ships: the device grant on a client of its own, its endpoint set by hand (DOT leaves it
        # out of discovery; dot_server adds it there, and the grant to the quick starts' client, for people).
        return {"issuer": self.issuer, "clientId": "authbridge-device", "scopes": ["openid", "read"],
                "deviceAuthorizationEndpoint": f"{self.base}/o/device-authorization/", **extra}

    def approve_device(self, user_code: str, verification_uri: str, user: str = USER, password: str = PASSWORD,
                       action: str = "accept") -> None:
        super().approve_device(user_code, verification_uri, action=action, user=user, password=password)

    def introspect(self, token: str) -> bool:
        """RFC 7662 at /o/introspect/ as the confidential client (DOT knows access tokens there);
        a refresh token is looked up in DOT's tables (/test/refresh-active)."""
        import base64
        from .openid_servers import CONFIDENTIAL_CLIENT, CONFIDENTIAL_SECRET
        credentials = base64.b64encode(f"{CONFIDENTIAL_CLIENT}:{CONFIDENTIAL_SECRET}".encode()).decode()
        request = urllib.request.Request(f"{self.base}/o/introspect/", data=urllib.parse.urlencode({"token": token}).encode(),
                                         headers={"Authorization": f"Basic {credentials}"})
        with urllib.request.urlopen(request, timeout=10) as response:
            if json.loads(response.read()).get("active") is True:
                return True
        return self._get_json("/test/refresh-active?" + urllib.parse.urlencode({"token": token}))["active"]

    def admin_revoke(self, user: str = USER) -> None:  # type: ignore[override]
        assert super().admin_revoke(user) >= 1, f"{user} had no refresh token to revoke"
