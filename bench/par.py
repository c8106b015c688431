#!/usr/bin/env python3
"""Sign-in with and without pushed authorization requests (RFC 9126), against a real server.

    python3 bench/par.py [--server idpyoidc|glewlwyd] [--begins 200] [--sign-ins 20] [--only auto|false]

Starts the test kit's server (Tests/support/authbridge_testkit) and one `authbridge serve` with two
profiles of the bundled oidc plugin that differ only in `par` ("auto": the server advertises PAR, so
the host pushes; false: the classic URL). The sign-ins alternate between the two, each an external
sign-in whose browser is the kit's scripted one. Per sign-in it reports, as medians:

- begin: requestOAuthTokens sent → its openUrl received, the sign-in then cancelled (what the
  push adds: one POST to the server's PAR endpoint), --begins of each, alternating;
- whole: requestOAuthTokens sent → signed in (the browser's steps and the code exchange
  included), each sign-in followed by a signOut, --sign-ins of each, alternating;
- the browser URL's length and its parameters.

With --only, only that profile signs in (for farm-bench's whole-process timing of A against B).
Prints a table and one line "PAR_JSON {...}". Uses the test kit and its venv (make deps-test).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import urllib.parse
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "Tests" / "support"))

from authbridge_testkit.host import Host, host_command  # noqa: E402
from authbridge_testkit.openid_servers import make_server  # noqa: E402


class QuietHost(Host):
    """The kit's host driver without its per-frame check against bridge-spec (tens of ms a frame:
    the contract tests make it; here it would be most of what is timed)."""

    def _validate(self, frame, text) -> None:
        pass


def begin(host: Host, profile: str) -> float:
    since = host.mark()   # the kit's frames are scanned from here: a long run must not time the scan
    started = time.perf_counter()
    request = host.send_request("requestOAuthTokens", {"provider": profile, "flow": "external"})
    host.wait_for_notification("signIn/progress", lambda p: p["requestId"] == request and p["stage"] == "openUrl", since=since)
    begun = time.perf_counter()
    host.notify("$/cancelRequest", {"id": request})
    host.wait_response(request)
    return (begun - started) * 1000


def sign_in(host: Host, server, profile: str) -> dict[str, float]:
    since = host.mark()
    started = time.perf_counter()
    request = host.send_request("requestOAuthTokens", {"provider": profile, "flow": "external"})
    opened = host.wait_for_notification("signIn/progress", lambda p: p["requestId"] == request and p["stage"] == "openUrl", since=since)
    begun = time.perf_counter()
    location = server.browse(opened["url"])
    host.result("completeSignIn", {"provider": profile, "callbackUrl": location})
    answer = host.wait_response(request)
    assert answer.get("result", {}).get("state") == "signedIn", answer
    done = time.perf_counter()
    host.result("signOut", {"provider": profile})
    query = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(opened["url"]).query))
    return {"wholeMs": (done - started) * 1000, "urlLength": len(opened["url"]), "urlParameters": len(query)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", choices=["idpyoidc", "glewlwyd"], default="idpyoidc")
    parser.add_argument("--begins", type=int, default=200)
    parser.add_argument("--sign-ins", type=int, default=20)
    parser.add_argument("--only", choices=["auto", "false"])
    arguments = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        server = make_server(arguments.server, Path(folder) / "server").start()
        try:
            profiles = {name: {"plugin": "oidc", "settings": server.settings(confidential=True, par=par)}
                        for name, par in (("auto", "auto"), ("false", False))}
            argv, environment = host_command(Path(folder) / "host", profiles=profiles, log_level="warning", default_plugins=True)
            host = QuietHost(argv, environment, Path(folder) / "host")
            host.initialize()
            try:
                names = [arguments.only] if arguments.only else ["auto", "false"]
                for name in names:   # untimed: discovery, JWKS, the server's first requests
                    sign_in(host, server, name)
                begins: dict[str, list[float]] = {name: [] for name in names}
                for _ in range(arguments.begins):
                    for name in names:
                        begins[name].append(begin(host, name))
                runs: dict[str, list[dict[str, float]]] = {name: [] for name in names}
                for _ in range(arguments.sign_ins):
                    for name in names:
                        runs[name].append(sign_in(host, server, name))
            finally:
                host.stop()
        finally:
            server.stop()
    summary = {name: {key: statistics.median(run[key] for run in found) for key in found[0]} if found else
               {"wholeMs": float("nan"), "urlLength": float("nan"), "urlParameters": float("nan")} for name, found in runs.items()}
    for name, found in begins.items():
        summary[name]["beginMs"] = statistics.median(found) if found else float("nan")
        summary[name]["beginP90Ms"] = statistics.quantiles(found, n=10)[-1] if len(found) > 1 else float("nan")
    print(f"sign-in with and without PAR ({arguments.server}: {arguments.begins} begins, {arguments.sign_ins} sign-ins each; medians)")
    print(f"{'par':8} {'begin ms':>9} {'p90':>7} {'whole ms':>9} {'URL chars':>10} {'URL params':>11}")
    for name, figures in summary.items():
        print(f"{name:8} {figures['beginMs']:9.2f} {figures['beginP90Ms']:7.2f} {figures['wholeMs']:9.2f} "
              f"{figures['urlLength']:10.0f} {figures['urlParameters']:11.0f}")
    print("PAR_JSON " + json.dumps({"server": arguments.server, "begins": arguments.begins, "signIns": arguments.sign_ins,
                                    "medians": summary}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
