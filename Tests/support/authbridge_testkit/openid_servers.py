"""The real OpenID providers of the tests, behind one interface: django-oauth-toolkit (dot_auth),
glewlwyd (glewlwyd) and an OP built on idpyoidc (idpyoidc_op). The oidc plugin's end-to-end
scenarios (Tests/contract/test_openid_servers.py) run against each through `OpenIDServer`, so a
scenario is written once and what differs between servers is said here, as data.

Every server is started by the tests themselves on 127.0.0.1, in a temporary folder, from what
`make deps-test` installs (Debian's glewlwyd package; django-oauth-toolkit and idpyoidc from PyPI
in the venv), and stopped at the end of its fixture.

Users (both servers know both): ada / lovelace-test and grace / hopper-test.
Clients (registered by the kit at start-up):
  PUBLIC_CLIENT        authorization code + PKCE S256, refresh; redirect URIs `redirect_uri` and
                       `http://127.0.0.1:<loopback_port>/callback` (servers that match exactly get
                       exactly those two); device authorization where the server has it.
  CONFIDENTIAL_CLIENT  the same with the secret CONFIDENTIAL_SECRET (client_secret_basic or _post;
                       client_secret_jwt too), and the client credentials grant (glewlwyd and
                       idpyoidc: the scopes `client_credentials_scopes`).
  JWT_CLIENT           (glewlwyd and idpyoidc) private_key_jwt (RFC 7523) with an RSA key the kit
                       makes: PEM at `jwt_client_key_file` (0600), kid `jwt_client_key_id`;
                       authorization code + PKCE, refresh, client credentials; the same redirect URIs.

Resources (RFC 8707; glewlwyd and idpyoidc): `resources`, two absolute URIs served by the kit's
`ResourceServer` (resource_server.py) beside the authorization server; `introspection(token)` is
the full RFC 7662 answer the resource server decides on.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any, Protocol

from . import http_answer

USERS = {"ada": "lovelace-test", "grace": "hopper-test"}
USER, PASSWORD = "ada", USERS["ada"]
PUBLIC_CLIENT = "authbridge-test"
CONFIDENTIAL_CLIENT = "authbridge-confidential"
CONFIDENTIAL_SECRET = "authbridge-confidential-secret-0123456789"
JWT_CLIENT = "authbridge-jwt"
#: The kid under which JWT_CLIENT's public key is registered (and which its assertions name).
JWT_CLIENT_KID = "authbridge-jwt-key"
#: The external flow's redirect URI (the test is the browser and hands the redirect over).
EXTERNAL_REDIRECT = "http://127.0.0.1:53682/callback"


def free_port() -> int:
    """A loopback port free right now (servers that match redirect URIs exactly register it)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def jwt_client_key(state: Path) -> Path:
    """JWT_CLIENT's RSA private key as PEM (PKCS#8) in `state`, mode 0600: made the first time,
    read back after (a restarted server has the same public key registered)."""
    path = state / "jwt-client-key.pem"
    if not path.exists():
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import rsa
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
        state.mkdir(parents=True, exist_ok=True)
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(pem)
    return path


def client_assertion(client_id: str, audience: str | list[str], key_file: Path | None = None, secret: str | None = None,
                     kid: str | None = JWT_CLIENT_KID, lifetime: int = 60, **claims: Any) -> str:
    """A client assertion (RFC 7523 §3, OpenID Connect Core §9): RS256 with the PEM key in
    `key_file` (private_key_jwt) or HS256 with `secret` (client_secret_jwt); iss = sub =
    `client_id`, `aud`, a fresh jti, iat and exp = iat + `lifetime`; `claims` added last (None
    removes one)."""
    import base64
    import json
    import time
    import uuid

    def b64(data: bytes) -> str:
        return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

    now = int(time.time())
    payload: dict[str, Any] = {"iss": client_id, "sub": client_id, "aud": audience, "jti": uuid.uuid4().hex,
                               "iat": now, "exp": now + lifetime, **claims}
    payload = {name: value for name, value in payload.items() if value is not None}
    header: dict[str, Any] = {"alg": "HS256" if secret is not None else "RS256", "typ": "JWT"}
    if kid and secret is None:
        header["kid"] = kid
    signing_input = f"{b64(json.dumps(header).encode())}.{b64(json.dumps(payload).encode())}".encode()
    if secret is not None:
        import hashlib
        import hmac
        signature = hmac.new(secret.encode(), signing_input, hashlib.sha256).digest()
    else:
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import padding
        key = serialization.load_pem_private_key(Path(key_file).read_bytes(), password=None)
        signature = key.sign(signing_input, padding.PKCS1v15(), hashes.SHA256())
    return f"{signing_input.decode()}.{b64(signature)}"


def make_server(name: str, state: Path, **options: Any) -> "OpenIDServer":
    """A server of the kit by its name ("dot", "glewlwyd", "idpyoidc"), its files in `state`, not
    started; `options` go to its constructor (e.g. glewlwyd's `oidc_overrides`, idpyoidc's `dpop_algs`)."""
    if name == "dot":
        from .dot_auth import DotOpenIDServer
        return DotOpenIDServer(state, **options)
    if name == "glewlwyd":
        from .glewlwyd import GlewlwydServer
        return GlewlwydServer(state, **options)
    if name == "idpyoidc":
        from .idpyoidc_op import IdpyOIDCServer
        return IdpyOIDCServer(state, **options)
    raise ValueError(f"no server named {name!r} in the test kit")


def server_fixture(names: list[str], scope: str = "module", **options: Any):
    """A pytest fixture (`op` by convention) that starts one server of the kit per parameter —
    `names`, e.g. ["glewlwyd", "idpyoidc"] — once per `scope`, and stops it at its end. In a test
    module: `op = server_fixture(["dot", "glewlwyd", "idpyoidc"])`."""
    import pytest

    @pytest.fixture(scope=scope, params=names)
    def fixture(request, tmp_path_factory):
        server = make_server(request.param, tmp_path_factory.mktemp(request.param), **options).start()
        yield server
        server.stop()
    return fixture


class OpenIDServer(Protocol):
    """What a scenario needs of a server. Attributes are valid after `start()`."""

    #: "dot", "glewlwyd" or "idpyoidc": the pytest id of the parametrized fixture.
    name: str
    #: The issuer identifier, exactly as the server's discovery document names it.
    issuer: str
    #: scheme://host:port of the server.
    base: str
    #: The authorization endpoint followed by "?" (sign_in_external checks the sign-in URL with it).
    authorize_prefix: str
    #: EXTERNAL_REDIRECT, registered for both clients.
    redirect_uri: str
    #: The port of `http://127.0.0.1:PORT/callback`, registered for both clients: the browser
    #: flow's pinned `loopbackPort` (servers without the RFC 8252 any-port rule need it).
    loopback_port: int
    #: The server's token endpoint (what the discovery document says).
    token_endpoint: str
    #: Whether the server has the device authorization grant (RFC 8628).
    has_device_flow: bool

    def start(self) -> "OpenIDServer":
        """Starts the server (the first time: sets it up); after `stop()`, on the same port with the
        same users, clients, keys and grants, so tokens issued before the stop still work."""

    def stop(self) -> None:
        """Stops the server: connections to its port are refused until `start()`."""

    def settings(self, confidential: bool = False, **extra: Any) -> dict[str, Any]:
        """Settings of an `oidc` profile that signs in as the public client (or the confidential
        one): issuer (endpoints by discovery), clientId (+ clientSecret), redirectUri, scopes that
        get a refresh token on this server; `extra` added last."""

    # A server whose device grant needs other settings (DOT: its own client, an endpoint discovery
    # does not list) also has `device_settings(**extra)`; the others sign in on `settings()`.

    def browse(self, url: str, user: str = USER, password: str = PASSWORD) -> str:
        """The user in a browser: follows the authorization URL, signs in as `user` (and consents
        where the server asks), and returns the URL of the redirect back to the app (never
        followed). Asserts every step went where it should."""

    # glewlwyd and idpyoidc (PAR and RP-initiated logout, issue 29) also have: `post_logout_redirect_uri`
    # (registered for both clients: the browser flow's loopback redirect); `new_tab()`, a browser
    # tab whose cookies last across the calls given it; `browse(url, tab=tab)`;
    # `authorize_silently(url, tab)`, the redirect back when the server still knows the tab's user
    # (None when it asks for the password); `end_session(url, tab)`, the user confirming the
    # provider's end-session page, which returns the post-logout redirect (never followed).

    def approve_device(self, user_code: str, verification_uri: str, user: str = USER, password: str = PASSWORD) -> None:
        """The user on another device approves `user_code` (RFC 8628 §3.3). Only where has_device_flow."""

    def introspect(self, token: str) -> bool:
        """Whether the server says `token` (access or refresh) is active (RFC 7662), asked by a
        resource server with its own credentials, not by the host."""

    # glewlwyd and idpyoidc (per-request resources, issue 30) also have: `introspection(token)`, the
    # whole RFC 7662 answer (`aud` as the resource server sees it); `resources` (two URIs, RFC 8707)
    # and `resource_server` (the kit's ResourceServer serving them); `client_credentials_scopes`;
    # `jwt_client_key_file` and `jwt_client_key_id` (JWT_CLIENT's key, RFC 7523).

    def admin_revoke(self, user: str = USER) -> None:
        """What an administrator does to end `user`'s sessions at this server: afterwards every
        refresh token issued to `user` is refused at the token endpoint."""

    def handed_out(self) -> list[str]:
        """Codes and tokens the server handed out that the kit knows of (the suite's leak scan)."""


# ── What reaches a token endpoint ──────────────────────────────────────────


class TokenEndpointRecorder:
    """A loopback relay in front of a server's token endpoint, for the scenarios that must see what
    the host and the server said to each other: how many refresh grants reached the server (one for
    any number of callers), which refresh token a refresh spent (to replay it at the server and see
    it refused), which codes were redeemed. Every request is passed on unchanged (form, headers,
    client authentication) and every answer handed back unchanged, unless `tamper_id_token` is set:
    then the next ID tokens come back with a flipped signature byte.

    A profile uses it by naming it as its `tokenEndpoint` (explicit settings win over discovery;
    everything else still comes from the server's discovery document). The host never hands a
    refresh token out; the test sees it here only because it sits on the wire, as the server does.
    """

    def __init__(self, token_endpoint: str) -> None:
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        self.target = token_endpoint
        self.exchanges: list[dict[str, Any]] = []
        self.tamper_id_token = False
        self._lock = threading.Lock()
        recorder = self

        class Relay(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *arguments: Any) -> None:  # quiet
                pass

            def do_POST(self) -> None:  # noqa: N802 - http.server naming
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                status, headers, answer = recorder._relay(body, self.headers)
                http_answer.answer(self, status, answer, headers)

        class Server(ThreadingHTTPServer):
            daemon_threads = True
            request_queue_size = 128

        self.server = Server(("127.0.0.1", 0), Relay)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/token"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        from . import leak_scan
        leak_scan.register(self.handed_out)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def _relay(self, body: bytes, headers: Any) -> tuple[int, list[tuple[str, str]], bytes]:
        import json
        import urllib.error
        import urllib.parse
        import urllib.request

        passed = {name: headers[name] for name in ("Content-Type", "Authorization", "Accept", "DPoP") if headers.get(name)}
        request = urllib.request.Request(self.target, data=body, headers=passed, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                status, answer, reply_headers = response.status, response.read(), response.headers
        except urllib.error.HTTPError as error:
            status, answer, reply_headers = error.code, error.read(), error.headers
        except OSError:  # the server is down: as the host would see it, the connection goes away
            return 502, [("Content-Type", "text/plain")], b"the server behind the recorder is not answering"
        form = dict(urllib.parse.parse_qsl(body.decode(errors="replace")))
        try:
            parsed = json.loads(answer) if answer else None
        except ValueError:
            parsed = None
        if self.tamper_id_token and status == 200 and isinstance(parsed, dict) and isinstance(parsed.get("id_token"), str):
            head, payload, signature = parsed["id_token"].split(".")
            parsed["id_token"] = f"{head}.{payload}.{signature[:-4]}{'AAAA' if not signature.endswith('AAAA') else 'BBBB'}"
            answer = json.dumps(parsed).encode()
        with self._lock:
            self.exchanges.append({"grant": form.get("grant_type"), "form": form, "status": status, "answer": parsed})
        kept = [(name, value) for name, value in reply_headers.items()
                if name.lower() in ("content-type", "cache-control", "pragma", "dpop-nonce", "www-authenticate")]
        return status, kept, answer

    def grants(self, grant: str, status: int | None = 200) -> list[dict[str, Any]]:
        """The exchanges of one grant type (answered `status`; None: whatever the answer)."""
        with self._lock:
            return [e for e in self.exchanges if e["grant"] == grant and (status is None or e["status"] == status)]

    @property
    def refreshes(self) -> int:
        """Refresh grants the server answered with new tokens."""
        return len(self.grants("refresh_token"))

    @property
    def codes_redeemed(self) -> int:
        return len(self.grants("authorization_code"))

    def last_refresh(self) -> tuple[str, str | None]:
        """The refresh token the last successful refresh spent, and the one it brought (None: kept)."""
        exchange = self.grants("refresh_token")[-1]
        return exchange["form"]["refresh_token"], exchange["answer"].get("refresh_token")

    def issued_refresh_token(self) -> str:
        """The refresh token the latest successful exchange (code or refresh) handed out."""
        with self._lock:
            for exchange in reversed(self.exchanges):
                if exchange["status"] == 200 and isinstance(exchange["answer"], dict) and exchange["answer"].get("refresh_token"):
                    return exchange["answer"]["refresh_token"]
        raise AssertionError("no refresh token was handed out")

    def id_token_claims(self) -> dict[str, Any]:
        """The (unverified) claims of the latest ID token the server handed out."""
        import base64
        import json
        with self._lock:
            for exchange in reversed(self.exchanges):
                token = (exchange["answer"] or {}).get("id_token") if isinstance(exchange["answer"], dict) else None
                if token:
                    payload = token.split(".")[1]
                    return json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        raise AssertionError("no ID token was handed out")

    def handed_out(self) -> list[str]:
        found: list[str] = []
        with self._lock:
            for exchange in self.exchanges:
                found += [exchange["form"].get(key, "") for key in ("code", "refresh_token", "device_code")]
                if isinstance(exchange["answer"], dict):
                    found += [str(exchange["answer"].get(key, "")) for key in ("access_token", "refresh_token", "id_token")]
        return [value for value in found if value]
