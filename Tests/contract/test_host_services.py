"""Host services seen from plugins: HTTP (through the lazily loaded transport), events, and the
authorized `fetch` proxy — against a real HTTP server on 127.0.0.1 started by the test."""

from __future__ import annotations

import http.server
import json
import threading
import urllib.parse

import pytest

from conftest import error_code, sign_in_session


class Recorder(http.server.ThreadingHTTPServer):
    """Records every request; answers from a per-path script (a list of (status, body))."""

    daemon_threads = True

    def __init__(self):
        super().__init__(("127.0.0.1", 0), Handler)
        self.seen: list[dict] = []
        self.script: dict[str, list[tuple[int, str]]] = {}
        self.lock = threading.Lock()

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class Handler(http.server.BaseHTTPRequestHandler):
    disable_nagle_algorithm = True  # separate header/body writes + delayed ACK = 40 ms per answer

    def _answer(self):
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length).decode() if length else ""
        server: Recorder = self.server  # type: ignore[assignment]
        path = urllib.parse.urlsplit(self.path).path
        with server.lock:
            server.seen.append({"method": self.command, "path": path, "headers": dict(self.headers), "body": body})
            queue = server.script.get(path) or [(200, '{"ok":true}')]
            status, text = queue.pop(0) if len(queue) > 1 else queue[0]
        data = text.encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = _answer

    def log_message(self, *args):  # keep pytest output clean
        pass


@pytest.fixture
def server():
    recorder = Recorder()
    thread = threading.Thread(target=recorder.serve_forever, daemon=True)
    thread.start()
    yield recorder
    recorder.shutdown()
    recorder.server_close()


@pytest.fixture
def services_host(start_host, plugin_dir, server):
    profiles = {
        "s": {"plugin": "swifttest", "settings": {
            "clientId": "c1", "probeUrl": f"{server.base}/probe", "revokeUrl": f"{server.base}/revoke",
            "apiBaseUrl": f"{server.base}/api"}},
        "c": {"plugin": "ctest", "settings": {"server": "https://ctest.example", "probeUrl": f"{server.base}/cprobe"}},
    }
    return start_host([plugin_dir], profiles=profiles)


def requests_to(server: Recorder, path: str) -> list[dict]:
    with server.lock:
        return [r for r in server.seen if r["path"] == path]


def test_plugins_reach_http_through_the_host(services_host, server):
    sign_in_session(services_host, "s", "http")       # swifttest GETs probeUrl via host->http
    sign_in_session(services_host, "c", "http")       # so does the C plugin
    assert [r["method"] for r in requests_to(server, "/probe")] == ["GET"]
    assert [r["method"] for r in requests_to(server, "/cprobe")] == ["GET"]


def test_sign_out_revokes_through_plugin_http(services_host, server):
    sign_in_session(services_host, "s", "rv")
    result = services_host.result("signOut", {"provider": "s"})
    assert sorted(result["revoked"]) == ["access_token", "refresh_token"]
    forms = [urllib.parse.parse_qs(r["body"]) for r in requests_to(server, "/revoke")]
    assert sorted(f["token_hint"][0] for f in forms) == ["access_token", "refresh_token"]
    assert sorted(f["token"][0] for f in forms) == ["sat-rv", "srt-rv"]
    services_host.wait_for_notification("session/changed", lambda p: p["state"] == "signedOut" and p["reason"] == "userSignedOut")


def test_fetch_attaches_credentials_from_the_plugin(services_host, server):
    sign_in_session(services_host, "s", "f1")
    server.script["/api/me"] = [(200, '{"name":"Ada"}')]
    result = services_host.result("fetch", {"provider": "s", "url": "/me", "headers": {"Accept": "application/json"}})
    assert result["status"] == 200 and json.loads(result["body"]) == {"name": "Ada"}
    (seen,) = requests_to(server, "/api/me")
    headers = {k.lower(): v for k, v in seen["headers"].items()}
    assert headers["authorization"] == "Bearer sat-f1"
    assert headers["x-swifttest"] == "1"
    assert headers["cookie"] == "swifttest_session=sat-f1"


def test_fetch_refreshes_and_replays_once_on_session_expired(services_host, server):
    sign_in_session(services_host, "s", "f2")
    server.script["/api/data"] = [(401, '[{"message":"Session expired or invalid","errorCode":"INVALID_SESSION_ID"}]'),
                                  (200, '{"rows":[]}')]
    result = services_host.result("fetch", {"provider": "s", "url": "/data"})
    assert result["status"] == 200
    tokens = [{k.lower(): v for k, v in r["headers"].items()}["authorization"] for r in requests_to(server, "/api/data")]
    assert tokens == ["Bearer sat-f2", "Bearer sat2-f2"]
    services_host.wait_for_notification("session/changed", lambda p: p["state"] == "refreshed")


def test_fetch_signs_out_when_the_provider_reports_revocation(services_host, server):
    sign_in_session(services_host, "s", "f3")
    server.script["/api/x"] = [(403, "REVOKED by admin")]
    error = services_host.error("fetch", {"provider": "s", "url": "/x"})
    assert error["code"] == -32001 and error["data"]["reason"] == "revoked"
    services_host.wait_for_notification("session/changed", lambda p: p["state"] == "signedOut" and p["reason"] == "revoked")
    assert services_host.result("checkSignInStatus", {"provider": "s"})["state"] == "notSignedIn"


def test_other_statuses_are_results_not_errors(services_host, server):
    sign_in_session(services_host, "s", "f4")
    server.script["/api/missing"] = [(404, '{"error":"nope"}')]
    assert services_host.result("fetch", {"provider": "s", "url": "/missing"})["status"] == 404


def test_an_unreachable_server_is_transient(start_host, plugin_dir):
    # A closed port on loopback: the request is refused, the session is kept.
    host = start_host([plugin_dir], profiles={"s": {"plugin": "swifttest", "settings": {
        "clientId": "c1", "apiBaseUrl": "http://127.0.0.1:9/api"}}})
    sign_in_session(host, "s", "f5")
    error = host.error("fetch", {"provider": "s", "url": "/x"})
    assert error["code"] == -32007 and error["data"]["retryable"] is True
    assert host.result("checkSignInStatus", {"provider": "s"})["state"] == "signedIn"


def test_insecure_urls_are_refused_before_anything_is_sent(services_host):
    sign_in_session(services_host, "s", "f6")
    error = services_host.error("fetch", {"provider": "s", "url": "http://192.0.2.1/x"})
    assert error["code"] == -32013 and error["data"]["reason"] == "insecureUrl"


def test_plugin_events_become_sign_in_progress(services_host):
    pending = services_host.send_request("requestOAuthTokens", {"provider": "s", "flow": "external"})
    event = services_host.wait_for_notification(
        "signIn/progress", lambda p: p["requestId"] == pending and p["stage"] == "plugin")
    assert event["message"] == "Swift plugin began sign-in"
    services_host.wait_for_notification("signIn/progress", lambda p: p["requestId"] == pending and p["stage"] == "openUrl")
    services_host.notify("$/cancelRequest", {"id": pending})
    assert error_code(services_host.wait_response(pending)) == -32800
