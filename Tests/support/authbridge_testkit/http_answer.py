"""An answer written on an `http.server` handler: status, headers, Content-Length, body. The kit's test
servers, the contract suites' own and the provider simulators (Tests/contract/simulators) answer
through it."""

from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler
from typing import Any, Iterable


def answer(handler: BaseHTTPRequestHandler, status: int, body: bytes = b"", headers: Iterable[tuple[str, str]] = ()) -> None:
    handler.send_response(status)
    for name, value in headers:
        handler.send_header(name, value)
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    if body:
        handler.wfile.write(body)


def answer_json(handler: BaseHTTPRequestHandler, status: int, payload: Any) -> None:
    answer(handler, status, json.dumps(payload).encode(), [("Content-Type", "application/json")])
