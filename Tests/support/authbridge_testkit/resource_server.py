"""A resource server of the kit (RFC 8707's other side): each of an OpenID server's `resources` is a
path here, and a request to it is served only with a bearer token meant for it.

`ResourceServer` is a loopback HTTP server (threaded http.server, daemon threads) that the kit's
servers (glewlwyd, idpyoidc) start beside themselves, because the resource URIs must exist before
the authorization server is set up (glewlwyd's `resource-scope`, the idpyoidc OP's `--resources`).
It keeps its port across stop/start, as the authorization server does, so the URIs registered there
stay true.

A request with `Authorization: Bearer T` to the path of resource R is answered by asking the
authorization server about T (RFC 7662 introspection with the kit's resource-server credentials,
the server's `introspection(token)`):
- 200 {"resource": R, "sub", "scope", "aud": [...]} when T is active and R is among its audiences;
- 401 `WWW-Authenticate: Bearer error="invalid_token"` otherwise, with the body
  {"error": "invalid_token", "error_description": "wrong audience"} when T is active but not for R
  (a token for the other resource), "inactive" when the server says it is not active;
- 401 `WWW-Authenticate: Bearer` (no error, RFC 6750 §3.1) without a bearer token.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

from . import http_answer

#: The paths of the two resources every kit server has ("A" and "B" of the scenarios).
PATHS = ("/api-a", "/api-b")


def audiences(introspection: dict[str, Any]) -> list[str]:
    """`aud` of an introspection answer as a list (RFC 7662 allows a string or an array)."""
    aud = introspection.get("aud")
    if aud is None:
        return []
    return [aud] if isinstance(aud, str) else [str(value) for value in aud]


class ResourceServer:
    """Bound on construction (so `resources` are known before the authorization server is set up);
    serving after `start()`; `stop()` closes the port, a later `start()` binds the same one."""

    def __init__(self, introspection: Callable[[str], dict[str, Any]], paths: tuple[str, ...] = PATHS) -> None:
        self.introspection = introspection
        self.paths = paths
        #: Every request answered: (path, status), for scenarios that count the resource server's work.
        self.requests: list[tuple[str, int]] = []
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._server = self._bind(0)
        self.port = self._server.server_address[1]
        self.base = f"http://127.0.0.1:{self.port}"

    @property
    def resources(self) -> list[str]:
        """The absolute URIs of the resources (RFC 8707 resource indicators), one per path."""
        return [f"{self.base}{path}" for path in self.paths]

    def start(self) -> "ResourceServer":
        if self._server is None:
            self._server = self._bind(self.port)
        if self._thread is None:
            self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is None:
            return
        if self._thread is not None:
            self._server.shutdown()   # returns once serve_forever has (at most one poll interval)
            self._thread.join(timeout=10)
            self._thread = None
        self._server.server_close()
        self._server = None

    def _bind(self, port: int) -> ThreadingHTTPServer:
        resource_server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *arguments: Any) -> None:  # quiet
                pass

            def do_GET(self) -> None:  # noqa: N802 - http.server naming
                status, headers, body = resource_server._answer(self.path.split("?")[0], self.headers.get("Authorization", ""))
                with resource_server._lock:
                    resource_server.requests.append((self.path, status))
                http_answer.answer(self, status, json.dumps(body).encode(), [("Content-Type", "application/json"), *headers])

            do_POST = do_GET

        class Server(ThreadingHTTPServer):
            daemon_threads = True
            allow_reuse_address = True   # the restart's bind on the same port

        return Server(("127.0.0.1", port), Handler)

    def _answer(self, path: str, authorization: str) -> tuple[int, list[tuple[str, str]], dict[str, Any]]:
        if path not in self.paths:
            return 404, [], {"error": "not_found"}
        resource = f"{self.base}{path}"
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return 401, [("WWW-Authenticate", "Bearer")], {"error": "invalid_request", "error_description": "no bearer token"}
        refused = [("WWW-Authenticate", 'Bearer error="invalid_token"')]
        try:
            answer = self.introspection(token.strip())
        except Exception as failure:   # the authorization server down or refusing: the token cannot be trusted
            return 503, [], {"error": "temporarily_unavailable", "error_description": f"introspection failed: {failure}"}
        if answer.get("active") is not True:
            return 401, refused, {"error": "invalid_token", "error_description": "inactive"}
        if resource not in audiences(answer):
            return 401, refused, {"error": "invalid_token", "error_description": "wrong audience"}
        return 200, [], {"resource": resource, "sub": answer.get("sub"), "scope": answer.get("scope"), "aud": audiences(answer)}
