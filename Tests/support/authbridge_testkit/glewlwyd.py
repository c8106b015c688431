"""glewlwyd (Debian's `glewlwyd` package, 2.7.5 on bookworm: a C OpenID provider), a real
authorization server of the tests behind `OpenIDServer` (openid_servers.py).

`GlewlwydServer` runs the packaged binary on 127.0.0.1 in a temporary folder: a sqlite database
made from the package's own schema (which creates the administrator admin/password, the database
user and client back ends, and the scopes g_admin, g_profile and openid), a config file naming it,
and everything else set up the way an administrator does it, through glewlwyd's admin REST API
with a session cookie: the scopes `read` and `introspect`, the OpenID Connect plugin instance
`oidc` (endpoints under /api/oidc/), the users and the clients. Each server is its own process
on ports free_port() picks; the package's service (port 4593, /etc/glewlwyd) is neither needed nor
used, and nothing outside the folder is touched. `make deps-test` installs the package.

The OIDC instance has what the scenarios exercise switched on: RS256 signatures (a PEM key pair),
access tokens of `access_lifetime` seconds, one-time refresh tokens (`refresh-token-one-use`
"always": every refresh rotates, and replaying a rotated token disables the chain), PKCE S256,
introspection (RFC 7662) and revocation (RFC 7009), the device grant (RFC 8628), `iss` in every
callback (RFC 9207, `oauth-as-iss-id`), session management with its end_session endpoint, DPoP,
pushed authorization requests, resource indicators (RFC 8707: the kit's `resources` and RESOURCE,
with the read scope; `resource-change-allowed`), client credentials (CONFIDENTIAL_CLIENT and
JWT_CLIENT, scope read) and client assertions (client_secret_jwt for CONFIDENTIAL_CLIENT,
private_key_jwt for JWT_CLIENT, whose JWKS is the client's `jwks` property).

What glewlwyd does that a scenario meets (measured with 2.7.5):
- redirect URIs are matched exactly, so both clients get EXTERNAL_REDIRECT and
  http://127.0.0.1:<loopback_port>/callback and nothing else;
- `iss` comes in callbacks, but `authorization_response_iss_parameter_supported` is not advertised;
- token_type is "bearer" (lower case); a refresh token needs no offline_access scope;
- a refresh with a revoked, disabled or rotated-away refresh token is answered 400 with an empty body
  (no OAuth error JSON);
- revocation and introspection take client_secret_basic or (not advertised) client_secret_post from
  the client the token was issued to; a public client is refused (401): it has no secret;
- a client authenticates at the token endpoint only with a method listed in its
  `token_endpoint_auth_method` property: without one, a confidential client is refused
  (unauthorized_client, or "client_id invalid" in the log for client_credentials);
- a token has ONE resource (`aud` a string): the authorization request may name several, each
  token request names one of them (two: invalid_target, 403 at the code exchange, 400 at a
  refresh); a refresh may move to another resource of the sign-in, not to one it did not name
  (400 invalid_target "Invalid Resource"); without `resource` the aud is the scope string; an
  unknown resource at the authorization endpoint is redirected back (invalid_target) only after
  the user signed in and consented;
- `scope` on a refresh is ignored (wider or narrower: the grant's scopes, 200);
- client_credentials needs `scope` (none: 403, empty body; one the client lacks: 400
  {"error":"scope_invalid"}); the introspection of a token names its client_id only when the
  client authenticated with client_secret_basic (the JWT always has it);
- a client assertion must have aud == the token endpoint URL (a string: the issuer, or an array
  holding the endpoint, is refused), a jti not seen before, exp at most about an hour ahead, a kid
  (private_key_jwt); any fault, a bad signature included, is 403 with an empty body;
- no token exchange: its grant type is answered 400 with an empty body.
"""

from __future__ import annotations

import base64
import functools
import gzip
import http.cookiejar
import json
import shutil
import sqlite3
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from . import leak_scan
from .openid_servers import (CONFIDENTIAL_CLIENT, CONFIDENTIAL_SECRET, EXTERNAL_REDIRECT, JWT_CLIENT, JWT_CLIENT_KID,
                             PASSWORD, PUBLIC_CLIENT, USER, USERS, free_port, jwt_client_key)
from .resource_server import ResourceServer

#: Where Debian puts the binary (bookworm: /usr/bin); PATH is looked at first.
BINARIES = ("/usr/bin/glewlwyd", "/usr/sbin/glewlwyd")
#: The package's sqlite schema: dbconfig-common's copy first (it survives images that drop
#: /usr/share/doc), then the documentation's.
SCHEMAS = (Path("/usr/share/dbconfig-common/data/glewlwyd/install/sqlite3"),
           Path("/usr/share/doc/glewlwyd/database/init.sqlite3.sql.gz"))
MODULES = Path("/usr/lib/glewlwyd")
#: The administrator the schema creates.
ADMIN, ADMIN_PASSWORD = "admin", "password"
#: The OIDC plugin instance's name: its endpoints are /api/<name>/….
PLUGIN = "oidc"
#: A resource server with its own credentials (client_credentials): it asks for tokens with
#: INTROSPECT_SCOPE, the scope glewlwyd requires of a bearer at /introspect for tokens of any client.
RESOURCE_SERVER, RESOURCE_SERVER_SECRET = "authbridge-resource-server", "authbridge-resource-server-secret-0123"
INTROSPECT_SCOPE = "introspect"
#: The scope besides openid that the clients ask for (it exists only because the kit creates it).
READ_SCOPE = "read"
#: A resource indicator (RFC 8707) glewlwyd accepts with READ_SCOPE besides the kit's `resources`
#: (served by its ResourceServer); any other is refused (invalid_target). An identifier only:
#: nothing listens there.
RESOURCE = "https://resource.authbridge.test/api"
NAMES = {"ada": ("Ada Lovelace", "ada@example.test"), "grace": ("Grace Hopper", "grace@example.test")}
#: Bound on glewlwyd's start (it listens within ~0.1 s) and on each HTTP call.
READY_TIMEOUT = 20.0
HTTP_TIMEOUT = 10.0
#: Ports picked by free_port() can be taken before glewlwyd binds them (parallel workers): retries.
PORT_ATTEMPTS = 3


def find_binary() -> str:
    """glewlwyd's path; a clear error (never a skip) when the package is missing."""
    for candidate in (shutil.which("glewlwyd"), *BINARIES):
        if candidate and Path(candidate).is_file():
            return candidate
    raise RuntimeError("glewlwyd is not installed (Debian package `glewlwyd`): run `make deps-test`")


def _schema() -> str:
    for path in SCHEMAS:
        if path.is_file():
            with gzip.open(path, "rt", encoding="utf-8") if path.suffix == ".gz" else path.open(encoding="utf-8") as schema:
                return schema.read()
    raise RuntimeError(f"glewlwyd's sqlite schema is missing ({' or '.join(map(str, SCHEMAS))}): run `make deps-test`")


@functools.cache
def signing_key() -> tuple[str, str]:
    """An RSA key pair (PEM: PKCS#8 private key, SubjectPublicKeyInfo), made once per process and
    shared by every server of the run: generating one costs more than the rest of a start-up."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    public = key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    return private.decode(), public.decode()


class _PortTaken(RuntimeError):
    """glewlwyd could not bind its port (taken since free_port() saw it free)."""


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):  # each step looks at its Location itself
        return None


class _Session:
    """A cookie jar and no automatic redirects: a browser tab, or the administrator's session."""

    def __init__(self) -> None:
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()), _NoRedirect)

    def call(self, method: str, url: str, body: Any = None, form: dict[str, str] | None = None,
             headers: dict[str, str] | None = None) -> tuple[int, str, str]:
        """(status, Location, body text). `body` is sent as JSON, `form` as a urlencoded form."""
        headers = dict(headers or {})
        data = None
        if body is not None:
            data, headers["Content-Type"] = json.dumps(body).encode(), "application/json"
        elif form is not None:
            data = urllib.parse.urlencode(form).encode()
        request = urllib.request.Request(url, data=data, method=method, headers=headers)
        try:
            with self.opener.open(request, timeout=HTTP_TIMEOUT) as response:
                return response.status, response.headers.get("Location", ""), response.read().decode()
        except urllib.error.HTTPError as answer:   # 3xx (not followed) and errors alike
            return answer.code, answer.headers.get("Location", ""), answer.read().decode()


def _errors(log: str) -> str:
    """What to show of a failed start: its ERROR lines (a shutdown logs pages of noise after them),
    or the end of the log when there are none (a config file glewlwyd could not parse)."""
    errors = [line for line in log.splitlines() if " ERROR: " in line]
    return "\n".join(errors[-20:]) if errors else log[-3000:]


def _query(url: str) -> dict[str, str]:
    return dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(url).query))


class GlewlwydServer:
    """glewlwyd as an `OpenIDServer`. Its folder holds glewlwyd.conf, glewlwyd.db and server.log."""

    name = "glewlwyd"
    has_device_flow = True

    def __init__(self, state: Path, access_lifetime: int = 3600, oidc_overrides: dict[str, Any] | None = None) -> None:
        self.state = state
        #: Parameters of the OIDC plugin instance that differ from the kit's (e.g. oauth-dpop-nonce-mandatory).
        self.oidc_overrides = dict(oidc_overrides or {})
        self.access_lifetime = max(1, int(access_lifetime))  # glewlwyd wants a positive integer
        self.binary = ""
        self.process: subprocess.Popen | None = None
        self.port = 0
        self.base = self.issuer = self.authorize_prefix = self.token_endpoint = ""
        self.introspection_endpoint = self.revocation_endpoint = ""
        self.redirect_uri = EXTERNAL_REDIRECT
        self.loopback_port = 0
        self._set_up = False
        self._seen: list[str] = []   # codes and tokens the kit saw (handed_out)
        #: Bound now: the OIDC plugin instance is set up with its resource URIs.
        self.resource_server = ResourceServer(self.introspection)
        self.resources = self.resource_server.resources
        self.jwt_client_key_file = jwt_client_key(state)
        self.jwt_client_key_id = JWT_CLIENT_KID
        #: What CONFIDENTIAL_CLIENT and JWT_CLIENT get with client_credentials (a client's `scope`).
        self.client_credentials_scopes = [READ_SCOPE]

    # ── Life cycle ───────────────────────────────────────────────────────────

    @property
    def config(self) -> Path:
        return self.state / "glewlwyd.conf"

    @property
    def database(self) -> Path:
        return self.state / "glewlwyd.db"

    @property
    def log(self) -> Path:
        return self.state / "server.log"

    def start(self) -> "GlewlwydServer":
        """The first time: a new database and port, then the set-up through the admin API. After
        `stop()`: the same process command on the same port and database."""
        self.resource_server.start()
        if self._set_up:
            self._launch()
            return self
        self.binary = find_binary()
        self.state.mkdir(parents=True, exist_ok=True)
        self.loopback_port = free_port()
        for attempt in range(PORT_ATTEMPTS):
            port = free_port()
            while port == self.loopback_port:
                port = free_port()
            self._use_port(port)
            self._write_files()
            try:
                self._launch()
                break
            except _PortTaken:
                if attempt == PORT_ATTEMPTS - 1:
                    raise
        try:
            self._set_up_server()
        except BaseException:
            self.stop()   # no fixture will: it never got the server
            raise
        self._set_up = True
        leak_scan.register(self.handed_out)
        return self

    def stop(self) -> None:
        """Kills glewlwyd: a SIGTERM costs 1.5 s of its shutdown, and sqlite has committed every
        request already, so nothing is lost for the next `start()`. The resource server stops too."""
        self.resource_server.stop()
        if self.process and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)

    def _use_port(self, port: int) -> None:
        self.port = port
        self.base = f"http://127.0.0.1:{port}"
        api = f"{self.base}/api/{PLUGIN}"
        self.issuer = api   # discovery is {issuer}/.well-known/openid-configuration
        self.authorize_prefix = f"{api}/auth?"
        self.token_endpoint = f"{api}/token"
        self.introspection_endpoint = f"{api}/introspect"
        self.revocation_endpoint = f"{api}/revoke"

    def _write_files(self) -> None:
        """A new database from the package's schema, and the config file (libconfig): plain http on
        loopback, so cookies without Secure; the login API on (the scripted browser signs in
        through it); the package's module folders; the log in a file (glewlwyd flushes each line
        there, not on the console when that is a file)."""
        if self.database.exists():
            self.database.unlink()
        db = sqlite3.connect(self.database)
        try:   # one transaction: statement by statement, each commit's fsync makes it seconds
            db.executescript(f"BEGIN;\n{_schema()}\nCOMMIT;")
            # The OIDC plugin reads a client's post-logout redirect URIs from the list property
            # `post_logout_redirect_uris` (RP-initiated logout), which 2.7.5's schema does not
            # declare (it has a single `post_logout_redirect_uri` nothing reads): declared here.
            (parameters,) = db.execute("SELECT gcmi_parameters FROM g_client_module_instance WHERE gcmi_name = 'database'").fetchone()
            parameters = json.loads(parameters)
            parameters["data-format"]["post_logout_redirect_uris"] = {"multiple": True, "read": True, "write": True}
            db.execute("UPDATE g_client_module_instance SET gcmi_parameters = ? WHERE gcmi_name = 'database'", (json.dumps(parameters),))
            db.commit()
        finally:
            db.close()
        self.config.write_text(f"""# Written by the AuthBridge test kit (Tests/support/authbridge_testkit/glewlwyd.py).
port={self.port}
bind_address="127.0.0.1"
external_url="{self.base}"
login_url="login.html"
api_prefix="api"
static_files_path="/usr/share/glewlwyd/webapp/"
cookie_domain="127.0.0.1"
cookie_secure=0
login_api_enabled=true
admin_scope="g_admin"
profile_scope="g_profile"
user_module_path="{MODULES}/user"
client_module_path="{MODULES}/client"
user_auth_scheme_module_path="{MODULES}/scheme"
plugin_module_path="{MODULES}/plugin"
hash_algorithm="SHA512"
database={{ type="sqlite3"; path="{self.database}"; }};
log_mode="file"
log_file="{self.log}"
""")

    def _launch(self) -> None:
        """Starts the process and waits, bounded, until it answers HTTP (it listens after loading
        its modules and plugin instances, so an answer means the OIDC endpoints are there too)."""
        logged_before = self.log.stat().st_size if self.log.exists() else 0
        with open(self.log, "ab") as log:   # what it says before its log is open (config errors)
            self.process = subprocess.Popen([self.binary, f"--config-file={self.config}", "--log-level=DEBUG"],
                                            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=self.state)
        deadline = time.monotonic() + READY_TIMEOUT
        while True:
            if self.process.poll() is not None:
                this_run = self._log_text()[logged_before:]
                error = _PortTaken if "Address already in use" in this_run else RuntimeError
                raise error(f"glewlwyd exited ({self.process.returncode}) while starting on port {self.port}:\n{_errors(this_run)}")
            try:
                urllib.request.urlopen(f"{self.base}/api/", timeout=1).close()
                return
            except urllib.error.HTTPError:   # any HTTP answer (404 here) means it serves
                return
            except OSError:
                if time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"glewlwyd did not answer on {self.base} within {READY_TIMEOUT:.0f} s:\n"
                                       f"{_errors(self._log_text()[logged_before:])}")
                time.sleep(0.02)

    def _log_text(self) -> str:
        try:
            return self.log.read_text(errors="replace")
        except OSError:
            return ""

    # ── Set-up, as an administrator does it ──────────────────────────────────

    def _admin(self) -> _Session:
        """A session of glewlwyd's administrator (g_admin), for the admin REST API."""
        session = _Session()
        status, _, body = session.call("POST", f"{self.base}/api/auth/", {"username": ADMIN, "password": ADMIN_PASSWORD})
        assert status == 200, f"glewlwyd refused its administrator ({status}): {body}"
        return session

    def _set_up_server(self) -> None:
        admin = self._admin()

        def add(path: str, what: dict[str, Any]) -> None:
            status, _, body = admin.call("POST", f"{self.base}/api/{path}", what)
            # glewlwyd keeps a plugin instance whose parameters it refused: fail at once, loudly.
            if status != 200:
                raise RuntimeError(f"glewlwyd refused POST /api/{path} ({status}): {body}\n{self._log_text()[-2000:]}")

        for scope, description in ((READ_SCOPE, "Read access (the AuthBridge tests' resource scope)"),
                                   (INTROSPECT_SCOPE, "Token introspection and revocation by a resource server")):
            add("scope/", {"name": scope, "display_name": scope, "description": description,
                           "password_required": False, "password_max_age": 0, "scheme": {}})
        add("mod/plugin/", {"module": "oidc", "name": PLUGIN, "display_name": "OpenID Connect", "enabled": True,
                            "parameters": self._oidc_parameters()})
        for user, password in USERS.items():
            name, email = NAMES.get(user, (user, f"{user}@example.test"))
            # g_profile: the consent (PUT /api/auth/grant/…) is a profile API.
            add("user/", {"username": user, "password": password, "name": name, "email": email, "enabled": True,
                          "scope": ["g_profile", "openid", READ_SCOPE]})
        redirects = [EXTERNAL_REDIRECT, f"http://127.0.0.1:{self.loopback_port}/callback"]
        user_grants = ["code", "refresh_token", "device_authorization", "delete_token"]
        logout = {"post_logout_redirect_uris": [self.post_logout_redirect_uri]}   # RP-initiated logout
        add("client/", {"client_id": PUBLIC_CLIENT, "name": "AuthBridge tests (public)", "enabled": True,
                        "confidential": False, "redirect_uri": redirects, "authorization_type": user_grants,
                        "token_endpoint_auth_method": ["none"], "scope": [], **logout})
        # client_credentials: glewlwyd lets a client introspect and revoke its own tokens only with it.
        add("client/", {"client_id": CONFIDENTIAL_CLIENT, "name": "AuthBridge tests (confidential)", "enabled": True,
                        "confidential": True, "client_secret": CONFIDENTIAL_SECRET, "redirect_uri": redirects,
                        "authorization_type": [*user_grants, "client_credentials"],
                        "token_endpoint_auth_method": ["client_secret_basic", "client_secret_post", "client_secret_jwt"],
                        "scope": [READ_SCOPE],
                        **logout})
        add("client/", {"client_id": RESOURCE_SERVER, "name": "AuthBridge tests (resource server)", "enabled": True,
                        "confidential": True, "client_secret": RESOURCE_SERVER_SECRET, "redirect_uri": [],
                        "authorization_type": ["client_credentials"], "token_endpoint_auth_method": ["client_secret_basic"],
                        "scope": [INTROSPECT_SCOPE]})
        # private_key_jwt (RFC 7523): the public key as a JWKS in the client's `jwks` property
        # (the plugin's client-jwks-parameter), the only method its token endpoint accepts.
        add("client/", {"client_id": JWT_CLIENT, "name": "AuthBridge tests (private_key_jwt)", "enabled": True,
                        "confidential": True, "redirect_uri": redirects,
                        "authorization_type": [*user_grants, "client_credentials"],
                        "token_endpoint_auth_method": ["private_key_jwt"], "scope": [READ_SCOPE],
                        "jwks": {"keys": [_public_jwk(self.jwt_client_key_file, self.jwt_client_key_id)]}, **logout})
        status, _, body = _Session().call("GET", f"{self.issuer}/.well-known/openid-configuration")
        assert status == 200 and json.loads(body)["issuer"] == self.issuer, f"glewlwyd's discovery answered {status}: {body[:300]}"

    def _oidc_parameters(self) -> dict[str, Any]:
        """The plugin instance's parameters (names as in glewlwyd's docs/OIDC.md and its admin app)."""
        private_key, public_key = signing_key()
        return {
            "iss": self.issuer,
            "jwt-type": "rsa", "jwt-key-size": "256", "key": private_key, "cert": public_key,   # RS256
            "access-token-duration": self.access_lifetime,
            "refresh-token-duration": 14 * 24 * 3600,
            "code-duration": 600,
            "refresh-token-rolling": True,
            "refresh-token-one-use": "always",   # rotation; a replayed rotated token disables the chain
            "allow-non-oidc": True,              # client_credentials (the resource server's grant)
            "auth-type-code-enabled": True,
            "auth-type-code-revoke-replayed": True,
            "auth-type-token-enabled": False,
            "auth-type-id-token-enabled": True,
            "auth-type-none-enabled": False,
            "auth-type-password-enabled": False,
            "auth-type-client-enabled": True,
            "auth-type-device-enabled": True,
            "auth-type-refresh-enabled": True,
            "device-authorization-expiration": 600,
            "device-authorization-interval": 1,
            "allowed-scope": ["openid", READ_SCOPE],   # scopes_supported in discovery
            "secret-type": "public",                 # one `sub` per user, whichever client
            "name-claim": "mandatory", "email-claim": "mandatory",
            "pkce-allowed": True, "pkce-method-plain-allowed": False,
            "introspection-revocation-allowed": True,
            "introspection-revocation-auth-scope": [INTROSPECT_SCOPE],
            "introspection-revocation-allow-target-client": True,
            "oauth-as-iss-id": True,                 # RFC 9207: iss in every callback
            "session-management-allowed": True,
            "session-cookie-name": "GLEWLWYD2_OIDC_SID", "session-cookie-expiration": 2419200,
            "oauth-dpop-allowed": True, "oauth-dpop-iat-duration": 60,
            "oauth-par-allowed": True, "oauth-par-required": False, "oauth-par-duration": 90,
            "oauth-par-request_uri-prefix": "urn:ietf:params:oauth:request_uri:",   # required once PAR is on
            "resource-allowed": True, "resource-scope": {READ_SCOPE: [RESOURCE, *self.resources]},
            "resource-change-allowed": True,
            "client-jwks-parameter": "jwks", "client-pubkey-parameter": "pubkey",
            "request-parameter-allow": True,
            **self.oidc_overrides,
        }

    # ── OpenIDServer ─────────────────────────────────────────────────────────

    def settings(self, confidential: bool = False, **extra: Any) -> dict[str, Any]:
        """An `oidc` profile: endpoints by discovery; openid brings the ID token, and glewlwyd gives
        every code grant a refresh token (no offline_access)."""
        settings: dict[str, Any] = {"issuer": self.issuer, "redirectUri": self.redirect_uri, "scopes": ["openid", READ_SCOPE]}
        if confidential:
            settings.update(clientId=CONFIDENTIAL_CLIENT, clientSecret=CONFIDENTIAL_SECRET)
        else:
            settings["clientId"] = PUBLIC_CLIENT
        return {**settings, **extra}

    @property
    def post_logout_redirect_uri(self) -> str:
        """The post-logout redirect URI both clients have (RP-initiated logout): the browser flow's."""
        return f"http://127.0.0.1:{self.loopback_port}/callback"

    def new_tab(self) -> _Session:
        """A browser tab whose cookies (glewlwyd's session) last across `browse`, `authorize_silently`
        and `end_session` calls given it."""
        return _Session()

    def browse(self, url: str, user: str = USER, password: str = PASSWORD, tab: _Session | None = None) -> str:
        """What glewlwyd's login page does in a browser: the authorization URL sends it to
        login.html (client_id, scope, callback_url); the user signs in (POST /api/auth/), consents
        (PUT /api/auth/grant/<client>, the scopes shown), and "Continue" opens callback_url with
        g_continue, which redirects to the app. That redirect's URL is returned, never followed.
        A pushed request's URL (RFC 9126) names no redirect_uri: the redirect is to 127.0.0.1."""
        browser = tab or _Session()
        login = self._to_login_page(browser, url, "the authorization URL")
        self._sign_in_and_consent(browser, login, user, password)
        status, location, _ = browser.call("GET", self._continue_url(login))
        redirect_uri = _query(url).get("redirect_uri", "http://127.0.0.1:")
        assert status == 302 and location.startswith(redirect_uri), \
            f"authorize after sign-in answered {status} → {location[:200]}"
        if code := _query(location).get("code"):
            self._seen.append(code)
        return location

    def authorize_silently(self, url: str, tab: _Session) -> str | None:
        """The authorization URL opened in `tab` by someone who types nothing: the redirect back to
        the app (with a code) when glewlwyd still knows the tab's user, None when it wants the
        password (login.html's "Continue" is refused without a session)."""
        status, location, _ = tab.call("GET", url)
        assert status == 302 and location.startswith(f"{self.base}/login.html?"), f"the authorization URL answered {status}"
        status, location, _ = tab.call("GET", self._continue_url(_query(location)))
        return location if status == 302 and location.startswith("http://127.0.0.1:") and "code=" in location else None

    def end_session(self, url: str, tab: _Session) -> str:
        """What glewlwyd's login page does with an end-session URL (RP-initiated logout) in `tab`:
        end_session sends it to login.html (prompt=end_session, sid, callback_url: the post-logout
        redirect with the state); the user confirms, which deletes the OIDC session and the
        glewlwyd session (DELETE /api/oidc/session/<sid>, DELETE /api/auth/); the page then opens
        callback_url, which is returned, never followed."""
        status, location, body = tab.call("GET", url)
        assert status == 302 and location.startswith(f"{self.base}/login.html?"), f"end_session answered {status} → {location or body[:200]}"
        page = _query(location)
        assert page.get("prompt") == "end_session" and page.get("sid"), f"end_session led to the login page with {sorted(page)}"
        status, _, body = tab.call("DELETE", f"{self.base}/api/{page['plugin']}/session/{urllib.parse.quote(page['sid'], safe='')}")
        assert status == 200, f"ending the OIDC session answered {status} {body[:200]}"
        status, _, body = tab.call("DELETE", f"{self.base}/api/auth/")
        assert status == 200, f"signing out of glewlwyd answered {status} {body[:200]}"
        assert page.get("callback_url"), "glewlwyd did not accept the post-logout redirect URI (no callback_url)"
        return page["callback_url"]

    def approve_device(self, user_code: str, verification_uri: str, user: str = USER, password: str = PASSWORD) -> None:
        """The user on another device: the verification URI shows the code form (login.html with
        prompt=device), which opens the URI with ?code=<user_code>; then sign-in and consent as in
        `browse`, and "Continue" ends on the page that says the device is connected."""
        browser = _Session()
        status, location, _ = browser.call("GET", verification_uri)
        assert status == 302 and _query(location).get("prompt") == "device", f"the verification URI answered {status} → {location[:200]}"
        with_code = f"{_query(location).get('callback_url', verification_uri)}?code={urllib.parse.quote(user_code)}"
        login = self._to_login_page(browser, with_code, "the user code")
        self._sign_in_and_consent(browser, login, user, password)
        status, location, _ = browser.call("GET", self._continue_url(login))
        assert status == 302 and _query(location).get("prompt") == "deviceComplete", \
            f"the device approval answered {status} → {location[:200]}"

    def introspect(self, token: str) -> bool:
        """RFC 7662, asked by the resource server: a client_credentials token with INTROSPECT_SCOPE as
        the bearer (the client's own secret would do only for its own tokens). Access and refresh
        tokens alike (glewlwyd finds the kind without token_type_hint)."""
        return self.introspection(token).get("active") is True

    def introspection(self, token: str) -> dict[str, Any]:
        """The whole RFC 7662 answer, asked as `introspect` does (active, sub, scope, aud, client_id...)."""
        self._seen.append(token)
        bearer = self._resource_server_token()
        status, _, body = _Session().call("POST", self.introspection_endpoint, form={"token": token},
                                          headers={"Authorization": f"Bearer {bearer}"})
        assert status == 200, f"glewlwyd's introspection endpoint answered {status}: {body[:200]}"
        return json.loads(body)

    def admin_revoke(self, user: str = USER) -> int:
        """What glewlwyd's administrator does on the user's page (profile.html?delegate=<user>,
        "Sessions"): list the user's refresh tokens of the OIDC plugin (GET /api/oidc/token?impersonate=)
        and disable each enabled one (DELETE /api/oidc/token/<token_hash>). Refreshing with any of
        them is refused afterwards (400); the user stays enabled and can sign in again. Returns how
        many were disabled."""
        admin = self._admin()
        tokens: list[dict[str, Any]] = []
        while True:   # pages of 100
            query = urllib.parse.urlencode({"impersonate": user, "offset": len(tokens), "limit": 100})
            status, _, body = admin.call("GET", f"{self.base}/api/{PLUGIN}/token?{query}")
            assert status == 200, f"listing {user}'s refresh tokens answered {status}: {body[:200]}"
            page = json.loads(body)
            tokens += page
            if len(page) < 100:
                break
        disabled = 0
        for token in tokens:
            if token["enabled"]:
                target = urllib.parse.quote(token["token_hash"], safe="")   # "{SHA512}…"
                query = urllib.parse.urlencode({"impersonate": user})
                status, _, body = admin.call("DELETE", f"{self.base}/api/{PLUGIN}/token/{target}?{query}")
                assert status == 200, f"disabling a refresh token of {user} answered {status}: {body[:200]}"
                disabled += 1
        return disabled

    def handed_out(self) -> list[str]:
        """The codes the kit saw in callbacks and the tokens it saw (introspected, and the resource
        server's own); the host's other tokens never pass through the kit."""
        return list(dict.fromkeys(self._seen))

    # ── Helpers ──────────────────────────────────────────────────────────────

    def _to_login_page(self, browser: _Session, url: str, what: str) -> dict[str, str]:
        """GETs `url`, which must send the browser to the login page; that page's query."""
        status, location, body = browser.call("GET", url)
        assert status == 302 and location.startswith(f"{self.base}/login.html?"), \
            f"{what} answered {status} → {location[:200] or body[:200]}"
        login = _query(location)
        assert login.get("callback_url") and login.get("client_id") and "prompt" not in login, \
            f"{what} led to the login page with {sorted(login)} (prompt={login.get('prompt')})"
        return login

    def _sign_in_and_consent(self, browser: _Session, login: dict[str, str], user: str, password: str) -> None:
        status, _, body = browser.call("POST", f"{self.base}/api/auth/", {"username": user, "password": password})
        assert status == 200, f"signing in as {user} answered {status} {body[:200]}"
        client = urllib.parse.quote(login["client_id"], safe="")
        status, _, body = browser.call("PUT", f"{self.base}/api/auth/grant/{client}", {"scope": login.get("scope", "")})
        assert status == 200, f"{user}'s consent to {login['client_id']} answered {status} {body[:200]}"

    @staticmethod
    def _continue_url(login: dict[str, str]) -> str:
        callback = login["callback_url"]
        return callback + ("&" if "?" in callback else "?") + "g_continue"

    def _resource_server_token(self) -> str:
        """A fresh token of the resource server (they live `access_lifetime` seconds, maybe one)."""
        status, _, body = _Session().call(
            "POST", self.token_endpoint, form={"grant_type": "client_credentials", "scope": INTROSPECT_SCOPE},
            headers={"Authorization": _basic(RESOURCE_SERVER, RESOURCE_SERVER_SECRET)})
        assert status == 200, f"the resource server's client_credentials grant answered {status}: {body[:200]}"
        token = json.loads(body)["access_token"]
        self._seen.append(token)
        return token


def _public_jwk(key_file: Path, kid: str) -> dict[str, str]:
    """The public half of an RSA PEM key as a JWK (RFC 7517) for RS256 signatures."""
    from cryptography.hazmat.primitives import serialization
    numbers = serialization.load_pem_private_key(key_file.read_bytes(), password=None).public_key().public_numbers()

    def b64(number: int) -> str:
        return base64.urlsafe_b64encode(number.to_bytes((number.bit_length() + 7) // 8, "big")).rstrip(b"=").decode()
    return {"kty": "RSA", "kid": kid, "use": "sig", "alg": "RS256", "n": b64(numbers.n), "e": b64(numbers.e)}


def _basic(client_id: str, secret: str) -> str:
    """client_secret_basic (RFC 6749 §2.3.1: both parts form-urlencoded first)."""
    pair = f"{urllib.parse.quote_plus(client_id)}:{urllib.parse.quote_plus(secret)}"
    return "Basic " + base64.b64encode(pair.encode()).decode()
