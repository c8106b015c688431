"""The encrypted-file vault seen through the bridge: sessions survive a restart, files are
private and hold no token bytes, a damaged record signs out only its own profile."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import stat
from pathlib import Path

import pytest

from authbridge_testkit.paths import BUILD_DIR
from conftest import (DEFAULT_PROFILES, HOST_BIN, Host, host_command, session_records, sign_in_session, start_on_data_home,
                      stop_cleanly)


def start(tmp_path: Path, plugin_dir: Path, name: str, data_home: Path, *extra: str, env: dict | None = None) -> Host:
    return start_on_data_home(tmp_path, plugin_dir, name, data_home, *extra, env=env)


stop = stop_cleanly


def one_stored_session(tmp_path: Path, plugin_dir: Path, data_home: Path, name: str) -> tuple[Path, Path]:
    """A first host signs profile c in as `name` and stops: the vault folder and the one record in it."""
    host = start(tmp_path, plugin_dir, "first", data_home)
    sign_in_session(host, "c", name)
    stop(host)
    vault = data_home / "authbridge" / "vault"
    (record,) = session_records(vault)
    return vault, record


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
    vault, victim = one_stored_session(tmp_path, plugin_dir, data_home, "victim")
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


def test_without_the_cryptography_library_a_stored_session_is_an_error_and_is_kept(tmp_path, plugin_dir):
    """A host whose libAuthBridgeNettle.so is missing (a broken installation) cannot open
    records: that is an error naming the library, never a damaged record set aside or a sign-out."""
    data_home = tmp_path / "data"
    vault, record = one_stored_session(tmp_path, plugin_dir, data_home, "kept")
    before = record.read_bytes()

    lone = tmp_path / "lone" / "bin"
    lone.mkdir(parents=True)
    shutil.copy2(BUILD_DIR / "authbridge-host", lone / "authbridge-host")   # the host itself, alone
    argv, environment = host_command(tmp_path / "broken", [plugin_dir], profiles=DEFAULT_PROFILES)
    argv[0] = str(lone / "authbridge-host")
    environment["XDG_DATA_HOME"] = str(data_home)
    broken = Host(argv, environment, tmp_path / "broken")
    broken.initialize()
    for method in ("checkSignInStatus", "getAccessToken"):
        error = broken.error(method, {"provider": "c"})
        assert "libAuthBridgeNettle.so" in error["message"], error
        assert error["data"].get("reason") != "corruptRecord", error
    stop(broken)
    assert record.read_bytes() == before and not (vault / "quarantine").exists()

    host = start(tmp_path, plugin_dir, "again", data_home)
    assert host.result("checkSignInStatus", {"provider": "c"})["state"] == "signedIn"
    assert host.result("getAccessToken", {"provider": "c"})["accessToken"] == "at-kept"
    stop(host)


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
    secret = base64.b64encode(os.urandom(32)).decode()
    host = start(tmp_path, plugin_dir, "first", data_home, "--require-secure-storage", env={"AUTHBRIDGE_VAULT_KEY": secret})
    sign_in_session(host, "c", "svc")
    stop(host)
    host = start(tmp_path, plugin_dir, "second", data_home, env={"AUTHBRIDGE_VAULT_KEY": os.urandom(32).hex()})
    error = host.error("checkSignInStatus", {"provider": "c"})
    assert error["code"] == -32011 and error["data"]["reason"] == "wrongKey"
    stop(host)
    host = start(tmp_path, plugin_dir, "third", data_home, env={"AUTHBRIDGE_VAULT_KEY": secret})
    assert host.result("checkSignInStatus", {"provider": "c"})["state"] == "signedIn"
    stop(host)


@pytest.mark.parametrize("secret", [
    "a-long-random-service-secret-1234",          # a passphrase: HKDF adds no work against guessing it
    "correct horse battery staple and more words",
    "0" * 64,                                      # the right form, but not random
    pytest.param(base64.b64encode(os.urandom(24)).decode(), id="random-24-bytes"),   # random, but 24 bytes
])
def test_a_service_secret_weaker_than_a_random_32_byte_key_is_refused(tmp_path, plugin_dir, secret):
    data_home = tmp_path / "data"
    host = start(tmp_path, plugin_dir, "weak", data_home, env={"AUTHBRIDGE_VAULT_KEY": secret})
    assert any("AUTHBRIDGE_VAULT_KEY" in w for w in host.init_result.get("warnings", [])), host.init_result
    error = host.error("requestOAuthTokens", {"provider": "c", "flow": "session", "sessionId": "x"})
    assert error["code"] == -32011 and error["data"]["reason"] == "noKey"
    assert "32-byte" in error["message"] or "random" in error["message"]
    assert secret not in error["message"]
    stop(host)
    assert not list(data_home.rglob("*.vault")), "nothing stored"


@pytest.mark.parametrize("form", ["base64", "base64url-unpadded", "hex"])
def test_a_random_32_byte_service_key_is_accepted_in_each_documented_form(tmp_path, plugin_dir, form):
    raw = os.urandom(32)
    secret = {"base64": base64.b64encode(raw).decode(), "hex": raw.hex(),
              "base64url-unpadded": base64.urlsafe_b64encode(raw).decode().rstrip("=")}[form]
    host = start(tmp_path, plugin_dir, form, tmp_path / "data", env={"AUTHBRIDGE_VAULT_KEY": secret})
    assert sign_in_session(host, "c", "ok")["storage"] == {"backend": "encrypted-file", "protection": "encrypted"}
    stop(host)

#: First-time openers started together, and how many fresh vaults they open in turn.
OPENERS = 10
ROUNDS = 3


def open_together(tmp_path: Path, plugin_dir: Path, data_home: Path, tag: str, env: dict | None = None) -> list[str]:
    """OPENERS hosts on one fresh vault, each sending its first vault call at the same moment
    (all initialized first, then the requests written back to back); returns the errors."""
    hosts = [start(tmp_path, plugin_dir, f"{tag}-{index}", data_home, env=env) for index in range(OPENERS)]
    errors = []
    try:
        ids = [host.send_request("requestOAuthTokens", {"provider": "c", "flow": "session", "sessionId": f"first-{index}"})
               for index, host in enumerate(hosts)]
        for host, id_ in zip(hosts, ids):
            answer = host.wait_response(id_)
            if "error" in answer:
                errors.append(f"{host.workdir.name}: {answer['error']['data'].get('reason')}: {answer['error']['message']}")
    finally:
        for host in hosts:
            stop(host)
    return errors


def test_many_first_time_openers_create_one_key_and_every_later_host_opens_the_vault(tmp_path, plugin_dir):
    # Before: each opener that found no key file wrote its own (a replacing rename) and sealed
    # vault.check with it; losers got wrongKey, and a vault.check sealed with an overwritten key
    # left the vault closed for good.
    for round_ in range(ROUNDS):
        data_home = tmp_path / f"data{round_}"
        errors = open_together(tmp_path, plugin_dir, data_home, f"round{round_}")
        assert not errors, "first-time openers disagreed on the key:\n" + "\n".join(errors)
        later = start(tmp_path, plugin_dir, f"later{round_}", data_home)
        assert later.result("checkSignInStatus", {"provider": "c"})["state"] == "signedIn"
        stop(later)
        keys = data_home / "authbridge" / "keys"
        assert [p.name for p in keys.iterdir()] == ["vault.key"], "one key file, no leftovers"
        assert not list((data_home / "authbridge" / "vault").glob("*.tmp"))


def records_of(data_home: Path, profile: str) -> list[Path]:
    """A profile's record files: named by the first 16 bytes of SHA-256 of its name, in hex, then
    the account's (bridge-spec Storage)."""
    stem = hashlib.sha256(profile.encode()).hexdigest()[:32]
    return sorted((data_home / "authbridge" / "vault").glob(stem + "*.vault"))


def damage(path: Path, kind: str) -> None:
    if kind == "too large":
        path.write_bytes(b"x" * (17 << 20))    # the size of a Duke callback's 17 MiB access_token
    elif kind == "torn":
        path.write_bytes(path.read_bytes()[:40])
    elif kind == "wrong format":
        path.write_bytes(json.dumps({**json.loads(path.read_bytes()), "format": "something-else"}).encode())
    elif kind == "another record's copy":
        path.write_bytes(json.dumps({"format": "authbridge-vault", "version": 1, "profile": "c", "sealed": ""}).encode())
    elif kind == "not a file":
        path.unlink()
        os.mkfifo(path, 0o600)


@pytest.mark.parametrize("first", ["checkSignInStatus", "signOut", "removeProfile"])
@pytest.mark.parametrize("kind", ["too large", "torn", "wrong format", "another record's copy", "not a file"])
def test_an_unreadable_record_is_quarantined_and_the_profile_works_afterwards(tmp_path, plugin_dir, kind, first):
    # Before: a record over the read limit was never moved aside, so checkSignInStatus, signOut
    # and removeProfile on its profile answered -32011 for good (and a FIFO blocked the host).
    data_home = tmp_path / "data"
    host = start(tmp_path, plugin_dir, "first", data_home)
    sign_in_session(host, "c", "victim")
    sign_in_session(host, "s", "bystander")
    stop(host)
    (record,) = records_of(data_home, "c")
    damage(record, kind)

    host = start(tmp_path, plugin_dir, "second", data_home)
    params = {"name": "c"} if first == "removeProfile" else {"provider": "c"}
    answer = host.request(first, params)
    if "error" in answer:     # reported once, with where the record went
        assert answer["error"]["code"] == -32011 and answer["error"]["data"]["reason"] == "corruptRecord", answer
        assert "quarantine" in answer["error"]["message"]
    else:
        assert first == "removeProfile" and answer["result"] == {"removed": True}, "removeProfile sets it aside and succeeds"
    if first != "removeProfile":
        assert host.result("checkSignInStatus", {"provider": "c"})["state"] == "notSignedIn"
        assert host.result("signOut", {"provider": "c"})["signedOut"] is True
        assert host.result("removeProfile", {"name": "c"}) == {"removed": True}
    assert [a["provider"] for a in host.result("listAccounts", {})["accounts"]] == ["s"]
    assert host.result("checkSignInStatus", {"provider": "s"})["state"] == "signedIn"
    stop(host)
    vault = data_home / "authbridge" / "vault"
    assert len(list((vault / "quarantine").iterdir())) == 1, "kept aside, never deleted"
    assert not records_of(data_home, "c")
