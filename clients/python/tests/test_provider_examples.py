"""Examples/authorized_request.py, one call per seed provider family, as a user runs it after
signing in (the profiles in their config file, the host of the build with its bundled plugins,
through the frame tap): OpenID Connect (django-oauth-toolkit's userinfo), Tableau (its cookies and
XSRF header, a JSON body), MarketSharp (`{companyId}` from the session), Duke; each again after
the provider ended the access token; and a profile nobody signed in to. Salesforce's are
test_salesforce_examples.py's."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest
from conftest import REPO, WAIT, plugin_folder, sign_in_blocking, sign_in_external_blocking

import authbridge
import authbridge.sync

sys.path.insert(0, str(REPO / "Tests" / "contract"))
import test_marketsharp as marketsharp_tests  # noqa: E402
import test_tableau as tableau_tests  # noqa: E402
from simulators.sim_duke import DukeAuthorizer  # noqa: E402
from simulators.sim_http import simulators  # noqa: E402

make_tableau, tableau = tableau_tests.make_tableau, tableau_tests.tableau
make_sim, sim = marketsharp_tests.make_sim, marketsharp_tests.sim

EXAMPLE = REPO / "Examples" / "authorized_request.py"


@pytest.fixture
def duke():
    with simulators(DukeAuthorizer, "Duke's protocol") as make:
        yield make()


@pytest.fixture
def user(host_options, tmp_path, frame_tap):
    """user(plugin, profiles) → (a blocking bridge of the user's to sign in with, run(*arguments)
    running the example in the same folders and configuration)."""
    bridges: list[authbridge.sync.SyncAuthBridge] = []

    def make(plugin: str, profiles: dict[str, Any]) -> tuple[authbridge.sync.SyncAuthBridge, Callable[..., Any]]:
        folder = plugin_folder(tmp_path / f"{plugin}-plugins", plugin)
        options = host_options(profiles=profiles, plugins=[folder])
        bridge = authbridge.sync.connect(**options)
        bridges.append(bridge)
        bridge.start()
        env = dict(options["env"], **frame_tap.env)

        def run(*arguments: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run([sys.executable, str(EXAMPLE), "--config", str(options["config"]), *arguments],
                                  cwd=tmp_path, env=env, capture_output=True, text=True, timeout=WAIT * 4)
        return bridge, run

    yield make
    for bridge in bridges:
        bridge.close()


def succeeded(done: subprocess.CompletedProcess[str]) -> Any:
    assert (done.returncode, done.stderr) == (0, ""), done.stdout + done.stderr
    return json.loads(done.stdout)


def test_openid_connect_userinfo_and_a_profile_nobody_signed_in_to(user, dot):
    settings = {"issuer": f"{dot.base}/o", "clientId": "authbridge-test", "scopes": ["openid"]}
    bridge, run = user("oidc", {"corp": {"plugin": "oidc", "settings": settings},
                                "other": {"plugin": "oidc", "settings": settings}})
    sub = sign_in_blocking(bridge, dot, "corp").account.id
    userinfo = f"{dot.base}/o/userinfo/"
    assert succeeded(run("corp", userinfo))["sub"] == sub
    dot.end_access_token(bridge.get_access_token("corp").access_token)     # the server ends it early
    assert succeeded(run("corp", userinfo))["sub"] == sub

    done = run("other", userinfo)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == "other is not signed in (noTokens): sign in first (authbridge login other, or your app)\n"


def test_tableau_views_with_its_cookies_and_header(user, tableau):
    bridge, run = user("tableau", {"tab": tableau_tests.profile(tableau)})
    assert bridge.request_oauth_tokens("tab", flow="session", session_id=tableau.web_sign_in("alice")).signed_in
    views = ["{server}" + tableau_tests.VIEWS_PATH, "--json", '{"method": "getViews", "params": {}}']
    assert succeeded(run("tab", *views))["result"]["totalCount"] == 2
    tableau.expire_sessions()
    assert succeeded(run("tab", *views))["result"]["totalCount"] == 2
    assert tableau.snapshot().refreshes == 1


def test_marketsharp_company_from_the_session(user, sim):
    bridge, run = user("marketsharp", {"ms": {"plugin": "marketsharp", "settings": sim.settings()}})
    sign_in_external_blocking(bridge, "ms", lambda url: sim.browse(url, "alice"))
    current = f"{sim.base}/companies/{{companyId}}/users/current"
    first = succeeded(run("ms", current))
    sim.expire_access_tokens()
    assert succeeded(run("ms", current)) == first
    missing = run("ms", f"{sim.base}/companies/{{tenant}}/users/current")
    assert missing.returncode == 1 and "the session has no 'tenant' (its details: companyId)" in missing.stderr


def test_duke_me(user, duke):
    bridge, run = user("duke", {"duke": {"plugin": "duke", "settings": duke.settings()}})
    sign_in_external_blocking(bridge, "duke", lambda url: duke.browse(url, netid="ab123"))
    assert succeeded(run("duke", duke.api_url))["netid"] == "ab123"
