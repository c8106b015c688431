"""The WSGI server the suites' own authorization servers run in (dot_server.py, idpyoidc_server.py):
threaded, quiet, on a loopback port, and bound before the application is configured, because the
port goes into its URLs (the issuer, the device grant's verification URI)."""

from __future__ import annotations

from socketserver import ThreadingMixIn
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server


class Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True
    allow_reuse_address = True


class Handler(WSGIRequestHandler):
    disable_nagle_algorithm = True  # headers and body are separate writes: avoid 40 ms delayed ACKs

    def log_message(self, *arguments):  # quiet
        pass


def bind(port: int) -> tuple[WSGIServer, str]:
    """A server bound to 127.0.0.1:`port` (0: any free port), without its application yet, and its base URL."""
    server = make_server("127.0.0.1", port, None, server_class=Server, handler_class=Handler)
    return server, f"http://127.0.0.1:{server.server_address[1]}"
