"""The Secret Service: a real gnome-keyring on a private D-Bus session bus, started here.

Both uses are covered: the `secret-service` vault (sessions are keyring items) and the
default encrypted-file vault with its key in the keyring (no key file on disk).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from conftest import Host, sign_in_session, start_on_data_home, stop_cleanly

# No skip: `make deps` installs gnome-keyring and dbus; without them these tests must fail, not hide.

# The tests' session bus starts nothing on demand (see the file): the only Secret Service on it
# is the daemon a test started.
TEST_BUS_CONFIG = Path(__file__).resolve().parents[2] / "scripts" / "test-session-bus.conf"


def start_bus(env: dict) -> tuple[subprocess.Popen, str]:
    """A private session bus (dbus-daemon with the tests' configuration) and its address."""
    bus = subprocess.Popen(["dbus-daemon", f"--config-file={TEST_BUS_CONFIG}", "--nofork", "--print-address=1"],
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
    address = bus.stdout.readline().decode().strip()
    assert address, "dbus-daemon printed no address"
    return bus, address


def stop_keyrings_of(root: Path) -> None:
    """Stops every gnome-keyring-daemon started (or D-Bus-activated) for `root`: the daemon
    outlives its bus otherwise."""
    marker = f"AUTHBRIDGE_KEYRING_HOME={root}".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if b"gnome-keyring" in (entry / "cmdline").read_bytes() and marker in (entry / "environ").read_bytes().split(b"\0"):
                os.kill(int(entry.name), 9)
        except (OSError, ProcessLookupError):
            continue


class KeyringSession:
    """dbus-daemon + gnome-keyring-daemon (unlocked, secrets only) for one test."""

    def __init__(self, root: Path, ask_first: bool = False):
        """`ask_first`: a client asks for the Secret Service before the daemon is started."""
        root.mkdir(parents=True, exist_ok=True)
        self.root = root
        self.env = dict(os.environ, HOME=str(root), XDG_RUNTIME_DIR=str(root), XDG_DATA_HOME=str(root / "kr-data"),
                        AUTHBRIDGE_KEYRING_HOME=str(root))
        self.bus, self.env["DBUS_SESSION_BUS_ADDRESS"] = start_bus(self.env)
        if ask_first:
            early = subprocess.run(["secret-tool", "lookup", "application", "authbridge-test"], env=self.env,
                                   capture_output=True, timeout=10)
            assert early.returncode != 0, "a Secret Service answered before the test started one"
        self.keyring = subprocess.Popen(["gnome-keyring-daemon", "--foreground", "--unlock", "--components=secrets"],
                                        stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=self.env)
        self.keyring.stdin.write(b"test-password")
        self.keyring.stdin.close()
        # Readiness: the keyring answers once it has registered on the bus (bounded).
        deadline = time.monotonic() + 30   # as scripts/with-keyring.sh: ~30 ms idle, seconds on a loaded machine
        while True:
            probe = subprocess.run(["secret-tool", "store", "--label=probe", "application", "authbridge-test"],
                                   input=b"x", env=self.env, capture_output=True, timeout=10)
            if probe.returncode == 0:
                break
            assert time.monotonic() < deadline, f"gnome-keyring did not come up: {probe.stderr.decode()}"
            time.sleep(0.1)

    def search(self, *attributes: str) -> str:
        """What secret-tool lists for the attributes (it prints attributes on stderr, labels on stdout)."""
        found = subprocess.run(["secret-tool", "search", "--all", *attributes], env=self.env,
                               capture_output=True, timeout=10)
        return found.stdout.decode() + found.stderr.decode()

    def store(self, value: str, *attributes: str) -> None:
        subprocess.run(["secret-tool", "store", "--label=test", *attributes], input=value.encode(),
                       env=self.env, check=True, timeout=10)

    def stop(self) -> None:
        for process in (self.keyring, self.bus):
            process.kill()
            process.wait(timeout=10)
        stop_keyrings_of(self.root)


@pytest.fixture
def keyring(tmp_path):
    session = KeyringSession(tmp_path / "keyring")
    yield session
    session.stop()


def start(tmp_path: Path, plugin_dir: Path, name: str, env: dict, *extra: str) -> Host:
    bus = {k: v for k, v in env.items() if k in ("DBUS_SESSION_BUS_ADDRESS", "XDG_RUNTIME_DIR")}
    return start_on_data_home(tmp_path, plugin_dir, name, tmp_path / "data", *extra, env=bus)


stop = stop_cleanly


REPO = Path(__file__).resolve().parents[2]


def test_the_test_keyring_comes_up_when_a_client_asks_for_it_first(tmp_path):
    # CI once failed with "gnome-keyring did not come up": the readiness probe asked for the
    # Secret Service before the unlocked daemon had registered, the default session bus started
    # the system's locked daemon on demand, and that one kept the name. The tests' bus starts
    # nothing on demand (scripts/test-session-bus.conf), as scripts/with-keyring.sh runs it.
    session = KeyringSession(tmp_path / "early", ask_first=True)
    try:
        session.store("value", "application", "authbridge-early")
        assert "authbridge-early" in session.search("application", "authbridge-early")
    finally:
        session.stop()
    script = subprocess.run(
        [str(REPO / "scripts" / "with-keyring.sh"), "sh", "-c",
         "secret-tool lookup application authbridge-probe-early; "
         "dbus-send --session --print-reply --dest=org.freedesktop.DBus /org/freedesktop/DBus "
         "org.freedesktop.DBus.ListActivatableNames"],
        capture_output=True, timeout=60)
    assert script.returncode == 0, script.stderr.decode()
    assert b"org.freedesktop.DBus" in script.stdout and b"org.freedesktop.secrets" not in script.stdout


def test_secret_service_vault_keeps_sessions_in_the_keyring(tmp_path, plugin_dir, keyring):
    host = start(tmp_path, plugin_dir, "first", keyring.env, "--vault", "secret-service")
    status = sign_in_session(host, "c", "kr")
    assert status["storage"] == {"backend": "secret-service", "protection": "keyring"}
    stop(host)
    assert "AuthBridge session: c" in keyring.search("application", "authbridge", "kind", "session")
    assert not list((tmp_path / "data").rglob("*.vault")), "nothing of the session on disk"

    host = start(tmp_path, plugin_dir, "second", keyring.env, "--vault", "secret-service")
    assert host.result("checkSignInStatus", {"provider": "c"})["state"] == "signedIn"
    assert [a["provider"] for a in host.result("listAccounts", {})["accounts"]] == ["c"]
    host.result("signOut", {"provider": "c"})
    stop(host)
    assert "AuthBridge session: c" not in keyring.search("application", "authbridge", "kind", "session")


def test_a_damaged_keyring_item_is_kept_aside_and_signs_out_only_its_profile(tmp_path, plugin_dir, keyring):
    keyring.store("not json", "xdg:schema", "org.authbridge.Secret", "application", "authbridge", "kind", "session", "key", "c")
    host = start(tmp_path, plugin_dir, "first", keyring.env, "--vault", "secret-service")
    sign_in_session(host, "s", "fine")
    error = host.error("checkSignInStatus", {"provider": "c"})
    assert error["code"] == -32011 and error["data"]["reason"] == "corruptRecord"
    assert host.result("checkSignInStatus", {"provider": "c"})["state"] == "notSignedIn"
    assert host.result("checkSignInStatus", {"provider": "s"})["state"] == "signedIn"
    stop(host)
    assert "kind = quarantine" in keyring.search("application", "authbridge", "kind", "quarantine").replace("attribute.", "")


def test_encrypted_file_vault_keeps_its_key_in_the_keyring(tmp_path, plugin_dir, keyring):
    host = start(tmp_path, plugin_dir, "first", keyring.env)
    assert host.result("checkSignInStatus", {"provider": "c"})["state"] == "notSignedIn"
    status = sign_in_session(host, "c", "fk")
    assert status["storage"] == {"backend": "encrypted-file", "protection": "keyring"}
    stop(host)
    assert not (tmp_path / "data" / "authbridge" / "keys").exists(), "no key file when the keyring holds the key"
    assert "AuthBridge vault key" in keyring.search("application", "authbridge", "kind", "vault-key")
    host = start(tmp_path, plugin_dir, "second", keyring.env)
    assert host.result("getAccessToken", {"provider": "c"})["accessToken"] == "at-fk"
    stop(host)


def test_without_a_keyring_the_errors_are_clear(tmp_path, plugin_dir):
    # A session bus address that leads nowhere: no keyring can answer.
    env = {"DBUS_SESSION_BUS_ADDRESS": f"unix:path={tmp_path}/no-bus", "XDG_RUNTIME_DIR": str(tmp_path)}
    host = start(tmp_path, plugin_dir, "secret-service", env, "--vault", "secret-service")
    error = host.error("requestOAuthTokens", {"provider": "c", "flow": "session", "sessionId": "x"})
    assert error["code"] == -32011 and error["data"]["reason"] == "keyringUnavailable"
    assert "Secret Service" in error["message"]
    stop(host)

    # The default vault falls back to a key file (and says so in `protection`)...
    host = start(tmp_path, plugin_dir, "fallback", env)
    assert sign_in_session(host, "c", "fb")["storage"] == {"backend": "encrypted-file", "protection": "encrypted"}
    stop(host)

    # ...unless secure storage is required: then it fails closed.
    shutil.rmtree(tmp_path / "data")
    host = start(tmp_path, plugin_dir, "strict", env, "--require-secure-storage")
    error = host.error("requestOAuthTokens", {"provider": "c", "flow": "session", "sessionId": "x"})
    assert error["code"] == -32011 and error["data"]["reason"] == "noKey"
    stop(host)
    assert not (tmp_path / "data" / "authbridge" / "keys").exists()


def test_a_locked_keyring_gives_a_clear_error(tmp_path, plugin_dir):
    # The daemon runs but was never unlocked: its login collection does not exist (a desktop
    # would prompt for the password; headless, libsecret fails at once).
    root = tmp_path / "locked"
    root.mkdir()
    env = dict(os.environ, HOME=str(root), XDG_DATA_HOME=str(root), XDG_RUNTIME_DIR=str(root),
               AUTHBRIDGE_KEYRING_HOME=str(root))
    bus, env["DBUS_SESSION_BUS_ADDRESS"] = start_bus(env)
    try:
        subprocess.run(["gnome-keyring-daemon", "--start", "--components=secrets"], env=env,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=10, check=True)
        host = start(tmp_path, plugin_dir, "locked-host", env, "--vault", "secret-service")
        error = host.error("requestOAuthTokens", {"provider": "c", "flow": "session", "sessionId": "x"})
        assert error["code"] == -32011 and error["data"]["reason"] == "keyringUnavailable"
        assert "keyring" in error["message"]
        stop(host)
    finally:
        bus.kill()
        bus.wait(timeout=10)
        stop_keyrings_of(root)


def test_first_time_openers_store_one_vault_key_in_the_keyring(tmp_path, plugin_dir, keyring):
    # Before: each opener looked the key up, found none, stored its own (the keyring keeps the
    # last) and sealed vault.check with its key: earlier openers then held a key the keyring no
    # longer had, and vault.check could be sealed with a key nobody can get back.
    bus = {k: v for k, v in keyring.env.items() if k in ("DBUS_SESSION_BUS_ADDRESS", "XDG_RUNTIME_DIR")}
    for round_ in range(3):
        data_home = tmp_path / f"data{round_}"
        hosts = [start_on_data_home(tmp_path, plugin_dir, f"r{round_}-{i}", data_home, env=bus) for i in range(8)]
        ids = [host.send_request("requestOAuthTokens", {"provider": "c", "flow": "session", "sessionId": f"k{i}"})
               for i, host in enumerate(hosts)]
        answers = [host.wait_response(id_) for host, id_ in zip(hosts, ids)]
        for host in hosts:
            stop(host)
        errors = [a["error"]["message"] for a in answers if "error" in a]
        assert not errors, errors
        later = start_on_data_home(tmp_path, plugin_dir, f"later{round_}", data_home, env=bus)
        status = later.result("checkSignInStatus", {"provider": "c"})
        assert status["state"] == "signedIn" and status["storage"]["protection"] == "keyring"
        stop(later)
