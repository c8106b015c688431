"""Token hygiene (bridge-spec/README.md §8 Security).

A scenario drives both test plugins through sign-ins (session and external), token reads,
refreshes, definitive and transient refresh failures, sign-outs and bad callbacks, with the
host logging at `trace`. Then: token values appear on the wire only in getAccessToken results;
refresh tokens never leave the host; nothing secret reaches stderr; no notification or error
carries anything token-shaped.
"""

import json
import re

import urllib.parse

import pytest

from conftest import DEFAULT_PROFILES, advance_clock, begin_sign_in, id_key, short, sign_in_session

HOUR = 3_600_000

# Prefixes of the test plugins' tokens: at-/rt- (ctest), sat-/srt- (swifttest), at2-/sat2- refreshed.
TOKEN_SHAPED = re.compile(r"(?<![A-Za-z0-9])(?:s?at2?|s?rt)-[A-Za-z0-9]")

EXTERNAL_ACCESS = "ext-access-5150"
EXTERNAL_REFRESH = "ext-session-5150"
LEAKY_CALLBACK_SECRET = "leak-access-3131"


class Scenario:
    def __init__(self, host):
        self.host = host
        self.access_tokens: set[str] = set()
        self.refresh_tokens: set[str] = set()
        self.inbound_secrets: set[str] = set()

    def token(self, provider):
        result = self.host.result("getAccessToken", {"provider": provider})
        self.access_tokens.add(result["accessToken"])
        return result

    def sign_in(self, provider, session_id):
        self.inbound_secrets.add(session_id)
        prefix = "rt-" if provider == "c" else "srt-"
        self.refresh_tokens.update({prefix + session_id, prefix + session_id + "+"})
        self.access_tokens.add(("at-" if provider == "c" else "sat-") + session_id)
        self.access_tokens.add(("at2-" if provider == "c" else "sat2-") + session_id)
        return sign_in_session(self.host, provider, session_id)

    def run(self):
        host = self.host
        # Session sign-ins, tokens, a refresh after expiry, sign-out.
        for provider in ("c", "s"):
            self.sign_in(provider, f"sec-{provider}-4711")
            self.token(provider)
            host.result("checkSignInStatus", {"provider": provider})
            host.result("listAccounts", {})
        advance_clock(host, 2 * HOUR)
        for provider in ("c", "s"):
            self.token(provider)
            host.result("checkSignInStatus", {"provider": provider})
            host.result("signOut", {"provider": provider})

        # External sign-in: the callback URL carries the tokens (inbound secrets).
        callback = f"https://swifttest.example/done?session_token={EXTERNAL_REFRESH}&access_token={EXTERNAL_ACCESS}"
        self.inbound_secrets.update({EXTERNAL_ACCESS, EXTERNAL_REFRESH})
        self.access_tokens.add(EXTERNAL_ACCESS)
        self.refresh_tokens.add(EXTERNAL_REFRESH)
        request_id, opened = begin_sign_in(host, "s", flow="external")
        callback += "&state=" + urllib.parse.quote(urllib.parse.parse_qs(urllib.parse.urlsplit(opened["url"]).query)["state"][0])
        host.request("completeSignIn", {"provider": "s", "callbackUrl": callback.replace("swifttest.example", "evil.example")})
        host.result("completeSignIn", {"provider": "s", "callbackUrl": callback})
        host.wait_response(request_id)
        self.token("s")
        host.result("checkSignInStatus", {"provider": "s"})
        host.result("signOut", {"provider": "s"})

        # A callback with a token and no pending sign-in.
        self.inbound_secrets.add(LEAKY_CALLBACK_SECRET)
        host.request("completeSignIn", {"provider": "c",
                                        "callbackUrl": f"https://ctest.example/callback?access_token={LEAKY_CALLBACK_SECRET}"})

        # Definitive sign-in failure; definitive and transient refresh failures.
        host.request("requestOAuthTokens", {"provider": "c", "flow": "session", "sessionId": "bad"})
        for provider in ("c", "s"):
            self.sign_in(provider, "revoked-9931")
        advance_clock(host, 2 * HOUR)
        for provider in ("c", "s"):
            host.request("getAccessToken", {"provider": provider})
            host.request("checkSignInStatus", {"provider": provider})
        self.sign_in("s", "transient-2024")
        self.token("s")
        advance_clock(host, 2 * HOUR)
        host.request("getAccessToken", {"provider": "s"})
        host.request("checkSignInStatus", {"provider": "s"})
        host.request("signOut", {"provider": "s"})

        host.result("shutdown")
        host.notify("exit")
        assert host.wait_exit() == 0
        return self


@pytest.fixture
def scenario(start_host, plugin_dir):
    host = start_host([plugin_dir], profiles=DEFAULT_PROFILES, log_level="trace", test_clock=True)
    return Scenario(host).run()


def frames_except_get_access_token_results(host):
    for frame in host.frames:
        if "result" in frame and host.sent.get(id_key(frame["id"])) == "getAccessToken":
            continue
        yield frame


def test_scenario_exercised_tokens(scenario):
    # Guards the other tests against passing vacuously.
    assert {"at-sec-c-4711", "sat-sec-s-4711", "at2-sec-c-4711", "sat2-sec-s-4711", EXTERNAL_ACCESS} <= \
        scenario.access_tokens
    seen = {f["result"]["accessToken"] for f in scenario.host.frames
            if "result" in f and isinstance(f["result"], dict) and "accessToken" in f["result"]}
    assert {"at-sec-c-4711", "sat-sec-s-4711", "at2-sec-c-4711", "sat2-sec-s-4711", EXTERNAL_ACCESS} <= seen
    assert scenario.host.notifications("session/changed")
    assert len(scenario.host.stderr_text()) > 0


def test_no_secret_in_stderr_at_trace_level(scenario):
    stderr = scenario.host.stderr_text()
    secrets = scenario.access_tokens | scenario.refresh_tokens | scenario.inbound_secrets
    leaked = sorted(s for s in secrets if s in stderr)
    assert not leaked, f"secrets in the host's stderr: {leaked}"
    assert not TOKEN_SHAPED.search(stderr), TOKEN_SHAPED.search(stderr).group(0)


def test_access_tokens_only_in_get_access_token_results(scenario):
    tokens = scenario.access_tokens | scenario.refresh_tokens
    for frame in frames_except_get_access_token_results(scenario.host):
        text = json.dumps(frame, ensure_ascii=False)
        leaked = sorted(t for t in tokens if t in text)
        assert not leaked, f"token values {leaked} in {short(text, 300)}"


def test_refresh_tokens_never_leave_the_host(scenario):
    stdout = scenario.host.all_output_text()
    leaked = sorted(t for t in scenario.refresh_tokens if t in stdout)
    assert not leaked, f"refresh tokens on stdout: {leaked}"


def test_notifications_and_errors_carry_nothing_token_shaped(scenario):
    callback_secrets = {EXTERNAL_ACCESS, EXTERNAL_REFRESH, LEAKY_CALLBACK_SECRET}
    for frame in scenario.host.frames:
        if "method" in frame or "error" in frame:
            text = json.dumps(frame.get("params", frame.get("error")), ensure_ascii=False)
            match = TOKEN_SHAPED.search(text)
            assert match is None, f"token-shaped {match.group(0)!r} in {short(frame, 300)}"
            leaked = sorted(secret for secret in callback_secrets if secret in text)
            assert not leaked, f"callback secrets {leaked} echoed in {short(frame, 300)}"


def test_the_suite_wide_leak_scan_finds_a_token_where_it_must_not_be():
    """Every host of the suite is scanned at teardown (conftest); the scan itself must be able to fail."""
    from authbridge_testkit import leak_scan
    secret = "at-0123456789abcdef"
    source = lambda: [secret]  # noqa: E731
    leak_scan.register(source)
    try:
        assert leak_scan.leaks(f"debug: refreshed with {secret}\n", []) == ["stderr line 1"]
        notification = {"jsonrpc": "2.0", "method": "session/changed", "params": {"message": secret}}
        assert leak_scan.leaks("", [notification]) == ["frame 0 (session/changed)"]
        token_result = {"jsonrpc": "2.0", "id": 1, "result": {"accessToken": secret}}
        assert leak_scan.leaks("", [token_result]) == [], "getAccessToken's result carries it by contract"
        error = {"jsonrpc": "2.0", "id": 2, "error": {"code": -32004, "message": f"bad token {secret}"}}
        assert leak_scan.leaks("", [token_result, error]) == ["frame 1 (error)"]
    finally:
        leak_scan.unregister(source)


# ── The vault key and crash dumps ───────────────────────────────────────────

#: A stand-in xdg-open: records its own environment (/proc/self/environ, as any process of this
#: user could read it), then fails as on a machine without a desktop, which the host reports in a
#: progress event: the test's signal that the record is complete.
RECORDING_BROWSER = """#!{python}
import shutil, sys
shutil.copyfile("/proc/self/environ", {record!r})
sys.exit(3)
"""


def proc_fields(pid: int, name: str) -> list[str]:
    return next(line.split()[len(name.split()):] for line in open(f"/proc/{pid}/limits") if line.startswith(name))


def test_the_vault_key_leaves_the_environment_and_children_get_a_filtered_one(start_host, oidc_plugin_dir, tmp_path):
    # Before: AUTHBRIDGE_VAULT_KEY stayed in the host's environment (readable in
    # /proc/<pid>/environ) and xdg-open and the browser inherited it.
    import base64
    import os
    import sys
    secret = base64.b64encode(os.urandom(32)).decode()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    record = tmp_path / "xdg-open-environ"
    (bin_dir / "xdg-open").write_text(RECORDING_BROWSER.format(python=sys.executable, record=str(record)))
    (bin_dir / "xdg-open").chmod(0o755)
    profile = {"plugin": "oidc", "settings": {"clientId": "x", "authorizationEndpoint": "http://127.0.0.1:9/authorize",
                                              "tokenEndpoint": "http://127.0.0.1:9/token"}}
    host = start_host([oidc_plugin_dir], profiles={"o": profile}, extra_args=["--open-browser"],
                      env={"PATH": f"{bin_dir}:{os.environ['PATH']}", "AUTHBRIDGE_VAULT_KEY": secret,
                           "SOME_API_TOKEN": "tok-123456", "KEEP_ME": "visible"})
    pending = host.send_request("requestOAuthTokens", {"provider": "o", "flow": "browser", "timeoutMs": 60_000})
    host.wait_for_notification("signIn/progress", lambda p: p["requestId"] == pending and p["stage"] == "openUrl")
    host.result("listAccounts", {})  # the vault opened with the key: it was read before it left
    host.wait_for_notification("signIn/progress", lambda p: p["requestId"] == pending and "could not be opened" in p.get("message", ""))
    child = dict(entry.split(b"=", 1) for entry in record.read_bytes().split(b"\0") if b"=" in entry)
    assert b"AUTHBRIDGE_VAULT_KEY" not in child and secret.encode() not in record.read_bytes()
    assert b"SOME_API_TOKEN" not in child, "a variable named like a secret is not passed on"
    assert child.get(b"KEEP_ME") == b"visible" and child.get(b"PATH", b"").startswith(str(bin_dir).encode())
    pid = host.proc.pid
    if os.geteuid() == 0:
        # root may read any process's environment: the host's shows no trace of the key.
        environ = open(f"/proc/{pid}/environ", "rb").read()
        assert secret.encode() not in environ and b"AUTHBRIDGE_VAULT_KEY=" not in environ
    else:
        # Not dumpable: this user's other processes cannot read it at all.
        with pytest.raises(PermissionError):
            open(f"/proc/{pid}/environ", "rb").read()
    host.notify("$/cancelRequest", {"id": pending})
    assert host.wait_response(pending)["error"]["code"] == -32800


def test_no_core_dumps_and_not_dumpable():
    # Before: the default core limit applied and the process was dumpable (ptrace-able by this
    # user's other processes). A process that is not dumpable has its /proc entries owned by
    # root; it is observed as a non-root user (root may read anything anyway).
    import os
    import subprocess
    from conftest import BUILD_DIR
    import shutil
    import tempfile
    from pathlib import Path
    uid = 65534 if os.geteuid() == 0 else os.geteuid()
    env = {"PATH": os.environ["PATH"], "HOME": "/nonexistent"}
    # A copy the other user can run: the build folder may sit in a private (0700) folder, as a CI
    # clone in a `mktemp -d` folder does. It needs nothing beside it for `initialize` (no plugins,
    # the memory vault; the Swift runtime is found by its absolute RUNPATH).
    shared = Path(tempfile.mkdtemp(prefix="authbridge-nobody-"))
    shared.chmod(0o755)
    host = shared / "authbridge"
    shutil.copy2(BUILD_DIR / "authbridge-host", host)   # the host itself (the front door would look for it beside)
    host.chmod(0o755)
    process = subprocess.Popen([str(host), "serve", "--no-default-plugins", "--vault", "memory"], env=env, cwd="/",
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               user=uid if os.geteuid() == 0 else None)
    try:
        # Answered once it runs: the hardening happens before anything is read.
        process.stdin.write(b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"1.0"}}\n')
        process.stdin.flush()
        assert b'"id":1' in process.stdout.readline()
        assert proc_fields(process.pid, "Max core file size")[:2] == ["0", "0"]
        assert os.stat(f"/proc/{process.pid}/environ").st_uid == 0, "the host is still dumpable"
    finally:
        process.stdin.close()
        process.wait(timeout=30)
        shutil.rmtree(shared)
