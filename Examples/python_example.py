#!/usr/bin/env python3
"""AuthBridge from Python: sign in to an OpenID Connect provider, call its userinfo API, sign out.

    python Examples/python_example.py --issuer https://login.example.com --client-id my-app \\
        [--plugins DIR] [--host PATH] [--scripted]

Against the repository's test server: paste the exports `make dev-server` prints (ISSUER, CLIENT_ID,
AUTHBRIDGE…), then `python3 Examples/python_example.py --issuer "$ISSUER" --client-id "$CLIENT_ID"`.

Uses the `authbridge` package (clients/python: `pip install ./clients/python`; from a checkout
it is found without installing). The host is `--host`, else `$AUTHBRIDGE`, else `authbridge` on
PATH; `--plugins DIR` loads plugins only from DIR (it must hold the bundled `oidc` plugin).

1. starts `authbridge serve` and configures a profile "example" for the `oidc` plugin (the
   endpoints come from the issuer's discovery document);
2. shows the sign-in status;
3. signs in with the browser flow: the host listens on a 127.0.0.1 port for the redirect, and
   this program prints the URL to open (`--scripted`: it plays the test user of the repository's
   django-oauth-toolkit server itself, ada / lovelace-test, as the tests do);
4. shows the status again, and every session-changed notification as it arrives;
5. calls the provider's userinfo endpoint through the host (`fetch`: the token never leaves it);
6. signs out (the host revokes the tokens) and shuts the host down.

Token values are never printed. Exit status 0 on success, 1 on an AuthBridge error.
"""

from __future__ import annotations

import argparse
import asyncio
import http.cookiejar
import json
import re
import sys
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

try:
    import authbridge
except ImportError:  # running from a checkout without `pip install ./clients/python`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "clients" / "python"))
    import authbridge

PROFILE = "example"
HUMAN_WAIT_MS = 300_000    # how long a person gets to sign in
SCRIPTED_WAIT_MS = 30_000


def where(url: str) -> str:
    """host/path of a URL: its query (state, PKCE challenge, codes) is not for the screen."""
    parts = urllib.parse.urlsplit(url)
    return parts.netloc + parts.path


def on_session_changed(event: authbridge.SessionChanged) -> None:
    """The host tells every frontend when a session starts, is renewed or ends (also when the
    provider revoked it): the place to update a UI."""
    who = f" as {event.account.name or event.account.id}" if event.account else ""
    print(f"    event: session/changed {event.state} (reason {event.reason}){who}", flush=True)


# ── The scripted user (django-oauth-toolkit's login page, for the tests) ──────

class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: object, **kwargs: object) -> None:
        return None


def scripted_user(url: str, user: str = "ada", password: str = "lovelace-test") -> None:
    """What a person does in the browser: open the URL, sign in at DOT's login form, follow the
    redirect back to the host's 127.0.0.1 listener."""
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()), _NoRedirect)

    def send(target: str, form: dict[str, str] | None = None) -> tuple[int, str, str]:
        data = urllib.parse.urlencode(form).encode() if form is not None else None
        request = urllib.request.Request(target, data=data, headers={"Referer": target} if form else {})
        try:
            with opener.open(request, timeout=15) as response:
                return response.status, response.headers.get("Location", ""), response.read().decode()
        except urllib.error.HTTPError as answer:
            return answer.code, answer.headers.get("Location", ""), answer.read().decode()

    _, location, _ = send(url)
    login = urllib.parse.urljoin(url, location)
    _, _, page = send(login)
    csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page)
    if csrf is None:
        raise RuntimeError(f"no login form at {where(login)}")
    next_url = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(login).query)).get("next", "")
    _, location, _ = send(login, {"username": user, "password": password, "csrfmiddlewaretoken": csrf.group(1),
                                  "next": next_url})
    _, callback, _ = send(urllib.parse.urljoin(login, location))
    if not callback.startswith("http://127.0.0.1:"):
        raise RuntimeError("the provider did not send the browser back to the host")
    print(f"    (scripted user signed in as {user}; the browser goes back to {where(callback)})", flush=True)
    status, _, _ = send(callback)   # the host holds this request until the session is stored
    if status != 200:
        raise RuntimeError(f"the host's listener answered {status}")


def userinfo_endpoint(issuer: str) -> str:
    """From the issuer's discovery document, as the plugin itself finds its endpoints."""
    with urllib.request.urlopen(issuer.rstrip("/") + "/.well-known/openid-configuration", timeout=15) as answer:
        endpoint = json.load(answer).get("userinfo_endpoint")
    if not isinstance(endpoint, str):
        raise RuntimeError(f"{issuer} names no userinfo endpoint: pass --userinfo")
    return endpoint


# ── The example ────────────────────────────────────────────────────────────

async def run(args: argparse.Namespace) -> None:
    plugins = [args.plugins] if args.plugins else []
    async with authbridge.connect(args.host, plugins=plugins, no_default_plugins=bool(plugins),
                                  client_name="python-example") as bridge:
        info = bridge.info
        print(f"[1] authbridge {info.server_info.version}, protocol {info.protocol_version}, "
              f"tokens kept in {info.storage.backend if info.storage else '?'}")
        profile = await bridge.configure_profile(PROFILE, "oidc", {
            "issuer": args.issuer, "clientId": args.client_id, "scopes": args.scope or ["openid"]})
        print(f"    profile {profile.name!r}: {profile.status}, flows {', '.join(profile.flows)}")
        bridge.on("session/changed", on_session_changed)

        status = await bridge.check_sign_in_status(PROFILE)
        print(f"[2] status: {status.state} (reason {status.reason})")

        print("[3] signing in with the browser flow")
        users: list[asyncio.Future[None]] = []

        def on_progress(event: authbridge.SignInProgress) -> None:
            if event.stage == "openUrl" and event.url:
                if args.scripted:
                    users.append(asyncio.ensure_future(asyncio.to_thread(scripted_user, event.url)))
                else:
                    print(f"\n    Open this page in your browser and sign in:\n\n    {event.url}\n", flush=True)
            elif event.stage == "waiting":
                print("    waiting for the browser to come back…", flush=True)

        status = await bridge.request_oauth_tokens(
            PROFILE, flow="browser", on_progress=on_progress,
            timeout_ms=SCRIPTED_WAIT_MS if args.scripted else HUMAN_WAIT_MS)
        for user in users:
            await user   # surfaces a failure of the scripted user
        print(f"[4] status: {status.state} (reason {status.reason})")
        status = await bridge.check_sign_in_status(PROFILE)
        who = status.account.name or status.account.id if status.account else "unknown"
        print(f"    status: {status.state} (reason {status.reason}), account {who}")

        url = args.userinfo or userinfo_endpoint(args.issuer)
        answer = await bridge.fetch(PROFILE, url)
        claims = answer.json() if answer.ok else {}
        print(f"[5] userinfo {where(url)}: HTTP {answer.status}, sub {claims.get('sub')!r}")

        result = await bridge.sign_out(PROFILE)
        print(f"[6] signed out; revoked: {', '.join(result.revoked) or 'nothing'}; "
              f"failures: {', '.join(f.token for f in result.failures) or 'none'}")
    print(f"    the host exited with status {bridge.returncode}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--issuer", required=True, help="the OpenID Connect issuer URL")
    parser.add_argument("--client-id", required=True, help="your app's client id at that issuer (a public client)")
    parser.add_argument("--scope", action="append", help="a scope to ask for (repeatable; default openid)")
    parser.add_argument("--userinfo", help="the userinfo URL (default: from the discovery document)")
    parser.add_argument("--host", help="the authbridge executable (default: $AUTHBRIDGE, else PATH)")
    parser.add_argument("--plugins", help="load plugins only from this folder")
    parser.add_argument("--scripted", action="store_true",
                        help="play the repository's test user at django-oauth-toolkit instead of a person")
    args = parser.parse_args()
    try:
        asyncio.run(run(args))
    except authbridge.AuthBridgeError as error:
        print(f"failed: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
