"""`agent=`: the user's running `authbridge agent` instead of a host of the bridge's own — found
by its socket, required or optional, started on request only (`autostart`), and two bridges on
one agent sharing its sessions and events."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import pytest
from conftest import WAIT, FrameValidator, dot_profiles, sign_in

import authbridge


def default_socket(options: dict) -> Path:
    return Path(options["env"]["XDG_RUNTIME_DIR"]) / "authbridge" / "agent.sock"


def parent_of(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


async def test_agent_true_without_an_agent_says_there_is_none(host_options):
    options = host_options(agent=True)
    with pytest.raises(authbridge.AgentNotRunning) as refused:
        await authbridge.connect(**options).start()
    assert refused.value.socket == str(default_socket(options))
    assert f"no authbridge agent answers on {default_socket(options)}" in str(refused.value)
    assert isinstance(refused.value, authbridge.HostNotFound), "no host to talk to, as when none can be started"
    options["env"].pop("XDG_RUNTIME_DIR")
    with pytest.raises(authbridge.AgentNotRunning, match="XDG_RUNTIME_DIR is not set"):
        await authbridge.connect(**options).start()
    with pytest.raises(ValueError, match="agent must be"):
        authbridge.connect(agent="always")   # type: ignore[arg-type]


async def test_auto_without_an_agent_runs_a_host_of_its_own(host_options):
    async with authbridge.connect(**host_options(agent="auto")) as bridge:
        assert not bridge.on_agent and bridge.pid and parent_of(bridge.pid) == os.getpid()
        assert (await bridge.list_providers()).plugins[0].id == "oidc"


async def test_autostart_starts_one_agent_that_outlives_the_bridges_and_is_shared(host_options, dot):
    options = host_options(profiles=dot_profiles(dot), agent=True, autostart=True)
    socket = default_socket(options)
    agent_pid = None
    try:
        async with authbridge.connect(**options) as first:
            agent_pid = first.pid
            assert first.on_agent and agent_pid and socket.is_socket()
            assert parent_of(agent_pid) != os.getpid(), "the agent is nobody's child here: it outlives this program"
            # A second bridge (no autostart) finds the same agent; a sign-in in one reaches the other.
            second_frames = FrameValidator()   # a connection of its own: ids of its own
            async with authbridge.connect(**{**options, "autostart": False, "on_frame": second_frames}) as second:
                assert second.on_agent and second.pid == agent_pid
                changes = second.events("session/changed")
                await sign_in(first, dot)
                event = await changes.next(WAIT)
                assert (event.provider, event.state) == ("dot", "signedIn")
                assert (await second.check_sign_in_status("dot")).signed_in
                assert await second.close() is None, "closing a connection to the agent has no exit status"
            assert not second_frames.violations, second_frames.violations
        # Both bridges closed: the agent still serves.
        async with authbridge.connect(**{**options, "autostart": False}) as third:
            assert third.pid == agent_pid and (await third.check_sign_in_status("dot")).signed_in
    finally:
        if agent_pid:
            await stop_agent(agent_pid, socket)


async def test_the_socket_can_be_named(host_options, tmp_path):
    options = host_options(agent=True, autostart=True, agent_socket=tmp_path / "named.sock")
    async with authbridge.connect(**options) as bridge:
        assert bridge.on_agent and bridge.agent_socket == str(tmp_path / "named.sock")
        agent_pid = bridge.pid
    env = dict(options["env"], AUTHBRIDGE_AGENT_SOCKET=str(tmp_path / "named.sock"))
    async with authbridge.connect(**host_options(agent=True, env=env)) as bridge:
        assert bridge.pid == agent_pid, "AUTHBRIDGE_AGENT_SOCKET of the bridge's environment names it too"
    await stop_agent(agent_pid, tmp_path / "named.sock")


async def stop_agent(pid: int, socket: Path) -> None:
    """SIGTERM, then wait until the agent has removed its socket (it does so as it ends)."""
    os.kill(pid, signal.SIGTERM)
    for _ in range(int(WAIT / 0.05)):
        if not socket.exists():
            return
        await asyncio.sleep(0.05)   # polled, bounded
    raise AssertionError(f"the agent (pid {pid}) did not stop")
