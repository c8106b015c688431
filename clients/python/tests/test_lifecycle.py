"""Cancellation, deadlines, a host that dies, big frames, stderr, and a bounded shutdown."""

from __future__ import annotations

import asyncio
import http.server
import os
import signal
import sys
import textwrap
import threading
import time

import pytest
from conftest import HOST_BIN, WAIT, dot_profiles, dot_settings, sign_in

import authbridge


def is_cancelled_answer(request_id):
    return lambda f: f.get("id") == request_id and f.get("error", {}).get("code") == -32800


async def start_pending_sign_in(bridge, provider="dot"):
    """A browser sign-in nobody completes, once the host waits for the user: (task, request id)."""
    waiting: asyncio.Future = asyncio.get_running_loop().create_future()
    task = asyncio.ensure_future(bridge.request_oauth_tokens(
        provider, flow="browser",
        on_progress=lambda e: e.stage == "waiting" and not waiting.done() and waiting.set_result(e.request_id)))
    return task, await asyncio.wait_for(waiting, WAIT)


async def test_cancelling_the_task_cancels_the_request_at_the_host(host_options, dot, frames):
    async with authbridge.connect(**host_options(profiles=dot_profiles(dot))) as bridge:
        task, request_id = await start_pending_sign_in(bridge)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        # The client sent $/cancelRequest: the host stopped the sign-in and answered -32800,
        # which the client dropped (the caller had already been told).
        await frames.wait_for(is_cancelled_answer(request_id))
        # The bridge goes on, and the provider can sign in again at once.
        assert (await sign_in(bridge, dot)).state == "signedIn"
        await bridge.sign_out("dot")


async def test_a_client_deadline_cancels_the_request_and_raises_request_timeout(host_options, dot, frames):
    async with authbridge.connect(**host_options(profiles=dot_profiles(dot), request_timeout=0.5)) as bridge:
        started = time.monotonic()
        with pytest.raises(authbridge.RequestTimeout) as raised:
            await bridge.request_oauth_tokens("dot", flow="browser")        # request_timeout applies
        assert time.monotonic() - started < WAIT
        # One error of the client's, with a message, that is still what callers caught before.
        error = raised.value
        assert isinstance(error, TimeoutError) and isinstance(error, asyncio.TimeoutError)
        assert isinstance(error, authbridge.Timeout) and isinstance(error, authbridge.AuthBridgeError)
        assert error.request_method == "requestOAuthTokens" and error.timeout == 0.5
        assert (error.code, error.reason, error.retryable) == (-32006, "clientTimeout", True)
        assert str(error) == ("requestOAuthTokens: no answer within 0.5 s; the request was cancelled at the host"
                              " [-32006] (clientTimeout)")
        sent = [i for i, m in frames.sent.items() if m == "requestOAuthTokens"]
        await frames.wait_for(is_cancelled_answer(sent[-1]))
        with pytest.raises(authbridge.RequestTimeout, match="within 0.2 s"):
            await bridge.request_oauth_tokens("dot", flow="browser", timeout=0.2)  # per call
        sent = [i for i, m in frames.sent.items() if m == "requestOAuthTokens"]
        await frames.wait_for(is_cancelled_answer(sent[-1]))
        assert (await bridge.check_sign_in_status("dot", timeout=WAIT)).state == "notSignedIn"


async def test_a_missing_or_unexecutable_host_is_host_not_found_with_a_message(host_options, tmp_path):
    missing = tmp_path / "no-such-authbridge"
    with pytest.raises(authbridge.HostNotFound) as raised:
        await authbridge.connect(**host_options(executable=str(missing))).start()
    error = raised.value
    assert isinstance(error, authbridge.AuthBridgeError) and isinstance(error, FileNotFoundError)
    assert str(missing) in str(error) and "does not exist" in str(error) and "AUTHBRIDGE" in str(error)
    assert error.executable == str(missing) and error.code is None
    unexecutable = tmp_path / "authbridge"
    unexecutable.write_text("#!/bin/sh\n")
    unexecutable.chmod(0o644)
    with pytest.raises(authbridge.HostNotFound, match="is not executable"):
        await authbridge.connect(**host_options(executable=str(unexecutable))).start()
    options = host_options()
    del options["executable"]
    options["env"] = {name: value for name, value in options["env"].items() if name != "AUTHBRIDGE"}
    options["env"]["PATH"] = str(tmp_path / "empty")
    options["env"]["AUTHBRIDGE"] = "authbridge-nowhere"
    with pytest.raises(authbridge.HostNotFound, match="'authbridge-nowhere' is not on PATH"):
        await authbridge.connect(**options).start()
    # The blocking wrapper raises the same.
    with pytest.raises(authbridge.HostNotFound):
        with authbridge.sync.connect(**host_options(executable=str(missing))):
            pass


async def test_calls_cancelled_while_the_pipe_is_full_are_cancelled_at_the_host(host_options, frames, logs):
    """Calls given up while the host reads nothing (stopped): each frame was queued whole, so each
    gets its $/cancelRequest, the host answers each id once, and the client drops those answers
    and forgets the ids (none is left waiting for an answer that never comes)."""
    async with authbridge.connect(**host_options()) as bridge:
        os.kill(bridge.pid, signal.SIGSTOP)          # reads nothing: the pipe and the client's buffer fill
        try:
            big = asyncio.ensure_future(bridge.fetch("nope", "https://api.example.com/", method="POST",
                                                     body="x" * (1 << 20)))
            small = asyncio.ensure_future(bridge.list_accounts())
            sent = [await frames.wait_for(lambda f, m=method: f.get("method") == m, direction="send")
                    for method in ("fetch", "listAccounts")]
            assert not big.done() and not small.done(), "both wait for the pipe"
            for task in (small, big):                # the later call first: it never got to the pipe
                task.cancel()
            for task in (small, big):
                with pytest.raises(asyncio.CancelledError):
                    await task
        finally:
            os.kill(bridge.pid, signal.SIGCONT)
        cancels = [f["params"]["id"] for f in frames.sent_frames if f.get("method") == "$/cancelRequest"]
        assert sorted(cancels) == [f["id"] for f in sent]
        for frame in sent:                           # answered (cancelled, or refused first): once each
            await frames.wait_for(lambda f, i=frame["id"]: f.get("id") == i and "method" not in f)
        assert bridge._connection is not None and bridge._connection._abandoned == {}
        assert (await bridge.list_providers()).plugins, "the bridge goes on"
    assert "unknown request id" not in logs.text()


async def test_a_killed_host_fails_every_pending_call_and_a_new_one_works(host_options, dot):
    profiles = {**dot_profiles(dot), "dot2": {"plugin": "oidc", "settings": dot_settings(dot)}}
    options = host_options(profiles=profiles)
    bridge = await authbridge.connect(**options)
    try:
        changes = []
        bridge.on("session/changed", changes.append)
        stream = bridge.events("session/changed")
        first, _ = await start_pending_sign_in(bridge, "dot")
        second, _ = await start_pending_sign_in(bridge, "dot2")
        os.kill(bridge.pid, signal.SIGKILL)
        for pending in (first, second):
            with pytest.raises(authbridge.HostExited) as raised:
                await asyncio.wait_for(pending, WAIT)
            assert raised.value.returncode == -signal.SIGKILL
            assert raised.value.request_method == "requestOAuthTokens"
            assert raised.value.stderr_tail, "the host's last log lines (it logs at debug here)"
            assert "killed by signal 9" in str(raised.value) and raised.value.stderr_tail[-1] in str(raised.value)
        with pytest.raises(authbridge.HostExited):
            await stream.next(timeout=WAIT)                 # the event stream says so too
        with pytest.raises(authbridge.HostExited):
            await bridge.list_providers()                   # and so does every later call
        assert not bridge.running and bridge.returncode == -signal.SIGKILL

        info = await bridge.restart()                       # a new host, same options
        assert info.server_info.name == "authbridge" and bridge.running
        assert (await bridge.sign_out("dot")).signed_out
        assert (await sign_in(bridge, dot)).state == "signedIn"
        assert [c.state for c in changes] == ["signedIn"], "callbacks carry over to the new host"
    finally:
        await bridge.close()
    assert bridge.returncode == 0
    async with authbridge.connect(**options) as again:     # or simply a new connect
        assert (await again.check_sign_in_status("dot")).state == "signedIn"
        await again.sign_out("dot")


async def test_restart_configures_the_runtime_profiles_again(host_options, dot, frames):
    async with authbridge.connect(**host_options()) as bridge:     # none in the configuration file
        for name in ("dot", "gone", "dot2"):
            await bridge.configure_profile(name, "oidc", dot_settings(dot))
        assert await bridge.remove_profile("gone")
        assert (await sign_in(bridge, dot)).state == "signedIn"
        os.kill(bridge.pid, signal.SIGKILL)
        await bridge.restart()
        configured = [f["params"]["name"] for f in frames.sent_frames if f.get("method") == "configureProfile"]
        assert configured[-2:] == ["dot", "dot2"], "again, in order, without the removed one"
        assert [(p.name, p.source) for p in (await bridge.list_providers()).profiles] == \
            [("dot", "runtime"), ("dot2", "runtime")]
        status = await bridge.check_sign_in_status("dot")
        assert (status.state, status.reason) == ("signedIn", "valid"), "the stored session is the same profile's"
        await bridge.sign_out("dot")


class BigBody(http.server.BaseHTTPRequestHandler):
    """An API on 127.0.0.1 answering a large JSON body (the host allows http on loopback)."""
    size = 8 * 1024 * 1024

    def do_GET(self):  # noqa: N802
        body = b'{"data":"' + b"x" * (self.size - 11) + b'"}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def big_api():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), BigBody)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/big"
    server.shutdown()
    server.server_close()


async def test_large_frames(host_options, dot, big_api, frames):
    async with authbridge.connect(**host_options(profiles=dot_profiles(dot))) as bridge:
        document = await bridge.discover()
        assert document["info"]["title"] == "AuthBridge bridge"
        await sign_in(bridge, dot)
        answer = await bridge.fetch("dot", big_api, timeout_ms=60_000, timeout=60)
        assert answer.status == 200 and len(answer.body) == BigBody.size    # an 8 MiB frame, 128× asyncio's default
        assert answer.json()["data"].startswith("xxx")
        await bridge.sign_out("dot")

    # Past max_frame_bytes, the frame is skipped and its call fails; the bridge goes on.
    async with authbridge.connect(**host_options("small", max_frame_bytes=16 * 1024)) as bridge:
        for _ in range(3):
            with pytest.raises(authbridge.FrameTooLarge) as raised:
                await bridge.discover(timeout=WAIT)
            assert raised.value.request_method == "rpc.discover"
            assert (await bridge.list_providers()).plugins[0].id == "oidc"


STUB_HOST = textwrap.dedent('''
    import json, signal, sys
    # A stand-in host. It exits 0 after `exit`, and 1 at EOF without one (the real host exits 0
    # either way, so only this one tells whether the client sent `exit`).
    #   --chatty: logs 4 MiB before it answers initialize (a client that does not drain stderr
    #             leaves it blocked on a full 64 KiB pipe, and initialize is never answered);
    #   --deaf:   answers neither shutdown nor exit and outlives EOF; only a signal ends it.
    deaf = "--deaf" in sys.argv
    for line in sys.stdin:
        frame = json.loads(line)
        method = frame.get("method")
        if method == "initialize":
            if "--chatty" in sys.argv:
                for n in range(32768):
                    sys.stderr.write(f"stub log line {n:06d} " + "." * 100 + "\\n")
                sys.stderr.flush()
            result = {"protocolVersion": "1.0", "serverInfo": {"name": "authbridge", "version": "0"},
                      "capabilities": {"batches": False, "cancellation": True, "flows": [], "notifications": []},
                      "providers": [], "profiles": [], "storage": {"backend": "memory", "protection": "none"}}
        elif method == "shutdown" and not deaf:
            result = None
        elif method == "exit" and not deaf:
            sys.exit(0)
        else:
            continue
        sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": frame["id"], "result": result}) + "\\n")
        sys.stdout.flush()
    if deaf:
        while True:
            signal.pause()
    sys.exit(1)
''')


@pytest.fixture
def stub_host(tmp_path):
    stub = tmp_path / "stub-host"
    stub.write_text(f"#!{sys.executable}\n{STUB_HOST}")
    stub.chmod(0o755)
    return stub


async def test_stderr_is_drained_and_kept_for_diagnostics(stub_host, frames, logs):
    async with authbridge.connect(stub_host, args=["--chatty"], on_frame=frames, start_timeout=WAIT,
                                  stderr_lines=50) as bridge:
        assert bridge.info.storage.backend == "memory"
    assert bridge.returncode == 0
    tail = bridge.stderr_tail(3)
    assert [line.split()[3] for line in tail] == ["032765", "032766", "032767"]
    assert len(bridge.stderr_tail(1000)) == 50, "a bounded ring of lines"
    forwarded = [r for r in logs.records if r.name == "authbridge.host"]
    assert len(forwarded) == 32768 and forwarded[0].levelname == "DEBUG"


async def test_close_sends_shutdown_then_exit(stub_host, frames):
    async with authbridge.connect(stub_host, on_frame=frames, start_timeout=WAIT):
        pass
    methods = [f.get("method") for f in frames.sent_frames]
    assert methods == ["initialize", "initialized", "shutdown", "exit"], methods
    assert frames.sent_frames[-1] == {"jsonrpc": "2.0", "method": "exit"}
    shutdown = frames.sent_frames[-2]["id"]
    assert {"jsonrpc": "2.0", "id": shutdown, "result": None} in frames.frames()


async def test_a_host_deaf_to_shutdown_and_eof_ends_at_sigterm(stub_host, frames, logs):
    bridge = await authbridge.connect(stub_host, args=["--deaf"], on_frame=frames, start_timeout=WAIT,
                                      shutdown_timeout=0.5)
    code = await bridge.close()
    assert code == -signal.SIGTERM, "SIGTERM ended it: no SIGKILL was needed"
    assert [f.get("method") for f in frames.sent_frames][-1] == "exit", "exit was sent although shutdown went unanswered"
    steps = [r.getMessage().rsplit(": ", 1)[1] for r in logs.records if "did not exit within" in r.getMessage()]
    assert steps == ["terminate"]


async def test_shutdown_of_a_stuck_host_is_bounded(host_options):
    bridge = await authbridge.connect(**host_options(shutdown_timeout=0.5))
    os.kill(bridge.pid, signal.SIGSTOP)     # answers nothing, ignores EOF and SIGTERM
    started = time.monotonic()
    code = await bridge.close()
    assert code == -signal.SIGKILL and time.monotonic() - started < 10
    assert bridge.returncode == code and not bridge.running
    await bridge.close()    # closing twice is harmless


async def test_the_executable_comes_from_the_argument_the_environment_or_path(host_options, monkeypatch):
    options = host_options()
    del options["executable"]
    # The host's environment says nothing here: this process's AUTHBRIDGE and PATH decide.
    options["env"] = {name: value for name, value in options["env"].items() if name not in ("AUTHBRIDGE", "PATH")}
    monkeypatch.setenv("AUTHBRIDGE", str(HOST_BIN))
    async with authbridge.connect(**options) as bridge:
        assert bridge.argv[0] == str(HOST_BIN)
    monkeypatch.delenv("AUTHBRIDGE")
    monkeypatch.setenv("PATH", str(HOST_BIN.parent))
    assert authbridge.connect(**options).argv[0] == str(HOST_BIN)
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(FileNotFoundError, match="AUTHBRIDGE"):
        await authbridge.connect(**options).start()


async def test_a_host_that_cannot_start_says_why(host_options):
    with pytest.raises(authbridge.HostExited) as raised:
        async with authbridge.connect(**host_options(args=["--no-such-option"])):
            pass
    assert raised.value.returncode == 64 and raised.value.request_method == "initialize"
    assert any("--no-such-option" in line for line in raised.value.stderr_tail), raised.value.stderr_tail


def test_the_host_is_found_through_the_environment_given_to_connect(tmp_path, monkeypatch):
    from authbridge.transport import find_executable
    monkeypatch.delenv("AUTHBRIDGE", raising=False)
    assert find_executable(None, {"AUTHBRIDGE": str(HOST_BIN)}) == str(HOST_BIN.resolve())
    own_bin = tmp_path / "bin"
    own_bin.mkdir()
    (own_bin / "authbridge").write_text("#!/bin/sh\n")
    (own_bin / "authbridge").chmod(0o755)
    assert find_executable(None, {"PATH": str(own_bin)}) == str(own_bin / "authbridge"), "the host's PATH"
    with pytest.raises(FileNotFoundError, match="set AUTHBRIDGE"):
        find_executable(None, {"PATH": str(tmp_path / "nowhere")})
