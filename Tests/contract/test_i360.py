"""The i360 scenario (Salesforce and MarketSharp in one app, plugins/*/README.md): one host with Salesforce production, Salesforce sandbox and
MarketSharp signed in at once; signing out of one leaves the others untouched.

Each provider is its own simulator (two Salesforce orgs: production and a sandbox, each on its own
login host), each checking what the host sends and failing the test on any deviation.
"""

from __future__ import annotations

import pytest

from conftest import sign_in_external
from simulators.sim_http import simulators
from simulators.sim_marketsharp import MarketSharpSimulator
from simulators.sim_salesforce import SalesforceSim

SOBJECTS = "/services/data/v60.0/sobjects"
APPOINTMENTS = "/companies/{companyId}/appointments"


@pytest.fixture
def providers():
    with simulators(lambda kind: kind(), "its provider's protocol") as make:
        yield {"salesforce-production": make(kind=SalesforceSim), "salesforce-sandbox": make(kind=SalesforceSim),
               "marketsharp": make(kind=MarketSharpSimulator)}


def test_three_providers_signed_in_at_once_and_signing_out_of_one(start_host, bundled_plugin_dir, providers):
    profiles = {name: {"plugin": "marketsharp" if name == "marketsharp" else "salesforce", "settings": sim.settings()}
                for name, sim in providers.items()}
    host = start_host([bundled_plugin_dir], profiles=profiles)
    for name, sim in providers.items():
        assert sign_in_external(host, sim, name)["state"] == "signedIn"

    accounts = host.result("listAccounts")["accounts"]
    assert sorted(entry["provider"] for entry in accounts) == sorted(providers)
    tokens = {name: host.result("getAccessToken", {"provider": name})["accessToken"] for name in providers}
    assert len(set(tokens.values())) == 3, "each profile has its own session"
    paths = {"salesforce-production": SOBJECTS, "salesforce-sandbox": SOBJECTS, "marketsharp": APPOINTMENTS}
    for name, path in paths.items():
        assert host.result("fetch", {"provider": name, "url": path})["status"] == 200, name

    mark = host.mark()
    result = host.result("signOut", {"provider": "salesforce-sandbox"})
    assert result["revoked"], "the sandbox's grant was revoked at the sandbox"
    assert providers["salesforce-sandbox"].snapshot()["revocations"]
    assert not providers["salesforce-production"].snapshot()["revocations"], "production was not touched"
    assert not providers["marketsharp"].snapshot()["revocations"], "MarketSharp was not touched"
    ended = [n["provider"] for n in host.notifications("session/changed", since=mark) if n["state"] == "signedOut"]
    assert ended == ["salesforce-sandbox"]

    assert host.result("checkSignInStatus", {"provider": "salesforce-sandbox"})["state"] == "notSignedIn"
    for name in ("salesforce-production", "marketsharp"):
        assert host.result("checkSignInStatus", {"provider": name})["state"] == "signedIn"
        assert host.result("getAccessToken", {"provider": name})["accessToken"] == tokens[name], "same session"
        assert host.result("fetch", {"provider": name, "url": paths[name]})["status"] == 200
    assert sorted(entry["provider"] for entry in host.result("listAccounts")["accounts"]) == ["marketsharp", "salesforce-production"]
