#!/usr/bin/env python3
"""Salesforce's REST API through requests, authorized by AuthBridge: a SOQL query at the org's
instance URL.

    python3 Examples/salesforce_requests.py --client-id YOUR_CONSUMER_KEY [--login-host sandbox]

Signs in through the browser the first time (the host keeps the session, encrypted, for the next
runs). `authbridge.requests.AuthBridgeAuth` puts the session's access token on each request;
Salesforce gives its tokens no expiry, so a token it has ended (the org's session timeout, an
administrator) shows up as a 401 `INVALID_SESSION_ID`: the auth object then renews it once and
sends the request again. Needs `requests` (`pip install requests`). Token values are never printed.
"""

from __future__ import annotations

import sys

import requests
from salesforce_session import TIMEOUT, arguments, newest_api_version, salesforce

import authbridge
from authbridge.requests import AuthBridgeAuth

SOQL = "SELECT Id, Name FROM Account ORDER BY Name LIMIT 10"


def main() -> int:
    args = arguments(__doc__.split("\n\n")[0])
    try:
        with salesforce(args) as (bridge, instance_url), requests.Session() as session:
            session.auth = AuthBridgeAuth(bridge, "salesforce")
            version = newest_api_version(session, instance_url)
            answer = session.get(f"{instance_url}/services/data/v{version}/query", params={"q": SOQL}, timeout=TIMEOUT)
            answer.raise_for_status()
            result = answer.json()
            print(f"REST API v{version}: {result['totalSize']} accounts")
            for record in result["records"]:
                print(f"  {record['Id']}  {record['Name']}")
    except authbridge.AuthBridgeError as error:
        print(f"failed: {error}", file=sys.stderr)
        return 1
    except requests.HTTPError as error:
        print(f"Salesforce answered HTTP {error.response.status_code}: {error.response.text[:300]}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
