#!/usr/bin/env python3
"""simple-salesforce with AuthBridge's session: a SOQL query and the org's objects.

    python3 Examples/salesforce_simple.py --client-id YOUR_CONSUMER_KEY [--login-host sandbox]

simple-salesforce is given the instance URL and the access token, as its documentation asks of
an app that did the OAuth itself; it is also given a requests session whose `auth` is
AuthBridge's, which puts the current token on each of its calls and renews it once on a 401
(simple-salesforce alone would raise `SalesforceExpiredSession` when the token it was given
ends). Needs `simple-salesforce` (`pip install simple-salesforce`). Token values are never printed.
"""

from __future__ import annotations

import sys

import requests
from salesforce_session import arguments, newest_api_version, salesforce
from simple_salesforce.api import Salesforce
from simple_salesforce.exceptions import SalesforceError

import authbridge
from authbridge.requests import AuthBridgeAuth


def main() -> int:
    args = arguments(__doc__.split("\n\n")[0])
    try:
        with salesforce(args) as (bridge, instance_url), requests.Session() as session:
            session.auth = AuthBridgeAuth(bridge, "salesforce")
            token = bridge.get_access_token("salesforce")
            sf = Salesforce(instance_url=instance_url, session_id=token.access_token, session=session,
                            version=newest_api_version(session, instance_url))
            result = sf.query("SELECT Id, Name FROM Account LIMIT 10")
            print(f"simple-salesforce v{sf.sf_version}: {result['totalSize']} accounts")
            for record in result["records"]:
                print(f"  {record['Id']}  {record['Name']}")
            objects = sf.describe() or {}
            print("objects:", ", ".join(sobject["name"] for sobject in objects.get("sobjects", [])))
    except authbridge.AuthBridgeError as error:
        print(f"failed: {error}", file=sys.stderr)
        return 1
    except SalesforceError as error:
        print(f"Salesforce refused: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
