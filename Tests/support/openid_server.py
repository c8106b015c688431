"""One OpenID provider of the test kit (glewlwyd or the idpyoidc OP), for tests that are not
Python: the Node client's. Started as `python openid_server.py glewlwyd|idpyoidc STATE [--nonce]`;
prints `READY {json}` (issuer, the public client's `oidc` settings, the userinfo endpoint) once the
server answers, then answers `browse URL` lines — the user signing in — with `LOCATION URL` (the
redirect back to the app, never followed) or `ERROR text`; stops the server at end of input.
`--nonce`: glewlwyd wants its DPoP nonce in every proof (a nonce good for 2 uses)."""

from __future__ import annotations

import json
import sys
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def main() -> int:
    name, state = sys.argv[1], Path(sys.argv[2])
    from authbridge_testkit.openid_servers import make_server
    nonce = {"oidc_overrides": {"oauth-dpop-nonce-mandatory": True, "oauth-dpop-nonce-counter": 2}} if "--nonce" in sys.argv else {}
    server = make_server(name, state, **nonce)
    server.start()
    try:
        with urllib.request.urlopen(f"{server.issuer.rstrip('/')}/.well-known/openid-configuration", timeout=30) as answer:
            userinfo = json.load(answer)["userinfo_endpoint"]
        print("READY " + json.dumps({"issuer": server.issuer, "settings": server.settings(), "userinfo": userinfo}), flush=True)
        for line in sys.stdin:
            command, _, argument = line.strip().partition(" ")
            if command != "browse":
                print(f"ERROR unknown command {command!r}", flush=True)
                continue
            try:
                print("LOCATION " + server.browse(argument), flush=True)
            except Exception as failure:  # named only: its text may quote a URL with a code in it
                print(f"ERROR {type(failure).__name__} (see the server's log in STATE)", flush=True)
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
