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

REPO = Path(__file__).resolve().parents[2]
SERVER = REPO / "Tests" / "support" / "dot_server.py"
USER, PASSWORD = "ada", "lovelace-test"
CLIENT_ID = "authbridge-test"


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):  # the test looks at every Location itself
        return None


class DotAuthServer:
    def __init__(self, state: Path, access_lifetime: int = 3600, grace_period: int = 0, port: int = 0) -> None:
        self.state = state
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
             "--grace", str(max(1, round(self.grace_period)) if self.grace_period else 0), "--port", str(self.port)],
            stdout=subprocess.PIPE, stderr=open(self.state / "server.log", "wb"))
        line = self.process.stdout.readline().decode()  # bounded: the process exits on any set-up error
        if not line.startswith("READY "):
            self.stop()
            raise RuntimeError(f"django-oauth-toolkit did not start: {(self.state / 'server.log').read_text()[-2000:]}")
        self.port = int(line.split()[1])  # a restart comes back on the same port
        self.base = f"http://127.0.0.1:{self.port}"
        return self

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)

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

    def browse(self, url: str) -> str:
        """A browser signing in as ada: authorize → login page → login → authorize → the redirect
        to the app's callback, whose URL is returned (never followed)."""
        jar = http.cookiejar.CookieJar()
        opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar), _NoRedirect)

        def get(target: str) -> tuple[int, str, str]:
            try:
                with opener.open(target, timeout=10) as response:
                    return response.status, response.headers.get("Location", ""), response.read().decode()
            except urllib.error.HTTPError as redirect:
                return redirect.code, redirect.headers.get("Location", ""), redirect.read().decode()

        status, location, _ = get(url)
        assert status == 302 and "/accounts/login/" in location, f"authorize answered {status} → {location}"
        login_url = urllib.parse.urljoin(url, location)
        status, _, page = get(login_url)
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page)
        assert status == 200 and token, "no login form"
        next_url = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(login_url).query))["next"]
        form = urllib.parse.urlencode({"username": USER, "password": PASSWORD, "csrfmiddlewaretoken": token.group(1),
                                       "next": next_url}).encode()
        request = urllib.request.Request(login_url, data=form, headers={"Referer": login_url})
        try:
            with opener.open(request, timeout=10) as response:
                status, location = response.status, response.headers.get("Location", "")
        except urllib.error.HTTPError as redirect:
            status, location = redirect.code, redirect.headers.get("Location", "")
        assert status == 302, f"login answered {status}"
        status, location, _ = get(urllib.parse.urljoin(login_url, location))
        assert status == 302 and location.startswith("http://127.0.0.1:"), f"authorize after login answered {status} → {location}"
        return location
