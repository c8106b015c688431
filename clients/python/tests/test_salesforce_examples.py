"""Examples/salesforce_requests.py and Examples/salesforce_simple.py against the Salesforce
simulator (Tests/contract/simulators/sim_salesforce.py, its instance over https with a self-signed
certificate: simple-salesforce speaks only https), run as a user runs them: the first run signs
in through the browser; later runs find the session kept, and renew it once when Salesforce ended
it in between (Setup > Session Management). (A 401 from the REST API in the middle of a run, and
its renewal, is test_http_auth.py's.) Every frame is recorded by
frame_tap.py and validated; the simulator fails the test on any departure from Salesforce's
protocol."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import urllib.request

import pytest
from conftest import REPO, plugin_folder
from signing_in import run_signing_in

from authbridge_testkit.tls import self_signed

sys.path.insert(0, str(REPO / "Tests" / "contract"))
from simulators.sim_http import simulators  # noqa: E402
from simulators.sim_salesforce import CLIENT_ID, EXTERNAL_REDIRECT_URI, SalesforceSim  # noqa: E402

EXAMPLES = REPO / "Examples"
TIMEOUT = 60
QUERY = "/services/data/v60.0/query"


@pytest.fixture
def make_sim():
    with simulators(SalesforceSim, "Salesforce's protocol") as make:
        yield make


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_the_salesforce_examples_query_the_org_and_outlive_an_ended_session(tmp_path, make_sim, frame_tap):
    certificate = self_signed(tmp_path / "tls")
    port = free_port()
    sim = make_sim(callback_urls=[EXTERNAL_REDIRECT_URI, f"http://127.0.0.1:{port}/OauthRedirect"],
                   instance_tls=certificate.server_context())
    assert sim.instance_url.startswith("https://127.0.0.1:")
    env = dict(os.environ, **frame_tap.env, XDG_CONFIG_HOME=str(tmp_path / "config"),
               XDG_DATA_HOME=str(tmp_path / "data"), HOME=str(tmp_path), REQUESTS_CA_BUNDLE=str(certificate.cert))
    env.pop("DBUS_SESSION_BUS_ADDRESS", None)
    env.pop("AUTHBRIDGE_VAULT_KEY", None)
    options = ["--client-id", CLIENT_ID, "--login-host", sim.login_base, "--callback-port", str(port),
               "--plugins", str(plugin_folder(tmp_path / "plugins", "salesforce"))]

    def person(url: str) -> int:
        """Signs in as jane at Salesforce's page; the browser follows the redirect to the host."""
        with urllib.request.urlopen(sim.browse(url), timeout=TIMEOUT) as page:
            return page.status

    def run(example: str) -> str:
        done = subprocess.run([sys.executable, str(EXAMPLES / example), *options], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=TIMEOUT)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "Open this page" not in done.stdout, "the session was kept"
        return done.stdout + done.stderr

    signed_in = f"signed in as Jane Doe; the org's API is at {sim.instance_url}"
    first = run_signing_in([sys.executable, EXAMPLES / "salesforce_requests.py", *options], cwd=tmp_path, env=env,
                           sign_in=person, timeout=TIMEOUT)
    assert signed_in in first and "REST API v60.0: 1 accounts\n  0015g00000SiMuAAAA  Acme\n" in first, first
    assert sim.snapshot()["api_calls"][-1] == ("GET", QUERY, 200)

    # Setup > Session Management: the token dies; the refresh token still works. The examples'
    # status check finds that out (the identity service refuses the token) and renews it.
    sim.expire_sessions()
    second = run("salesforce_simple.py")
    assert signed_in in second and "simple-salesforce v60.0: 1 accounts\n  0015g00000SiMuAAAA  Acme\n" in second
    assert "objects: Account" in second
    assert sim.snapshot()["api_calls"][-2:] == [("GET", QUERY + "/", 200), ("GET", "/services/data/v60.0/sobjects", 200)]

    sim.expire_sessions()
    third = run("salesforce_requests.py")
    assert "REST API v60.0: 1 accounts" in third
    snapshot = sim.snapshot()
    assert (snapshot["sign_ins"], snapshot["refreshes"]) == (1, 2), "one sign-in; one renewal per ended session"
    assert snapshot["api_calls"][-1] == ("GET", QUERY, 200)
    for secret in sim.handed_out:
        for text in (first, second, third):
            assert secret not in text, "a token or code in the examples' output"
