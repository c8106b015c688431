"""The runner's sandbox (issue 26): a plugin in a runner is confined, not only kept apart.

Isolation used to be fault isolation: a plugin in its runner (the same user) read the vault's key
file, its records and ~/.ssh, connected to the agent's socket and to the network, and a child it
moved out of its process group (`setsid`) outlived the agent. The runner now confines itself
before it loads the plugin (no new privileges, Landlock, a seccomp filter, a PID namespace) and
says so in PluginStatus `confinement` (bridge-spec/README.md, Isolation). The escaping plugin is a
variant of the C test plugin (CTEST_ESCAPE): its check_session tries each way out and logs how
each went, never what it read. The bundled plugins' own tests (test_salesforce, test_tableau,
test_marketsharp, test_duke, test_openid_servers…) load them from `--plugins` folders, that is in
runners: they show the sandbox leaves a plugin everything it needs.

Every wait is bounded; no test relies on timing to pass.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import socket
import subprocess
import tempfile
from pathlib import Path

import pytest

from conftest import TIMEOUT, sign_in_session
from authbridge_testkit import leak_scan
from authbridge_testkit.agent import Agent
from authbridge_testkit.host import Host, host_command, stop_cleanly
from authbridge_testkit.paths import BUILD_DIR, HOST_BIN
from test_isolation import (SERVER, children_named, lingering, new_folder, plugin_entries, poll, process_alive, runners_of,
                            start_with_lingering_children)

__all__ = ["lingering"]  # a fixture, from test_isolation

#: The escaping plugin's attempts (CTEST_ESCAPE), each named by the setting that gives its target;
#: setsid is its child's.
ATTEMPTS = ("keyFile", "record", "sshKey", "agentSocket", "tcpPort", "tracee", "setsid")


def landlock_abi() -> int:
    """The Landlock ABI this kernel offers (landlock_create_ruleset with the VERSION flag), 0 for none."""
    libc = ctypes.CDLL(None, use_errno=True)
    answer = libc.syscall(444, None, ctypes.c_size_t(0), ctypes.c_uint32(1))  # the same number on every architecture
    return max(answer, 0)


def user_namespaces() -> bool:
    try:
        return int(Path("/proc/sys/user/max_user_namespaces").read_text()) > 0
    except OSError:
        return False


complete_sandbox = pytest.mark.skipif(landlock_abi() < 6 or not user_namespaces(),
                                      reason="the kernel lacks Landlock ABI 6 or user namespaces: runners get less (with warnings)")


def probe_report(text: str) -> dict[str, str]:
    """The escaping plugin's log lines, "sandbox probe NAME: denied: …" → {NAME: "denied: …"}."""
    report = {}
    for line in text.splitlines():
        if "sandbox probe " in line:
            name, _, outcome = line.split("sandbox probe ", 1)[1].partition(": ")
            report[name] = outcome.split(" plugin=")[0].split(" [")[0].strip()
    return report


@pytest.fixture
def short_home():
    """A short private folder for an agent: its socket's path must stay under 108 bytes, which
    pytest's nested folders (one more level per xdist worker) exceed. Removed after the test."""
    folder = Path(tempfile.mkdtemp(prefix="ab-sandbox-"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@complete_sandbox
def test_a_plugin_in_a_runner_reaches_none_of_the_users_files_sockets_or_processes(tmp_path, short_home, ctest_variants,
                                                                                     lingering):
    folder = new_folder(tmp_path / "plugins")
    ctest_variants.install(folder, "cescape", "-DCTEST_ESCAPE")
    ctest_variants.install(folder, "ctest")
    agent = Agent(short_home / "agent", [folder], {"corp": {"plugin": "ctest", "settings": SERVER}})
    tracee = subprocess.Popen(["sleep", "600"])
    listener = socket.socket()
    try:
        lingering.append(agent.pid)
        client = agent.connect()
        # corp's session: the vault now holds its record, the key file its key.
        assert sign_in_session(client, "corp", "corp-user")["state"] == "signedIn"
        data = Path(agent.env["XDG_DATA_HOME"]) / "authbridge"
        key_file = data / "keys" / "vault.key"
        records = sorted(data.rglob("*.vault"))
        assert key_file.is_file() and records, sorted(data.rglob("*"))
        ssh_key = Path(agent.env["HOME"]) / ".ssh" / "id_ed25519"
        ssh_key.parent.mkdir(mode=0o700)
        ssh_key.write_text("-----BEGIN OPENSSH PRIVATE KEY-----\nnot a real key\n")
        ssh_key.chmod(0o600)
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        settings = {**SERVER, "keyFile": str(key_file), "record": str(records[0]), "sshKey": str(ssh_key),
                    "agentSocket": str(agent.socket), "tcpPort": str(listener.getsockname()[1]), "tracee": str(tracee.pid)}

        client.result("configureProfile", {"name": "escape", "plugin": "cescape", "settings": settings})
        assert sign_in_session(client, "escape", "s1")["state"] == "signedIn"
        assert client.result("checkSignInStatus", {"provider": "escape"})["state"] == "signedIn"

        report = poll(lambda: (lambda r: r if set(ATTEMPTS) <= set(r) else None)(probe_report(agent.stderr_text())),
                      TIMEOUT, "the escaping plugin's report")
        assert all(report[name].startswith("denied") for name in ATTEMPTS), report
        listener.setblocking(False)
        with pytest.raises(BlockingIOError):
            listener.accept()                     # nobody connected
        entry = plugin_entries(client.result("listProviders", {})["plugins"])["cescape"]
        assert entry["isolation"] == "process", entry
        assert entry["confinement"] == {"noNewPrivileges": True, "seccomp": True, "landlock": landlock_abi(),
                                        "pidNamespace": True}, entry

        # Its child stays until the runner ends, then goes with it (setsid was refused, and the
        # runner's PID namespace ends with the runner).
        escapees = children_named(agent.pid, "ctest-escapee")
        assert len(escapees) == 1, escapees
        assert corp_token(client) == "at-corp-user"
        client.close()
    finally:
        listener.close()
        tracee.kill()
        tracee.wait(TIMEOUT)
        code = agent.stop()
    assert code == 0, agent.stderr_tail()
    poll(lambda: not runners_of(agent.pid) and not any(process_alive(pid) for pid in escapees), TIMEOUT,
         "the runner and the escaping plugin's child to end")
    assert not leak_scan.leaks(agent.stderr_text(), [])


def corp_token(client) -> str:
    return client.result("getAccessToken", {"provider": "corp"})["accessToken"]


@complete_sandbox
def test_what_a_plugin_starts_ends_with_its_runner_even_when_the_host_is_killed(start_host, tmp_path, ctest_variants, lingering):
    # Before, a host killed with SIGKILL took its runners (PR_SET_PDEATHSIG) but not what they had
    # forked: nobody was left to kill their process group.
    host = start_with_lingering_children(start_host, tmp_path, ctest_variants, lingering)
    left = runners_of(host.proc.pid)
    assert len(children_named(host.proc.pid, "ctest-linger")) == 2, left
    host.proc.send_signal(signal.SIGKILL)
    host.proc.wait(TIMEOUT)
    poll(lambda: not any(process_alive(pid) for pid in left), TIMEOUT, f"the runner's processes {left} to end")


@complete_sandbox
def test_each_isolated_plugin_says_how_its_runner_is_confined_and_in_process_ones_say_nothing(start_host, plugin_dir):
    host = start_host([plugin_dir], profiles={"c": {"plugin": "ctest", "settings": SERVER}},
                      extra_args=["--plugin-isolation", "swifttest=none"])
    entries = plugin_entries(host.init_result["providers"])
    assert entries["ctest"]["isolation"] == "process"
    assert entries["ctest"]["confinement"] == {"noNewPrivileges": True, "seccomp": True, "landlock": landlock_abi(),
                                               "pidNamespace": True}
    assert entries["swifttest"]["isolation"] == "none" and "confinement" not in entries["swifttest"]
    assert "less confinement" not in host.stderr_text()
    # The runner's own pid is the one the host knows, not its pid in the runner's namespace.
    assert sign_in_session(host, "c", "s1")["state"] == "signedIn"
    assert len(runners_of(host.proc.pid, children_only=True)) == 1



@complete_sandbox
def test_the_bundled_plugins_load_in_confined_runners(start_host, bundled_plugin_dir):
    # From a `--plugins` folder they run isolated, as in their own tests (test_salesforce,
    # test_tableau, test_marketsharp, test_duke, test_openid_servers), which sign in, refresh,
    # fetch and sign out against the providers' simulators and real servers through the sandbox.
    host = start_host([bundled_plugin_dir], profiles={})
    entries = plugin_entries(host.init_result["providers"])
    assert set(entries) == {"duke", "marketsharp", "oidc", "salesforce", "tableau"}, entries
    for entry in entries.values():
        assert (entry["status"], entry["isolation"]) == ("loaded", "process"), entry
        assert entry["confinement"] == {"noNewPrivileges": True, "seccomp": True, "landlock": landlock_abi(),
                                        "pidNamespace": True}, entry


NOBODY = 65534


@complete_sandbox
@pytest.mark.skipif(os.geteuid() != 0, reason="starts the host as another user (as any user but root, the other tests are this one)")
def test_a_user_who_is_not_root_gets_the_same_sandbox(ctest_variants):
    # Root may write any process's uid_map; another user may write only their own, and only while
    # the runner is dumpable (proc(5)): that path needs a user who is not root.
    top = Path(tempfile.mkdtemp(prefix="authbridge-sandbox-"))
    try:
        top.chmod(0o711)
        plugins = new_folder(top / "plugins")
        ctest_variants.install(plugins, "ctest")
        argv, env = host_command(top / "host", [plugins], profiles={"c": {"plugin": "ctest", "settings": SERVER}})
        # The host and its helper libraries, copied where that user can read them: the checkout may
        # sit in a folder only its owner can enter (a clone in `mktemp -d`, as CI may make one).
        executables = new_folder(top / "bin")
        for library in [HOST_BIN, BUILD_DIR / "authbridge-host", *BUILD_DIR.glob("libAuthBridge*.so")]:
            shutil.copy(library, executables / library.name)
        argv[0] = str(executables / HOST_BIN.name)
        for path in [top / "host", *(top / "host").rglob("*")]:
            os.chown(path, NOBODY, NOBODY)
        host = Host(["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", *argv], env, top / "host")
        try:
            entry = plugin_entries(host.initialize()["providers"])["ctest"]
            assert entry["confinement"] == {"noNewPrivileges": True, "seccomp": True, "landlock": landlock_abi(),
                                            "pidNamespace": True}, entry
            assert sign_in_session(host, "c", "s1")["state"] == "signedIn"
            assert host.result("checkSignInStatus", {"provider": "c"})["state"] == "signedIn"
        finally:
            stop_cleanly(host)
    finally:
        shutil.rmtree(top, ignore_errors=True)


@complete_sandbox
def test_without_user_namespaces_a_runner_says_what_it_lacks_and_the_rest_holds(tmp_path, ctest_variants, lingering):
    # The host in a user namespace of its own whose limit on user namespaces is 0 (the sysctl is
    # per namespace): its runners cannot make theirs, as on a system that turned them off.
    folder = new_folder(tmp_path / "plugins")
    ctest_variants.install(folder, "cescape", "-DCTEST_ESCAPE")
    argv, env = host_command(tmp_path / "host", [folder], profiles={"e": {"plugin": "cescape", "settings": SERVER}})
    no_namespaces = 'echo 0 > /proc/sys/user/max_user_namespaces && exec "$@"'
    host = Host(["unshare", "--user", "--map-root-user", "sh", "-c", no_namespaces, "sh", *argv], env, tmp_path / "host")
    try:
        lingering.append(host.proc.pid)
        entry = plugin_entries(host.initialize()["providers"])["cescape"]
        warning = ("no PID namespace (No space left on device): what the plugin starts ends with the runner's process "
                   "group, not whenever the runner ends")
        assert entry["confinement"] == {"noNewPrivileges": True, "seccomp": True, "landlock": landlock_abi(),
                                        "pidNamespace": False, "warnings": [warning]}, entry
        assert f"plugin cescape runs with less confinement: {warning}" in host.stderr_text()
        # The filter still keeps its child in the runner's process group, which the host ends.
        assert sign_in_session(host, "e", "s1")["state"] == "signedIn"
        assert host.result("checkSignInStatus", {"provider": "e"})["state"] == "signedIn"
        report = poll(lambda: probe_report(host.stderr_text()).get("setsid"), TIMEOUT, "the setsid attempt")
        assert report.startswith("denied"), report
        assert len(children_named(host.proc.pid, "ctest-escapee")) == 1
        host.close_stdin()
        assert host.wait_exit(TIMEOUT) == 0, host.stderr_tail()
        poll(lambda: not runners_of(host.proc.pid), TIMEOUT, "the runner and its child to end")
    finally:
        stop_cleanly(host)
