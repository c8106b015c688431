"""What bridge-spec says about things a driver written from the spec alone found it silent or
wrong on, held to the real host: the vault's file names and `vault.check`, and which reason
`checkSignInStatus` gives once a session has ended."""

from __future__ import annotations

import hashlib
import json
import re

from conftest import REPO, SPEC_PATH, sign_in_session

SPEC_README = (REPO / "bridge-spec" / "README.md").read_text(encoding="utf-8")


def first_32_hex_digits(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def test_vault_files_are_named_as_the_spec_says(start_host, plugin_dir):
    host = start_host([plugin_dir], profiles={"c": {"plugin": "ctest", "settings": {"server": "https://ctest.example"}}})
    account = sign_in_session(host, "c", "names")["account"]["id"]
    vault = host.workdir / "xdg-data" / "authbridge" / "vault"
    names = {path.name for path in vault.iterdir() if path.is_file()}
    assert f"{first_32_hex_digits('c')}-{first_32_hex_digits(account)}.vault" in names
    assert "vault.check" in names
    storage = SPEC_README.split("\n## Storage\n", 1)[1]
    assert "the first 32 hex digits (128 bits) of the SHA-256 of the profile name" in storage
    assert "`vault.check`" in storage


def test_check_sign_in_status_says_no_tokens_after_any_ending(start_host, plugin_dir):
    host = start_host([plugin_dir], profiles={"c": {"plugin": "ctest", "settings": {"server": "https://ctest.example"}}})
    sign_in_session(host, "c", "bye")
    host.result("signOut", {"provider": "c"})
    assert host.result("checkSignInStatus", {"provider": "c"})["reason"] == "noTokens"

    sign_in_session(host, "c", "revoked")   # its refresh token is refused with invalid_grant
    error = host.error("getAccessToken", {"provider": "c", "forceRefresh": True})
    assert (error["code"], error["data"]["reason"]) == (-32001, "revoked")
    assert host.result("checkSignInStatus", {"provider": "c"})["reason"] == "noTokens"

    # The spec lists only reasons a status can carry: userSignedOut and invalidGrant are
    # session/changed words (signOut; a refusal other than invalid_grant), never a status's.
    document = json.loads(SPEC_PATH.read_text(encoding="utf-8"))
    not_signed_in = document["components"]["schemas"]["SignInStatus"]["allOf"][1]["then"]["properties"]["reason"]
    assert not {"userSignedOut", "invalidGrant"} & set(not_signed_in["examples"])
    row = re.search(r"^\| `notSignedIn` \|(.*)$", SPEC_README, re.M).group(1)
    assert "`userSignedOut` for `signOut`" in row and "invalidGrant" not in row


def test_revoked_token_names_are_the_rfc_7009_hints():
    document = json.loads(SPEC_PATH.read_text(encoding="utf-8"))
    schemas = document["components"]["schemas"]
    for description in (schemas["SignOutResult"]["properties"]["revoked"]["items"]["description"],
                        schemas["RevocationFailure"]["properties"]["token"]["description"]):
        assert "refresh_token" in description and "accessToken" not in description
