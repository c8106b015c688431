#!/usr/bin/env python3
"""A real django-oauth-toolkit authorization server for the tests, on 127.0.0.1.

    dot_server.py --state DIR [--access-lifetime S] [--grace S] [--device-interval S] [--port P]
                  [--banner [--checkout-export NAME=VALUE ...]]

Configures Django in-process (no project on disk), migrates a SQLite database in DIR (created if
need be), creates two users (ada / lovelace-test, grace / hopper-test), three public clients and
a confidential one, then serves on an ephemeral port and prints `READY <port>` on stdout (with
--banner, for people: `make dev-server`, the exports a quick start reads and the test user, instead):

- "authbridge-test": authorization code + PKCE, redirect http://127.0.0.1/callback on any port,
  consent skipped (the scripted user); also the device authorization grant (RFC 8628), so that the
  quick starts' one client signs in both ways (`authbridge login corp` and `… --device`), as a
  provider's client usually may (DOT allows one grant per application: DualGrantValidator);
- "authbridge-consent": the same with DOT's consent page (the real-browser test clicks it);
- "authbridge-device": the device authorization grant (RFC 8628), verification at /o/device/;
- "authbridge-confidential": like "authbridge-test" with a client secret; also the resource server
  that introspects tokens at /o/introspect/ (RFC 7662, scope `introspection`).

Discovery (/o/.well-known/openid-configuration) announces `device_authorization_endpoint`
(RFC 8628 §4), as providers that offer the grant do; DOT 3.4 leaves it out of its document.

ID tokens and userinfo name the user: `preferred_username`, `name` and `email` besides DOT's
numeric `sub` (NamingValidator).

Refresh tokens rotate with reuse protection, as a careful deployment configures them; OIDC is on
(RS256, a key made at start-up; the key survives restarts in DIR so issued ID tokens stay valid).

Test-only endpoints:
- `GET /test/stats`: refresh outcomes and redeemed codes counted at the token endpoint;
- `GET /test/issued?token=…`: whether an access token was issued by this server;
- `GET /test/secrets`: every code and token it handed out (the suite scans the hosts' output for them);
- `GET /test/user?name=ada`: the `sub` DOT gives that user (its id) in ID tokens and userinfo;
- `GET /test/admin-revoke?user=ada`: what an administrator does in DOT's admin — revoke every
  refresh token (and its access token) of a user;
- `GET /test/end-access?token=…`: the access token stops working now (its expiry moved to the past,
  as a server does that ends sessions early); its refresh token still works. (Revoking the access
  token at `/o/revoke_token/` revokes its refresh token too, as RFC 7009 §2.1 allows.)
- `GET /test/refresh-active?token=…`: whether a refresh token is still good (DOT's RFC 7662
  endpoint knows access tokens only);
- `GET /test/tamper?mode=signature|aud|exp|nonce|none`: the next ID tokens the token endpoint
  hands out are altered (a flipped signature byte, or re-signed with DOT's own key and another
  `aud`, an `exp` in the past, another `nonce`): the client must refuse each.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import threading

import loopback_wsgi  # beside this file

parser = argparse.ArgumentParser()
parser.add_argument("--state", required=True)
parser.add_argument("--access-lifetime", type=int, default=3600)
parser.add_argument("--grace", type=int, default=0)
parser.add_argument("--port", type=int, default=0, help="0: an ephemeral port")
parser.add_argument("--device-interval", type=int, default=1, help="RFC 8628 polling interval (s)")
parser.add_argument("--extra-scope", action="append", default=[], metavar="SCOPE",
                    help="a scope DOT also accepts (repeatable), e.g. offline_access, which oidc-agent always asks for")
parser.add_argument("--banner", action="store_true", help="print what a person needs to try the quick starts")
parser.add_argument("--checkout-export", action="append", default=[], metavar="NAME=VALUE",
                    help="an export in the banner that runs this checkout's build, printed apart and marked as such")
args = parser.parse_args()
os.makedirs(args.state, exist_ok=True)


# Bound before Django is configured: the device grant's verification URI names the port.
server, BASE = loopback_wsgi.bind(args.port)
PORT = server.server_address[1]

from django.conf import settings  # noqa: E402
from jwcrypto import jwk, jwt  # noqa: E402

#: The confidential client's secret (the test kit's openid_servers.CONFIDENTIAL_SECRET).
CONFIDENTIAL_SECRET = "authbridge-confidential-secret-0123456789"

KEY_FILE = os.path.join(args.state, "oidc-key.pem")
if not os.path.exists(KEY_FILE):
    with open(KEY_FILE, "wb") as handle:
        handle.write(jwk.JWK.generate(kty="RSA", size=2048).export_to_pem(private_key=True, password=None))
with open(KEY_FILE, "rb") as handle:
    OIDC_KEY_PEM = handle.read().decode()

os.makedirs(os.path.join(args.state, "templates"), exist_ok=True)
with open(os.path.join(args.state, "templates", "login.html"), "w") as handle:
    handle.write('<form method="post">{% csrf_token %}{{ form.as_p }}'
                 '<input type="hidden" name="next" value="{{ next }}"><button>Sign in</button></form>')

settings.configure(
    DEBUG=False,
    SECRET_KEY="authbridge-tests-only",
    ALLOWED_HOSTS=["127.0.0.1", "localhost"],
    ROOT_URLCONF=__name__,
    INSTALLED_APPS=["django.contrib.auth", "django.contrib.contenttypes", "django.contrib.sessions",
                    "oauth2_provider"],
    MIDDLEWARE=["django.contrib.sessions.middleware.SessionMiddleware",
                "django.middleware.common.CommonMiddleware",
                "django.middleware.csrf.CsrfViewMiddleware",
                "django.contrib.auth.middleware.AuthenticationMiddleware",
                f"{__name__}.remember_codes"],
    DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": os.path.join(args.state, "db.sqlite3"),
                           "OPTIONS": {"timeout": 30}}},
    TEMPLATES=[{"BACKEND": "django.template.backends.django.DjangoTemplates",
                "DIRS": [os.path.join(args.state, "templates")], "APP_DIRS": True,
                "OPTIONS": {"context_processors": ["django.template.context_processors.request"]}}],
    LOGIN_URL="/accounts/login/",
    USE_TZ=True,
    DEFAULT_AUTO_FIELD="django.db.models.AutoField",
    LOGGING={"version": 1, "disable_existing_loggers": False},
    OAUTH2_PROVIDER={
        "PKCE_REQUIRED": True,
        "COMPLIANT_BCP_RFC9700_AUTHZ_RESPONSE_ISS": True,  # RFC 9207: the redirect carries `iss`
        "ROTATE_REFRESH_TOKEN": True,
        "REFRESH_TOKEN_REUSE_PROTECTION": True,
        "REFRESH_TOKEN_GRACE_PERIOD_SECONDS": args.grace,
        "ACCESS_TOKEN_EXPIRE_SECONDS": args.access_lifetime,
        "OIDC_ENABLED": True,
        "OIDC_RSA_PRIVATE_KEY": OIDC_KEY_PEM,
        "OAUTH_DEVICE_VERIFICATION_URI": f"{BASE}/o/device/",
        "OAUTH_DEVICE_VERIFICATION_URI_COMPLETE": f"{BASE}/o/device/?user_code={{user_code}}",
        "DEVICE_FLOW_INTERVAL": args.device_interval,
        "SCOPES": {"openid": "OpenID Connect", "read": "Read", "introspection": "Introspect tokens",
                   **{scope: scope for scope in args.extra_scope}},
        "OIDC_TOKEN_ENDPOINT_AUTH_METHODS_SUPPORTED": ["none", "client_secret_post", "client_secret_basic"],
        "OAUTH2_VALIDATOR_CLASS": f"{__name__}.NamingValidator",
    },
)

import django  # noqa: E402

django.setup()

from django.contrib.auth.models import User  # noqa: E402
from django.contrib.auth.views import LoginView  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.http import JsonResponse  # noqa: E402
from django.urls import include, path, re_path  # noqa: E402
from django.views.decorators.csrf import csrf_exempt  # noqa: E402
from oauth2_provider.models import get_application_model  # noqa: E402
from oauth2_provider.views import ConnectDiscoveryInfoView, TokenView  # noqa: E402

from oauth2_provider.oauth2_validators import OAuth2Validator  # noqa: E402


#: Clients that may also use the device authorization grant (their application's grant is the
#: authorization code): the quick starts' client.
DEVICE_TOO = {"authbridge-test"}
DEVICE_GRANT = "urn:ietf:params:oauth:grant-type:device_code"


class NamingValidator(OAuth2Validator):
    """ID tokens and userinfo name the user (`preferred_username`, `name`, `email`), not only by
    DOT's numeric `sub`, so that a sign-in shows who signed in. DOT releases a claim only with its
    scope (`profile`, `email`); the quick starts ask for `openid` alone, so every claim comes with
    it here (`oidc_claim_scope = None`)."""

    oidc_claim_scope = None

    def get_additional_claims(self):
        # Request-agnostic form (callables): DOT also lists these in discovery's claims_supported.
        return {
            "preferred_username": lambda request: request.user.get_username(),
            "name": lambda request: request.user.get_full_name() or request.user.get_username(),
            "email": lambda request: request.user.email,
        }

    def validate_grant_type(self, client_id, grant_type, client, request, *args, **kwargs):
        # DOT allows an application one grant; DEVICE_TOO's have the device grant too.
        if grant_type == DEVICE_GRANT and request.client.client_id in DEVICE_TOO:
            return True
        return super().validate_grant_type(client_id, grant_type, client, request, *args, **kwargs)


STATS = {"refreshes": 0, "revocations": 0, "refresh_errors": 0, "codes_redeemed": 0, "device_polls": 0,
         "device_codes_redeemed": 0}
TAMPER = {"mode": "none"}
ISSUED: set[str] = set()  # every access token handed out (DOT deletes rotated ones from its tables)
HANDED_OUT: set[str] = set()  # every code, access, refresh and ID token (the tests scan for leaks)
STATS_LOCK = threading.Lock()


class CountingTokenView(TokenView):
    """DOT's token endpoint, counting refresh outcomes for the tests."""

    def post(self, request, *args, **kwargs):
        grant = request.POST.get("grant_type")
        response = super().post(request, *args, **kwargs)
        with STATS_LOCK:
            if response.status_code == 200:
                body = json.loads(response.content)
                ISSUED.add(body.get("access_token", ""))
                HANDED_OUT.update(body.get(key, "") for key in ("access_token", "refresh_token", "id_token"))
                if TAMPER["mode"] != "none" and "id_token" in body:
                    body["id_token"] = tampered(body["id_token"], TAMPER["mode"])
                    response.content = json.dumps(body).encode()
            if grant == "urn:ietf:params:oauth:grant-type:device_code":
                STATS["device_polls"] += 1
                if response.status_code == 200:
                    STATS["device_codes_redeemed"] += 1
            if grant == "refresh_token":
                if response.status_code == 200:
                    STATS["refreshes"] += 1
                else:
                    body = json.loads(response.content or b"{}")
                    # With reuse protection, a replayed refresh token revokes its family: invalid_grant.
                    STATS["revocations" if body.get("error") == "invalid_grant" else "refresh_errors"] += 1
            elif grant == "authorization_code" and response.status_code == 200:
                STATS["codes_redeemed"] += 1
        return response


class DiscoveryWithDevice(ConnectDiscoveryInfoView):
    """DOT's OpenID discovery document with the device authorization endpoint it serves (RFC 8628 §4)."""

    def get(self, request, *args, **kwargs):
        response = super().get(request, *args, **kwargs)
        document = json.loads(response.content)
        document["device_authorization_endpoint"] = f"{BASE}/o/device-authorization/"
        response.content = json.dumps(document).encode()
        return response


def tampered(id_token: str, mode: str) -> str:
    """The ID token altered as `mode` says; re-signed with DOT's own key unless the signature is the target."""
    if mode == "signature":
        head, payload, signature = id_token.split(".")
        return f"{head}.{payload}.{signature[:-6]}{'AAAAAA' if not signature.endswith('AAAAAA') else 'BBBBBB'}"
    key = jwk.JWK.from_pem(OIDC_KEY_PEM.encode())
    original = jwt.JWT(key=key, jwt=id_token)
    claims = json.loads(original.claims)
    header = json.loads(original.header) if isinstance(original.header, str) else dict(original.header)
    if mode == "aud":
        claims["aud"] = "someone-else"
    elif mode == "exp":
        claims["iat"] = claims["iat"] - 7200
        claims["exp"] = claims["iat"] + 600
    elif mode == "nonce":
        claims["nonce"] = "not-the-one-sent"
    token = jwt.JWT(header=header, claims=claims)
    token.make_signed_token(key)
    return token.serialize()


def tamper(request):
    TAMPER["mode"] = request.GET.get("mode", "none")
    return JsonResponse(TAMPER)


def admin_revoke(request):
    from oauth2_provider.models import get_refresh_token_model
    revoked = 0
    for token in get_refresh_token_model().objects.filter(user__username=request.GET["user"], revoked__isnull=True):
        token.revoke()
        revoked += 1
    return JsonResponse({"revoked": revoked})


def end_access(request):
    import datetime
    import hashlib

    from django.utils import timezone
    from oauth2_provider.models import get_access_token_model
    checksum = hashlib.sha256(request.GET["token"].encode()).hexdigest()
    ended = get_access_token_model().objects.filter(token_checksum=checksum).update(
        expires=timezone.now() - datetime.timedelta(seconds=1))
    return JsonResponse({"ended": ended})


def secrets(request):
    with STATS_LOCK:
        return JsonResponse({"secrets": sorted(value for value in HANDED_OUT if value)})


def remember_codes(get_response):
    """Middleware: authorization codes leave in the authorize redirect's Location."""
    def middleware(request):
        response = get_response(request)
        location = response.get("Location", "") if hasattr(response, "get") else ""
        if "code=" in location:
            from urllib.parse import parse_qs, urlsplit
            with STATS_LOCK:
                HANDED_OUT.update(parse_qs(urlsplit(location).query).get("code", []))
        return response
    return middleware


def refresh_active(request):
    """Whether a refresh token is still good at DOT: its introspection endpoint knows access tokens only."""
    from oauth2_provider.models import get_refresh_token_model
    active = get_refresh_token_model().objects.filter(token=request.GET.get("token", ""), revoked__isnull=True).exists()
    return JsonResponse({"active": active})


def stats(request):
    with STATS_LOCK:
        return JsonResponse(dict(STATS))


def user(request):
    return JsonResponse({"sub": str(User.objects.get(username=request.GET["name"]).pk)})


def issued(request):
    with STATS_LOCK:
        return JsonResponse({"issued": request.GET.get("token", "") in ISSUED})


from oauth2_provider.urls import metadata_urlpatterns  # noqa: E402

urlpatterns = [
    # RFC 8414 metadata at the origin (/.well-known/oauth-authorization-server/o), as DOT documents.
    path("", include(metadata_urlpatterns)),
    path("o/token/", csrf_exempt(CountingTokenView.as_view())),
    re_path(r"^o/\.well-known/openid-configuration/?$", DiscoveryWithDevice.as_view()),
    path("o/", include("oauth2_provider.urls", namespace="oauth2_provider")),
    path("accounts/login/", LoginView.as_view(template_name="login.html")),
    path("test/stats", stats),
    path("test/issued", issued),
    path("test/secrets", secrets),
    path("test/user", user),
    path("test/tamper", tamper),
    path("test/admin-revoke", admin_revoke),
    path("test/end-access", end_access),
    path("test/refresh-active", refresh_active),
]

call_command("migrate", verbosity=0, interactive=False)
Application = get_application_model()
for username, password, first, last in [("ada", "lovelace-test", "Ada", "Lovelace"), ("grace", "hopper-test", "Grace", "Hopper")]:
    if not User.objects.filter(username=username).exists():  # a restart keeps users, clients and tokens
        User.objects.create_user(username, password=password, email=f"{username}@example.test")
    # Named also in a state folder made before users had names.
    User.objects.filter(username=username, first_name="").update(first_name=first, last_name=last)
CLIENTS = [
    ("authbridge-test", Application.GRANT_AUTHORIZATION_CODE, True, None),
    ("authbridge-consent", Application.GRANT_AUTHORIZATION_CODE, False, None),
    ("authbridge-device", Application.GRANT_DEVICE_CODE, False, None),
    # Confidential: signs in as the public one does, and is the resource server that introspects.
    ("authbridge-confidential", Application.GRANT_AUTHORIZATION_CODE, True, CONFIDENTIAL_SECRET),
]
for client_id, grant, skip, secret in CLIENTS:
    if not Application.objects.filter(client_id=client_id).exists():
        Application.objects.create(
            client_id=client_id, name=f"AuthBridge tests ({client_id})",
            client_type=Application.CLIENT_CONFIDENTIAL if secret else Application.CLIENT_PUBLIC,
            client_secret=secret or "",
            authorization_grant_type=grant, redirect_uris="http://127.0.0.1/callback" if grant != Application.GRANT_DEVICE_CODE else "",
            skip_authorization=skip, algorithm=Application.RS256_ALGORITHM)

from django.core.wsgi import get_wsgi_application  # noqa: E402

server.set_app(get_wsgi_application())
if args.banner:
    def export_lines(pairs) -> str:
        return "".join(f'  export {name}="{value}"\n' for name, value in pairs)

    exports = [("ISSUER", f"{BASE}/o"), ("CLIENT_ID", "authbridge-test"), ("USERINFO_URL", f"{BASE}/o/userinfo/")]
    checkout = [tuple(item.split("=", 1)) for item in args.checkout_export]
    text = (f"django-oauth-toolkit is serving on {BASE} (Ctrl-C stops it).\n\n"
            "In another terminal, paste these, then run a quick start (README.md):\n" + export_lines(exports))
    if checkout:
        # Pasted blindly, these would put the checkout's build in front of an installed authbridge.
        installed = shutil.which("authbridge")
        built = dict(checkout).get("AUTHBRIDGE")
        found = (f" (`authbridge` on your PATH now is {installed}: leave these out to keep using it)"
                 if installed and built and os.path.realpath(installed) != os.path.realpath(built) else "")
        text += ("\nOnly to run this checkout's build instead of an installed authbridge, in that terminal"
                 f" only{found}:\n" + export_lines(checkout))
    text += ("\n`authbridge login corp` signs in in a browser; `authbridge login corp --device` with a code\n"
             f"typed at {BASE}/o/device/ on any device.\n"
             "\nSign in as ada, password lovelace-test (or grace, hopper-test).")
    print(text, flush=True)
else:
    print(f"READY {PORT}", flush=True)
try:
    server.serve_forever()
except KeyboardInterrupt:
    pass
