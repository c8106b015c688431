"""DPoP (RFC 9449, issue 29 §1) end to end against the two real servers of the test kit that
advertise it: glewlwyd (Debian's package, C) and the idpyoidc OP (PyPI). Both list
`dpop_signing_alg_values_supported`, so an `oidc` profile with the default `"dpop": "auto"` signs
in with a key of its own: every token request carries a proof, the tokens come back bound
(`token_type` DPoP, the access token's `cnf.jkt`), and the host's own requests (`fetch`, userinfo)
and a frontend's (the headers of `getAccessToken` with `method` and `url`) carry proofs too.

Before issue 29 the host sent no proof: the same scenarios got Bearer tokens, and the token a
thief copied from a frontend worked anywhere.
"""

from __future__ import annotations

import base64
import hashlib
import json
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from conftest import begin_sign_in, sign_in_external
from authbridge_testkit.isolation import isolated_environment
from authbridge_testkit.openid_servers import make_server, server_fixture

DPOP_SERVERS = ["glewlwyd", "idpyoidc"]


op = server_fixture(DPOP_SERVERS)


def discovery(op) -> dict[str, Any]:
    with urllib.request.urlopen(f"{op.issuer.rstrip('/')}/.well-known/openid-configuration", timeout=30) as response:
        return json.load(response)


def profile(op, **settings) -> dict:
    return {"p": {"plugin": "oidc", "settings": op.settings(**settings)}}


def b64decode(part: str) -> bytes:
    return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))


def jwt_parts(token: str) -> tuple[dict[str, Any], dict[str, Any]]:
    head, payload, _ = token.split(".")
    return json.loads(b64decode(head)), json.loads(b64decode(payload))


def thumbprint(jwk: dict[str, Any]) -> str:
    """RFC 7638 of an EC, OKP or RSA key."""
    required = {"EC": ("crv", "kty", "x", "y"), "OKP": ("crv", "kty", "x"), "RSA": ("e", "kty", "n")}[jwk["kty"]]
    members = {key: jwk[key] for key in required}
    canonical = json.dumps(members, separators=(",", ":"), sort_keys=True).encode()
    return base64.urlsafe_b64encode(hashlib.sha256(canonical).digest()).rstrip(b"=").decode()


def call(url: str, headers: dict[str, str], method: str = "GET") -> int:
    request = urllib.request.Request(url, headers=headers, method=method)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


def access_claims(token: str) -> dict[str, Any] | None:
    """The claims of a JWT access token (both servers issue them), else None."""
    return jwt_parts(token)[1] if token.count(".") == 2 else None


def test_sign_in_binds_the_tokens_to_a_key_the_host_keeps(start_host, oidc_plugin_dir, op):
    """The servers issue DPoP tokens only for a code grant that came with a valid proof; the
    proofs the host hands a frontend are of the same key, which never leaves the host."""
    host = start_host([oidc_plugin_dir], profiles=profile(op))
    status = sign_in_external(host, op, "p")
    assert status["tokenType"] == "DPoP", status
    userinfo = discovery(op)["userinfo_endpoint"]
    token = host.result("getAccessToken", {"provider": "p"})
    assert token["tokenType"] == "DPoP" and token["headers"]["Authorization"] == f"DPoP {token['accessToken']}"
    assert "DPoP" not in token["headers"], "no proof without the request's URL"
    with_proof = host.result("getAccessToken", {"provider": "p", "method": "GET", "url": userinfo})
    header, claims = jwt_parts(with_proof["headers"]["DPoP"])
    assert header["typ"] == "dpop+jwt" and header["alg"] == "ES256" and set(header["jwk"]) == {"kty", "crv", "x", "y"}, header
    assert claims["htm"] == "GET" and claims["htu"] == userinfo and claims["jti"] and isinstance(claims["iat"], int)
    bound = access_claims(token["accessToken"])
    if bound is not None:
        assert bound["cnf"]["jkt"] == thumbprint(header["jwk"]), "the token is bound to the key of the proofs"
    assert host.result("checkSignInStatus", {"provider": "p"})["tokenType"] == "DPoP"


@pytest.mark.parametrize("isolation", ["process", "none"])
def test_the_key_proves_every_refresh_and_a_stolen_token_is_useless(start_host, oidc_plugin_dir, op, isolation):
    """The plugin in its runner (a user's folder: the default) or inside the host (as the bundled
    plugins run): either way its standard steps' requests get their proofs from the host."""
    host = start_host([oidc_plugin_dir], profiles=profile(op), extra_args=["--plugin-isolation", isolation])
    sign_in_external(host, op, "p")
    stolen = host.result("getAccessToken", {"provider": "p"})["accessToken"]
    userinfo = discovery(op)["userinfo_endpoint"]
    # A thief with the token and no key: refused whichever scheme it tries.
    assert call(userinfo, {"Authorization": f"DPoP {stolen}"}) in (400, 401)
    assert call(userinfo, {"Authorization": f"Bearer {stolen}"}) in (400, 401)
    # The refresh token is bound too: the server renews it only with a proof of the same key.
    refreshed = host.result("getAccessToken", {"provider": "p", "forceRefresh": True})
    assert refreshed["accessToken"] != stolen and refreshed["tokenType"] == "DPoP"
    if access_claims(stolen) is not None:
        assert access_claims(refreshed["accessToken"])["cnf"] == access_claims(stolen)["cnf"]
    answer = host.result("fetch", {"provider": "p", "url": userinfo})
    assert answer["status"] == 200, answer


def test_fetch_sends_a_proof_with_the_token(start_host, oidc_plugin_dir, op):
    host = start_host([oidc_plugin_dir], profiles=profile(op))
    status = sign_in_external(host, op, "p")
    answer = host.result("fetch", {"provider": "p", "url": discovery(op)["userinfo_endpoint"]})
    assert answer["status"] == 200, answer
    assert json.loads(answer["body"])["sub"] == status["account"]["id"]


@pytest.mark.parametrize("op", ["glewlwyd"], indirect=True)
def test_refreshes_in_a_row_are_never_refused_for_the_time_of_their_proof(start_host, oidc_plugin_dir, op):
    """glewlwyd refuses a proof whose iat is ahead of its clock, with no leeway, and its clock
    (time(2), coarse) can still read the previous second for a few milliseconds after the host's
    has turned: with iat the current second, about one refresh in 150 was refused "invalid_dpop_proof:
    Invalid DPoP" (its log: "Invalid iat"). Proofs are dated a second earlier (DPoPKey.issuedAt)."""
    host = start_host([oidc_plugin_dir], profiles=profile(op))
    sign_in_external(host, op, "p")
    for attempt in range(300):
        answer = host.request("getAccessToken", {"provider": "p", "forceRefresh": True})
        assert "result" in answer, f"refresh {attempt + 1} of 300: {answer.get('error')}"


def test_a_frontends_own_request_with_the_headers_of_getAccessToken(start_host, oidc_plugin_dir, op):
    host = start_host([oidc_plugin_dir], profiles=profile(op))
    sign_in_external(host, op, "p")
    userinfo = discovery(op)["userinfo_endpoint"]
    token = host.result("getAccessToken", {"provider": "p", "method": "GET", "url": userinfo + "?schema=openid#top"})
    assert set(token["headers"]) == {"Authorization", "DPoP"}, token["headers"].keys()
    claims = jwt_parts(token["headers"]["DPoP"])[1]
    assert claims["htu"] == userinfo, "htu without query and fragment"
    assert claims["ath"] == base64.urlsafe_b64encode(hashlib.sha256(token["accessToken"].encode()).digest()).rstrip(b"=").decode()
    assert call(userinfo, token["headers"]) == 200
    # RFC 9449 §11.1: a proof seen before may be refused; glewlwyd keeps the jti of the proofs it
    # accepted, idpyoidc 5.0.0 does not (its window is iat's) — what the host can do is never send one twice.
    if op.name == "glewlwyd":
        assert call(userinfo, token["headers"]) == 401, "a replayed proof is refused"
    # A proof made for another request is refused: another method, another URL.
    post = host.result("getAccessToken", {"provider": "p", "method": "DELETE", "url": userinfo})
    assert call(userinfo, post["headers"]) in (400, 401)
    other = host.result("getAccessToken", {"provider": "p", "method": "GET", "url": op.token_endpoint})
    assert call(userinfo, other["headers"]) in (400, 401)
    # Each answer has its own proof.
    again = host.result("getAccessToken", {"provider": "p", "method": "GET", "url": userinfo})
    assert jwt_parts(again["headers"]["DPoP"])[1]["jti"] != claims["jti"]
    assert call(userinfo, again["headers"]) == 200


@pytest.mark.parametrize("op", ["glewlwyd"], indirect=True)   # idpyoidc has no device grant
def test_a_device_sign_in_is_bound_too(start_host, oidc_plugin_dir, op):
    """RFC 8628's device_code grant carries a proof like the code grant: the tokens are bound."""
    host = start_host([oidc_plugin_dir], profiles={"tv": {"plugin": "oidc", "settings": op.settings()}})
    pending = host.send_request("requestOAuthTokens", {"provider": "tv", "flow": "device"})
    shown = host.wait_for_notification("signIn/progress", lambda p: p["requestId"] == pending and p["stage"] == "deviceCode")
    op.approve_device(shown["userCode"], shown["verificationUri"])
    assert host.wait_response(pending)["result"]["tokenType"] == "DPoP"
    answer = host.result("fetch", {"provider": "tv", "url": discovery(op)["userinfo_endpoint"]})
    assert answer["status"] == 200, answer


def test_dpop_false_keeps_bearer_tokens(start_host, oidc_plugin_dir, op):
    host = start_host([oidc_plugin_dir], profiles=profile(op, dpop=False))
    status = sign_in_external(host, op, "p")
    assert status["tokenType"] == "Bearer"
    token = host.result("getAccessToken", {"provider": "p", "method": "GET", "url": discovery(op)["userinfo_endpoint"]})
    assert token["headers"] == {"Authorization": f"Bearer {token['accessToken']}"}


@pytest.mark.parametrize("pushed", [False, True], ids=["url", "par"])
def test_the_authorization_request_names_the_key(start_host, oidc_plugin_dir, op, pushed):
    """RFC 9449 §10: dpop_jkt binds the code to the key that will redeem it — in the browser URL,
    or with PAR (RFC 9126, the servers' default here) in the pushed request."""
    from test_par_and_logout import PushRelay
    relay = PushRelay(discovery(op)["pushed_authorization_request_endpoint"], expires_in=600)
    try:
        settings = {"pushedAuthorizationRequestEndpoint": relay.url} if pushed else {"par": False}
        host = start_host([oidc_plugin_dir], profiles=profile(op, **settings))
        pending, opened = begin_sign_in(host, "p", flow="external")
        query = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(opened["url"]).query))
        host.result("completeSignIn", {"provider": "p", "callbackUrl": op.browse(opened["url"])})
        assert host.wait_response(pending)["result"]["tokenType"] == "DPoP"
        proof = host.result("getAccessToken", {"provider": "p", "url": discovery(op)["userinfo_endpoint"]})["headers"]["DPoP"]
        sent = relay.pushes[0] if pushed else query
        assert ("request_uri" in query) == pushed and "dpop_jkt" not in (query if pushed else {})
        assert sent["dpop_jkt"] == thumbprint(jwt_parts(proof)[0]["jwk"])
    finally:
        relay.close()


def test_dpop_required_is_refused_by_a_server_without_it(start_host, oidc_plugin_dir, tmp_path):
    server = make_server("dot", tmp_path / "dot").start()
    try:
        host = start_host([oidc_plugin_dir], profiles={"p": {"plugin": "oidc", "settings": server.settings(dpop=True)}})
        error = host.error("requestOAuthTokens", {"provider": "p", "flow": "external"})
        assert error["data"]["reason"] == "dpopUnsupported", error
        assert "dpop_signing_alg_values_supported" in error["message"]
    finally:
        server.stop()


@pytest.fixture(scope="module")
def nonce_server(tmp_path_factory):
    """glewlwyd that demands a server nonce in every proof (RFC 9449 §8)."""
    server = make_server("glewlwyd", tmp_path_factory.mktemp("glewlwyd-nonce"),
                         oidc_overrides={"oauth-dpop-nonce-mandatory": True, "oauth-dpop-nonce-counter": 5}).start()
    yield server
    server.stop()


def test_a_server_nonce_is_fetched_and_kept(start_host, oidc_plugin_dir, nonce_server):
    """Every token request of this glewlwyd needs the server's nonce: the first is refused with
    use_dpop_nonce and a DPoP-Nonce; the host asks once more with it, and keeps it for the next."""
    host = start_host([oidc_plugin_dir], profiles=profile(nonce_server))
    assert sign_in_external(host, nonce_server, "p")["tokenType"] == "DPoP"
    token = host.result("getAccessToken", {"provider": "p", "forceRefresh": True})
    assert token["tokenType"] == "DPoP"
    answer = host.result("fetch", {"provider": "p", "url": discovery(nonce_server)["userinfo_endpoint"]})
    assert answer["status"] == 200, answer


def cli(host_workdir: Path, plugin_dir: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    """`authbridge …` on the vault and configuration of a host that has stopped, without an agent."""
    from conftest import HOST_BIN
    command, rest = args[0], list(args[1:])
    argv = [str(HOST_BIN), command, "--no-default-plugins", "--plugins", str(plugin_dir),
            "--config", str(host_workdir / "config.json"), "--no-agent", *rest]
    return subprocess.run(argv, env=isolated_environment(host_workdir), input=stdin, capture_output=True, text=True, timeout=120)


def test_the_command_line_gives_one_requests_headers_and_bearer_only_consumers_a_clear_no(start_host, oidc_plugin_dir, op):
    host = start_host([oidc_plugin_dir], profiles=profile(op))
    sign_in_external(host, op, "p")
    host.stop()
    userinfo = discovery(op)["userinfo_endpoint"]
    done = cli(host.workdir, oidc_plugin_dir, "token", "p", "--header", "GET", userinfo)
    assert done.returncode == 0, done.stderr
    headers = dict(line.split(": ", 1) for line in done.stdout.splitlines())
    assert set(headers) == {"Authorization", "DPoP"} and headers["Authorization"].startswith("DPoP ")
    assert call(userinfo, headers) == 200, "the printed headers are what the server needs"
    status = cli(host.workdir, oidc_plugin_dir, "status")
    assert status.returncode == 0 and "signedIn, DPoP-bound" in status.stdout, status.stdout
    plain = cli(host.workdir, oidc_plugin_dir, "token", "p")
    assert plain.returncode == 0 and "--header METHOD URL" in plain.stderr
    # git, kubectl and `exec` would send the token alone: refused, and said why.
    git = cli(host.workdir, oidc_plugin_dir, "git-credential", "--profile", "p", "get", stdin="protocol=https\nhost=git.example\n\n")
    assert git.returncode == 1 and "DPoP-bound" in git.stderr and "password=" not in git.stdout, git
    run = cli(host.workdir, oidc_plugin_dir, "exec", "p", "--", "env")
    assert run.returncode == 1 and "DPoP-bound" in run.stderr and headers["Authorization"][5:] not in run.stdout, run.stderr


def test_the_key_lives_in_the_vault_with_the_session(start_host, oidc_plugin_dir, op, tmp_path):
    """Another host on the same vault (the next run, the agent, the CLI) refreshes the bound grant
    with the same key: the server renews it only with a proof of that key. The key is in the
    session's sealed record and nowhere else."""
    shared = tmp_path / "data"
    first = start_host([oidc_plugin_dir], profiles=profile(op), env={"XDG_DATA_HOME": str(shared)})
    sign_in_external(first, op, "p")
    bound = access_claims(first.result("getAccessToken", {"provider": "p"})["accessToken"])
    first.stop()
    second = start_host([oidc_plugin_dir], profiles=profile(op), env={"XDG_DATA_HOME": str(shared)})
    token = second.result("getAccessToken", {"provider": "p", "forceRefresh": True})
    assert token["tokenType"] == "DPoP"
    if bound is not None:
        assert access_claims(token["accessToken"])["cnf"] == bound["cnf"], "the same key"
    assert second.result("fetch", {"provider": "p", "url": discovery(op)["userinfo_endpoint"]})["status"] == 200
    stored = b"".join(path.read_bytes() for path in shared.rglob("*") if path.is_file())
    assert b"dpopKey" not in stored and b'"d":' not in stored, "nothing of the key in the clear on disk"


@pytest.mark.parametrize("algorithm", ["EdDSA", "RS256"])
def test_a_server_that_lists_only_another_algorithm_gets_proofs_in_it(start_host, oidc_plugin_dir, tmp_path, algorithm):
    """RFC 9449 §5.1: the key is made for an algorithm the server lists — ES256 unless it lists
    only others; then EdDSA, then RS256."""
    server = make_server("idpyoidc", tmp_path / "op", dpop_algs=[algorithm, "PS256"]).start()
    try:
        host = start_host([oidc_plugin_dir], profiles=profile(server))
        assert sign_in_external(host, server, "p")["tokenType"] == "DPoP"
        userinfo = discovery(server)["userinfo_endpoint"]
        token = host.result("getAccessToken", {"provider": "p", "method": "GET", "url": userinfo})
        header = jwt_parts(token["headers"]["DPoP"])[0]
        assert header["alg"] == algorithm and header["jwk"]["kty"] == ("OKP" if algorithm == "EdDSA" else "RSA"), header
        assert call(userinfo, token["headers"]) == 200
        assert host.result("getAccessToken", {"provider": "p", "forceRefresh": True})["tokenType"] == "DPoP"
        assert host.result("fetch", {"provider": "p", "url": userinfo})["status"] == 200
    finally:
        server.stop()


def test_sign_out_revokes_a_bound_session(start_host, oidc_plugin_dir, op):
    """RFC 7009 revocation needs no proof: a DPoP-bound grant is revoked like a bearer one (as the
    confidential client: glewlwyd refuses a public client's revocation)."""
    host = start_host([oidc_plugin_dir], profiles=profile(op, confidential=True))
    assert sign_in_external(host, op, "p")["tokenType"] == "DPoP"
    access = host.result("getAccessToken", {"provider": "p"})["accessToken"]
    assert op.introspect(access)
    result = host.result("signOut", {"provider": "p"})
    assert "refresh_token" in result["revoked"] and not result["failures"], result
    assert not op.introspect(access), "the access token is revoked at the server"
    assert host.result("checkSignInStatus", {"provider": "p"})["state"] == "notSignedIn"
