"""The HTTP plumbing the provider simulators share (sim_salesforce, sim_tableau, sim_marketsharp,
sim_duke, rotating_server; Python standard library only): a quiet threading server on a loopback
address, a request handler with the usual answers (`send`, `send_json`, `redirect`, `read_form`),
starting and stopping, and a one-shot client for the tests' own requests (`request`, and
`redirect_location` for a browser that reads where a sign-in page sends it).

Each simulator keeps only what is its provider's: routes, state, and what it checks."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import http.client
import json
import socket
import ssl
import sys
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Iterator

from authbridge_testkit.http_answer import answer


def pkce_s256(verifier: str) -> str:
    """The PKCE S256 code challenge of a code verifier (RFC 7636 §4.2)."""
    return base64.urlsafe_b64encode(hashlib.sha256(verifier.encode("ascii")).digest()).rstrip(b"=").decode("ascii")


class QuietServer(ThreadingHTTPServer):
    """No traceback for a client that went away (the tests kill hosts mid-request on purpose), and
    the open keep-alive connections are known, so that `stop` makes the server really gone."""

    daemon_threads = True
    request_queue_size = 128   # many concurrent callers: the default backlog (5) drops connections

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.connections: set[socket.socket] = set()
        self._connections_lock = threading.Lock()
        super().__init__(*args, **kwargs)

    def process_request(self, request, client_address) -> None:
        with self._connections_lock:
            self.connections.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request) -> None:
        with self._connections_lock:
            self.connections.discard(request)
        super().shutdown_request(request)

    def drop_connections(self) -> None:
        with self._connections_lock:
            connections, self.connections = list(self.connections), set()
        for connection in connections:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)

    def handle_error(self, request, client_address) -> None:
        if isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            return
        super().handle_error(request, client_address)


class Handler(BaseHTTPRequestHandler):
    """A simulator's request handler. Subclasses set `json_type` / `json_headers` to their
    provider's way of answering JSON, and `violation` to record what a client did wrong."""

    protocol_version = "HTTP/1.1"
    # Headers and body go out in two writes: with Nagle's algorithm and the client's delayed ACK
    # every answer would wait ~40 ms (and a kill would nearly always land in that wait).
    disable_nagle_algorithm = True
    json_type = "application/json"
    json_headers: dict[str, str] = {"Cache-Control": "no-store"}

    def log_message(self, format: str, *args) -> None:  # noqa: A002 - base-class signature
        pass

    def violation(self, text: str) -> None:
        """A client's departure from the provider's protocol (ignored unless a subclass records it)."""

    def send(self, status: int, body: bytes = b"", content_type: str | None = None,
             headers: dict[str, str] | None = None) -> None:
        try:
            answer(self, status, body, [*([("Content-Type", content_type)] if content_type else []), *(headers or {}).items()])
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client went away after its request

    def send_json(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
        self.send(status, json.dumps(payload).encode("utf-8"), self.json_type, {**self.json_headers, **(headers or {})})

    def redirect(self, target: str, params: dict[str, str]) -> None:
        """302 to `target` with `params` added to its query."""
        location = target + ("&" if "?" in target else "?") + urllib.parse.urlencode(params)
        self.send(302, b"", headers={"Location": location})

    def read_body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length > 0 else b""

    def content_type(self) -> str:
        return (self.headers.get("Content-Type") or "").split(";")[0].strip().lower()

    def read_form(self, body: bytes, where: str) -> dict[str, str] | None:
        """The form-encoded body, or None (a violation) when it is not a form or repeats a
        parameter (RFC 6749 §3.1)."""
        if self.content_type() != "application/x-www-form-urlencoded":
            self.violation(f"{where}: Content-Type {self.content_type()!r}, expected a form")
            return None
        form: dict[str, str] = {}
        for name, value in urllib.parse.parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True):
            if name in form:
                self.violation(f"{where}: parameter {name!r} repeated")
                return None
            form[name] = value
        return form


class Served:
    """`handler` served on `address`:`port` (0: an ephemeral port) by a daemon thread; over TLS with
    `tls` (a server context, e.g. the test kit's `tls.self_signed(...).server_context()`)."""

    def __init__(self, handler: type[Handler], address: str = "127.0.0.1", port: int = 0, name: str = "simulator",
                 tls: ssl.SSLContext | None = None) -> None:
        self.server = QuietServer((address, port), handler)
        if tls is not None:
            self.server.socket = tls.wrap_socket(self.server.socket, server_side=True)
        self.port = self.server.server_address[1]
        self.base = f"{'https' if tls else 'http'}://{address}:{self.port}"
        self._thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name=name, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stops listening and drops the open connections: the server is gone."""
        self.server.shutdown()
        self.server.server_close()
        self.server.drop_connections()
        self._thread.join(5)


class Simulator:
    """A simulator's servers: `serve` starts one (several for a provider on several hosts),
    `stop` stops them all; `start()` may be called again after `stop()`."""

    _served: list[Served] | None = None

    def serve(self, handler: type[Handler], address: str = "127.0.0.1", port: int = 0, name: str = "simulator",
              tls: ssl.SSLContext | None = None) -> Served:
        served = Served(handler, address, port, name, tls)
        self._served = (self._served or []) + [served]
        return served

    def stop(self) -> None:
        for served in self._served or []:
            served.stop()
        self._served = None


def request(url: str, method: str = "GET", body: str | bytes | None = None,
            headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    """One request from the test itself: (status, lower-case headers, body). Redirects are not followed."""
    parts = urllib.parse.urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
    try:
        connection.request(method, parts.path + ("?" + parts.query if parts.query else ""), body=body, headers=headers or {})
        response = connection.getresponse()
        data = response.read()
        return response.status, {name.lower(): value for name, value in response.getheaders()}, data
    finally:
        connection.close()


def redirect_location(url: str, headers: dict[str, str] | None = None) -> str:
    """The browser's part of a sign-in page that answers at once: GET `url` and return where its
    302 points (not followed)."""
    status, answer, body = request(url, headers=headers)
    assert status == 302 and answer.get("location"), f"{urllib.parse.urlsplit(url).path} answered {status}: {body[:200]!r}"
    return answer["location"]


@contextlib.contextmanager
def simulators(start: Callable[..., Any], protocol: str) -> Iterator[Callable[..., Any]]:
    """For a pytest fixture (`with simulators(SalesforceSim, "Salesforce's protocol") as make:`):
    make(**options) → `start(**options).start()`; at the end every simulator made is stopped, and
    the block fails when any of them saw the client break `protocol`."""
    made: list[Any] = []

    def make(**options: Any) -> Any:
        simulator = start(**options).start()
        made.append(simulator)
        return simulator

    try:
        yield make
    finally:
        for simulator in made:
            simulator.stop()
    problems = [violation for simulator in made for violation in simulator.violations]
    assert not problems, f"the client broke {protocol}:\n- " + "\n- ".join(problems)
