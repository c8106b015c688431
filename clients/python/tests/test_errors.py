"""Each error class, raised for a real error of the real host (and the code table itself)."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import urllib.parse

import pytest
from conftest import SPEC_PATH, WAIT, dot_profiles, dot_settings

import authbridge
from authbridge.errors import error_from_wire


def test_every_error_code_of_the_spec_has_its_class():
    """components/errors of openrpc.json names each code; the class has that name and code."""
    catalogue = json.loads(SPEC_PATH.read_text())["components"]["errors"]
    codes = json.loads(SPEC_PATH.read_text())["components"]["schemas"]["ErrorObject"]["properties"]["code"]["enum"]
    assert sorted(entry["code"] for entry in catalogue.values()) == sorted(codes)
    for name, entry in catalogue.items():
        error = error_from_wire(entry, "someMethod")
        assert type(error).__name__ == name and type(error) is getattr(authbridge, name)
        assert isinstance(error, authbridge.AuthBridgeError) and error.code == entry["code"]
        assert error.data == entry.get("data", {}) and error.reason == entry.get("data", {}).get("reason")
    unknown = error_from_wire({"code": -32099, "message": "from a newer host"})
    assert type(unknown) is authbridge.AuthBridgeError and unknown.code == -32099


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


async def test_request_errors_map_to_their_classes(host_options, dot, frames):
    profiles = {**dot_profiles(dot), "ghost": {"plugin": "ghost", "settings": {}}}
    async with authbridge.connect(**host_options(profiles=profiles)) as bridge:
        with pytest.raises(authbridge.ProviderUnknown) as raised:
            await bridge.get_access_token("nope")
        error = raised.value
        assert (error.code, error.provider, error.reason, error.field, error.retryable) == \
            (-32003, "nope", "unknownProfile", "provider", False)
        assert error.request_method == "getAccessToken" and "nope" in str(error)

        with pytest.raises(authbridge.ProviderUnknown) as raised:
            await bridge.configure_profile("x", "no-such-plugin")
        assert (raised.value.reason, raised.value.field) == ("unknownPlugin", "plugin")

        with pytest.raises(authbridge.NotSignedIn) as raised:
            await bridge.get_access_token("dot")
        assert (raised.value.code, raised.value.reason, raised.value.provider, raised.value.retryable) == \
            (-32001, "noTokens", "dot", False)
        with pytest.raises(authbridge.NotSignedIn):
            await bridge.fetch("dot", f"{dot.base}/o/userinfo/")

        with frames.off_spec(), pytest.raises(authbridge.InvalidParams) as raised:
            await bridge.get_access_token("dot", min_validity_ms=-1)
        assert raised.value.field == "minValidityMs"

        with frames.off_spec(), pytest.raises(authbridge.MethodNotFound) as raised:
            await bridge.request("getTokens", {})
        assert raised.value.data == {"method": "getTokens"}

        with pytest.raises(authbridge.InvalidRequest):
            await bridge.request("initialize", {"protocolVersion": "1.0"})   # already initialized

        with pytest.raises(authbridge.Unsupported) as raised:
            await bridge.request_oauth_tokens("dot", flow="session", session_id="s")
        assert (raised.value.reason, raised.value.field) == ("unsupportedFlow", "flow")

        with pytest.raises(authbridge.ConfigurationError) as raised:
            await bridge.configure_profile("bad", "oidc", {"issuer": f"{dot.base}/o", "clientId": 42})
        assert (raised.value.reason, raised.value.field) == ("invalidSettings", "settings.clientId")

        # No clientId: the host would register itself (RFC 7591), but DOT offers no registration.
        with pytest.raises(authbridge.ConfigurationError) as raised:
            await bridge.configure_profile("bad", "oidc", {"issuer": f"{dot.base}/o"})
        assert raised.value.reason == "missingSetting" and '"clientId"' in raised.value.message

        with pytest.raises(authbridge.ProviderUnavailable) as raised:
            await bridge.configure_profile("down", "oidc", {"issuer": f"http://127.0.0.1:{free_port()}/o", "clientId": "c"})
        assert (raised.value.reason, raised.value.retryable) == ("refused", True)

        with pytest.raises(authbridge.PluginError) as raised:
            await bridge.check_sign_in_status("ghost")
        assert raised.value.reason == "pluginNotLoaded"

        with pytest.raises(authbridge.NoPendingSignIn) as raised:
            await bridge.complete_sign_in("dot", "http://127.0.0.1:1/callback?code=x&state=y")
        assert raised.value.reason == "noPendingSignIn"

        # The host's own deadline on the user: -32006, not the client's asyncio.TimeoutError.
        with pytest.raises(authbridge.Timeout) as raised:
            await bridge.request_oauth_tokens("dot", flow="browser", timeout_ms=1000, timeout=WAIT)
        assert (raised.value.reason, raised.value.retryable) == ("timeout", True)


async def test_a_plugin_that_is_not_loaded_says_what_there_is_and_what_to_do(host_options, plugin_dir):
    ghost = plugin_dir / "ghost.json"
    ghost.write_text(json.dumps({"id": "ghost", "version": "1", "abi": "1.0", "library": "libauthbridge-ghost.so"}))
    os.chmod(ghost, 0o666)                       # refused: others may write it
    async with authbridge.connect(**host_options()) as bridge:
        with pytest.raises(authbridge.ProviderUnknown) as raised:
            await bridge.configure_profile("corp", "ghost")
        error = raised.value
        assert (error.code, error.reason, error.field) == (-32003, "unknownPlugin", "plugin")
        assert error.message.startswith(f'No loaded plugin has the id "ghost" (searched: {plugin_dir}'), \
            "the host's own words first, naming the folders it searched"
        assert f"Loaded plugins: oidc (from {plugin_dir})." in error.message
        assert f"It refused {ghost}: " in error.message and "(mode 666)" in error.message
        assert "Fix that and start the bridge again." in error.message

        with pytest.raises(authbridge.ProviderUnknown) as raised:
            await bridge.configure_profile("corp", "okta")
        assert "put its manifest and library (okta.json, a .so) in a plugin folder" in raised.value.message
        assert "$XDG_DATA_HOME/authbridge/plugins" in raised.value.message and "authbridge plugins" in str(raised.value)
        assert [p.name for p in (await bridge.list_providers()).profiles] == []


async def test_sign_in_refusals_and_cancellations(host_options, dot):
    settings = {**dot_settings(dot), "redirectUri": dot.redirect_uri}
    async with authbridge.connect(**host_options(profiles={"dot": {"plugin": "oidc", "settings": settings}})) as bridge:
        # UserCancelled: a second sign-in supersedes the first.
        first_waiting = asyncio.Event()
        first = asyncio.ensure_future(bridge.request_oauth_tokens(
            "dot", flow="browser", on_progress=lambda e: e.stage == "waiting" and first_waiting.set()))
        await asyncio.wait_for(first_waiting.wait(), WAIT)
        second_waiting = asyncio.Event()
        second = asyncio.ensure_future(bridge.request_oauth_tokens(
            "dot", flow="browser", on_progress=lambda e: e.stage == "waiting" and second_waiting.set()))
        with pytest.raises(authbridge.UserCancelled) as raised:
            await asyncio.wait_for(first, WAIT)
        assert raised.value.reason == "superseded"
        # …and sign_out ends a pending one.
        await asyncio.wait_for(second_waiting.wait(), WAIT)
        await bridge.sign_out("dot")
        with pytest.raises(authbridge.UserCancelled) as raised:
            await asyncio.wait_for(second, WAIT)
        assert raised.value.reason == "signedOut"

        # The external flow: a redirect whose state was tampered with is refused to whoever hands it
        # over (InvalidParams, stateMismatch) and the sign-in goes on; ProviderRefused: the
        # provider's error redirect, with the sign-in's state.
        opened: asyncio.Future = asyncio.get_running_loop().create_future()
        pending = asyncio.ensure_future(bridge.request_oauth_tokens(
            "dot", flow="external",
            on_progress=lambda e: e.stage == "openUrl" and not opened.done() and opened.set_result(e.url)))
        url = await asyncio.wait_for(opened, WAIT)
        callback = await asyncio.to_thread(dot.browse, url)
        state = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(callback).query))["state"]
        forged = callback.replace(f"state={urllib.parse.quote(state)}", "state=forged")
        assert forged != callback
        with pytest.raises(authbridge.InvalidParams) as refused:
            await bridge.complete_sign_in("dot", forged)
        assert (refused.value.reason, refused.value.field) == ("stateMismatch", "callbackUrl")
        assert not pending.done()
        error_redirect = f"{callback.split('?')[0]}?error=invalid_request&state={urllib.parse.quote(state)}"
        assert await bridge.complete_sign_in("dot", error_redirect) is True
        with pytest.raises(authbridge.ProviderRefused) as raised:
            await asyncio.wait_for(pending, WAIT)
        assert (raised.value.reason, raised.value.retryable) == ("invalid_request", False)


async def test_storage_error_for_a_vault_others_can_open(host_options, tmp_path):
    data_home = tmp_path / "shared-data"
    vault = data_home / "authbridge" / "vault"
    vault.mkdir(parents=True)
    os.chmod(vault, 0o777)
    async with authbridge.connect(**host_options(data_home=data_home)) as bridge:
        with pytest.raises(authbridge.StorageError) as raised:
            await bridge.list_accounts()
        assert raised.value.reason == "insecurePermissions" and "chmod 700" in raised.value.message


async def test_unsupported_protocol_version_leaves_no_host_behind(host_options):
    bridge = authbridge.connect(**host_options(protocol_version="2.0"))
    with pytest.raises(authbridge.UnsupportedProtocolVersion) as raised:
        await bridge.start()
    assert raised.value.supported == ("1.0",)
    assert bridge.returncode is not None and not bridge.running


async def test_calls_running_when_the_bridge_closes_are_cancelled_by_the_host(host_options, dot, frames):
    async with authbridge.connect(**host_options(profiles=dot_profiles(dot))) as bridge:
        waiting = asyncio.Event()
        pending = asyncio.ensure_future(bridge.request_oauth_tokens(
            "dot", flow="browser", on_progress=lambda e: e.stage == "waiting" and waiting.set()))
        await asyncio.wait_for(waiting.wait(), WAIT)
    # `exit` cancels what still runs (spec §2): the host answered -32800 itself.
    with pytest.raises(authbridge.RequestCancelled) as raised:
        await asyncio.wait_for(pending, WAIT)
    assert raised.value.code == -32800 and raised.value.request_method == "requestOAuthTokens"
    with pytest.raises(authbridge.BridgeClosed):
        await bridge.list_providers()
