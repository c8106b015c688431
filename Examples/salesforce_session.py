"""What the Salesforce examples share (salesforce_requests.py, salesforce_simple.py): their command
line, and a blocking bridge signed in to a `salesforce` profile — through the browser when the
host has no session yet, else with the one it kept from an earlier run.

Your connected app (Setup > App Manager) needs the scopes `api` and `refresh_token`, PKCE, and the
callback URL `http://127.0.0.1:1717/OauthRedirect` (or another port: `--callback-port`).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path

import requests

try:
    import authbridge.sync
except ImportError:  # running from a checkout without `pip install ./clients/python`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "clients" / "python"))
    import authbridge.sync

PROFILE = "salesforce"
SIGN_IN_WAIT_MS = 300_000      # how long a person gets to sign in
TIMEOUT = 30                   # seconds, for each API call


def arguments(description: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--client-id", required=True, help="your connected app's consumer key")
    parser.add_argument("--login-host", default="production",
                        help="production (default), sandbox, or your My Domain URL")
    parser.add_argument("--callback-port", type=int, default=1717,
                        help="the port of the connected app's callback URL http://127.0.0.1:PORT/OauthRedirect")
    parser.add_argument("--host", help="the authbridge executable (default: $AUTHBRIDGE, else PATH)")
    parser.add_argument("--plugins", help="load plugins only from this folder (it must hold the salesforce plugin)")
    return parser.parse_args()


def show_sign_in_page(event: authbridge.SignInProgress) -> None:
    if event.stage == "openUrl":
        print(f"Open this page to sign in: {event.url}", flush=True)


@contextlib.contextmanager
def salesforce(args: argparse.Namespace) -> Iterator[tuple[authbridge.sync.SyncAuthBridge, str]]:
    """A bridge signed in to the org, and the org's instance URL (where its REST API is: the
    session's `instanceUrl`, which Salesforce names at sign-in)."""
    plugins = [args.plugins] if args.plugins else []
    with authbridge.sync.connect(args.host, plugins=plugins, no_default_plugins=bool(plugins),
                                 client_name="salesforce-example") as bridge:
        bridge.configure_profile(PROFILE, "salesforce", {
            "clientId": args.client_id, "loginHost": args.login_host,
            "loopbackPort": args.callback_port, "loopbackPath": "/OauthRedirect"})
        status = bridge.check_sign_in_status(PROFILE)
        if not status.signed_in:
            status = bridge.request_oauth_tokens(PROFILE, flow="browser", on_progress=show_sign_in_page,
                                                 timeout_ms=SIGN_IN_WAIT_MS)
        who = status.account.name or status.account.id if status.account else "someone"
        instance_url = (status.details or {}).get("instanceUrl")
        if not isinstance(instance_url, str):
            raise SystemExit("Salesforce named no instance URL for this session")
        print(f"signed in as {who}; the org's API is at {instance_url}", flush=True)
        yield bridge, instance_url


def newest_api_version(session: requests.Session, instance_url: str) -> str:
    """The newest REST API version the org offers (`GET /services/data`, which needs no token),
    e.g. "60.0"."""
    answer = session.get(f"{instance_url}/services/data", timeout=TIMEOUT)
    answer.raise_for_status()
    return str(answer.json()[-1]["version"])
