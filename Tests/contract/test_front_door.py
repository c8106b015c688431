"""`authbridge`, the command on PATH, is a small C program (Sources/authbridge/front_door.h): it
answers `token`, `exec-credential` and git's `get` and `store` from the running agent itself, and
hands every other command line — and every case with something to say — to authbridge-cli, with
the same arguments, environment and standard input. What it prints must be the CLI's, byte for
byte; what it sends the agent must be the bridge's (bridge-spec).

The agent serves the C test plugin's profile `bench`, signed in by the session flow (its access
token is `at-<sessionId>`)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import tempfile
import threading
from pathlib import Path

import pytest

from authbridge_testkit.agent import Agent
from authbridge_testkit.paths import BUILD_DIR, HOST_BIN
from authbridge_testkit.spec import sent_frame_problems, spec
from conftest import TIMEOUT

CLI_BIN = BUILD_DIR / "authbridge-cli"
GIT_REQUEST = "protocol=https\nhost=git.example.com\n\n"


@pytest.fixture
def tmp_path():
    """A short folder in place of pytest's: the agent's socket path must stay under 108 bytes
    (test_agent.py does the same)."""
    folder = Path(tempfile.mkdtemp(prefix="ab-door-"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def agent(tmp_path, plugin_dir):
    running = Agent(tmp_path / "agent", [plugin_dir], profiles={"bench": {"plugin": "ctest", "settings": {"server": "https://b.example"}},
                                                               "idle": {"plugin": "ctest", "settings": {"server": "https://i.example"}}})
    client = running.connect()
    client.result("requestOAuthTokens", {"provider": "bench", "flow": "session", "sessionId": "s1"})
    client.close()
    yield running
    running.stop()


def run(argv: list[str | Path], env: dict[str, str], stdin: str = "") -> subprocess.CompletedProcess:
    return subprocess.run([str(arg) for arg in argv], input=stdin, capture_output=True, text=True, timeout=TIMEOUT, env=env)


def lone_door(tmp_path: Path) -> Path:
    """A copy of `authbridge` alone in a folder (and its git helper name): no authbridge-cli to
    hand anything to, so an answer proves the front door gave it."""
    folder = tmp_path / "lone" / "bin"
    folder.mkdir(parents=True)
    shutil.copy2(HOST_BIN, folder / "authbridge")
    (folder / "git-credential-authbridge").symlink_to("authbridge")
    return folder / "authbridge"


def same_as_cli(door_argv: list, cli_argv: list, env: dict[str, str], stdin: str = "") -> subprocess.CompletedProcess:
    door = run(door_argv, env, stdin)
    cli = run([CLI_BIN, *cli_argv], env, stdin)
    assert (door.returncode, door.stdout, door.stderr) == (cli.returncode, cli.stdout, cli.stderr), (door, cli)
    return door


def test_the_three_commands_are_answered_from_the_agent_without_the_cli(tmp_path, agent):
    door = lone_door(tmp_path)
    env = agent.env
    assert run([door, "token", "bench"], env).stdout == "at-s1\n"
    assert run([door, "token", "bench", "--min-validity", "60", "--agent", "--account=s1"], env).stdout == "at-s1\n"
    for info in (None, '{"apiVersion":"client.authentication.k8s.io/v1beta1","spec":{"interactive":true}}',
                 '{"apiVersion":"client.authentication.k8s.io/v1","spec":{"interactive":false}}'):
        with_info = {**env, **({"KUBERNETES_EXEC_INFO": info} if info else {})}
        answered = run([door, "exec-credential", "bench"], with_info)
        assert answered.returncode == 0 and answered.stderr == "", answered
        assert answered.stdout == run([CLI_BIN, "exec-credential", "bench"], with_info).stdout
        assert json.loads(answered.stdout)["status"]["token"] == "at-s1"
    helper = door.parent / "git-credential-authbridge"
    answered = run([helper, "--profile", "bench", "get"], env, GIT_REQUEST)
    assert answered.stdout == run([CLI_BIN, "git-credential", "--profile", "bench", "get"], env, GIT_REQUEST).stdout
    assert answered.stdout.startswith("username=oauth2\npassword=at-s1\npassword_expiry_utc=")
    assert run([door, "git-credential", "--profile=bench", "get"], env, GIT_REQUEST).stdout == answered.stdout
    # The user name: the request's, else --username, else the profile's gitUsername.
    asked = run([helper, "--profile", "bench", "--username", "ada", "get"], env, "protocol=https\nhost=h.example:8443\nusername=bo\n\n")
    assert asked.stdout.startswith("username=bo\npassword=at-s1\n")
    assert run([helper, "--profile", "bench", "--username", "ada", "get"], env, GIT_REQUEST).stdout.startswith("username=ada\n")
    config = Path(env["XDG_CONFIG_HOME"]) / "authbridge" / "config.json"
    config.parent.mkdir(parents=True)
    config.write_text(json.dumps({"profiles": {"bench": {"plugin": "ctest", "gitUsername": "x-token-auth"}}}))
    configured = run([helper, "--profile", "bench", "get"], env, GIT_REQUEST)
    assert configured.stdout.startswith("username=x-token-auth\npassword=at-s1\n")
    assert configured.stdout == run([CLI_BIN, "git-credential", "--profile", "bench", "get"], env, GIT_REQUEST).stdout
    # store: AuthBridge keeps the tokens itself.
    stored = run([helper, "--profile", "bench", "store"], env, GIT_REQUEST + "password=at-s1\n")
    assert (stored.returncode, stored.stdout, stored.stderr) == (0, "", "")


def test_what_it_does_not_answer_reaches_the_cli_with_the_same_words_and_input(tmp_path, agent):
    env = agent.env
    # Not signed in, another output, a URL for git's request, http to a loopback address, no --profile
    # (the configuration's gitCredential decides), a bad KUBERNETES_EXEC_INFO, help, a DPoP-free warning.
    same_as_cli([HOST_BIN, "token", "idle"], ["token", "idle"], env)
    same_as_cli([HOST_BIN, "token", "nosuch"], ["token", "nosuch"], env)
    same_as_cli([HOST_BIN, "token", "bench", "--json"], ["token", "bench", "--json"], env)
    same_as_cli([HOST_BIN, "token", "bench", "--min-validity", "99999"], ["token", "bench", "--min-validity", "99999"], env)
    same_as_cli([HOST_BIN, "token", "bench", "--min-validity", "86400"], ["token", "bench", "--min-validity", "86400"], env)
    same_as_cli([HOST_BIN, "exec-credential", "idle"], ["exec-credential", "idle"], env)
    same_as_cli([HOST_BIN, "exec-credential", "bench"], ["exec-credential", "bench"],
                {**env, "KUBERNETES_EXEC_INFO": '{"apiVersion":"client.authentication.k8s.io/v2"}'})
    helper = HOST_BIN.parent / "git-credential-authbridge"
    for request in ("url=https://git.example.com/team/app.git\n\n", "protocol=http\nhost=127.0.0.1:9\n\n",
                    "protocol=https\nhost=h%2f%40evil\n\n", "protocol=ftp\nhost=x\n\n"):
        done = same_as_cli([HOST_BIN, "git-credential", "--profile", "bench", "get"], ["git-credential", "--profile", "bench", "get"],
                           env, request)
        assert done.returncode != 0 or done.stdout.startswith("username="), done
    # The request reached the CLI whole: it answered from the url= line.
    via_url = run([helper, "--profile", "bench", "get"], env, "url=https://git.example.com/team/app.git\n\n")
    assert via_url.returncode == 0 and via_url.stdout.startswith("username=oauth2\npassword=at-s1\n"), via_url
    same_as_cli([HOST_BIN, "git-credential", "get"], ["git-credential", "get"], env, GIT_REQUEST)
    same_as_cli([HOST_BIN, "token", "--help"], ["token", "--help"], env)
    # AUTHBRIDGE_VAULT_KEY is the key of a vault here: the CLI says the agent keeps its own.
    keyed = run([HOST_BIN, "token", "bench"], {**env, "AUTHBRIDGE_VAULT_KEY": "k" * 64})
    assert keyed.stdout == "at-s1\n" and "AUTHBRIDGE_VAULT_KEY is set but not used" in keyed.stderr, keyed


def test_a_declined_command_without_the_cli_says_what_is_missing(tmp_path, agent):
    done = run([lone_door(tmp_path), "token", "idle"], agent.env)
    assert done.returncode == 1 and done.stdout == ""
    assert "cannot run authbridge-cli" in done.stderr and "reinstall" in done.stderr, done.stderr


class FakeAgent:
    """A listener at the agent's socket that records what a client sends and answers with `answer`."""

    def __init__(self, path: Path, answer) -> None:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.frames: list[dict] = []
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.server.bind(str(path))
        self.server.listen(8)
        self.answer = answer
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self) -> None:
        while True:
            try:
                connection, _ = self.server.accept()
            except OSError:
                return
            with connection, connection.makefile("rwb") as stream:
                for line in stream:
                    frame = json.loads(line)
                    self.frames.append(frame)
                    reply = self.answer(frame)
                    if reply is not None:
                        stream.write(reply)
                        stream.flush()
                        if not reply.endswith(b"\n"):  # an answer cut short: the connection ends
                            break

    def close(self) -> None:
        self.server.close()


def test_the_frames_it_sends_are_the_bridges_and_garbage_back_goes_to_the_cli(tmp_path):
    from authbridge_testkit.isolation import isolated_environment
    env = isolated_environment(tmp_path / "user")
    socket_path = Path(env["XDG_RUNTIME_DIR"]) / "authbridge" / "agent.sock"

    seen = {"initialize": 0}

    def garbage(frame):
        # The door's connection gets it for its token, the CLI's (the second) for its initialize.
        seen[frame["method"]] = seen.get(frame["method"], 0) + 1
        asked_token = frame["method"] == "getAccessToken"
        return b"this is not JSON" if asked_token or seen["initialize"] > 1 else None

    fake = FakeAgent(socket_path, garbage)
    try:
        done = run([HOST_BIN, "token", "bench"], env)
    finally:
        fake.close()
    # The CLI tried the agent again and said what it got.
    assert done.returncode != 0 and done.stdout == "", done
    assert "authbridge agent" in done.stderr, done.stderr
    door_frames = fake.frames[:3]
    assert [frame.get("method") for frame in door_frames] == ["initialize", "initialized", "getAccessToken"]
    assert door_frames[2]["params"] == {"provider": "bench"}
    for frame in door_frames:
        method, problems = sent_frame_problems(spec(), frame)
        assert not problems, (method, problems)
    # An error answer: the CLI answers, with its words for it.
    os.unlink(socket_path)

    def refusing(frame):
        if frame.get("method") == "initialize":
            return (json.dumps({"jsonrpc": "2.0", "id": frame["id"], "error": {"code": -32600, "message": "no"}}) + "\n").encode()
        return None

    fake = FakeAgent(socket_path, refusing)
    try:
        refused = run([HOST_BIN, "token", "bench"], env)
    finally:
        fake.close()
    assert refused.returncode != 0 and "refused this command: no" in refused.stderr, refused
