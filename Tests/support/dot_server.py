#!/usr/bin/env python3
"""A real django-oauth-toolkit authorization server for the tests, on 127.0.0.1.

    dot_server.py --state DIR [--access-lifetime S] [--grace S]

Configures Django in-process (no project on disk), migrates a SQLite database in DIR, creates
a user (ada / lovelace-test) and a public client "authbridge-test" (authorization code + PKCE,
redirect http://127.0.0.1/callback on any port, consent skipped), then serves on an ephemeral
port and prints `READY <port>` on stdout. Refresh tokens rotate with reuse protection, as a
careful deployment configures them; OIDC is on (RS256, a key made at start-up).

Test-only endpoints: `GET /test/stats` (refresh outcomes counted at the token endpoint) and
`GET /test/issued?token=…` (whether an access token was issued by this server).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
from socketserver import ThreadingMixIn
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

parser = argparse.ArgumentParser()
parser.add_argument("--state", required=True)
parser.add_argument("--access-lifetime", type=int, default=3600)
parser.add_argument("--grace", type=int, default=0)
parser.add_argument("--port", type=int, default=0, help="0: an ephemeral port")
args = parser.parse_args()

from django.conf import settings  # noqa: E402
from jwcrypto import jwk  # noqa: E402

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
                "django.contrib.auth.middleware.AuthenticationMiddleware"],
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
        "OIDC_RSA_PRIVATE_KEY": jwk.JWK.generate(kty="RSA", size=2048).export_to_pem(private_key=True, password=None).decode(),
        "SCOPES": {"openid": "OpenID Connect", "read": "Read"},
        "OIDC_TOKEN_ENDPOINT_AUTH_METHODS_SUPPORTED": ["none", "client_secret_post", "client_secret_basic"],
    },
)

import django  # noqa: E402

django.setup()

from django.contrib.auth.models import User  # noqa: E402
from django.contrib.auth.views import LoginView  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.http import JsonResponse  # noqa: E402
from django.urls import include, path  # noqa: E402
from django.views.decorators.csrf import csrf_exempt  # noqa: E402
from oauth2_provider.models import get_application_model  # noqa: E402
from oauth2_provider.views import TokenView  # noqa: E402

STATS = {"refreshes": 0, "revocations": 0, "refresh_errors": 0, "codes_redeemed": 0}
ISSUED: set[str] = set()  # every access token handed out (DOT deletes rotated ones from its tables)
STATS_LOCK = threading.Lock()


class CountingTokenView(TokenView):
    """DOT's token endpoint, counting refresh outcomes for the tests."""

    def post(self, request, *args, **kwargs):
        grant = request.POST.get("grant_type")
        response = super().post(request, *args, **kwargs)
        with STATS_LOCK:
            if response.status_code == 200:
                ISSUED.add(json.loads(response.content).get("access_token", ""))
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


def stats(request):
    with STATS_LOCK:
        return JsonResponse(dict(STATS))


def issued(request):
    with STATS_LOCK:
        return JsonResponse({"issued": request.GET.get("token", "") in ISSUED})


from oauth2_provider.urls import metadata_urlpatterns  # noqa: E402

urlpatterns = [
    # RFC 8414 metadata at the origin (/.well-known/oauth-authorization-server/o), as DOT documents.
    path("", include(metadata_urlpatterns)),
    path("o/token/", csrf_exempt(CountingTokenView.as_view())),
    path("o/", include("oauth2_provider.urls", namespace="oauth2_provider")),
    path("accounts/login/", LoginView.as_view(template_name="login.html")),
    path("test/stats", stats),
    path("test/issued", issued),
]

call_command("migrate", verbosity=0, interactive=False)
Application = get_application_model()
if not User.objects.filter(username="ada").exists():  # a restart keeps users, clients and tokens
    User.objects.create_user("ada", password="lovelace-test")
if not Application.objects.filter(client_id="authbridge-test").exists():
    Application.objects.create(
        client_id="authbridge-test", name="AuthBridge tests", client_type=Application.CLIENT_PUBLIC,
        authorization_grant_type=Application.GRANT_AUTHORIZATION_CODE,
        redirect_uris="http://127.0.0.1/callback", skip_authorization=True, algorithm=Application.RS256_ALGORITHM)


class Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class Handler(WSGIRequestHandler):
    disable_nagle_algorithm = True  # headers and body are separate writes: avoid 40 ms delayed ACKs

    def log_message(self, *arguments):  # quiet
        pass


from django.core.wsgi import get_wsgi_application  # noqa: E402

Server.allow_reuse_address = True
server = make_server("127.0.0.1", args.port, get_wsgi_application(), server_class=Server, handler_class=Handler)
print(f"READY {server.server_address[1]}", flush=True)
try:
    server.serve_forever()
except KeyboardInterrupt:
    pass
