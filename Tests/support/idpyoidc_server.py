#!/usr/bin/env python3
"""An OpenID Provider of the tests' own, built on idpyoidc (IdentityPython), on 127.0.0.1.

    idpyoidc_server.py --state DIR [--access-lifetime S] [--port P] [--loopback-port P]
                       [--registration [--registration-as-is]]

`idpyoidc.server.Server` does the protocol; this file is its configuration and a small WSGI
wrapper (each endpoint's parse_request / process_request / do_response). It serves on an ephemeral
port (or P: a restart comes back on the same one) and prints `READY <port>` on stdout.

The issuer is http://127.0.0.1:<port>, discovery at /.well-known/openid-configuration. Endpoints:
authorization (a username/password page, UserPassJinja2 over a JSON user db), token, userinfo,
introspection (RFC 7662), revocation (RFC 7009), end session, pushed authorization (RFC 9126),
the JWKS; add-ons PKCE (S256, required) and DPoP (RFC 9449, optional: a token request with a proof
gets a DPoP-bound token, one without gets a Bearer token). Access tokens are RS256 JWTs, ID tokens
RS256, codes and refresh tokens opaque (encrypted by the library); refresh tokens rotate: the one
used dies when its successor is issued (`revoke_refresh_on_issue`).

Users: ada / lovelace-test and grace / hopper-test. Clients:
- "authbridge-test": public (token endpoint auth `none`), authorization code + PKCE, refresh;
- "authbridge-confidential": the same with a secret (client_secret_basic, client_secret_post or
  client_secret_jwt), client credentials and token exchange; it is also the resource server the
  tests introspect as;
- "authbridge-jwt" (with --jwt-client-key): private_key_jwt with that key's public half (kid
  --jwt-client-kid), otherwise as the confidential client.

Resource indicators (RFC 8707): --resources names the URIs the OP knows (the kit's resource
server). The OP checks `resource` itself (5.0.0's policy wants client ids): unknown at the
authorization endpoint, invalid_target redirected back; at the token endpoint, a code or refresh
grant may name only its authorization request's resources (400 invalid_target); access tokens get
aud = the resources asked for at the token endpoint, else those of the authorization request.
Token exchange (RFC 8693): subject access, refresh or ID tokens; `resource` among --resources,
`audience` among them and "authbridge-downstream"; access or refresh token requested.
Both have the redirect URIs http://127.0.0.1:53682/callback and, with --loopback-port,
http://127.0.0.1:<loopback-port>/callback (idpyoidc matches them exactly). idpyoidc refuses an
authorization request for `offline_access` (hence a refresh token) without prompt=consent, and
shows no consent page with it.

Dynamic client registration (RFC 7591), with --registration only: the library's own endpoint
(idpyoidc.server.oidc.registration.Registration) at /registration, discovery's
registration_endpoint. What 5.0.0 needs corrected for a public native client (the host's request:
token_endpoint_auth_method none, application_type native, loopback http redirect URIs, no keys):
- it logs the new client's key-jar entry before making one (`keyjar.key_summary(client_id)` in an
  f-string): every registration without jwks/jwks_uri failed, 400 invalid_configuration_request
  with the client id as the description. The client gets an empty key-jar entry first;
- it answers with one cookie (a dict), not the list the other endpoints give: set_cookies takes both;
- `none` is not in token_endpoint_auth_methods_supported, so the registration drops it (the answer
  names no method: client_secret_basic by RFC 7591 §2), and every client gets a client_secret
  (30 days). Advertised, and a `none` client registered without a secret (the library's
  set_secret=False) — unless --registration-as-is, which keeps the library's answers.
Accepted as the library does it: loopback http redirect URIs for native clients, matched exactly
(another port or a query is refused at the authorization endpoint); the registration's `scope` is
dropped (5.0.0 compares the space-separated string with scopes_supported as one value: the client
gets the OP's default scopes); PKCE is the OP's (essential, S256). Registered clients live in
memory only: a restart forgets them (the static clients are registered again at start-up).

State (DIR): the signing, token, cookie and session-encryption keys (private/, made on the first
start), the user db, and op-state.json — idpyoidc's session manager dumped (its `dump()`: every
user, grant and issued token) with the pushed requests and this file's counters, written when the
OP stops (SIGTERM or Ctrl-C; a SIGKILL loses what happened since the start). The next start loads
it: codes and tokens issued before a stop work after it.

Test-only endpoints:
- `GET /test/stats`: refreshes answered and refused, codes redeemed, revocation requests;
- `GET /test/secrets`: every code, token and client secret handed out (the suite scans the hosts'
  output for them);
- `GET /test/user?name=ada`: the `sub` this OP gives that user;
- `GET /test/admin-revoke?user=ada`: what an administrator does to end a user's sessions — every
  grant of the user revoked with every token minted from it, so later refreshes are refused;
- `GET /test/clients`: the clients registered dynamically, by id, as the client db keeps them
  (a secret only as `has_client_secret`).
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import html
import http.cookies
import json
import os
import signal
import threading
import traceback
import urllib.parse
import warnings

import loopback_wsgi  # beside this file

parser = argparse.ArgumentParser()
parser.add_argument("--state", required=True)
parser.add_argument("--access-lifetime", type=int, default=3600)
parser.add_argument("--dpop-algs", default="ES256 RS256 PS256 EdDSA",
                    help="dpop_signing_alg_values_supported, space-separated (a client must choose from it)")
parser.add_argument("--port", type=int, default=0, help="0: an ephemeral port")
parser.add_argument("--loopback-port", type=int, default=0,
                    help="the port of the second redirect URI, http://127.0.0.1:P/callback")
parser.add_argument("--resources", default="",
                    help="the resource indicators (RFC 8707) the OP knows, space-separated absolute URIs")
parser.add_argument("--jwt-client-key", default="",
                    help="PEM private key of the private_key_jwt client (its public half is registered)")
parser.add_argument("--jwt-client-kid", default="authbridge-jwt-key", help="the kid of that key")
parser.add_argument("--registration", action="store_true",
                    help="dynamic client registration (RFC 7591) at /registration, the library's own endpoint")
parser.add_argument("--registration-as-is", action="store_true",
                    help="with --registration: the library's answers unchanged (a secret for every client, `none` not advertised)")
args = parser.parse_args()

STATE = os.path.abspath(args.state)
PRIVATE = os.path.join(STATE, "private")
STATE_FILE = os.path.join(STATE, "op-state.json")
os.makedirs(PRIVATE, exist_ok=True)
os.makedirs(os.path.join(STATE, "templates"), exist_ok=True)


# Bound before the OP is configured: the issuer names the port.
httpd, ISSUER = loopback_wsgi.bind(args.port)
PORT = httpd.server_address[1]

USERS = {"ada": ("lovelace-test", "Ada", "Lovelace"), "grace": ("hopper-test", "Grace", "Hopper")}
PUBLIC_CLIENT = "authbridge-test"
CONFIDENTIAL_CLIENT = "authbridge-confidential"
CONFIDENTIAL_SECRET = "authbridge-confidential-secret-0123456789"
JWT_CLIENT = "authbridge-jwt"
#: RFC 8707: the resources a token can be asked for (an unknown one is refused, invalid_target).
RESOURCES = args.resources.split()
#: RFC 8693: besides the resources, the one logical audience a token exchange may name.
EXCHANGE_AUDIENCES = ["authbridge-downstream"]
ACCESS_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:access_token"
REFRESH_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:refresh_token"
ID_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:id_token"
REDIRECT_URIS = ["http://127.0.0.1:53682/callback"]
if args.loopback_port:
    REDIRECT_URIS.append(f"http://127.0.0.1:{args.loopback_port}/callback")
DPOP_ALGS = args.dpop_algs.split()

# The user db of the password page and the claims of userinfo and ID tokens.
with open(os.path.join(STATE, "passwd.json"), "w") as handle:
    json.dump({name: password for name, (password, _, _) in USERS.items()}, handle)
with open(os.path.join(STATE, "users.json"), "w") as handle:
    json.dump({name: {"preferred_username": name, "name": f"{first} {last}", "given_name": first, "family_name": last,
                      "email": f"{name}@example.test", "email_verified": True}
               for name, (_, first, last) in USERS.items()}, handle)
# The page UserPassJinja2 renders: `token` carries the authorization request, signed by the OP.
with open(os.path.join(STATE, "templates", "user_pass.jinja2"), "w") as handle:
    handle.write('<!DOCTYPE html><title>{{ page_header }}</title><h1>{{ page_header }}</h1>\n'
                 '<form method="post" action="{{ action }}">\n'
                 '<input type="hidden" name="token" value="{{ token }}">\n'
                 '<label>{{ user_label }} <input name="username"></label>\n'
                 '<label>{{ passwd_label }} <input type="password" name="password"></label>\n'
                 '<button>{{ submit_btn }}</button></form>\n')


def key_file(name: str, key_defs: list[dict]) -> dict:
    """Keys made on the first start and read back on the next ones (init_key_jar's private_path),
    so signatures, encrypted tokens and cookies stay valid across restarts. The definitions only
    when the file is not there yet: given with an existing file, cryptojwt compares them with the
    keys read, finds every symmetric key different, and makes new ones."""
    path = os.path.join(PRIVATE, name)
    if os.path.exists(path):
        return {"private_path": path, "read_only": True}
    return {"private_path": path, "key_defs": key_defs, "read_only": False}


def encrypter(name: str) -> dict:
    """The library's Fernet encrypter with its password and salt kept in `name`."""
    return {"kwargs": {"keys": key_file(name, [{"type": "OCT", "kid": kid, "use": ["enc"]} for kid in ("password", "salt")])}}


LIFETIME = args.access_lifetime
REFRESH_LIFETIME = 86400
PASSWORD_ACR = "urn:oasis:names:tc:SAML:2.0:ac:classes:InternetProtocolPassword"
CONFIG = {
    "issuer": ISSUER,
    "entity_id": ISSUER,
    "httpc_params": {"verify": False, "timeout": 4},
    # RS256 for ID tokens and JWT access tokens; published at /jwks.json (discovery's jwks_uri).
    "keys": {**key_file("jwks.json", [{"type": "RSA", "use": ["sig"]}]), "uri_path": "jwks.json"},
    "template_dir": os.path.join(STATE, "templates"),
    "cookie_handler": {
        "class": "idpyoidc.server.cookie_handler.CookieHandler",
        "kwargs": {"keys": key_file("cookie_jwks.json", [{"type": "OCT", "use": ["enc"], "kid": "enc"},
                                                         {"type": "OCT", "use": ["sig"], "kid": "sig"}]),
                   "name": {"session": "oidc_op", "register": "oidc_op_rp", "session_management": "sman"}},
    },
    # Session ids inside tokens are encrypted with this password/salt: fixed, or a restart would
    # orphan every token issued before it.
    "session_params": {"encrypter": encrypter("session_jwks.json")},
    "token_handler_args": {
        # Codes and refresh tokens are opaque, encrypted with these (5.0.0 ignores the `password`
        # its jwks_def would give them and makes a random key per process: crypt_conf instead).
        "code": {"kwargs": {"lifetime": 600, "crypt_conf": encrypter("code_jwks.json")}},
        "token": {"class": "idpyoidc.server.token.jwt_token.JWTToken",
                  "kwargs": {"lifetime": LIFETIME, "alg": "RS256", "add_claims_by_scope": True}},
        "refresh": {"kwargs": {"lifetime": REFRESH_LIFETIME, "crypt_conf": encrypter("refresh_jwks.json")}},
        "id_token": {"class": "idpyoidc.server.token.id_token.IDToken", "kwargs": {"add_claims_by_scope": True}},
    },
    "authz": {
        "class": "idpyoidc.server.authz.AuthzHandling",
        "kwargs": {"grant_config": {
            "usage_rules": {
                "authorization_code": {"supports_minting": ["access_token", "refresh_token", "id_token"],
                                       "max_usage": 1, "expires_in": 600},
                # Token exchange (RFC 8693) mints from a subject token: access and ID tokens may be one.
                "access_token": {"supports_minting": ["access_token", "refresh_token"], "expires_in": LIFETIME},
                "id_token": {"supports_minting": ["access_token", "refresh_token"]},
                "refresh_token": {"supports_minting": ["access_token", "refresh_token", "id_token"],
                                  "expires_in": REFRESH_LIFETIME},
            },
            "expires_in": 30 * 86400,
        }},
    },
    "authentication": {
        "user": {
            "acr": PASSWORD_ACR,
            "class": "idpyoidc.server.user_authn.user.UserPassJinja2",
            "kwargs": {
                "verify_endpoint": "/verify/user",
                "template": "user_pass.jinja2",
                "db": {"class": "idpyoidc.server.util.JSONDictDB",
                       "kwargs": {"filename": os.path.join(STATE, "passwd.json")}},
                "page_header": "Sign in to the AuthBridge test OP",
                # The sign-in stays valid a day (the library's default, an hour, makes userinfo fail
                # with an exception once it has passed).
                "expires_in": 86400,
            },
        },
    },
    "userinfo": {"class": "idpyoidc.server.user_info.UserInfo",
                 "kwargs": {"db_file": os.path.join(STATE, "users.json")}},
    "add_on": {
        "pkce": {"function": "idpyoidc.server.oauth2.add_on.pkce.add_support",
                 "kwargs": {"essential": True, "code_challenge_methods": {"S256": "S256"}}},
        "dpop": {"function": "idpyoidc.server.oauth2.add_on.dpop.add_support",
                 "kwargs": {"dpop_signing_alg_values_supported": DPOP_ALGS, "dpop_endpoints": ["token", "userinfo"]}},
    },
    "endpoint": {
        "provider_info": {"path": ".well-known/openid-configuration",
                          "class": "idpyoidc.server.oidc.provider_config.ProviderConfiguration",
                          "kwargs": {"client_authn_method": None}},
        "authorization": {"path": "authorization", "class": "idpyoidc.server.oidc.authorization.Authorization",
                          "kwargs": {"client_authn_method": None, "response_types_supported": ["code"],
                                     "response_modes_supported": ["query"]}},
        "pushed_authorization": {"path": "par",
                                 "class": "idpyoidc.server.oauth2.pushed_authorization.PushedAuthorization",
                                 "kwargs": {"client_authn_method": ["client_secret_basic", "client_secret_post", "public"]}},
        "token": {"path": "token", "class": "idpyoidc.server.oidc.token.Token",
                  # Rotation: a refresh token dies when its successor is issued.
                  "kwargs": {"client_authn_method": ["client_secret_basic", "client_secret_post", "client_secret_jwt",
                                                     "private_key_jwt", "public"],
                             "revoke_refresh_on_issue": True,
                             # Named, so client_credentials (not among oidc.Token's defaults) is there.
                             "grant_types_helpers": {
                                 "authorization_code": {"class": "idpyoidc.server.oidc.token_helper.access_token.AccessTokenHelper"},
                                 "refresh_token": {"class": "idpyoidc.server.oidc.token_helper.refresh_token.RefreshTokenHelper"},
                                 "client_credentials": {"class": "idpyoidc.server.oauth2.token_helper.client_credentials.ClientCredentials"},  # replaced below
                                 "urn:ietf:params:oauth:grant-type:token-exchange": {
                                     "class": "idpyoidc.server.oidc.token_helper.token_exchange.TokenExchangeHelper",
                                     "kwargs": {
                                         "subject_token_types_supported": [ACCESS_TOKEN_TYPE, REFRESH_TOKEN_TYPE, ID_TOKEN_TYPE],
                                         "requested_token_types_supported": [ACCESS_TOKEN_TYPE, REFRESH_TOKEN_TYPE],
                                         "default_requested_token_type": ACCESS_TOKEN_TYPE,
                                         "policy": {"": {
                                             "function": "idpyoidc.server.oauth2.token_helper.validate_token_exchange_policy",
                                             "kwargs": {"resource": RESOURCES, "audience": [*RESOURCES, *EXCHANGE_AUDIENCES]}}},
                                     }},
                             }}},
        "userinfo": {"path": "userinfo", "class": "idpyoidc.server.oidc.userinfo.UserInfo",
                     # Named, with the DPoP add-on's: when all are allowed, `none` (any request) wins
                     # before `dpop` is tried.
                     "kwargs": {"claim_types_supported": ["normal"],
                                "client_authn_method": ["bearer_header", "bearer_body", "dpop"]}},
        "introspection": {"path": "introspection", "class": "idpyoidc.server.oauth2.introspection.Introspection",
                          "kwargs": {"client_authn_method": ["client_secret_basic", "client_secret_post"],
                                     # The tests' resource server is not the audience of the tokens.
                                     "enforce_audience_restriction": False}},
        "token_revocation": {"path": "revocation", "class": "idpyoidc.server.oauth2.token_revocation.TokenRevocation",
                             "kwargs": {"client_authn_method": ["client_secret_basic", "client_secret_post", "public"]}},
        "end_session": {"path": "end_session", "class": "idpyoidc.server.oidc.session.Session",
                        "kwargs": {"logout_verify_url": f"{ISSUER}/verify_logout", "post_logout_uri_path": "post_logout",
                                   "signing_alg": "RS256", "frontchannel_logout_supported": False,
                                   "backchannel_logout_supported": False}},
    },
}
if args.registration:
    CONFIG["endpoint"]["registration"] = {
        "path": "registration", "class": "idpyoidc.server.oidc.registration.Registration",
        "kwargs": {"client_authn_method": None}}

from idpyoidc.message.oauth2 import ResponseMessage  # noqa: E402
from idpyoidc.message.oidc import AuthorizationRequest  # noqa: E402
from idpyoidc.server import Server as OP  # noqa: E402
from idpyoidc.server.configure import OPConfiguration  # noqa: E402
from idpyoidc.server.exception import (ClientAuthenticationError, FailedAuthentication,  # noqa: E402
                                       OnlyForTestingWarning, UnAuthorizedClient)
from idpyoidc.server.oauth2.add_on import dpop  # noqa: E402
from idpyoidc.server.oauth2.token_helper.client_credentials import ClientCredentials  # noqa: E402
from idpyoidc.time_util import utc_time_sans_frac  # noqa: E402
from idpyoidc.server.session.grant import Grant  # noqa: E402

warnings.simplefilter("ignore", OnlyForTestingWarning)  # UserPassJinja2 says at every sign-in it is for tests
op = OP(OPConfiguration(conf=CONFIG), cwd=STATE)
context = op.context

# idpyoidc 5.0.0 runs the add-ons before it rebuilds provider_info, which drops the DPoP add-on's
# entry from discovery; the refresh grant also only binds tokens when discovery has it.
context.provider_info["dpop_signing_alg_values_supported"] = context.add_on["dpop"]["algs_supported"]


def rfc_9449(library_check):
    """The DPoP add-on's check (5.0.0 puts the same one on every endpoint named), made what
    RFC 9449 says:
    - the add-on requires a proof of every request; the RFC lets the client choose: a request
      without a `DPoP` header passes, and its tokens are Bearer tokens;
    - the add-on does not hold a bound token to its key: an access token with `cnf.jkt` (§7.1), or
      the refresh token of a grant bound at its first token request (§5), is refused without a
      proof of that key;
    - the add-on compares `ath` with the token's SHA-256 in hex; the RFC's is base64url (§4.2):
      checked here instead, and the library's check skipped."""
    def post_parse(request, client_id, context, **kwargs):
        headers = (kwargs.get("http_info") or {}).get("headers", {})
        auth_info = kwargs.get("auth_info") or {}
        access_token = auth_info.get("token")  # at userinfo
        bound = bound_key(request, access_token)
        proof = headers.get("dpop")
        if not proof:
            return ResponseMessage(error="invalid_dpop_proof", error_description="a DPoP-bound token needs a proof") \
                if bound else request
        if access_token and jwt_claims(proof).get("ath") != sha256_b64url(access_token):  # signature: next
            return ResponseMessage(error="invalid_dpop_proof", error_description="'ath' is not the token's hash")
        try:
            request = library_check(request, client_id, context, **{**kwargs, "auth_info": {**auth_info, "token": None}})
        except Exception as failure:  # the add-on raises on any fault of the proof
            return ResponseMessage(error="invalid_dpop_proof", error_description=str(failure) or type(failure).__name__)
        if bound and request.get("dpop_jkt") != bound:
            return ResponseMessage(error="invalid_dpop_proof", error_description="a proof of another key than the token's")
        return request
    return post_parse


def bound_key(request, access_token: str | None) -> str | None:
    """The key thumbprint a token is bound to: the access token's `cnf.jkt` (a JWT here), or for a
    refresh, the one its grant keeps."""
    if access_token:
        return jwt_claims(access_token).get("cnf", {}).get("jkt")
    if request.get("grant_type") == "refresh_token":
        try:
            info = context.session_manager.get_session_info_by_token(request["refresh_token"], handler_key="refresh_token", grant=True)
        except Exception:  # unknown tokens were refused before this step
            return None
        return info["grant"].extra.get("dpop_jkt")
    return None


def jwt_claims(token: str) -> dict:
    try:
        payload = token.split(".")[1]
        return json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    except (IndexError, ValueError):
        return {}


def sha256_b64url(text: str) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()


for name in ("token", "userinfo"):
    endpoint = op.get_endpoint(name)
    endpoint.post_parse_request = [rfc_9449(step) if step is dpop.userinfo_post_parse_request else step
                                   for step in endpoint.post_parse_request]


if args.registration:
    def registering_with_a_key_issuer(library_step):
        """5.0.0's registration logs the new client's keys (`keyjar.key_summary(client_id)`, an
        f-string evaluated whatever the log level) before it has put any there: every registration
        without jwks/jwks_uri failed with IssuerNotFound (400 invalid_configuration_request, the
        client id as the description). The client gets an (empty) entry in the key jar first."""
        def do_client_registration(request, client_id, ignore=None):
            op.keyjar.return_issuer(client_id)
            return library_step(request, client_id, ignore)
        return do_client_registration

    registration_endpoint = op.get_endpoint("registration")
    registration_endpoint.do_client_registration = registering_with_a_key_issuer(registration_endpoint.do_client_registration)

    if not args.registration_as_is:
        # A public client (RFC 7591 §2 token_endpoint_auth_method "none"): the token endpoint takes
        # it ("public"), but 5.0.0 leaves `none` out of discovery, and its registration drops a
        # requested method the discovery list lacks (the answer then names none, which RFC 7591 §2
        # reads as client_secret_basic). Advertised here, so a registration for `none` keeps it.
        AUTH_METHODS = [*context.provider_info["token_endpoint_auth_methods_supported"], "none"]
        context.provider_info["token_endpoint_auth_methods_supported"] = AUTH_METHODS
        context.claims.set_preference("token_endpoint_auth_methods_supported", AUTH_METHODS)


# RP-initiated logout is a browser request that authenticates no client; 5.0.0's end-session
# endpoint still runs client authentication, which with every method allowed answers `none`, and
# then reads the bearer token that method never gives (a KeyError): no client authentication there.
op.get_endpoint("session").client_authentication = lambda *arguments, **options: {}


def register_clients() -> None:
    """The clients, registered at start-up (the client db is configuration, not state). The keys
    that verify client assertions (RFC 7523) go in the OP's key jar under the client's id: the
    JWT client's public key, and the confidential client's secret for client_secret_jwt (what
    the library's registration endpoint would have put there)."""
    common = {
        "redirect_uris": [(uri, {}) for uri in REDIRECT_URIS],
        "post_logout_redirect_uri": [(uri, {}) for uri in REDIRECT_URIS],
        "response_types_supported": ["code"],
        "grant_types_supported": ["authorization_code", "refresh_token"],
        "allowed_scopes": ["openid", "offline_access", "profile", "email"],
        "pkce_essential": True,
    }
    secret_methods = ["client_secret_basic", "client_secret_post"]
    context.cdb[PUBLIC_CLIENT] = {
        **common, "client_id": PUBLIC_CLIENT, "token_endpoint_auth_method": "none",
        # Per endpoint, so userinfo keeps its bearer authentication.
        "token_endpoint_client_authn_method": ["public"],
        "revocation_endpoint_client_authn_method": ["public"],
        "pushed_authorization_request_endpoint_client_authn_method": ["public"],
        "introspection_endpoint_client_authn_method": [],
    }
    context.cdb[CONFIDENTIAL_CLIENT] = {
        **common, "client_id": CONFIDENTIAL_CLIENT, "client_secret": CONFIDENTIAL_SECRET,
        "client_secret_expires_at": 0, "token_endpoint_auth_method": "client_secret_basic",
        "revocation_endpoint_client_authn_method": secret_methods,
        "pushed_authorization_request_endpoint_client_authn_method": secret_methods,
        "introspection_endpoint_client_authn_method": secret_methods,
        # client_secret_jwt as well at the token endpoint; client_credentials and token exchange.
        "token_endpoint_client_authn_method": [*secret_methods, "client_secret_jwt"],
        "grant_types_supported": [*common["grant_types_supported"], *SERVICE_GRANTS],
    }
    op.keyjar.add_symmetric(CONFIDENTIAL_CLIENT, CONFIDENTIAL_SECRET)
    if args.jwt_client_key:
        jwt_methods = ["private_key_jwt"]
        context.cdb[JWT_CLIENT] = {
            **common, "client_id": JWT_CLIENT, "token_endpoint_auth_method": "private_key_jwt",
            "token_endpoint_client_authn_method": jwt_methods,
            "revocation_endpoint_client_authn_method": jwt_methods,
            "pushed_authorization_request_endpoint_client_authn_method": jwt_methods,
            "introspection_endpoint_client_authn_method": jwt_methods,
            "grant_types_supported": [*common["grant_types_supported"], *SERVICE_GRANTS],
        }
        from cryptojwt.jwk.rsa import import_private_rsa_key_from_file, RSAKey
        public = RSAKey(pub_key=import_private_rsa_key_from_file(args.jwt_client_key).public_key(),
                        kid=args.jwt_client_kid, use="sig")
        op.keyjar.import_jwks({"keys": [public.serialize()]}, JWT_CLIENT)


SERVICE_GRANTS = ["client_credentials", "urn:ietf:params:oauth:grant-type:token-exchange"]
register_clients()

LOCK = threading.Lock()  # idpyoidc's objects are not thread-safe: one request at a time
STOPPING = threading.Event()  # set, under LOCK, when the state is written: later requests change nothing
STATS = {"refreshes": 0, "refresh_errors": 0, "codes_redeemed": 0, "revocations": 0}
HANDED_OUT: set[str] = set()  # every code, access, refresh and ID token (the tests scan for leaks)


def save_state() -> None:
    """Writes the session manager (its own dump), the pushed requests and the counters. Once, at
    the stop: the dump holds every token ever issued, so writing it after each request would make
    each request slower than the last (200 rotations: 4 MB, 40 ms a request)."""
    state = {"sessions": context.session_manager.dump(),
             "par": {urn: request.to_dict() for urn, request in context.par_db.items()},
             "stats": STATS, "handed_out": sorted(HANDED_OUT)}
    temporary = STATE_FILE + ".tmp"
    with open(temporary, "w") as handle:
        json.dump(state, handle)
    os.replace(temporary, STATE_FILE)


def load_state() -> None:
    if not os.path.exists(STATE_FILE):
        return
    with open(STATE_FILE) as handle:
        state = json.load(handle)
    context.session_manager.load(state["sessions"])
    context.par_db.update({urn: AuthorizationRequest(**request) for urn, request in state["par"].items()})
    STATS.update(state["stats"])
    HANDED_OUT.update(state["handed_out"])


load_state()


# ---- HTTP -------------------------------------------------------------------------------------

class Reply:
    def __init__(self, status: int, body: str | bytes = b"", content_type: str = "application/json",
                 headers: list[tuple[str, str]] | None = None) -> None:
        self.status, self.content_type, self.headers = status, content_type, list(headers or [])
        self.body = body.encode() if isinstance(body, str) else body

    @classmethod
    def json(cls, value, status: int = 200) -> "Reply":
        return cls(status, json.dumps(value), headers=[("Cache-Control", "no-store")])

    @classmethod
    def redirect(cls, location: str, cookies: list[dict] | None = None) -> "Reply":
        return cls(302, b"", "text/plain", [("Location", location)] + set_cookies(cookies))


STATUS_TEXT = {200: "OK", 201: "Created", 302: "Found", 400: "Bad Request", 401: "Unauthorized",
               403: "Forbidden", 404: "Not Found", 500: "Internal Server Error", 503: "Service Unavailable"}


def set_cookies(cookies: list[dict] | dict | None) -> list[tuple[str, str]]:
    """The library's cookie contents (name, value, max-age or expires) as Set-Cookie headers (the
    registration endpoint gives one cookie, not a list)."""
    if isinstance(cookies, dict):
        cookies = [cookies]
    headers = []
    for cookie in cookies or []:
        text = f"{cookie['name']}={cookie['value']}; Path=/; HttpOnly; SameSite=Lax"
        if "expires" in cookie:
            text += f"; Expires={cookie['expires'].rstrip(';')}"
        elif "max-age" in cookie:
            text += f"; Expires={cookie['max-age']}"
        headers.append(("Set-Cookie", text))
    return headers


#: Parameters that may be repeated: RFC 8707's `resource`, RFC 8693's `audience`.
MULTIPLE = ("resource", "audience")


class Request:
    """What idpyoidc wants of an HTTP request: the arguments, and `http_info` (lower-case headers,
    method, full URL — DPoP's htu — and cookies)."""

    def __init__(self, environ: dict) -> None:
        self.method = environ["REQUEST_METHOD"]
        self.path = environ.get("PATH_INFO", "")
        self.query = environ.get("QUERY_STRING", "")
        self.url = f"{ISSUER}{self.path}" + (f"?{self.query}" if self.query else "")
        self.headers = {key[5:].replace("_", "-").lower(): value for key, value in environ.items() if key.startswith("HTTP_")}
        if environ.get("CONTENT_TYPE"):
            self.headers["content-type"] = environ["CONTENT_TYPE"]
        length = int(environ.get("CONTENT_LENGTH") or 0)
        self.body = environ["wsgi.input"].read(length).decode() if length else ""
        jar = http.cookies.SimpleCookie(self.headers.pop("cookie", ""))
        self.cookies = [{"name": name, "value": morsel.value} for name, morsel in jar.items()]

    def args(self) -> dict[str, str]:
        """The arguments; those that may come more than once (MULTIPLE) as lists."""
        text = self.body if self.method == "POST" else self.query
        pairs = urllib.parse.parse_qsl(text, keep_blank_values=True)
        arguments: dict = dict(pairs)
        for name in MULTIPLE:
            if name in arguments:
                arguments[name] = [value for key, value in pairs if key == name]
        return arguments

    def http_info(self) -> dict:
        return {"headers": self.headers, "method": self.method, "url": self.url, "cookie": self.cookies}


def error(code: str, description: str, status: int = 400) -> Reply:
    return Reply.json({"error": code, "error_description": description}, status)


def is_error(message) -> bool:
    return isinstance(message, (dict, ResponseMessage)) and "error" in message


def error_reply(message, resource: bool = False) -> Reply:
    """An OAuth error as JSON: 401 for a client that failed to authenticate, and at a resource
    (userinfo) for every refusal of its token (RFC 6750 §3, RFC 9449 §7.1); 400 otherwise."""
    code = message["error"]
    status = 401 if resource or code in ("invalid_client", "unauthorized_client") else 400
    reply = error(code, str(message.get("error_description", "")), status)
    if resource:
        reply.headers.append(("WWW-Authenticate", f'Bearer error="{code}"'))
    return reply


def service(name: str, request: Request, arguments: dict[str, str] | str | None = None, **process_options) -> Reply:
    """One protocol endpoint: parse (client authentication and the add-ons' checks), process,
    then the library's own response (body, or a redirect for the authorization endpoint)."""
    endpoint = op.get_endpoint(name)
    http_info = request.http_info()
    resource = name == "userinfo"
    try:
        parsed = endpoint.parse_request(request.args() if arguments is None else arguments, http_info=http_info)
    except (ClientAuthenticationError, UnAuthorizedClient) as failure:
        return error("invalid_client", str(failure) or "client authentication failed", 401)
    except Exception as failure:  # the library signals malformed requests with many exception types
        return error("invalid_request", str(failure) or type(failure).__name__)
    if is_error(parsed):
        return error_reply(parsed, resource)
    try:
        result = endpoint.process_request(parsed, http_info=http_info, **process_options)
    except Exception as failure:
        traceback.print_exc()
        return error("invalid_request", str(failure) or type(failure).__name__)
    if is_error(result) and endpoint.response_placement == "body":
        return error_reply(result, resource)
    if "http_response" in result:  # the sign-in page, or the pushed request's answer
        page = result["http_response"]
        if isinstance(page, dict):
            return Reply.json(page, 201)
        return Reply(200, page, "text/html; charset=utf-8")
    if "redirect_location" in result:
        return Reply.redirect(result["redirect_location"])
    return library_reply(endpoint, parsed, result)


def registration(request: Request) -> Reply:
    """RFC 7591 §3.1: the body is the client's metadata as JSON (only with --registration)."""
    if "registration" not in CONFIG["endpoint"]:
        return error("not_found", request.path, 404)
    if request.method != "POST":
        return error("invalid_request", "POST the client metadata as JSON")
    try:
        metadata = json.loads(request.body)
    except ValueError:
        return error("invalid_client_metadata", "the body is not JSON")
    # 5.0.0 gives every client a secret (set_secret); a public one has no use for it (RFC 7591 §2 "none").
    public = isinstance(metadata, dict) and metadata.get("token_endpoint_auth_method") == "none" and not args.registration_as_is
    return service("registration", request, request.body, set_secret=not public)


def authorization(request: Request) -> Reply:
    """With a pushed request, the browser brings only client_id and request_uri (RFC 9126 §4), but
    5.0.0 verifies the query as a whole authorization request before it looks the pushed one up:
    the pushed parameters are put in (the library then uses, and forgets, the pushed request)."""
    arguments = request.args()
    pushed = context.par_db.get(arguments.get("request_uri", ""))
    if pushed is not None and pushed.get("client_id") == arguments.get("client_id"):
        arguments = {**{key: " ".join(value) if isinstance(value, list) and key not in MULTIPLE else value
                        for key, value in pushed.to_dict().items()},
                     **arguments}
    if unknown := [uri for uri in arguments.get("resource", []) if uri not in RESOURCES]:
        return target_refused(arguments, f"unknown resource: {' '.join(unknown)}")
    return service("authorization", request, arguments)


def target_refused(arguments: dict, description: str) -> Reply:
    """RFC 8707 §2: an authorization request for a resource the OP does not know is refused with
    invalid_target, redirected back when the redirect URI is the client's (400 otherwise; the
    library's own policy wants resources to be client ids, so the OP checks them itself)."""
    client = context.cdb.get(arguments.get("client_id", ""), {})
    redirect_uri = arguments.get("redirect_uri", "")
    if redirect_uri not in [uri for uri, _ in client.get("redirect_uris", [])]:
        return error("invalid_target", description)
    answer = {"error": "invalid_target", "error_description": description, "iss": ISSUER}
    if arguments.get("state"):
        answer["state"] = arguments["state"]
    return Reply.redirect(f"{redirect_uri}?{urllib.parse.urlencode(answer)}")


#: The resources (RFC 8707) the token request in hand asked for: the access token minted for it
#: has them as its audience (idpyoidc 5.0.0's refresh and client_credentials grants ignore
#: `resource`, its code grant takes it unchecked). Requests are handled one at a time (LOCK).
RESOURCES_ASKED: list[str] = []
RESOURCE_GRANTS = {"authorization_code": "code", "refresh_token": "refresh_token", "client_credentials": None}
TOKEN_EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange"


def token(request: Request) -> Reply:
    """The token endpoint, with RFC 8707 §2.2 checked first: a code or refresh grant may name only
    resources of its authorization request (any of RESOURCES when it named none), a client
    credentials grant any of RESOURCES; otherwise invalid_target (400). Without `resource`, a code
    or refresh grant's access token is for all the authorization request's resources (5.0.0 would
    make it the client's: its JWT tokens take `aud` from the token request only)."""
    arguments = request.args()
    grant_type = arguments.get("grant_type", "")
    resources = arguments.get("resource", []) if grant_type in RESOURCE_GRANTS else []
    granted = granted_resources(grant_type, arguments)
    if resources:
        if outside := [uri for uri in resources if uri not in (granted or RESOURCES)]:
            return error("invalid_target", f"not a resource of this grant: {' '.join(outside)}")
    if grant_type == TOKEN_EXCHANGE:   # checked by the exchange's policy (RESOURCES)
        resources = arguments.get("resource", [])
    RESOURCES_ASKED[:] = resources or granted
    try:
        return service("token", request, arguments)
    finally:
        RESOURCES_ASKED.clear()


def granted_resources(grant_type: str, arguments: dict) -> list[str]:
    """The resources the authorization request named, for a code or refresh token ([] when the
    token is unknown: the library refuses it next)."""
    parameter = RESOURCE_GRANTS.get(grant_type)
    if not parameter:
        return []
    handler = "authorization_code" if grant_type == "authorization_code" else "refresh_token"
    try:
        info = context.session_manager.get_session_info_by_token(arguments.get(parameter, ""), grant=True, handler_key=handler)
    except Exception:
        return []
    grant = info["grant"]
    named = (grant.authorization_request or {}).get("resource") or grant.resources or []
    return [uri for uri in ([named] if isinstance(named, str) else named) if uri in RESOURCES]


def with_resources_asked(mint):
    """A token helper's _mint_token that adds RESOURCES_ASKED to the access token's audience (for
    token exchange: 5.0.0 drops `resource` unless `audience` comes with it)."""
    def mint_token(*arguments, **options):
        if options.get("token_class") == "access_token" and RESOURCES_ASKED:
            token_args = options.get("token_args") or {}
            audience = list(dict.fromkeys([*(token_args.get("resources") or []), *RESOURCES_ASKED]))
            options["token_args"] = {**token_args, "resources": audience}
        return mint(*arguments, **options)
    return mint_token


class ClientCredentialsGrant(ClientCredentials):
    """5.0.0's client credentials grant, made usable more than once: the library looks the client's
    earlier grant up as a dict and fails on the object it gets ("'ClientSessionInfo' object is not
    subscriptable", every grant after a client's first); it answers token_type "access_token";
    and it grants all the client's allowed scopes whatever `scope` asks. Here: a new grant each
    time, token_type Bearer, and `scope` (when given) narrows the allowed scopes, a scope outside
    them being refused with invalid_scope."""

    def process_request(self, req, **kwargs):
        client_id = req["client_id"]
        client = context.cdb[client_id]
        if "client_credentials" not in client.get("grant_types_supported", []):
            return self.error_cls(error="unauthorized_client", error_description="client_credentials is not this client's")
        allowed = client.get("allowed_scopes", [])
        scope = req.get("scope") or allowed
        if outside := [name for name in scope if name not in allowed]:
            return self.error_cls(error="invalid_scope", error_description=f"not the client's: {' '.join(outside)}")
        manager = context.session_manager
        branch_id = manager.add_grant(["client_credentials", client_id])
        info = manager.get_session_info(branch_id, grant=True)
        access_token = self._mint_token(token_class="access_token", grant=info["grant"], session_id=branch_id,
                                        client_id=client_id, based_on=None, scope=scope, token_type="Bearer")
        answer = {"access_token": access_token.value, "token_type": "Bearer", "scope": scope}
        if access_token.expires_at:
            answer["expires_in"] = access_token.expires_at - utc_time_sans_frac()
        return answer


op.get_endpoint("token").grant_type_helper["client_credentials"] = ClientCredentialsGrant(op.get_endpoint("token"))

# Discovery lists the oidc token endpoint's default grants, not the helpers configured.
context.provider_info["grant_types_supported"] = list(op.get_endpoint("token").grant_type_helper)

for grant_type in [*RESOURCE_GRANTS, TOKEN_EXCHANGE]:
    helper = op.get_endpoint("token").grant_type_helper[grant_type]
    helper._mint_token = with_resources_asked(helper._mint_token)


def library_reply(endpoint, parsed, result) -> Reply:
    info = endpoint.do_response(request=parsed, **(result if isinstance(result, dict) else {"response_args": result}))
    headers = [(key, value) for key, value in info.get("http_headers", []) if key.lower() != "content-type"]
    content_type = dict((key.lower(), value) for key, value in info.get("http_headers", [])).get("content-type", "application/json")
    placement = info.get("response_placement", endpoint.response_placement)
    if placement == "url":
        return Reply(302, b"", "text/plain", headers + [("Location", info["response"])] + set_cookies(info.get("cookie")))
    status = info.get("response_code", 400 if is_error(result) else 200)
    return Reply(status, info["response"], content_type, headers + set_cookies(info.get("cookie")))


def sign_in(request: Request) -> Reply:
    """The password page's form: the user is checked, a session made, and the browser sent back to
    the client with a code (the library's authz_part2)."""
    form = request.args()
    method = context.authn_broker.get_method_by_id("user")
    try:
        user = method.verify(username=form.get("username", ""), password=form.get("password", ""))
    except FailedAuthentication:
        return Reply(403, "Wrong username or password", "text/plain")
    try:
        pending = method.unpack_token(form["token"])
    except Exception:
        return Reply(400, "The sign-in form was altered or is not this OP's", "text/plain")
    authorization = AuthorizationRequest().from_urlencoded(pending["query"])
    endpoint = op.get_endpoint("authorization")
    session_id = endpoint.create_session(authorization, user, pending["authn_class_ref"], pending["iat"], method)
    result = endpoint.authz_part2(request=authorization, session_id=session_id)
    if is_error(result):
        return error_reply(result)
    return library_reply(endpoint, authorization, result)


LOGOUT_PAGE = ('<!DOCTYPE html><title>Sign out</title><form method="post" action="/rp_logout">'
               '<input type="hidden" name="sjwt" value="{sjwt}"><button>Sign out</button></form>')


def verify_logout(request: Request) -> Reply:
    """The end-session endpoint sends the browser here to confirm."""
    sjwt = request.args().get("sjwt", "")
    return Reply(200, LOGOUT_PAGE.format(sjwt=html.escape(sjwt)), "text/html; charset=utf-8")


def confirm_logout(request: Request) -> Reply:
    endpoint = op.get_endpoint("session")
    try:
        info = endpoint.unpack_signed_jwt(request.args()["sjwt"])
    except Exception:
        return Reply(400, "Not a logout request of this OP", "text/plain")
    endpoint.do_verified_logout(alla=True, **info)
    return Reply.redirect(info["redirect_uri"], endpoint.kill_cookies())


# ---- Test-only endpoints ----------------------------------------------------------------------

def grants_of(user: str) -> list[Grant]:
    """The grants under the user's node (the session db's keys are user, client, grant paths)."""
    manager = context.session_manager
    return [node for key, node in manager.db.items()
            if isinstance(node, Grant) and manager.unpack_branch_key(key)[0] == user]


def admin_revoke(request: Request) -> Reply:
    """Every grant of the user revoked, with every token minted from it (the library's
    revoke_grant marks the grant only, and its refresh grant does not look at the grant)."""
    revoked = 0
    for grant in grants_of(request.args().get("user", "")):
        revoked += sum(1 for token in grant.issued_token if token.token_class == "refresh_token" and not token.revoked)
        grant.revoke_token()
        grant.revoke()
    return Reply.json({"revoked": revoked})


def user_sub(request: Request) -> Reply:
    name = request.args().get("name", "")
    return Reply.json({"sub": context.session_manager.sub_func["public"](name, salt=context.session_manager.get_salt())})


STATIC_CLIENTS = {PUBLIC_CLIENT, CONFIDENTIAL_CLIENT, JWT_CLIENT}


def registered_clients(_: Request) -> Reply:
    """The clients registered dynamically (RFC 7591), by id: what the client db keeps of each, a
    secret only as `has_client_secret`."""
    return Reply.json({"clients": {client_id: {**{key: value for key, value in info.items()
                                                  if key not in ("client_secret", "registration_access_token")},
                                               "has_client_secret": bool(info.get("client_secret"))}
                                   for client_id, info in context.cdb.items() if client_id not in STATIC_CLIENTS}})


def count_token_answer(form: dict[str, str], reply: Reply) -> None:
    grant = form.get("grant_type")
    if reply.status == 200:
        body = json.loads(reply.body)
        HANDED_OUT.update(body.get(key, "") for key in ("access_token", "refresh_token", "id_token"))
        if grant == "refresh_token":
            STATS["refreshes"] += 1
        elif grant == "authorization_code":
            STATS["codes_redeemed"] += 1
    elif grant == "refresh_token":
        STATS["refresh_errors"] += 1


def remember_code(reply: Reply) -> None:
    """Codes leave in the authorization redirect's Location."""
    location = dict(reply.headers).get("Location", "")
    if "code=" in location:
        HANDED_OUT.update(urllib.parse.parse_qs(urllib.parse.urlsplit(location).query).get("code", []))


def jwks(_: Request) -> Reply:
    return Reply.json(context.keyjar.export_jwks())


ROUTES = {
    "/.well-known/openid-configuration": lambda request: service("provider_config", request),
    "/jwks.json": jwks,
    "/authorization": authorization,
    "/verify/user": sign_in,
    "/par": lambda request: service("pushed_authorization", request),
    "/token": token,
    "/userinfo": lambda request: service("userinfo", request),
    "/introspection": lambda request: service("introspection", request),
    "/revocation": lambda request: service("token_revocation", request),
    "/end_session": lambda request: service("session", request),
    "/registration": registration,
    "/verify_logout": verify_logout,
    "/rp_logout": confirm_logout,
    "/post_logout": lambda request: Reply(200, "Signed out.", "text/plain"),
    "/test/stats": lambda request: Reply.json(dict(STATS)),
    "/test/secrets": lambda request: Reply.json({"secrets": sorted(value for value in HANDED_OUT if value)}),
    "/test/user": user_sub,
    "/test/admin-revoke": admin_revoke,
    "/test/clients": registered_clients,
}


def application(environ, start_response):
    request = Request(environ)
    route = ROUTES.get(request.path)
    with LOCK:
        if STOPPING.is_set():
            reply = error("temporarily_unavailable", "the OP is stopping", 503)
        elif route is None:
            reply = error("not_found", request.path, 404)
        else:
            try:
                reply = route(request)
            except Exception as failure:  # a bug here or in the library: say so, keep serving
                traceback.print_exc()
                reply = error("server_error", f"{type(failure).__name__}: {failure}", 500)
        if request.path == "/token":
            count_token_answer(request.args(), reply)
        elif request.path == "/revocation" and reply.status == 200:
            STATS["revocations"] += 1
        elif request.path == "/registration" and reply.status == 201:
            HANDED_OUT.add(json.loads(reply.body).get("client_secret", ""))   # a secret issued (--registration-as-is)
        remember_code(reply)
    start_response(f"{reply.status} {STATUS_TEXT.get(reply.status, '')}",
                   [("Content-Type", reply.content_type), ("Content-Length", str(len(reply.body)))] + reply.headers)
    return [reply.body]


httpd.set_app(application)
# SIGTERM (the kit's stop): stop accepting, write the state after the request in hand, exit.
signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=httpd.shutdown, daemon=True).start())
print(f"READY {PORT}", flush=True)
try:
    httpd.serve_forever(poll_interval=0.1)  # the interval bounds how long a stop takes
except KeyboardInterrupt:
    pass
finally:
    httpd.server_close()
    with LOCK:
        STOPPING.set()
        save_state()
