"""The encrypted-file vault seen through the bridge: sessions survive a restart, files are
private and hold no token bytes, a damaged record signs out only its own profile."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

from conftest import Host, session_records, sign_in_session, start_on_data_home, stop_cleanly


def start(tmp_path: Path, plugin_dir: Path, name: str, data_home: Path, *extra: str, env: dict | None = None) -> Host:
    return start_on_data_home(tmp_path, plugin_dir, name, data_home, *extra, env=env)


stop = stop_cleanly


def test_sessions_survive_a_restart_and_files_are_private(tmp_path, plugin_dir):
    data_home = tmp_path / "data"
    host = start(tmp_path, plugin_dir, "first", data_home)
    sign_in_session(host, "c", "persist")
    sign_in_session(host, "s", "other")
    stop(host)

    vault = data_home / "authbridge" / "vault"
    assert stat.S_IMODE(vault.stat().st_mode) == 0o700
    records = session_records(vault)
    assert len(records) == 2
    for path in records + [vault / "vault.check", data_home / "authbridge" / "keys" / "vault.key"]:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    for path in vault.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            for token in (b"at-persist", b"rt-persist", b"sat-other", b"srt-other"):
                assert token not in data, f"token bytes in {path}"

    host = start(tmp_path, plugin_dir, "second", data_home)
    status = host.result("checkSignInStatus", {"provider": "c"})
    assert status["state"] == "signedIn"
    assert status["storage"] == {"backend": "encrypted-file", "protection": "encrypted"}
    assert host.result("getAccessToken", {"provider": "c"})["accessToken"] == "at-persist"
    accounts = host.result("listAccounts", {})["accounts"]
    assert sorted(a["provider"] for a in accounts) == ["c", "s"]
    host.result("signOut", {"provider": "c"})
    stop(host)
    assert len(session_records(vault)) == 1, "sign-out wipes the profile's record"


def test_a_damaged_record_signs_out_only_its_profile(tmp_path, plugin_dir):
    data_home = tmp_path / "data"
    host = start(tmp_path, plugin_dir, "first", data_home)
    sign_in_session(host, "c", "victim")
    stop(host)
    vault = data_home / "authbridge" / "vault"
    (victim,) = session_records(vault)
    victim.write_bytes(victim.read_bytes()[:40])        # a torn write

    host = start(tmp_path, plugin_dir, "second", data_home)
    sign_in_session(host, "s", "bystander")
    error = host.error("checkSignInStatus", {"provider": "c"})
    assert error["code"] == -32011 and error["data"]["reason"] == "corruptRecord"
    assert "quarantine" in error["message"]
    assert host.result("checkSignInStatus", {"provider": "c"})["state"] == "notSignedIn"
    assert host.result("checkSignInStatus", {"provider": "s"})["state"] == "signedIn"
    stop(host)
    assert len(list((vault / "quarantine").iterdir())) == 1, "kept aside, never deleted"


def test_a_loose_vault_folder_is_refused_with_a_clear_error(tmp_path, plugin_dir):
    data_home = tmp_path / "data"
    host = start(tmp_path, plugin_dir, "first", data_home)
    sign_in_session(host, "c", "x")
    stop(host)
    (data_home / "authbridge" / "vault").chmod(0o755)
    host = start(tmp_path, plugin_dir, "second", data_home)
    error = host.error("checkSignInStatus", {"provider": "c"})
    assert error["code"] == -32011 and error["data"]["reason"] == "insecurePermissions"
    assert "chmod 700" in error["message"]
    stop(host)


def test_require_secure_storage_fails_closed_without_a_keyring(tmp_path, plugin_dir):
    data_home = tmp_path / "data"
    host = start(tmp_path, plugin_dir, "first", data_home, "--require-secure-storage")
    error = host.error("requestOAuthTokens", {"provider": "c", "flow": "session", "sessionId": "x"})
    assert error["code"] == -32011 and error["data"]["reason"] == "noKey"
    stop(host)
    assert not (data_home / "authbridge" / "keys").exists(), "no key file was written"


def test_a_service_secret_opens_the_vault_and_a_wrong_one_is_refused(tmp_path, plugin_dir):
    data_home = tmp_path / "data"
    host = start(tmp_path, plugin_dir, "first", data_home, "--require-secure-storage",
                 env={"AUTHBRIDGE_VAULT_KEY": "a-long-random-service-secret-1234"})
    sign_in_session(host, "c", "svc")
    stop(host)
    host = start(tmp_path, plugin_dir, "second", data_home, env={"AUTHBRIDGE_VAULT_KEY": "another-long-secret-value-5678"})
    error = host.error("checkSignInStatus", {"provider": "c"})
    assert error["code"] == -32011 and error["data"]["reason"] == "wrongKey"
    stop(host)
    host = start(tmp_path, plugin_dir, "third", data_home, env={"AUTHBRIDGE_VAULT_KEY": "a-long-random-service-secret-1234"})
    assert host.result("checkSignInStatus", {"provider": "c"})["state"] == "signedIn"
    stop(host)
