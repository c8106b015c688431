"""Lifecycle (bridge-spec/README.md §2): initialize → initialized → … → shutdown → exit."""

import json
import os
import re
import signal
import subprocess
import time

import pytest

from conftest import DEFAULT_PROFILES, HOST_BIN, REPO, SPEC_PATH, TIMEOUT, begin_sign_in, error_code, host_command, short, sign_in_session


def test_initialize_gives_the_settings_schemas_when_asked(start_host, plugin_dir):
    host = start_host([plugin_dir], profiles=DEFAULT_PROFILES, initialize=False)
    result = host.request("initialize", {"protocolVersion": "1.0", "settingsSchemas": True})["result"]
    providers = {p["id"]: p for p in result["providers"]}
    assert providers["ctest"]["settings"]["required"] == ["server"]
    assert providers["swifttest"]["settings"]["type"] == "object"


def test_initialize_reports_server_providers_profiles_and_storage(host):
    result = host.init_result
    assert result["protocolVersion"] == "1.0"
    assert result["serverInfo"]["name"] == "authbridge"
    assert result["serverInfo"]["version"]
    caps = result["capabilities"]
    assert caps["batches"] is False
    assert caps["cancellation"] is True
    assert set(caps["notifications"]) == {"session/changed", "signIn/progress", "signOut/progress"}
    assert {"external", "session"} <= set(caps["flows"])

    providers = {p["id"]: p for p in result["providers"]}
    assert set(providers) == {"ctest", "swifttest"}
    # One version: the one frontends see is the one plugins are told (`host_version`) and the one
    # `authbridge --version` prints.
    version = result["serverInfo"]["version"]
    told = f"ctest initialised (host {version}, ABI "
    deadline = time.monotonic() + TIMEOUT
    while told not in host.stderr_text() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert told in host.stderr_text(), host.stderr_text()[-2000:]
    printed = subprocess.run([str(HOST_BIN), "--version"], capture_output=True, text=True, timeout=TIMEOUT)
    assert printed.returncode == 0 and printed.stdout.split() == [version], printed.stdout + printed.stderr
    for plugin_id, display in (("ctest", "C test provider"), ("swifttest", "Swift test provider")):
        entry = providers[plugin_id]
        assert entry["status"] == "loaded"
        assert entry["version"] == "1.0.0"
        assert entry["displayName"] == display
        assert entry["flows"] == ["external", "session"]
        assert entry["capabilities"] == ["revoke", "checkSession", "fetch"]
        assert "settings" not in entry, "initialize leaves the settings schemas out unless asked (settingsSchemas)"
        assert entry["path"].endswith(".so")
    # listProviders has them, as initialize with settingsSchemas: true does.
    listed = {p["id"]: p for p in host.request("listProviders")["result"]["plugins"]}
    assert all(listed[plugin_id]["settings"]["type"] == "object" for plugin_id in ("ctest", "swifttest"))

    profiles = {p["name"]: p for p in result["profiles"]}
    assert profiles["c"] == {"name": "c", "plugin": "ctest", "status": "ready",
                             "flows": ["external", "session"], "source": "config"}
    assert profiles["s"]["plugin"] == "swifttest" and profiles["s"]["status"] == "ready"
    assert result["storage"] == {"backend": "encrypted-file", "protection": "encrypted"}


def test_initialize_negotiates_the_minor_version(start_host, plugin_dir):
    host = start_host([plugin_dir], initialize=False)
    result = host.result("initialize", {"protocolVersion": "1.7"})
    assert result["protocolVersion"] == "1.0"  # 1.min(7, host minor 0)


def test_initialize_ignores_unknown_members(start_host, plugin_dir):
    # README §3: "Exception: initialize ignores unknown members (a newer client sends them
    # before it knows the host's version)". InitializeParams has additionalProperties: true.
    host = start_host([plugin_dir], initialize=False)
    response = host.request("initialize", {"protocolVersion": "1.0", "clientInfo": {"name": "x", "build": 7},
                                           "workspaceHint": {"future": True}})
    assert "result" in response, f"initialize refused an unknown member: {response}"


def test_requests_before_initialize_get_server_not_initialized(start_host, plugin_dir):
    host = start_host([plugin_dir], initialize=False)
    for method, params in (("listProviders", {}), ("rpc.discover", None), ("checkSignInStatus", {"provider": "c"}),
                           ("shutdown", None), ("no/such/method", {})):
        error = host.error(method, params)
        assert error["code"] == -32002, (method, error)
    # The host is still uninitialized and usable.
    assert host.initialize()["protocolVersion"] == "1.0"
    assert "plugins" in host.result("listProviders", {})


def test_notifications_before_initialize_are_not_answered(start_host, plugin_dir):
    host = start_host([plugin_dir], initialize=False)
    mark = host.mark()
    host.notify("initialized", {})
    host.notify("$/cancelRequest", {"id": 1})
    host.notify("no/such/notification", {"x": 1})
    host.notify("listProviders", {})  # a method name, but without an id: a notification
    probe = host.send_request("listProviders", {})
    first = host.frame_at(mark)
    assert first.get("id") == probe, f"a notification was answered before initialize: {first}"
    assert first["error"]["code"] == -32002


def test_requests_pipelined_behind_initialize_are_served(start_host, plugin_dir):
    # README §2: "the host counts as initialized from the moment it reads initialize (requests
    # pipelined behind it are served once plugins have loaded)". Both lines go in one write.
    host = start_host([plugin_dir], initialize=False)
    host.send_lines(['{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"1.0"}}',
                     '{"jsonrpc":"2.0","id":2,"method":"listProviders","params":{}}'])
    assert "result" in host.wait_response(1)
    pipelined = host.wait_response(2)
    assert "result" in pipelined, f"a request pipelined behind initialize got {short(pipelined, 200)}"
    assert {p["id"] for p in pipelined["result"]["plugins"]} == {"ctest", "swifttest"}


def test_second_initialize_is_an_invalid_request(host):
    response = host.request("initialize", {"protocolVersion": "1.0"}, id="again")
    assert response["id"] == "again"
    assert response["error"]["code"] == -32600
    # Still running normally.
    assert host.result("listProviders", {})["plugins"]


def test_unsupported_protocol_version_is_refused_and_retry_is_possible(start_host, plugin_dir):
    host = start_host([plugin_dir], initialize=False)
    error = host.error("initialize", {"protocolVersion": "2.0"})
    assert error["code"] == -32010
    assert error["data"]["supported"] == ["1.0"]
    assert error["data"]["reason"] == "unsupportedProtocolVersion"
    assert error["data"]["retryable"] is False
    # The host stays uninitialized …
    assert host.error("listProviders", {})["code"] == -32002
    # … and the client may retry.
    assert host.initialize("1.0")["protocolVersion"] == "1.0"


@pytest.mark.parametrize("params,field", [
    ({"protocolVersion": "1"}, "protocolVersion"),
    ({"protocolVersion": "1.0.0"}, "protocolVersion"),
    ({"protocolVersion": "v1.0"}, "protocolVersion"),
    ({"protocolVersion": ""}, "protocolVersion"),
    ({"protocolVersion": 1}, "protocolVersion"),
    ({}, "protocolVersion"),
    ({"protocolVersion": "1.0", "clientInfo": "me"}, "clientInfo"),
    ({"protocolVersion": "1.0", "capabilities": []}, "capabilities"),
], ids=["no-minor", "three-parts", "prefix", "empty", "number", "missing", "clientInfo", "capabilities"])
def test_failed_initialize_leaves_the_host_uninitialized(start_host, plugin_dir, params, field):
    # README §2: "If initialize fails (-32602, -32010), the host is uninitialized again and the
    # client may retry."
    host = start_host([plugin_dir], initialize=False)
    error = host.error("initialize", params)
    assert error["code"] == -32602
    assert error["data"]["field"] == field
    after = host.request("listProviders", {})
    assert error_code(after) == -32002, \
        f"after a failed initialize, listProviders answered {short(after, 120)}"
    assert host.initialize()["protocolVersion"] == "1.0"


def test_shutdown_then_requests_are_refused_then_exit_0(host):
    response = host.request("shutdown")
    assert response["result"] is None
    for method, params in (("listProviders", {}), ("shutdown", None), ("initialize", {"protocolVersion": "1.0"})):
        error = host.error(method, params)
        assert error["code"] == -32600, (method, error)
    host.notify("exit")
    assert host.wait_exit() == 0


def test_running_requests_go_on_after_shutdown_until_exit_cancels_them(host):
    # README §2: "shutdown: answers null; requests already running go on until they finish or
    # exit/EOF cancels them."
    slow = host.send_request("requestOAuthTokens", {"provider": "c", "flow": "session", "sessionId": "slow"})
    host.wait_for_notification("signIn/progress", lambda p: p["requestId"] == slow and p["stage"] == "exchanging")
    pending, _ = begin_sign_in(host, "s", flow="external")
    assert host.request("shutdown")["result"] is None
    with host.cond:
        answered = {f.get("id") for f in host.frames if "method" not in f}
    assert slow not in answered and pending not in answered, "shutdown ended running requests"
    assert host.error("listProviders", {})["code"] == -32600
    host.notify("exit")
    for request_id in (slow, pending):
        answer = host.wait_response(request_id)
        assert error_code(answer) == -32800, f"at exit the running request answered {short(answer, 200)}"
    assert host.wait_exit() == 0


def test_exit_written_right_behind_shutdown_exits_0(host):
    # The frontend that writes shutdown and exit in one go (without waiting for shutdown's
    # answer) asked for a clean shutdown: exit's status follows arrival order, not whether
    # shutdown's handler happened to run first.
    host.send_lines(['{"jsonrpc":"2.0","id":"bye","method":"shutdown"}', '{"jsonrpc":"2.0","method":"exit"}'])
    assert host.wait_exit() == 0


def runner_pids(host_pid: int) -> set[int]:
    """The plugin runners (`authbridge plugin-runner --parent PID`) of the host `host_pid`."""
    found = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            argv = open(f"/proc/{entry}/cmdline", "rb").read().split(b"\0")
        except OSError:
            continue
        if b"plugin-runner" in argv and b"--parent" in argv and argv[argv.index(b"--parent") + 1] == str(host_pid).encode():
            found.add(int(entry))
    return found


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_a_termination_signal_ends_the_host_as_end_of_input_does(host, sig):
    # A service manager or a frontend's kill(): running requests are answered, plugins shut down
    # (their runners too), exit status 0 — not a process killed in the middle of a refresh.
    slow = host.send_request("requestOAuthTokens", {"provider": "c", "flow": "session", "sessionId": "slow"})
    host.wait_for_notification("signIn/progress", lambda p: p["requestId"] == slow and p["stage"] == "exchanging")
    runners = runner_pids(host.proc.pid)
    assert runners, "the test plugins in --plugins folders run in runner processes"
    os.kill(host.proc.pid, sig)
    assert error_code(host.wait_response(slow)) == -32800
    assert host.wait_exit() == 0
    assert not any(os.path.exists(f"/proc/{pid}") for pid in runners), "a runner outlived its host"


def test_exit_without_shutdown_exits_1(host):
    host.notify("exit")
    assert host.wait_exit() == 1


def test_exit_before_initialize_exits_1(start_host, plugin_dir):
    host = start_host([plugin_dir], initialize=False)
    host.notify("exit")
    assert host.wait_exit() == 1


def test_stdin_eof_exits_0(host):
    sign_in_session(host, "c", "eof")
    host.close_stdin()
    assert host.wait_exit() == 0


def test_requests_piped_before_eof_are_still_answered(start_host, plugin_dir):
    # `echo '{…initialize…}' | authbridge`: EOF right behind the request must not lose its answer.
    host = start_host([plugin_dir], initialize=False)
    request_id = host.send_request("initialize", {"protocolVersion": "1.0"})
    host.close_stdin()
    assert "result" in host.wait_response(request_id)
    assert host.wait_exit() == 0


def test_stdin_eof_before_initialize_exits_0(start_host, plugin_dir):
    host = start_host([plugin_dir], initialize=False)
    host.close_stdin()
    assert host.wait_exit() == 0


def test_stdin_eof_cancels_running_requests(host):
    # README §2: "stdin EOF (any phase): running requests get up to 1 s to finish, then the rest
    # are cancelled (their -32800 answers are written)". An external sign-in waits for the user;
    # here its own timeout is 3 s, so a host that lets requests run on after EOF answers -32006.
    pending, _ = begin_sign_in(host, "s", flow="external", timeoutMs=3000)
    host.close_stdin()
    answer = host.wait_response(pending)
    assert error_code(answer) == -32800, f"after EOF the running sign-in answered {short(answer, 200)}"
    assert host.wait_exit() == 0


def test_host_stops_when_the_frontend_closes_its_stdout(tmp_path, plugin_dir):
    # README §2: "If the frontend closes the host's stdout, the host stops the same way" (as on
    # stdin EOF: exit status 0). Raw process: the harness's reader must not hold stdout open.
    argv, env = host_command(tmp_path / "raw", [plugin_dir], profiles=DEFAULT_PROFILES)
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
    try:
        proc.stdin.write(b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"1.0"}}\n')
        proc.stdin.flush()
        assert b'"result"' in proc.stdout.readline()
        proc.stdout.close()
        # The answer to this request cannot be written: the host learns that stdout is gone.
        proc.stdin.write(b'{"jsonrpc":"2.0","id":2,"method":"listProviders","params":{}}\n')
        proc.stdin.flush()
        try:
            code = proc.wait(5)
        except subprocess.TimeoutExpired:
            raise AssertionError("the host kept running 5 s after its stdout was closed (stdin still open)") from None
        assert code == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(TIMEOUT)
        proc.stdin.close()


@pytest.mark.parametrize("ending", ["eof", "exit"])
def test_a_frontend_that_stops_reading_then_closes_stdin_ends_the_host(tmp_path, plugin_dir, ending):
    # Issue 26: with its output full (the frontend reads nothing) and its backlog full too, the
    # host's reader waited for room and never saw stdin's end, nor an `exit` behind the backlog:
    # it ran on for good. README §2: after exit or EOF the host ends within its grace.
    argv, env = host_command(tmp_path / "raw", [plugin_dir], profiles=DEFAULT_PROFILES)
    out_read, out_write = os.pipe()
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=out_write, stderr=subprocess.DEVNULL, env=env)
    try:
        # Before initialize every request is refused at once (-32002), on the reader thread, in
        # order: the answers (the same size each, the id echoed) fill the output, then the backlog.
        request = b'{"jsonrpc":"2.0","id":"' + b"i" * 1000 + b'","method":"listProviders"}\n'
        proc.stdin.write(request)
        proc.stdin.flush()
        answer = os.read(out_read, 65536)
        assert answer.endswith(b"\n") and b"-32002" in answer, answer
        # The frontend stops reading: its end of the host's stdout is full from now on.
        os.set_blocking(out_write, False)
        try:
            while True:
                os.write(out_write, b" " * 4096)
        except BlockingIOError:
            pass
        # 4 MiB of answers wait for the writer, 8 MiB more in the backlog: the reader stops there
        # (Flow control); 40 requests more and the ending wait in the stdin pipe (about 42 KB).
        stopped_after = -(-(4 << 20) // len(answer)) + (8 << 20) // len(answer) + 1
        proc.stdin.write(request * (stopped_after + 40))
        if ending == "exit":
            proc.stdin.write(b'{"jsonrpc":"2.0","id":"bye","method":"shutdown"}\n{"jsonrpc":"2.0","method":"exit"}\n')
        proc.stdin.close()
        try:
            code = proc.wait(TIMEOUT * 2)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"the host still ran {TIMEOUT * 2:.0f} s after its frontend stopped reading and closed stdin") from None
        assert code == (1 if ending == "exit" else 0)   # exit before initialize: 1 (shutdown was refused)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(TIMEOUT)
        os.close(out_read)
        os.close(out_write)


def test_rpc_discover_returns_bridge_spec_openrpc_json(host):
    document = host.result("rpc.discover")
    expected = json.loads(SPEC_PATH.read_text(encoding="utf-8"))
    if document != expected:
        differing = sorted(k for k in set(document) | set(expected) if document.get(k) != expected.get(k))
        raise AssertionError(f"rpc.discover differs from {SPEC_PATH.name} in top-level members {differing} "
                             f"(the embedded copy is stale: `make spec` and rebuild)")


def test_signal_handlers_are_installed_only_by_interrupt():
    # One signal path (issue 28): a handler that does not save errno, or that does more than
    # write(2), corrupts whatever the signal interrupted. SIG_IGN and SIG_DFL are not handlers.
    installs = re.compile(r"\bsigaction\(|(?<!func )\bsignal\([^)]*\)\s*\{|\bsignal\(\s*\w+\s*,\s*\{")
    allowed = {"Sources/AuthBridgeLaunch/Interrupt.swift"}
    found = sorted(
        f"{path.relative_to(REPO)}:{number}"
        for folder in ("Sources", "plugins")
        for path in (REPO / folder).rglob("*.swift")
        if str(path.relative_to(REPO)) not in allowed
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if installs.search(line.split("//")[0])
    )
    assert found == [], f"signal handlers outside Interrupt: {found}"
