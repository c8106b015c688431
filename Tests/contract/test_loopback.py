"""The browser flow's loopback listener (RFC 8252 §7.3) against local processes that misbehave,
seen through the bridge: a process dripping a byte every few seconds, a process left without
file descriptors, a connection attempt right after a cancelled sign-in was answered, and error
redirects with and without the sign-in's state (a scripted request: a browser adds nothing).

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


def start_browser_sign_in(host, timeout_ms: int = 60_000):
    """Starts a browser sign-in; returns its request id, the callback port and the state."""
    pending = host.send_request("requestOAuthTokens", {"provider": "o", "flow": "browser", "timeoutMs": timeout_ms})
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


def browser_get(port: int, target: str) -> tuple[int, str]:
    """A browser following a redirect to the listener: the status and the page (held until the outcome)."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as connection:
        connection.sendall(f"GET {target} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode())
        answer = b""
        while chunk := connection.recv(65536):
            answer += chunk
    head, _, body = answer.decode().partition("\r\n\r\n")
    return int(head.split()[1]), body


def test_an_error_redirect_ends_the_sign_in_only_with_its_state_and_says_what_the_provider_said(start_host, oidc_plugin_dir):
    # Issue 27 §6 (b). A redirect without this sign-in's state (a stale tab, or a local process
    # trying to cancel someone's sign-in) is answered and ignored; the provider's own error
    # redirect ends it at once, with the provider's error as plain, bounded text. Before: the
    # description went through with its escape sequences and line breaks, at any length.
    host = start_host([oidc_plugin_dir], profiles=PROFILE)
    pending, port, state = start_browser_sign_in(host, timeout_ms=60_000)
    for forged in ("/callback?error=access_denied&state=forged", "/callback?error=access_denied"):
        status, page = browser_get(port, forged)
        assert status == 400 and "another attempt" in page, page
    with host.cond:
        assert not [frame for frame in host.frames if frame.get("id") == pending], "a forged error ended the sign-in"
    description = urllib.parse.quote("Scope \x1b[2J\x1b]0;owned\x07\"admin\"\r\nis not\u202e allowed. " + "x" * 3000)
    started = time.monotonic()
    status, page = browser_get(port, f"/callback?error=invalid_scope&error_description={description}&state={urllib.parse.quote(state)}")
    error = host.wait_response(pending)["error"]
    assert time.monotonic() - started < 10, "the error redirect ended the wait at once"
    assert error["code"] == -32004 and error["data"]["reason"] == "invalid_scope", error
    message = error["message"]
    assert message.startswith('The provider refused the sign-in (invalid_scope): Scope "admin" is not allowed. xxx'), message
    assert "owned" not in message, "an escape sequence goes with its string"
    assert len(message) <= 400 and message.endswith("…."), len(message)
    assert not [c for c in message if ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0 or c == "\u202e"], "no control character"
    # The browser is told the same, once, as text (no markup from the provider).
    assert status == 200 and "The sign-in did not complete: The provider refused the sign-in (invalid_scope)" in page, page
    assert "\x1b" not in page and "…." in page and "….." not in page


def test_access_denied_on_the_redirect_is_the_user_cancelling(start_host, oidc_plugin_dir):
    host = start_host([oidc_plugin_dir], profiles=PROFILE)
    pending, port, state = start_browser_sign_in(host)
    browser_get(port, f"/callback?error=access_denied&error_description=The+user+said+no&state={urllib.parse.quote(state)}")
    error = host.wait_response(pending)["error"]
    assert error["code"] == -32005 and error["data"]["reason"] == "access_denied", error
    assert error["message"] == "The provider refused the sign-in (access_denied): The user said no.", error
