"""Access tokens that live less than getAccessToken's minimum validity (default 60 s): a token is
never refreshed while it is younger than half its own lifetime, in one host or in several sharing a
vault (issue 12 §3). Against django-oauth-toolkit with 5-second access tokens."""

from __future__ import annotations

from authbridge_testkit.dot_auth import dot_fixture
from conftest import advance_clock, host_command, Host, sign_in_external, stop_cleanly

dot = dot_fixture("module", access_lifetime=5)


def settings(dot) -> dict:
    return {"issuer": f"{dot.base}/o", "clientId": "authbridge-test", "redirectUri": dot.redirect_uri}


def test_sequential_calls_after_a_refresh_cause_no_more_grants(start_host, oidc_plugin_dir, dot):
    host = start_host([oidc_plugin_dir], profiles={"dot": {"plugin": "oidc", "settings": settings(dot)}})
    sign_in_external(host, dot, "dot")
    before = dot.snapshot()["refreshes"]
    fresh = host.result("getAccessToken", {"provider": "dot", "forceRefresh": True})["accessToken"]
    tokens = {host.result("getAccessToken", {"provider": "dot"})["accessToken"] for _ in range(5)}
    assert tokens == {fresh}, "the token just refreshed is handed out"
    assert dot.snapshot()["refreshes"] - before == 1, "only the forced refresh reached the server"
    # A caller asking for less than half the lifetime is served as asked.
    assert host.result("getAccessToken", {"provider": "dot", "minValidityMs": 1000})["accessToken"] == fresh


def test_hosts_sharing_a_vault_make_one_grant_per_expiry(tmp_path, oidc_plugin_dir, dot):
    profiles = {"dot": {"plugin": "oidc", "settings": settings(dot)}}
    data_home = tmp_path / "shared-data"
    data_home.mkdir(mode=0o700)
    hosts: list[Host] = []
    try:
        for index in range(4):
            argv, env = host_command(tmp_path / f"h{index}", [oidc_plugin_dir], profiles=profiles, test_clock=True)
            env["XDG_DATA_HOME"] = str(data_home)
            host = Host(argv, env, tmp_path / f"h{index}")
            host.initialize()
            hosts.append(host)
        sign_in_external(hosts[0], dot, "dot")
        before = dot.snapshot()["refreshes"]
        for host in hosts:   # the same clock everywhere: the token has expired for every host
            advance_clock(host, 60_000)
        pending = [(host, [host.send_request("getAccessToken", {"provider": "dot"}) for _ in range(50)]) for host in hosts]
        tokens = {host.wait_response(request_id)["result"]["accessToken"] for host, ids in pending for request_id in ids}
        assert len(tokens) == 1, "every host hands out the one refreshed token"
        assert dot.snapshot()["refreshes"] - before == 1, "one grant for one expiry, whatever the number of hosts"
    finally:
        for host in hosts:
            stop_cleanly(host)
