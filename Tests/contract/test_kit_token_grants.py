"""The test kit's side of issue 30 (per-request resources, client credentials, client assertions,
token exchange), proved with plain HTTP against the real servers: no AuthBridge host here, only
what the host's scenarios will rely on — that glewlwyd and the idpyoidc OP, as the kit sets them
up, really do what openid_servers.py says, and answer refusals the way the scenarios will expect.

Each sign-in is the user in the kit's browser (`browse`) with a PKCE code exchanged by hand;
resource servers are the kit's own (`op.resource_server`), which introspect at the server.

What the two servers do differently (measured, glewlwyd 2.7.5 and idpyoidc 5.0.0 + the kit's OP):
- glewlwyd issues a token for ONE resource (aud a string): several `resource` at the token endpoint
  are refused (invalid_target); without `resource` the aud is the scope. idpyoidc takes several
  (aud a list); without `resource` the aud is the authorization request's resources.
- a refresh `scope` outside the grant: glewlwyd ignores `scope` on refresh altogether (200, the
  grant's scopes), idpyoidc refuses (400 invalid_request "Invalid refresh scopes"); a narrower
  `scope` narrows the token at idpyoidc only.
- client assertions: glewlwyd wants aud == the token endpoint (a string; the issuer or an array is
  refused), a jti used once, exp at most about an hour ahead, a kid; any fault is 403 with an empty
  body. idpyoidc takes the token endpoint or an array holding it (not the issuer alone), refuses a
  jti seen before, accepts no jti, any exp in the future and no kid; a fault is 401 invalid_client.
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

import pytest

from authbridge_testkit.openid_servers import (CONFIDENTIAL_CLIENT, CONFIDENTIAL_SECRET, JWT_CLIENT, PUBLIC_CLIENT,
                                               client_assertion, server_fixture)

op = server_fixture(["glewlwyd", "idpyoidc"])

JWT_BEARER = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"
TOKEN_EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange"
ACCESS_TOKEN = "urn:ietf:params:oauth:token-type:access_token"
REFRESH_TOKEN = "urn:ietf:params:oauth:token-type:refresh_token"
ID_TOKEN = "urn:ietf:params:oauth:token-type:id_token"
UNKNOWN_RESOURCE = "http://127.0.0.1:9/unknown"


# ── Plain HTTP ───────────────────────────────────────────────────────────────


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def post(url: str, form: list[tuple[str, str]], headers: dict[str, str] | None = None) -> tuple[int, Any]:
    """(status, JSON body, or None for an empty one)."""
    request = urllib.request.Request(url, data=urllib.parse.urlencode(form).encode(), headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            status, body = response.status, response.read()
    except urllib.error.HTTPError as answer:
        status, body = answer.code, answer.read()
    return status, json.loads(body) if body else None


def get(url: str, token: str) -> tuple[int, dict[str, Any], str]:
    """A resource server's answer: (status, JSON body, WWW-Authenticate)."""
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.load(response), ""
    except urllib.error.HTTPError as answer:
        return answer.code, json.loads(answer.read() or b"{}"), answer.headers.get("WWW-Authenticate", "")


def token(op, form: dict[str, Any] | list[tuple[str, str]], client: str = CONFIDENTIAL_CLIENT, auth: str = "basic") -> tuple[int, Any]:
    """A token request authenticated as `client` with `auth`: basic, post, none (public),
    client_secret_jwt or private_key_jwt (assertions as the kit's client_assertion makes them)."""
    pairs = list(form.items()) if isinstance(form, dict) else list(form)
    pairs = [(name, item) for name, value in pairs for item in (value if isinstance(value, list) else [value])]
    headers: dict[str, str] = {}
    if auth == "basic":
        headers["Authorization"] = "Basic " + base64.b64encode(f"{client}:{CONFIDENTIAL_SECRET}".encode()).decode()
    elif auth == "post":
        pairs += [("client_id", client), ("client_secret", CONFIDENTIAL_SECRET)]
    elif auth == "none":
        pairs += [("client_id", client)]
    else:
        assertion = (client_assertion(client, op.token_endpoint, key_file=op.jwt_client_key_file) if auth == "private_key_jwt"
                     else client_assertion(client, op.token_endpoint, secret=CONFIDENTIAL_SECRET))
        pairs += [("client_id", client), ("client_assertion_type", JWT_BEARER), ("client_assertion", assertion)]
    return post(op.token_endpoint, pairs, headers)


def user_scopes(op) -> list[str]:
    """Scopes that bring a refresh token (idpyoidc: offline_access, with prompt=consent)."""
    return ["openid", "read"] if op.name == "glewlwyd" else ["openid", "offline_access", "profile"]


def sign_in(op, resources: list[str] = (), token_resources: list[str] | None = None, client: str = CONFIDENTIAL_CLIENT,
            auth: str = "basic") -> dict[str, Any]:
    """ada signs in (authorization code + PKCE S256) asking for `resources`; the code is exchanged
    with `token_resources` (default: the same). The token answer."""
    verifier = secrets.token_urlsafe(48)
    params = [("response_type", "code"), ("client_id", client), ("redirect_uri", op.redirect_uri),
              ("scope", " ".join(user_scopes(op))), ("state", secrets.token_urlsafe(8)), ("nonce", secrets.token_urlsafe(8)),
              ("code_challenge", b64url(hashlib.sha256(verifier.encode()).digest())), ("code_challenge_method", "S256"),
              *[("resource", uri) for uri in resources]]
    if op.name == "idpyoidc":
        params.append(("prompt", "consent"))
    callback = op.browse(op.authorize_prefix + urllib.parse.urlencode(params))
    code = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(callback).query)).get("code")
    assert code, f"no code in the callback: {callback}"
    form = [("grant_type", "authorization_code"), ("code", code), ("redirect_uri", op.redirect_uri), ("code_verifier", verifier),
            *[("resource", uri) for uri in (resources if token_resources is None else token_resources)]]
    status, answer = token(op, form, client, auth)
    assert status == 200, f"the code exchange answered {status}: {answer}"
    return answer


def jwt_claims(access_token: str) -> dict[str, Any]:
    """The (unverified) claims of a JWT access token (both servers issue them)."""
    payload = access_token.split(".")[1]
    return json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))


def client_of(op, access_token: str) -> str | None:
    """The client a token was issued to. glewlwyd's introspection names it only when the client
    authenticated with client_secret_basic (its JWT always does); idpyoidc's client credentials
    JWTs have no client_id claim (its introspection always does)."""
    return op.introspection(access_token).get("client_id") or jwt_claims(access_token).get("client_id")


def audience(op, access_token: str) -> list[str]:
    aud = op.introspection(access_token).get("aud")
    return [aud] if isinstance(aud, str) else list(aud or [])


# ── 1 and 2: resource indicators, the kit's resource server ─────────────────


def test_each_server_has_two_resources_on_its_resource_server(op):
    assert len(op.resources) == 2 and all(uri.startswith(op.resource_server.base + "/") for uri in op.resources)
    assert op.introspection("not-a-token").get("active") is False


def test_a_token_for_resource_a_is_served_by_a_and_refused_by_b(op):
    a, b = op.resources
    answer = sign_in(op, [a])
    assert audience(op, answer["access_token"]) == [a]
    status, body, _ = get(a, answer["access_token"])
    assert status == 200 and body["resource"] == a and body["aud"] == [a] and body["sub"]
    status, body, challenge = get(b, answer["access_token"])
    assert status == 401 and body == {"error": "invalid_token", "error_description": "wrong audience"}
    assert challenge == 'Bearer error="invalid_token"'
    status, body, challenge = get(a, "not-a-token")
    assert status == 401 and body["error"] == "invalid_token" and challenge == 'Bearer error="invalid_token"'


def test_a_sign_in_for_both_resources_narrows_to_one_at_the_code_and_at_each_refresh(op):
    a, b = op.resources
    answer = sign_in(op, [a, b], token_resources=[a])
    assert audience(op, answer["access_token"]) == [a]
    status, refreshed = token(op, {"grant_type": "refresh_token", "refresh_token": answer["refresh_token"], "resource": b})
    assert status == 200, refreshed
    assert audience(op, refreshed["access_token"]) == [b]
    assert get(b, refreshed["access_token"])[0] == 200 and get(a, refreshed["access_token"])[0] == 401


def test_several_resources_in_one_token_request(op):
    """idpyoidc: one token for both (aud a list); glewlwyd: invalid_target (one resource a token)."""
    a, b = op.resources
    answer = sign_in(op, [a, b], token_resources=[a])
    status, refreshed = token(op, {"grant_type": "refresh_token", "refresh_token": answer["refresh_token"], "resource": [a, b]})
    if op.name == "glewlwyd":
        assert (status, refreshed) == (400, {"error": "invalid_target", "error_description": "Invalid Resource"})
    else:
        assert status == 200 and sorted(audience(op, refreshed["access_token"])) == sorted([a, b])


def test_a_refresh_for_a_resource_the_sign_in_did_not_name_is_invalid_target(op):
    a, b = op.resources
    answer = sign_in(op, [a])
    status, body = token(op, {"grant_type": "refresh_token", "refresh_token": answer["refresh_token"], "resource": b})
    assert status == 400 and body["error"] == "invalid_target", body
    status, body = token(op, {"grant_type": "refresh_token", "refresh_token": answer["refresh_token"], "resource": UNKNOWN_RESOURCE})
    assert status == 400 and body["error"] == "invalid_target", body


def test_an_unknown_resource_is_refused_at_the_authorization_endpoint(op):
    """Both redirect back with error=invalid_target: idpyoidc before the sign-in page, glewlwyd after
    the user signed in and consented (browse gets the redirect)."""
    params = {"response_type": "code", "client_id": CONFIDENTIAL_CLIENT, "redirect_uri": op.redirect_uri,
              "scope": " ".join(user_scopes(op)), "state": "s1", "nonce": "n1", "resource": UNKNOWN_RESOURCE,
              "code_challenge": b64url(hashlib.sha256(b"v" * 43).digest()), "code_challenge_method": "S256"}
    url = op.authorize_prefix + urllib.parse.urlencode(params)
    if op.name == "glewlwyd":
        location = op.browse(url)
    else:
        opener = urllib.request.build_opener(type("NoRedirect", (urllib.request.HTTPRedirectHandler,),
                                                  {"redirect_request": lambda *arguments, **options: None}))
        with pytest.raises(urllib.error.HTTPError) as redirect:
            opener.open(url, timeout=30)
        assert redirect.value.code == 302
        location = redirect.value.headers["Location"]
    answer = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(location).query))
    assert location.startswith(op.redirect_uri) and answer["error"] == "invalid_target" and answer["state"] == "s1"


def test_refresh_scope_outside_the_grant_and_narrower(op):
    answer = sign_in(op)
    status, body = token(op, {"grant_type": "refresh_token", "refresh_token": answer["refresh_token"], "scope": "openid address"})
    if op.name == "glewlwyd":   # `scope` is ignored on refresh: the grant's scopes again, rotated
        assert status == 200 and body["scope"] == "openid read"
        status, body = token(op, {"grant_type": "refresh_token", "refresh_token": body["refresh_token"], "scope": "openid"})
        assert status == 200 and body["scope"] == "openid read"
        assert op.introspection(body["access_token"])["scope"] == "openid read"
    else:
        assert (status, body) == (400, {"error": "invalid_request", "error_description": "Invalid refresh scopes"})
        status, body = token(op, {"grant_type": "refresh_token", "refresh_token": answer["refresh_token"],
                                  "scope": "openid offline_access"})
        assert status == 200 and set(body["scope"].split()) == {"openid", "offline_access"}
        assert set(op.introspection(body["access_token"])["scope"].split()) == {"openid", "offline_access"}


def test_the_resource_server_keeps_its_port_across_a_restart(op):
    a, _ = op.resources
    answer = sign_in(op, [a])
    op.stop()
    try:
        with pytest.raises(OSError):
            urllib.request.urlopen(a, timeout=5)
    finally:
        op.start()
    assert op.resources[0] == a and get(a, answer["access_token"])[0] == 200


# ── 3: client credentials ────────────────────────────────────────────────────


@pytest.mark.parametrize("auth", ["basic", "post", "client_secret_jwt"])
def test_client_credentials_for_the_confidential_client(op, auth):
    scope = op.client_credentials_scopes[0]
    status, body = token(op, {"grant_type": "client_credentials", "scope": scope}, CONFIDENTIAL_CLIENT, auth)
    assert status == 200 and body["token_type"].lower() == "bearer" and body["scope"] == scope, body
    assert op.introspection(body["access_token"])["active"] is True
    assert client_of(op, body["access_token"]) == CONFIDENTIAL_CLIENT


def test_client_credentials_for_a_resource(op):
    a, b = op.resources
    status, body = token(op, {"grant_type": "client_credentials", "scope": op.client_credentials_scopes[0], "resource": a})
    assert status == 200, body
    assert get(a, body["access_token"])[0] == 200 and get(b, body["access_token"])[0] == 401
    status, body = token(op, {"grant_type": "client_credentials", "scope": op.client_credentials_scopes[0],
                              "resource": UNKNOWN_RESOURCE})
    assert status == 400 and body["error"] == "invalid_target"


def test_client_credentials_refusals(op):
    """A scope the client lacks: glewlwyd scope_invalid, idpyoidc invalid_scope. Without scope:
    glewlwyd 403 (empty), idpyoidc all of client_credentials_scopes. A public client: refused."""
    status, body = token(op, {"grant_type": "client_credentials", "scope": "g_admin"})
    assert status == 400 and body["error"] == ("scope_invalid" if op.name == "glewlwyd" else "invalid_scope")
    status, body = token(op, {"grant_type": "client_credentials"})
    if op.name == "glewlwyd":
        assert (status, body) == (403, None)
    else:
        assert status == 200 and body["scope"].split() == op.client_credentials_scopes
    status, body = token(op, {"grant_type": "client_credentials", "scope": op.client_credentials_scopes[0]}, PUBLIC_CLIENT, "none")
    assert status in (400, 401, 403)


# ── 4: private_key_jwt and client_secret_jwt ─────────────────────────────────


def test_the_jwt_clients_key_file(op):
    assert op.jwt_client_key_file.is_file() and op.jwt_client_key_file.stat().st_mode & 0o777 == 0o600
    assert op.jwt_client_key_file.read_text().startswith("-----BEGIN PRIVATE KEY-----") and op.jwt_client_key_id


def test_private_key_jwt_signs_in_refreshes_and_gets_client_credentials(op):
    a, _ = op.resources
    answer = sign_in(op, [a], client=JWT_CLIENT, auth="private_key_jwt")
    assert get(a, answer["access_token"])[0] == 200
    status, body = token(op, {"grant_type": "refresh_token", "refresh_token": answer["refresh_token"]}, JWT_CLIENT, "private_key_jwt")
    assert status == 200, body
    status, body = token(op, {"grant_type": "client_credentials", "scope": op.client_credentials_scopes[0]}, JWT_CLIENT, "private_key_jwt")
    assert status == 200 and client_of(op, body["access_token"]) == JWT_CLIENT


def assertion_answer(op, assertion: str, client: str = JWT_CLIENT) -> tuple[int, Any]:
    return post(op.token_endpoint, [("grant_type", "client_credentials"), ("scope", op.client_credentials_scopes[0]),
                                    ("client_id", client), ("client_assertion_type", JWT_BEARER), ("client_assertion", assertion)])


def refused(op) -> tuple[int, Any]:
    """How each server refuses a client assertion."""
    return (403, None) if op.name == "glewlwyd" else (401, {"error": "invalid_client", "error_description": "Authorization failed"})


def test_a_tampered_assertion_is_refused(op):
    good = client_assertion(JWT_CLIENT, op.token_endpoint, op.jwt_client_key_file)
    head, payload, signature = good.split(".")
    flipped = signature[:10] + ("A" if signature[10] != "A" else "B") + signature[11:]
    assert assertion_answer(op, f"{head}.{payload}.{flipped}") == refused(op)
    wrong_secret = client_assertion(CONFIDENTIAL_CLIENT, op.token_endpoint, secret="not-the-secret-" * 3)
    assert assertion_answer(op, wrong_secret, CONFIDENTIAL_CLIENT) == refused(op)


def test_which_assertion_audiences_each_server_accepts(op):
    key = op.jwt_client_key_file
    accepted = {"token endpoint": op.token_endpoint, "issuer": op.issuer, "both": [op.issuer, op.token_endpoint],
                "elsewhere": "http://127.0.0.1:9/token"}
    answers = {label: assertion_answer(op, client_assertion(JWT_CLIENT, aud, key))[0] == 200 for label, aud in accepted.items()}
    if op.name == "glewlwyd":   # exactly the token endpoint, as a string
        assert answers == {"token endpoint": True, "issuer": False, "both": False, "elsewhere": False}
    else:                       # the token endpoint among the audiences
        assert answers == {"token endpoint": True, "issuer": False, "both": True, "elsewhere": False}


def test_assertion_jti_exp_and_kid(op):
    key = op.jwt_client_key_file
    once = client_assertion(JWT_CLIENT, op.token_endpoint, key)
    assert assertion_answer(op, once)[0] == 200
    assert assertion_answer(op, once) == refused(op)   # a jti seen before
    assert assertion_answer(op, client_assertion(JWT_CLIENT, op.token_endpoint, key, lifetime=-60)) == refused(op)
    assert assertion_answer(op, client_assertion(JWT_CLIENT, op.token_endpoint, key, lifetime=3600))[0] == 200
    lenient = op.name == "idpyoidc"
    for label, assertion in (("no jti", client_assertion(JWT_CLIENT, op.token_endpoint, key, jti=None)),
                             ("exp a day ahead", client_assertion(JWT_CLIENT, op.token_endpoint, key, lifetime=86400)),
                             ("no exp", client_assertion(JWT_CLIENT, op.token_endpoint, key, exp=None)),
                             ("no kid", client_assertion(JWT_CLIENT, op.token_endpoint, key, kid=None))):
        assert (assertion_answer(op, assertion)[0] == 200) is lenient, label


# ── 5: token exchange (idpyoidc) ─────────────────────────────────────────────


@pytest.fixture
def idpyoidc(op):
    if op.name != "idpyoidc":
        pytest.skip("token exchange (RFC 8693): glewlwyd 2.7.5 has none")
    return op


@pytest.mark.parametrize("client, auth", [(CONFIDENTIAL_CLIENT, "basic"), (JWT_CLIENT, "private_key_jwt")])
def test_token_exchange_for_a_resource(idpyoidc, client, auth):
    op = idpyoidc
    a, b = op.resources
    subject = sign_in(op, [a, b])["access_token"]
    status, body = token(op, {"grant_type": TOKEN_EXCHANGE, "subject_token": subject, "subject_token_type": ACCESS_TOKEN,
                              "requested_token_type": ACCESS_TOKEN, "resource": b, "scope": "openid profile"}, client, auth)
    assert status == 200, body
    assert body["issued_token_type"] == ACCESS_TOKEN and body["token_type"] == "Bearer"
    assert set(body["scope"].split()) == {"openid", "profile"}
    assert client_of(op, body["access_token"]) == client and op.introspection(body["access_token"])["aud"] == [b]
    assert get(b, body["access_token"])[0] == 200 and get(a, body["access_token"])[0] == 401


def test_token_exchange_audience_and_other_subject_tokens(idpyoidc):
    op = idpyoidc
    answer = sign_in(op, op.resources)
    form = {"grant_type": TOKEN_EXCHANGE, "subject_token": answer["access_token"], "subject_token_type": ACCESS_TOKEN,
            "audience": op.exchange_audience}
    status, body = token(op, form)
    assert status == 200 and op.introspection(body["access_token"])["aud"] == [op.exchange_audience]
    status, body = token(op, {**form, "requested_token_type": REFRESH_TOKEN})
    assert status == 200 and body["issued_token_type"] == REFRESH_TOKEN, body
    for subject, kind in ((answer["refresh_token"], REFRESH_TOKEN), (answer["id_token"], ID_TOKEN)):
        status, body = token(op, {"grant_type": TOKEN_EXCHANGE, "subject_token": subject, "subject_token_type": kind,
                                  "resource": op.resources[0]})
        assert status == 200 and body["issued_token_type"] == ACCESS_TOKEN, (kind, body)


def test_token_exchange_refusals(idpyoidc):
    op = idpyoidc
    subject = sign_in(op, op.resources)["access_token"]
    form = {"grant_type": TOKEN_EXCHANGE, "subject_token": subject, "subject_token_type": ACCESS_TOKEN}
    tampered = subject[:-4] + ("AAAA" if not subject.endswith("AAAA") else "BBBB")
    expected = {
        "unknown audience": ({**form, "audience": "nobody"}, {"error": "invalid_target", "error_description": "Unknown audience"}),
        "unknown resource": ({**form, "resource": UNKNOWN_RESOURCE}, {"error": "invalid_target", "error_description": "Unknown resource"}),
        "bad subject": ({**form, "subject_token": "garbage"}, {"error": "invalid_request", "error_description": "Subject token invalid"}),
        "tampered subject": ({**form, "subject_token": tampered}, {"error": "invalid_request", "error_description": "BadSignature"}),
        "wrong subject type": ({**form, "subject_token_type": REFRESH_TOKEN},
                               {"error": "invalid_request", "error_description": "Subject token invalid"}),
        "actor": ({**form, "actor_token": subject, "actor_token_type": ACCESS_TOKEN},
                  {"error": "invalid_request", "error_description": "Actor token not supported"}),
    }
    for label, (request, answer) in expected.items():
        assert token(op, request) == (400, answer), label
    status, body = token(op, form, PUBLIC_CLIENT, "none")
    assert status == 400 and body["error"] == "invalid_request" and "Unsupported grant_type" in body["error_description"]
