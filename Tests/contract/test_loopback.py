"""The browser flow's loopback listener (RFC 8252 §7.3) against local processes that misbehave,
seen through the bridge: a process dripping a byte every few seconds, a process left without
file descriptors, and a connection attempt right after a cancelled sign-in was answered.

The profile's endpoints lead nowhere (port 9): what matters is whether the callback gets in
(the `exchanging` progress stage), not the token exchange after it.
"""

from __future__ import annotations

import os
import resource
import socket
import subprocess
import sys
import threading
import time
import urllib.parse

from test_http_transport import cpu_seconds

PROFILE = {"o": {"plugin": "oidc", "settings": {"clientId": "x", "authorizationEndpoint": "http://127.0.0.1:9/authorize",
                                                "tokenEndpoint": "http://127.0.0.1:9/token"}}}

#: A local process that connects to the callback port and sends a byte every 2 s, for ever
#: (saying so on stdout once it has sent the first).
DRIPPER = """
import socket, sys, time
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
for index, byte in enumerate(b"GET /callback?state=x HTTP/1.1" * 100):
    s.send(bytes([byte]))
    if index == 0:
        print("dripping", flush=True)
    time.sleep(2)
"""


def start_browser_sign_in(host):
    """Starts a browser sign-in; returns its request id, the callback port and the state."""
    pending = host.send_request("requestOAuthTokens", {"provider": "o", "flow": "browser", "timeoutMs": 60_000})
    opened = host.wait_for_notification("signIn/progress", lambda p: p["requestId"] == pending and p["stage"] == "openUrl")
    query = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(opened["url"]).query))
    port = urllib.parse.urlsplit(query["redirect_uri"]).port
    return pending, port, query["state"]


def deliver_callback(port: int, state: str, connection: socket.socket | None = None) -> threading.Thread:
    """Sends the browser's redirect; its page is read on a thread (the host holds it until the outcome)."""
    connection = connection or socket.create_connection(("127.0.0.1", port), timeout=30)
    connection.sendall(f"GET /callback?code=c1&state={state} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode())
    reader = threading.Thread(target=lambda: connection.recv(65536), daemon=True)
    reader.start()
    return reader


def test_a_process_dripping_bytes_does_not_keep_the_callback_out(start_host, oidc_plugin_dir):
    # Before: one connection at a time and 5 s per read: the dripper held the listener for
    # hours and the sign-in never completed.
    host = start_host([oidc_plugin_dir], profiles=PROFILE)
    pending, port, state = start_browser_sign_in(host)
    drippers = [subprocess.Popen([sys.executable, "-c", DRIPPER, str(port)], stdout=subprocess.PIPE, text=True)
                for _ in range(3)]
    try:
        for dripper in drippers:   # connected and dripping before the browser comes back
            assert dripper.stdout.readline().strip() == "dripping"
        deliver_callback(port, state)
        host.wait_for_notification("signIn/progress", lambda p: p["requestId"] == pending and p["stage"] == "exchanging")
        assert host.wait_response(pending)["error"]["code"] == -32007, "the exchange at port 9 is refused"
    finally:
        for dripper in drippers:
            dripper.kill()
            dripper.wait(timeout=10)


def test_the_callback_port_is_closed_before_a_cancelled_sign_in_is_answered(start_host, oidc_plugin_dir):
    # Before: in 1 of 3 runs a connection right after the -32800 answer still succeeded (the
    # listener closed when it was deallocated, after the answer).
    host = start_host([oidc_plugin_dir], profiles=PROFILE)
    for _ in range(10):
        pending, port, _ = start_browser_sign_in(host)
        host.notify("$/cancelRequest", {"id": pending})
        assert host.wait_response(pending)["error"]["code"] == -32800
        try:
            socket.create_connection(("127.0.0.1", port), timeout=5).close()
            raise AssertionError(f"port {port} still accepted a connection after the answer")
        except ConnectionRefusedError:
            pass


def test_accept_failures_back_off_instead_of_spinning(start_host, oidc_plugin_dir):
    # Out of file descriptors, accept fails while the connection stays pending: before, poll
    # returned at once, for ever (a core at 100 %). The limit is lowered on the running host.
    host = start_host([oidc_plugin_dir], profiles=PROFILE)
    pending, port, state = start_browser_sign_in(host)
    pid = host.proc.pid
    limits = resource.prlimit(pid, resource.RLIMIT_NOFILE)
    resource.prlimit(pid, resource.RLIMIT_NOFILE, (3, limits[1]))   # every descriptor is taken
    try:
        waiting = socket.create_connection(("127.0.0.1", port), timeout=30)   # in the backlog, not accepted
        before, started = cpu_seconds(pid), time.monotonic()
        time.sleep(2.0)   # a measuring window, not synchronisation
        used = cpu_seconds(pid) - before
        window = time.monotonic() - started
    finally:
        resource.prlimit(pid, resource.RLIMIT_NOFILE, limits)
    assert used < 0.25 * window, f"the listener used {used:.2f} s of CPU in {window:.2f} s while accept failed"
    # With descriptors back, the waiting connection is accepted and the sign-in goes on.
    deliver_callback(port, state, waiting)
    host.wait_for_notification("signIn/progress", lambda p: p["requestId"] == pending and p["stage"] == "exchanging")
    assert host.wait_response(pending)["error"]["code"] == -32007
