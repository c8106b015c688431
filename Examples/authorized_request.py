#!/usr/bin/env python3
"""One API call with a signed-in AuthBridge profile, through requests: a small curl that never
sees a token.

    python3 Examples/authorized_request.py PROFILE URL [-X METHOD] [-H 'Name: value']... [-d BODY | --json BODY]

The URL may name facts of the session in braces, filled from the profile's session details. One
call per provider family:

    authorized_request.py corp "$USERINFO_URL"                                      # OpenID Connect
    authorized_request.py sf '{instanceUrl}/services/data/v60.0/sobjects'           # Salesforce
    authorized_request.py tab '{server}/vizportal/api/web/v1/getViews' \\
        --json '{"method": "getViews", "params": {}}'                              # Tableau (cookies + XSRF header)
    authorized_request.py ms 'https://restapi.marketsharpm.com/companies/{companyId}/appointments'   # MarketSharp
    authorized_request.py duke 'https://…/api/v1/me'                                # Duke

Profiles come from your config.json (default ~/.config/authbridge/config.json, or `--config`);
sign in first (`authbridge login PROFILE`, or your app). `authbridge.requests.AuthBridgeAuth`
puts the token (headers and cookies) on the request and, on a 401, renews it once and sends the
request again. The response body goes to stdout; a status other than 2xx also to stderr, with
exit status 1; not signed in: 2. Needs `requests` (`pip install requests`).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import requests

try:
    import authbridge.sync
except ImportError:  # running from a checkout without `pip install ./clients/python`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "clients" / "python"))
    import authbridge.sync
from authbridge.requests import AuthBridgeAuth

TIMEOUT = 30   # seconds
NOT_SIGNED_IN = 2


def filled(url: str, details: dict[str, str | int | float | bool | None]) -> str:
    """`url` with each `{name}` replaced by that session detail."""
    def detail(match: re.Match[str]) -> str:
        value = details.get(match.group(1))
        if value is None:
            known = ", ".join(sorted(details)) or "none"
            raise SystemExit(f"the session has no {match.group(1)!r} (its details: {known})")
        return str(value)
    return re.sub(r"\{(\w+)\}", detail, url)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("profile")
    parser.add_argument("url", help="absolute; {name} is the session detail `name` (e.g. {instanceUrl})")
    parser.add_argument("-X", "--request", dest="method", help="the method (default GET, or POST with a body)")
    parser.add_argument("-H", "--header", action="append", default=[], help="'Name: value' (repeatable)")
    body = parser.add_mutually_exclusive_group()
    body.add_argument("-d", "--data", help="the body, as given")
    body.add_argument("--json", help="a JSON body (sets Content-Type: application/json)")
    parser.add_argument("--config", help="the host's configuration file (default: its own)")
    parser.add_argument("--host", help="the authbridge executable (default: $AUTHBRIDGE, else PATH)")
    args = parser.parse_args()
    headers: dict[str, str] = {}
    for header in args.header:
        name, _, value = header.partition(":")
        headers[name.strip()] = value.strip()
    data = args.json if args.json is not None else args.data
    if args.json is not None:
        headers.setdefault("Content-Type", "application/json")
    try:
        with authbridge.sync.connect(args.host, config=args.config, client_name="authorized-request") as bridge:
            status = bridge.check_sign_in_status(args.profile)
            if status.state in ("notSignedIn", "licenseRevoked"):
                print(f"{args.profile} is not signed in ({status.reason}): sign in first "
                      f"(authbridge login {args.profile}, or your app)", file=sys.stderr)
                return NOT_SIGNED_IN
            with requests.Session() as session:
                session.auth = AuthBridgeAuth(bridge, args.profile)
                answer = session.request(args.method or ("POST" if data is not None else "GET"),
                                         filled(args.url, status.details or {}), headers=headers,
                                         data=data.encode() if data is not None else None, timeout=TIMEOUT)
    except authbridge.NotSignedIn as error:
        print(f"failed: {error}", file=sys.stderr)
        return NOT_SIGNED_IN
    except (authbridge.AuthBridgeError, requests.RequestException) as error:
        print(f"failed: {error}", file=sys.stderr)
        return 1
    sys.stdout.write(answer.text)
    if not answer.ok:
        print(f"\nHTTP {answer.status_code} {answer.reason}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
