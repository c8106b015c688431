"""Dynamic client registration (RFC 7591, issue 31) against an OpenID provider nobody here wrote:
the kit's OP on idpyoidc 5.0.0 with the library's own registration endpoint
(`IdpyOIDCServer(registration=True)`, idpyoidc_server.py --registration).

An `oidc` profile with only `{"issuer", "scopes"}` (no clientId): at its first sign-in the host
registers a public native client (token_endpoint_auth_method none, authorization_code +
refresh_token, exact loopback redirect URIs), signs in with it (PKCE S256, the ID token verified
with aud = the registered client id), keeps the registration in the vault per issuer for every
profile of that issuer, and registers again when the OP no longer knows it.

What idpyoidc 5.0.0's registration does, measured (requests as the host sends them):
- with no `jwks`/`jwks_uri` in the request, every registration failed: 400
  {"error": "invalid_configuration_request", "error_description": "'<the new client id>'"} — the
  endpoint logs `keyjar.key_summary(client_id)` (an f-string, evaluated at any log level) before
  the client has an entry in the key jar (cryptojwt IssuerNotFound), and a half-made client
  (id, salt, secret expiry, no redirect URIs) is left in the client db. The OP gives the client an
  empty key-jar entry first (a correction of the library, as the kit's others);
- the answer is 201 with a `client_secret` (expiring in 30 days) for every client, a public one
  too; `token_endpoint_auth_method: "none"` is dropped from the registration ("Capabilities
  mismatch", the answer names no method — RFC 7591 §2's default is then client_secret_basic)
  because `none` is missing from the OP's token_endpoint_auth_methods_supported. The OP advertises
  `none` and gives a `none` client no secret (the library's own set_secret=False): the answer then
  echoes "none" and has no secret. `registration="as-is"` leaves both as the library has them: the
  host then signs in as a client_secret_basic client with the secret it was given (tested too);
- the registration's `scope` ("openid offline_access") is dropped too: the library compares the
  whole space-separated string with scopes_supported as one value. The client gets the OP's
  default scopes, which include openid and offline_access (the sign-in asks for those);
- redirect URIs match exactly: a registered URI with another port is refused 400 invalid_request
  "RedirectURIError:Doesn't match any registered uris", one with a query "No registered query
  part"; loopback http URIs are accepted for application_type native;
- PKCE is the OP's (essential, S256), not the client's; public clients authenticate at the token
  and revocation endpoints by client_id alone ("public");
- the host's probe of a stored registration (a code grant with a made-up code): a known client is
  answered 400 invalid_grant "Unknown code", an unknown one 401 invalid_client "Unknown Client ID";
- the OP keeps registrations in memory only (its client db is configuration): a restart forgets
  them, as a server that lost its registrations would.
"""

from __future__ import annotations

import base64
import json
import urllib.parse
from pathlib import Path

import pytest

from authbridge_testkit.idpyoidc_op import IdpyOIDCServer
from authbridge_testkit.openid_servers import TokenEndpointRecorder
from conftest import sign_in_external

CONFIGURATION_ERROR = -32013
NOT_SIGNED_IN = -32001
SCOPES = ["openid", "offline_access"]


@pytest.fixture
def idp(tmp_path):
    """Factory: idp(registration=True) → a started idpyoidc OP, stopped at teardown."""
    servers: list[IdpyOIDCServer] = []

    def start(registration: bool = True) -> IdpyOIDCServer:
        server = IdpyOIDCServer(tmp_path / f"op{len(servers)}", registration=registration).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


class RegisteredClientBrowser:
    """The OP as `sign_in_external` drives it for a client the host registered: the browser
    signs the test user in; the redirect is the host's own (its progress's callbackPrefix)."""

    def __init__(self, op: IdpyOIDCServer) -> None:
        self.op = op
        self.authorize_prefix = op.authorize_prefix
        self.redirect_uri = None

    def browse(self, url: str, **user: str) -> str:
        query = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(url).query))
        assert query["client_id"] in self.op.registered_clients(), "the sign-in uses the registered client"
        return self.op.browse(url, **user)


def settings(op: IdpyOIDCServer) -> dict:
    return {"issuer": op.issuer, "scopes": list(SCOPES)}


def jwt_claims(token: str) -> dict:
    payload = token.split(".")[1]
    return json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))


def id_tokens(op: IdpyOIDCServer) -> list[dict]:
    """The claims of every ID token the OP handed out (JWTs with a nonce; the access tokens have none)."""
    found = []
    for secret in op.handed_out():
        if secret.count(".") == 2:
            claims = jwt_claims(secret)
            if "nonce" in claims:
                found.append(claims)
    return found


def test_an_issuer_alone_registers_a_public_native_client_signs_in_refreshes_and_signs_out(start_host, oidc_plugin_dir, idp):
    op = idp()
    host = start_host([oidc_plugin_dir], profiles={"a": {"plugin": "oidc", "settings": settings(op)}})
    info = host.result("configureProfile", {"name": "b", "plugin": "oidc", "settings": settings(op)})
    assert info["status"] == "ready" and "dynamicClient" not in info, info
    assert op.registered_clients() == {}, "nothing is registered before a sign-in"

    status = sign_in_external(host, RegisteredClientBrowser(op), "a")
    assert status["dynamicClient"] is True and status["account"]["id"] == op.sub(), status

    # RFC 7591 as the OP kept it: one public native client, exact loopback redirect URIs, the app's name.
    (client_id, client), = op.registered_clients().items()
    assert client["token_endpoint_auth_method"] == "none" and client["has_client_secret"] is False, client
    assert client["application_type"] == "native" and client["client_name"] == "contract-tests"
    assert sorted(client["grant_types"]) == ["authorization_code", "refresh_token"]
    assert client["response_types"] == ["code"]
    uris = [uri for uri, _ in client["redirect_uris"]]
    assert len(uris) == 3 and len({urllib.parse.urlsplit(uri).port for uri in uris}) == 3
    assert all(uri.startswith("http://127.0.0.1:") and uri.endswith("/callback") for uri in uris), uris

    # The ID token the host verified was issued to the registered client.
    (claims,) = id_tokens(op)
    assert claims["aud"] in (client_id, [client_id]) and claims["sub"] == op.sub() and claims["iss"] == op.issuer

    first = host.result("getAccessToken", {"provider": "a"})["accessToken"]
    introspected = op.introspection(first)
    assert introspected["active"] and introspected["client_id"] == client_id and introspected["sub"] == op.sub()
    refreshed = host.result("getAccessToken", {"provider": "a", "forceRefresh": True})["accessToken"]
    assert refreshed != first and op.introspect(refreshed)
    assert op.stats()["refreshes"] == 1

    # Another profile of the issuer uses the stored registration.
    status = sign_in_external(host, RegisteredClientBrowser(op), "b")
    assert status["dynamicClient"] is True and status["account"]["id"] == op.sub()
    assert list(op.registered_clients()) == [client_id], "exactly one registration at the OP"
    assert op.introspection(host.result("getAccessToken", {"provider": "b"})["accessToken"])["client_id"] == client_id
    profiles = {p["name"]: p for p in host.result("listProviders")["profiles"]}
    assert profiles["a"]["dynamicClient"] is True and profiles["b"]["dynamicClient"] is True

    # Sign-out revokes at the OP (as the public client: client_id alone).
    revocations = op.stats()["revocations"]
    result = host.result("signOut", {"provider": "a"})
    assert "refresh_token" in result["revoked"], result
    assert op.stats()["revocations"] > revocations
    assert not op.introspect(refreshed), "the access token is revoked at the OP"
    assert host.result("checkSignInStatus", {"provider": "a"})["state"] == "notSignedIn"
    assert host.result("checkSignInStatus", {"provider": "b"})["state"] == "signedIn", "the other profile's session is its own"


def test_the_registration_is_kept_across_host_restarts(start_host, oidc_plugin_dir, idp, tmp_path):
    op = idp()
    data_home = tmp_path / "data-home"
    profiles = {"a": {"plugin": "oidc", "settings": settings(op)}}
    host = start_host([oidc_plugin_dir], profiles=profiles, env={"XDG_DATA_HOME": str(data_home)})
    sign_in_external(host, RegisteredClientBrowser(op), "a")
    host.stop()

    again = start_host([oidc_plugin_dir], profiles={**profiles, "c": {"plugin": "oidc", "settings": settings(op)}},
                       env={"XDG_DATA_HOME": str(data_home)})
    assert again.result("checkSignInStatus", {"provider": "a"})["state"] == "signedIn"
    sign_in_external(again, RegisteredClientBrowser(op), "c")
    assert len(op.registered_clients()) == 1, "the vault's registration was used"


def test_a_registration_the_op_forgot_is_made_again(start_host, oidc_plugin_dir, idp):
    op = idp()
    host = start_host([oidc_plugin_dir], profiles={"a": {"plugin": "oidc", "settings": settings(op)},
                                                   "b": {"plugin": "oidc", "settings": settings(op)}})
    sign_in_external(host, RegisteredClientBrowser(op), "a")
    (old_client,) = op.registered_clients()
    op.stop()
    op.start()   # the OP's client db is not kept: the registration is gone, the sessions are not
    assert op.registered_clients() == {}

    # The host's probe (a made-up code: 401 invalid_client) sees it before sending the user there.
    sign_in_external(host, RegisteredClientBrowser(op), "b")
    (new_client,) = op.registered_clients()
    assert new_client != old_client
    assert op.introspection(host.result("getAccessToken", {"provider": "b"})["accessToken"])["client_id"] == new_client

    # The forgotten client's session ends on the OP's invalid_client; signing in again works.
    error = host.error("getAccessToken", {"provider": "a", "forceRefresh": True})
    assert error["code"] == NOT_SIGNED_IN, error
    sign_in_external(host, RegisteredClientBrowser(op), "a")
    assert list(op.registered_clients()) == [new_client]


def test_without_a_registration_endpoint_a_profile_without_client_id_is_refused(start_host, oidc_plugin_dir, idp):
    op = idp(registration=False)
    assert "registration_endpoint" not in op.metadata
    host = start_host([oidc_plugin_dir])
    error = host.error("configureProfile", {"name": "a", "plugin": "oidc", "settings": settings(op)})
    assert error["code"] == CONFIGURATION_ERROR and error["data"]["reason"] == "missingSetting", error
    assert "dynamic client registration" in error["message"] and "clientId" in error["message"], error


def test_the_library_s_own_answer_a_secret_and_no_method_makes_a_client_secret_basic_client(start_host, oidc_plugin_dir, idp, request):
    """idpyoidc as it is: `none` not advertised, a secret for every client, no method in the
    answer (RFC 7591 §2: client_secret_basic). The host keeps the secret in the vault and
    authenticates with it; the leak scan covers it (the OP lists it among what it handed out)."""
    op = idp(registration="as-is")
    assert "none" not in op.metadata["token_endpoint_auth_methods_supported"]
    recorder = TokenEndpointRecorder(op.token_endpoint)   # to see how the client authenticates
    request.addfinalizer(recorder.close)
    profile = {**settings(op), "tokenEndpoint": recorder.url, "dpop": False}   # a DPoP proof names the relay's URL
    host = start_host([oidc_plugin_dir], profiles={"a": {"plugin": "oidc", "settings": profile}})
    status = sign_in_external(host, RegisteredClientBrowser(op), "a")
    assert status["dynamicClient"] is True and status["account"]["id"] == op.sub()
    (client_id, client), = op.registered_clients().items()
    assert client["has_client_secret"] is True and "token_endpoint_auth_method" not in client, client

    token = host.result("getAccessToken", {"provider": "a", "forceRefresh": True})["accessToken"]
    assert op.introspection(token)["client_id"] == client_id and op.stats()["refreshes"] == 1
    assert recorder.grants("authorization_code") and recorder.grants("refresh_token")
    for exchange in recorder.grants("authorization_code") + recorder.grants("refresh_token"):
        assert "client_id" not in exchange["form"] and "client_secret" not in exchange["form"], "client_secret_basic: in the header"
    result = host.result("signOut", {"provider": "a"})
    assert "refresh_token" in result["revoked"] and not op.introspect(token), result
