"""Servers that let in only a token django-oauth-toolkit says is valid: the parts git and kubectl
talk to in the credential-helper tests.

- `GitHTTPServer`: git's smart HTTP (clone, fetch, push) from the real `git http-backend` (CGI)
  behind a small HTTP server on 127.0.0.1. git sends the credential as HTTP Basic
  (user:token); the token must be one DOT's userinfo endpoint accepts, else 401 with a Basic
  challenge (which is what makes git ask its credential helpers).
- `KubeAPIServer`: the two discovery documents of a Kubernetes API server (`/api`, `/apis`) over
  https (a self-signed certificate, `tls.self_signed`), for a `Bearer` token DOT accepts.

Each records what it saw (the user names and tokens of accepted and refused requests) for the
test to look at; nothing is printed or logged.
"""

from __future__ import annotations

import base64
import http.server
import json
import os
import subprocess
import threading
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from . import http_answer
from .tls import SelfSigned

HTTP_BACKEND = "/usr/lib/git-core/git-http-backend"


def dot_accepts(dot_base: str, token: str) -> bool:
    """Whether DOT's userinfo endpoint answers 200 to `token` (a valid, unexpired access token)."""
    request = urllib.request.Request(f"{dot_base}/o/userinfo/", headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status == 200
    except urllib.error.HTTPError as refused:
        if refused.code in (401, 403):
            return False
        raise


@dataclass
class Seen:
    """What a gated server saw: (user, token) of every accepted and refused request, in order."""
    accepted: list[tuple[str, str]] = field(default_factory=list)
    refused: list[tuple[str, str]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, ok: bool, user: str, token: str) -> None:
        with self.lock:
            (self.accepted if ok else self.refused).append((user, token))

    def tokens(self) -> list[str]:
        with self.lock:
            return [token for _, token in self.accepted]


class _Server:
    def __init__(self, handler: type[http.server.BaseHTTPRequestHandler], context=None) -> None:
        self.http = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.http.daemon_threads = True
        if context is not None:
            self.http.socket = context.wrap_socket(self.http.socket, server_side=True)
        self.port = self.http.server_address[1]
        self._thread = threading.Thread(target=self.http.serve_forever, daemon=True)

    def start(self):
        self._thread.start()
        return self

    def stop(self) -> None:
        self.http.shutdown()
        self.http.server_close()


def _body(handler: http.server.BaseHTTPRequestHandler) -> bytes:
    """The request body, also when git sends it chunked (a push larger than http.postBuffer)."""
    if handler.headers.get("Transfer-Encoding", "").lower() == "chunked":
        data = b""
        while True:
            size = int(handler.rfile.readline().split(b";")[0].strip() or b"0", 16)
            if size == 0:
                while handler.rfile.readline() not in (b"\r\n", b"\n", b""):
                    pass
                return data
            data += handler.rfile.read(size)
            handler.rfile.readline()
    return handler.rfile.read(int(handler.headers.get("Content-Length") or 0))


class GitHTTPServer(_Server):
    """Bare repositories under `root`, served by git http-backend to a valid token only."""

    def __init__(self, root: Path, dot_base: str) -> None:
        self.root = root
        self.seen = Seen()
        root.mkdir(parents=True, exist_ok=True)
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:  # noqa: N802 - the http.server API
                server._serve(self)

            def do_POST(self) -> None:  # noqa: N802
                server._serve(self)

            def log_message(self, *args) -> None:
                pass

        super().__init__(Handler)
        self.dot_base = dot_base
        self.url = f"http://127.0.0.1:{self.port}"

    def create_repository(self, name: str) -> Path:
        """A bare repository `name` (e.g. "team/app.git") with one commit on main."""
        path = self.root / name
        subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(path)], check=True, timeout=30)
        work = self.root / (name + ".seed")
        env = {**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null", "HOME": str(self.root)}
        subprocess.run(["git", "init", "-q", "-b", "main", str(work)], check=True, timeout=30, env=env)
        (work / "README").write_text("seed\n")
        for argv in (["add", "README"], ["-c", "user.name=Seed", "-c", "user.email=seed@example.test", "commit", "-q", "-m", "seed"],
                     ["push", "-q", str(path), "main"]):
            subprocess.run(["git", "-C", str(work), *argv], check=True, timeout=30, env=env)
        return path

    def _credential(self, handler: http.server.BaseHTTPRequestHandler) -> tuple[str, str] | None:
        header = handler.headers.get("Authorization", "")
        if not header.startswith("Basic "):
            return None
        try:
            user, _, token = base64.b64decode(header[6:]).decode().partition(":")
        except ValueError:
            return None
        return user, token

    def _serve(self, handler: http.server.BaseHTTPRequestHandler) -> None:
        body = _body(handler)
        credential = self._credential(handler)
        if credential is None or not dot_accepts(self.dot_base, credential[1]):
            if credential is not None:
                self.seen.add(False, *credential)
            message = b"a valid token is needed\n"
            handler.send_response(401)
            handler.send_header("WWW-Authenticate", 'Basic realm="AuthBridge test git"')
            handler.send_header("Content-Type", "text/plain")
            handler.send_header("Content-Length", str(len(message)))
            handler.end_headers()
            handler.wfile.write(message)
            return
        self.seen.add(True, *credential)
        path, _, query = handler.path.partition("?")
        env = {"PATH": os.environ["PATH"], "GIT_PROJECT_ROOT": str(self.root), "GIT_HTTP_EXPORT_ALL": "1",
               "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null", "HOME": str(self.root),
               "REQUEST_METHOD": handler.command, "PATH_INFO": path, "QUERY_STRING": query,
               "CONTENT_TYPE": handler.headers.get("Content-Type", ""), "CONTENT_LENGTH": str(len(body)),
               "REMOTE_USER": credential[0], "REMOTE_ADDR": "127.0.0.1", "GATEWAY_INTERFACE": "CGI/1.1",
               "SERVER_PROTOCOL": "HTTP/1.1"}
        for name in ("Content-Encoding", "Git-Protocol"):
            if handler.headers.get(name):
                env["HTTP_" + name.upper().replace("-", "_")] = handler.headers[name]
        done = subprocess.run([HTTP_BACKEND], input=body, env=env, capture_output=True, timeout=60)
        head, found, payload = done.stdout.partition(b"\r\n\r\n")
        if not found:
            head, _, payload = done.stdout.partition(b"\n\n")
        status, headers = 200, []
        for line in head.decode("latin-1").splitlines():
            name, _, value = line.partition(":")
            if name.lower() == "status":
                status = int(value.strip().split()[0])
            elif name:
                headers.append((name, value.strip()))
        http_answer.answer(handler, status, payload, headers)


class KubeAPIServer(_Server):
    """`/api` and `/apis` of a Kubernetes API server, over https, for a Bearer token DOT accepts."""

    def __init__(self, dot_base: str, certificate: SelfSigned) -> None:
        self.seen = Seen()
        self.certificate = certificate
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:  # noqa: N802 - the http.server API
                server._serve(self)

            def log_message(self, *args) -> None:
                pass

        super().__init__(Handler, certificate.server_context())
        self.dot_base = dot_base
        self.url = f"https://127.0.0.1:{self.port}"

    def _serve(self, handler: http.server.BaseHTTPRequestHandler) -> None:
        header = handler.headers.get("Authorization", "")
        token = header[7:] if header.startswith("Bearer ") else ""
        ok = bool(token) and dot_accepts(self.dot_base, token)
        if token:
            self.seen.add(ok, "", token)
        path = handler.path.partition("?")[0]
        if not ok:
            status, body = 401, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                                 "message": "Unauthorized", "reason": "Unauthorized", "code": 401}
        elif path == "/api":
            status, body = 200, {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": [
                {"clientCIDR": "0.0.0.0/0", "serverAddress": f"127.0.0.1:{self.port}"}]}
        elif path == "/apis":
            status, body = 200, {"kind": "APIGroupList", "apiVersion": "v1", "groups": []}
        else:
            status, body = 404, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                                 "message": "the server could not find the requested resource", "reason": "NotFound",
                                 "code": 404}
        http_answer.answer_json(handler, status, body)
