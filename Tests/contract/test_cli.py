"""The human commands on the same binary (like `gh auth`): login, status, token, logout, plugins.

Each command is its own process sharing the profiles and the default encrypted-file vault, as a
person would run them one after another. The browser is a stand-in `xdg-open` on PATH that plays
the user at django-oauth-toolkit (and records that it ran); the device flow's user approves on
DOT's pages. What only happens on a terminal (help for a bare `authbridge`, colours, Ctrl-C) runs
on a pseudo-terminal.
"""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import struct
import subprocess
import termios
import threading
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from authbridge_testkit import http_answer, leak_scan
from authbridge_testkit.spec import schema_problems, spec
from conftest import HOST_BIN, TIMEOUT, bundled_files, copy_plugins, session_records
from authbridge_testkit.dot_auth import DotAuthServer, dot_fixture, install_fake_browser

FAILED, NOT_SIGNED_IN, UNAVAILABLE, CANCELLED, USAGE, CONFIG = 1, 2, 3, 4, 64, 78

#: A machine without a desktop: xdg-open starts, finds no browser, and exits 3.
FAILING_BROWSER = "#!/bin/sh\necho \"$1\" > '{record}'\nexit 3\n"

AUTHORIZE_URL = re.compile(r"http://127\.0\.0\.1:\d+/o/authorize/\?[^\s\x1b]+")


dot = dot_fixture("module")


def authbridge(*args: str, env: dict[str, str] | None = None, timeout: float = TIMEOUT,
               input: str | None = None) -> subprocess.CompletedProcess:
    """`authbridge ARGS…` run to its end, its output captured as text; its stdin is `input` or empty."""
    stdin = {"input": input} if input is not None else {"stdin": subprocess.DEVNULL}
    return subprocess.run([str(HOST_BIN), *args], env=env, capture_output=True, text=True, timeout=timeout, **stdin)


class CLI:
    """Runs `authbridge …` in one isolated home (config, data, PATH with the stand-in browser)."""

    def __init__(self, root: Path, oidc_plugin_dir: Path, dot: DotAuthServer) -> None:
        for name in ("config", "data", "home", "bin"):
            (root / name).mkdir()
        self.root = root
        self.browser_calls = root / "xdg-open-calls"
        install_fake_browser(root / "bin", self.browser_calls)
        profiles = {"dot": {"plugin": "oidc", "settings": {"issuer": f"{dot.base}/o", "clientId": "authbridge-test",
                                                           "scopes": ["openid", "read"]}},
                    "tv": {"plugin": "oidc", "settings": {"issuer": f"{dot.base}/o", "clientId": "authbridge-device",
                                                          "scopes": ["openid", "read"],
                                                          "deviceAuthorizationEndpoint": f"{dot.base}/o/device-authorization/"}},
                    # Nothing listens on port 9: the provider cannot be reached.
                    "down": {"plugin": "oidc", "settings": {"issuer": "http://127.0.0.1:9/o", "clientId": "x"}},
                    # DOT, but revocation goes nowhere: signing out cannot revoke.
                    "norevoke": {"plugin": "oidc", "settings": {"issuer": f"{dot.base}/o", "clientId": "authbridge-test",
                                                                "scopes": ["openid", "read"],
                                                                "revocationEndpoint": "http://127.0.0.1:9/revoke/"}},
                    "ghost": {"plugin": "ghost"}}
        (root / "config" / "authbridge").mkdir()
        (root / "config" / "authbridge" / "config.json").write_text(json.dumps({"profiles": profiles}))
        self.env = {k: v for k, v in os.environ.items() if k not in ("DBUS_SESSION_BUS_ADDRESS", "AUTHBRIDGE_VAULT_KEY", "NO_COLOR")}
        self.env.update(XDG_CONFIG_HOME=str(root / "config"), XDG_DATA_HOME=str(root / "data"), HOME=str(root / "home"),
                        PATH=f"{root / 'bin'}:{os.environ['PATH']}")
        self.plugins = oidc_plugin_dir
        self.common = ["--no-default-plugins", "--plugins", str(oidc_plugin_dir)]
        self.outputs: list[str] = []   # everything printed, but `token`'s stdout (the one place a token belongs)

    def run(self, *args: str) -> subprocess.CompletedProcess:
        command, rest = args[0], list(args[1:])
        done = authbridge(command, *self.common, *rest, env=self.env, timeout=TIMEOUT * 6)
        self.outputs += [done.stderr] if command == "token" else [done.stdout, done.stderr]
        return done

    def start(self, *args: str) -> subprocess.Popen:
        command, rest = args[0], list(args[1:])
        return subprocess.Popen([str(HOST_BIN), command, *self.common, *rest], env=self.env, text=True,
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    def on_terminal(self, *args: str, env: dict[str, str] | None = None) -> "OnTerminal":
        """`authbridge …` with a pseudo-terminal for stdin, stdout and stderr, as typed in a shell."""
        argv = [str(HOST_BIN)] + ([args[0], *self.common, *args[1:]] if args else [])
        return OnTerminal(argv, {**self.env, **(env or {})}, self.outputs)

    def failing_browser(self) -> Path:
        """Replaces the stand-in browser with one that fails as on a machine without a desktop;
        returns the file where it writes the URL it was given."""
        record = self.root / "failing-xdg-open-url"
        browser = self.root / "bin" / "xdg-open"
        browser.write_text(FAILING_BROWSER.format(record=record))
        browser.chmod(0o755)
        return record


class OnTerminal:
    """A process whose controlling terminal is a pseudo-terminal we hold the other end of:
    its output is what a person sees, and typing Ctrl-C there sends SIGINT as a shell would."""

    def __init__(self, argv: list[str], env: dict[str, str], outputs: list[str]) -> None:
        master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 200, 0, 0))  # wide: no wrapped rows
        self.process = subprocess.Popen(argv, env=env, stdin=slave, stdout=slave, stderr=slave, start_new_session=True,
                                        preexec_fn=lambda: fcntl.ioctl(0, termios.TIOCSCTTY, 0))
        os.close(slave)
        self.master = master
        self.outputs = outputs
        self._seen = b""
        self._changed = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        while True:
            try:
                chunk = os.read(self.master, 4096)
            except OSError:          # EIO: every holder of the terminal's other end is gone
                chunk = b""
            with self._changed:
                self._seen += chunk
                self._changed.notify_all()
            if not chunk:
                return

    @property
    def text(self) -> str:
        with self._changed:
            return self._seen.decode("utf-8", "replace")

    def wait_for(self, pattern: str, timeout: float = TIMEOUT * 3) -> re.Match:
        """The first match of `pattern` in what the terminal showed (bounded)."""
        regex = re.compile(pattern)
        with self._changed:
            if not self._changed.wait_for(lambda: regex.search(self._seen.decode("utf-8", "replace")), timeout):
                pytest.fail(f"{pattern!r} did not appear within {timeout} s; the terminal showed:\n{self.text}")
        return regex.search(self.text)

    def type(self, keys: bytes) -> None:
        os.write(self.master, keys)

    def finish(self, timeout: float = TIMEOUT * 3) -> int:
        """The exit status, once the process ended and its output was read."""
        try:
            status = self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            pytest.fail(f"still running after {timeout} s; the terminal showed:\n{self.text}")
        self._reader.join(timeout=TIMEOUT)
        os.close(self.master)
        self.outputs.append(self.text)
        return status


@pytest.fixture
def cli(tmp_path, oidc_plugin_dir, dot):
    runner = CLI(tmp_path, oidc_plugin_dir, dot)
    yield runner
    # Tokens only where a person asked for one: `token`'s stdout.
    places = leak_scan.leaks("\n".join(runner.outputs), [])
    assert not places, f"a token was printed outside `authbridge token`: {places}"


def test_login_status_token_logout(cli, dot):
    assert cli.run("status", "dot").returncode == NOT_SIGNED_IN
    login = cli.run("login", "dot")
    assert login.returncode == 0, login.stderr
    assert "Open this URL in a browser to sign in:" in login.stderr and f"{dot.base}/o/authorize/" in login.stderr
    sub = dot._get_json("/test/user?name=ada")["sub"]
    assert login.stdout.strip() == f"✓ Signed in to dot as ada@example.test ({sub})", "by name, the sub beside it"
    assert "\x1b[" not in login.stdout + login.stderr, "no colours when not on a terminal"

    status = cli.run("status")
    assert status.returncode == 0, status.stderr
    header, *rows = status.stdout.splitlines()
    assert header.split() == ["PROFILE", "ACCOUNT", "STATE", "EXPIRES", "STORAGE"]
    dot_row = next(row for row in rows if row.startswith("dot "))
    assert sub in dot_row and "signedIn" in dot_row and re.search(r"in \d+ min", dot_row)
    assert "encrypted file (key file)" in dot_row, "no keyring here: the vault key is in a key file"
    assert any(row.startswith("tv ") and "notSignedIn" in row for row in rows)
    as_json = json.loads(cli.run("status", "--json", "dot").stdout)
    assert [entry["state"] for entry in as_json] == ["signedIn"]

    token = cli.run("token", "dot")
    assert token.returncode == 0 and token.stderr == ""
    assert dot.is_issued(token.stdout.strip()), "a token DOT issued, alone on stdout"

    logout = cli.run("logout", "dot")
    assert logout.returncode == 0, logout.stderr
    assert logout.stdout.startswith("✓ Signed out of dot") and "refresh_token" in logout.stdout
    again = cli.run("token", "dot")
    assert again.returncode == NOT_SIGNED_IN and again.stdout == ""
    assert "not signed in" in again.stderr


def test_login_with_a_device_code(cli, dot):
    login = cli.start("login", "tv", "--device")
    lines: list[str] = []
    code = uri = None
    for line in login.stderr:            # bounded: the process ends on its own timeout at worst
        lines.append(line)
        if match := re.search(r"one-time code: (\S+)", line):
            code = match.group(1)
        if match := re.search(r"Then open (\S+) on any device", line):
            uri = match.group(1)
        if code and uri:
            break
    assert code and uri, "".join(lines)
    dot.approve_device(code, uri)
    out, _ = login.communicate(timeout=TIMEOUT * 3)
    assert login.returncode == 0 and out.startswith("✓ Signed in to tv")


def test_errors_have_exit_codes_and_one_line_messages(cli):
    unknown = cli.run("login", "nope", "--no-browser")
    assert unknown.returncode == FAILED and 'No profile is named "nope"' in unknown.stderr
    unreachable = cli.run("status", "down")
    assert unreachable.returncode == UNAVAILABLE, unreachable.stderr
    # A slow machine may also see the notice that the command waits for the provider (after 1 s).
    lines = [line for line in unreachable.stderr.splitlines() if not line.startswith("waiting for the provider of ")]
    assert len(lines) == 1 and lines[0].startswith("error: "), unreachable.stderr


def test_usage_errors_exit_64(cli):
    for argv in (["login"], ["login", "dot", "--timeout", "0"], ["status", "--vault", "nowhere"],
                 ["token", "dot", "--log-level", "loud"], ["logout"], ["plugins", "--no-such-flag"]):
        done = cli.run(*argv)
        assert done.returncode == USAGE, f"{argv}: {done.returncode}\n{done.stderr}"
        assert "Usage: authbridge " + argv[0] in done.stderr, f"{argv}: the command's usage\n{done.stderr}"


def test_a_mistyped_command_is_named_with_the_closest_one(cli):
    # `serve` is the default subcommand: a typo must not be taken for serve's argument.
    for typo, guess in (("stauts", "status"), ("logni", "login"), ("plugin", "plugins"), ("toke", "token")):
        done = authbridge(typo, "dot", env=cli.env)
        assert done.returncode == USAGE, done.stderr
        assert done.stdout == ""
        assert done.stderr.splitlines()[0] == f"error: unknown command '{typo}'. Did you mean '{guess}'?"
        assert "serve" not in done.stderr.lower(), "not serve's usage"
    far = authbridge("frobnicate", env=cli.env)
    assert far.returncode == USAGE and far.stderr.splitlines()[0] == "error: unknown command 'frobnicate'."
    assert "authbridge --help" in far.stderr


def test_open_browser_belongs_to_serve_only(cli):
    # login opens the browser by default (--no-browser: only print the URL); the others open nothing.
    for command in ("login", "status", "token", "logout", "plugins"):
        argv = [command, "dot"] if command in ("login", "token", "logout") else [command]
        done = cli.run(*argv, "--open-browser")
        assert done.returncode == USAGE and "--open-browser" in done.stderr, f"{command}: {done.stderr}"
        helped = authbridge(command, "--help")
        assert "--open-browser" not in helped.stdout, command
    serve_help = authbridge("serve", "--help")
    assert "--open-browser" in serve_help.stdout


def test_login_no_browser_prints_the_url_waits_and_times_out_as_a_failure(cli, dot):
    login = cli.run("login", "dot", "--no-browser", "--timeout", "2")
    assert "Open this URL in a browser to sign in:" in login.stderr
    assert AUTHORIZE_URL.search(login.stderr), login.stderr
    assert "Waiting for the browser to come back… (Ctrl-C cancels)" in login.stderr
    assert "opening it in your browser" not in login.stderr
    assert not cli.browser_calls.exists(), "--no-browser: xdg-open never ran"
    # Nobody signed in: the user did not finish, which is not "provider unreachable" (exit 3).
    assert login.returncode == FAILED, login.stderr
    # Issue 27 §6: what to check when the provider never sent the user back (before: "error: The
    # sign-in was not completed within 2 s." and nothing more).
    said = login.stderr.splitlines()[-1]
    assert said.startswith('error: The sign-in to "dot" was not completed within 2 s: nothing came back to http://127.0.0.1:'), said
    assert 'the client id "authbridge-test"' in said and "http://127.0.0.1/callback" in said, said
    assert said.endswith("Otherwise the sign-in was not finished in the browser."), said
    assert cli.run("status", "dot").returncode == NOT_SIGNED_IN


def test_login_tells_the_user_when_the_browser_cannot_be_opened_and_keeps_waiting(cli, dot):
    opened = cli.failing_browser()
    login = cli.start("login", "dot")
    lines: list[str] = []
    url = None
    for line in login.stderr:            # bounded: the login ends on its own --timeout at worst
        lines.append(line)
        url = url or (AUTHORIZE_URL.search(line) and AUTHORIZE_URL.search(line).group())
        if "could not open a browser" in line:
            break
    warning = lines[-1]
    assert url and warning.startswith("warning: could not open a browser (xdg-open exited with status 3)"), "".join(lines)
    assert "Open the URL above yourself; still waiting" in warning
    assert "authorize" not in warning and "state=" not in warning, "the warning is short and names no URL"
    assert opened.read_text().strip() == url, "xdg-open was given the sign-in URL"
    # The user opens the printed URL in a browser elsewhere: the login, still waiting, completes.
    urllib.request.urlopen(dot.browse(url), timeout=30).read()
    out, err = login.communicate(timeout=TIMEOUT * 3)
    assert login.returncode == 0, "".join(lines) + err
    assert out.startswith("✓ Signed in to dot")


def test_serve_open_browser_logs_a_failed_xdg_open(start_host, oidc_plugin_dir, dot, tmp_path):
    bin_dir = tmp_path / "failing-bin"
    bin_dir.mkdir()
    (bin_dir / "xdg-open").write_text(FAILING_BROWSER.format(record=tmp_path / "opened"))
    (bin_dir / "xdg-open").chmod(0o755)
    settings = {"issuer": f"{dot.base}/o", "clientId": "authbridge-test", "scopes": ["openid"]}
    host = start_host([oidc_plugin_dir], profiles={"dot": {"plugin": "oidc", "settings": settings}},
                      extra_args=["--open-browser"], env={"PATH": f"{bin_dir}:{os.environ['PATH']}"})
    pending = host.send_request("requestOAuthTokens", {"provider": "dot", "flow": "browser", "timeoutMs": 60_000})
    opened = host.wait_for_notification("signIn/progress", lambda p: p["requestId"] == pending and p["stage"] == "openUrl")
    # The frontend is told (a progress message), and the host's log says why.
    told = host.wait_for_notification("signIn/progress", lambda p: p["requestId"] == pending and "could not be opened" in p.get("message", ""))
    assert told["stage"] == "waiting" and "xdg-open exited with status 3" in told["message"] and opened["url"] not in told["message"]
    warning = next(line for line in host.stderr_text().splitlines() if "could not open the browser" in line)
    assert "warning" in warning and "xdg-open exited with status 3" in warning
    assert "the sign-in URL is in the openUrl progress event" in warning
    assert opened["url"] not in host.stderr_text() and "state=" not in warning
    # The sign-in goes on: the frontend's user opens the URL.
    urllib.request.urlopen(dot.browse(opened["url"]), timeout=30).read()
    assert host.wait_response(pending)["result"]["state"] == "signedIn"


def test_status_lists_every_profile_when_one_provider_is_down(cli, dot):
    assert cli.run("login", "dot").returncode == 0
    status = cli.run("status")
    assert status.returncode == 0, status.stderr
    rows = {row.split()[0]: row for row in status.stdout.splitlines()[1:]}
    assert set(rows) >= {"dot", "down", "tv", "ghost"}, status.stdout
    assert "signedIn" in rows["dot"] and "notSignedIn" in rows["tv"]
    assert " offline" in rows["down"], rows["down"]
    assert re.search(r"^down: .+", status.stderr, re.M), "the reason of the offline row, on stderr"
    as_json = {entry["provider"]: entry for entry in json.loads(cli.run("status", "--json").stdout)}
    assert as_json["down"]["state"] == "offline" and as_json["dot"]["state"] == "signedIn"


def test_a_profile_whose_plugin_is_not_loaded_names_the_folders_searched(cli):
    login = cli.run("login", "ghost", "--no-browser")
    assert login.returncode == FAILED
    message = login.stderr.strip()
    assert message.startswith('error: Profile "ghost" uses plugin "ghost", which is not loaded'), message
    assert f"searched: {cli.plugins}" in message, "the folders that were searched"
    assert "`authbridge plugins`" in message, "how to see what loaded and what was refused"
    assert message.endswith("Loaded plugins: oidc."), "which plugins there are, as the Python client says"
    assert len(message.splitlines()) == 1


def test_messages_say_what_a_person_needs_not_the_bridge_method(cli):
    config = cli.root / "config" / "authbridge" / "config.json"
    # An unknown profile: the file read, the profiles it has, the closest name (before: only
    # "Configure it with configureProfile or in the configuration file.").
    for argv in (["token", "dott"], ["login", "dott", "--no-browser"], ["status", "dott"]):
        done = cli.run(*argv)
        assert done.returncode == FAILED, (argv, done.stderr)
        assert done.stderr == (f'error: No profile is named "dott" in the configuration file {config}. Did you mean "dot"? '
                               "Its profiles: dot, down, ghost, norevoke, tv.\n"), (argv, done.stderr)
    far = cli.run("token", "payroll")
    assert "Did you mean" not in far.stderr and "Its profiles: dot, down" in far.stderr and "configureProfile" not in far.stderr
    # Not signed in: how to sign in, as git-credential says it.
    token = cli.run("token", "tv")
    assert token.returncode == NOT_SIGNED_IN
    assert token.stderr == 'error: Profile "tv" is not signed in. Sign in with: authbridge login tv\n', token.stderr
    # An http issuer: which profile, in which file.
    profiles = json.loads(config.read_text())
    profiles["profiles"]["plain"] = {"plugin": "oidc", "settings": {"issuer": "http://idp.example.com/o", "clientId": "x"}}
    config.write_text(json.dumps(profiles))
    plain = cli.run("login", "plain", "--no-browser", "--timeout", "5")
    assert plain.returncode == FAILED, plain.stderr
    assert 'must be an https URL' in plain.stderr and f'(profile "plain" in the configuration file {config})' in plain.stderr
    assert len(plain.stderr.splitlines()) == 1


def test_token_and_exec_say_when_the_token_is_valid_for_less_than_asked(cli, dot):
    assert cli.run("login", "dot").returncode == 0
    # DOT's tokens last an hour; 24 h cannot be had, and the half-lifetime rule renews none of them.
    token = cli.run("token", "dot", "--min-validity", "86400")
    assert token.returncode == 0 and dot.is_issued(token.stdout.strip())
    warning = re.fullmatch(r"warning: the token is valid for (\d+) s more, less than the 86400 s asked with --min-validity: "
                           r"it is renewed only when less than half its lifetime is left, and the provider's tokens may not "
                           r"last that long\n", token.stderr)
    assert warning and 0 < int(warning.group(1)) <= 3600, token.stderr
    ran = cli.run("exec", "dot", "--min-validity", "7200", "--", "sh", "-c", 'test -n "$AUTHBRIDGE_TOKEN"')
    assert ran.returncode == 0 and ran.stderr.count("less than the 7200 s asked with --min-validity") == 1, ran.stderr
    # Enough validity, or none asked: nothing said.
    for argv in (["token", "dot"], ["token", "dot", "--min-validity", "60"], ["exec", "dot", "--", "true"]):
        done = cli.run(*argv)
        assert done.returncode == 0 and done.stderr == "", (argv, done.stderr)
    # What each does is in its help.
    assert "with a warning on stderr" in authbridge("token", "--help").stdout
    assert "half its lifetime" in authbridge("exec", "--help").stdout


def test_token_for_scopes_exec_with_them_and_exchange_and_client_credentials_reach_the_host(cli, dot):
    """Issue 30 from the command line: `token --scope/--resource`, the same on `exec`, `exchange`,
    `login --client-credentials` (what the provider makes of them is the host's tests')."""
    assert cli.run("login", "dot").returncode == 0
    whole = cli.run("token", "dot").stdout.strip()
    narrow = cli.run("token", "dot", "--scope", "openid", "--scope", "read")
    assert narrow.returncode == 0 and narrow.stderr == "", narrow.stderr
    assert dot.is_issued(narrow.stdout.strip()) and narrow.stdout.strip() != whole, "a token of its own for those scopes"
    again = cli.run("token", "dot", "--scope", "openid", "--scope", "read", "--json")
    assert json.loads(again.stdout)["accessToken"] == narrow.stdout.strip(), "kept per scopes"
    ran = cli.run("exec", "dot", "--scope", "openid", "--scope", "read", "--", "sh", "-c", 'test "$AUTHBRIDGE_TOKEN" = "$0"',
                  narrow.stdout.strip())
    assert ran.returncode == 0, ran.stderr
    # Usage errors are the command line's own (exit 64), before any host.
    for argv in (["token", "dot", "--scope", "read write"], ["token", "dot", "--resource", "api.example.com"],
                 ["exchange", "dot", "--subject-token-type", "refreshToken"], ["login", "dot", "--client-credentials", "--device"]):
        done = cli.run(*argv)
        assert done.returncode == USAGE and done.stdout == "", (argv, done.stderr)
    # DOT does no token exchange and its test client is public: refusals, never the params check's.
    exchanged = cli.run("exchange", "dot", "--audience", "billing", "--scope", "read")
    assert exchanged.returncode not in (0, USAGE) and exchanged.stdout == "" and "Invalid params" not in exchanged.stderr, exchanged.stderr
    machine = cli.run("login", "dot", "--client-credentials", "--timeout", "5")
    assert machine.returncode not in (0, USAGE) and "Invalid params" not in machine.stderr, machine.stderr
    assert "--client-credentials" in authbridge("login", "--help").stdout
    assert "--scope <SCOPE>" in authbridge("exec-credential", "--help").stdout


def test_status_help_says_what_is_checked_and_a_valid_token_is_signed_in_with_the_provider_down(cli, dot, tmp_path):
    # Before: "Checks every signed-in account with its provider", while an unexpired token was
    # reported signedIn without asking it (the provider may be down).
    helped = " ".join(authbridge("status", "--help").stdout.split())
    assert "Checks every signed-in account with its provider" not in helped
    assert "a token that has not expired is signedIn from what AuthBridge holds, without asking the provider" in helped
    config = cli.root / "config" / "authbridge" / "config.json"
    profiles = json.loads(config.read_text())
    # A second name for DOT whose token endpoint and discovery go nowhere once signed in.
    assert cli.run("login", "dot").returncode == 0
    profiles["profiles"]["dot"]["settings"]["tokenEndpoint"] = "http://127.0.0.1:9/token/"
    config.write_text(json.dumps(profiles))
    status = cli.run("status", "dot")
    assert status.returncode == 0 and "signedIn" in status.stdout, status.stdout + status.stderr


def run_with(cli: CLI, config: Path, folder: Path, *args: str) -> subprocess.CompletedProcess:
    """`authbridge COMMAND …` with its own config file and plugin folder (not the CLI's)."""
    done = authbridge(args[0], "--no-default-plugins", "--plugins", str(folder), "--config", str(config), *args[1:],
                      env=cli.env, timeout=TIMEOUT * 6)
    cli.outputs += [done.stdout, done.stderr]
    return done


def test_login_with_a_refused_plugin_says_why_and_how_to_fix_it(cli, tmp_path):
    folder = copy_plugins(tmp_path / "careless-plugins", bundled_files("oidc"), cli.plugins)
    manifest = folder / "oidc.json"
    manifest.chmod(0o664)                            # writable by the group: refused at load
    config = tmp_path / "refused.json"
    config.write_text(json.dumps({"profiles": {"corp": {"plugin": "oidc", "settings": {
        "issuer": "http://127.0.0.1:9/o", "clientId": "x"}}}}))
    done = run_with(cli, config, folder, "login", "corp", "--no-browser")
    assert done.returncode == FAILED
    # One line: the refusal and its fix, no log line of the loader.
    assert done.stderr.splitlines() == [
        f'error: Profile "corp" uses plugin "oidc", which was refused (insecurePermissions): manifest {manifest} is '
        f"writable by group or others (mode 664). To fix it: chmod go-w {manifest}"], done.stderr
    # The fix, as printed, works: the plugin loads, and what fails now is the provider (nothing listens).
    fix = done.stderr.split("To fix it: ", 1)[1].strip()
    subprocess.run(["/bin/sh", "-c", fix], check=True, timeout=TIMEOUT)
    again = run_with(cli, config, folder, "login", "corp", "--no-browser")
    assert again.returncode == UNAVAILABLE and "plugin" not in again.stderr, again.stderr


def test_login_names_the_flows_a_plugin_has_and_says_when_it_has_none(cli, tmp_path, ctest_variants):
    config = tmp_path / "flows.json"
    config.write_text(json.dumps({"profiles": {
        "none": {"plugin": "noflows", "settings": {"server": "http://127.0.0.1:9"}},
        "some": {"plugin": "ctest", "settings": {"server": "http://127.0.0.1:9"}}}}))
    folder = tmp_path / "flow-plugins"
    ctest_variants.install(folder, "noflows", "-DCTEST_NO_FLOWS")
    ctest_variants.install(folder, "ctest")
    done = run_with(cli, config, folder, "login", "none", "--no-browser")
    assert done.returncode == FAILED
    assert done.stderr.splitlines() == [
        'error: The noflows plugin does not support the "browser" flow; it declares no sign-in flow at all (its describe '
        'lists no "flows"), so it cannot sign anyone in.'], done.stderr
    # A plugin with flows but no device flow: they are named, and there is no --device hint.
    done = run_with(cli, config, folder, "login", "some", "--device")
    assert done.returncode == FAILED
    assert done.stderr.splitlines() == [
        'error: The ctest plugin does not support the "device" flow (it supports: external, session).'], done.stderr


def test_a_configuration_file_that_cannot_be_used_exits_78_naming_the_file_and_the_problem(cli, tmp_path):
    config = cli.root / "config" / "authbridge" / "config.json"    # the default one ($XDG_CONFIG_HOME)
    config.write_text('{"profiles": {"dot": {"plugin": "oidc",}}}')  # a trailing comma
    for argv in (["status"], ["login", "dot", "--no-browser"], ["token", "dot"], ["logout", "dot"]):
        done = cli.run(*argv)
        assert done.returncode == CONFIG, f"{argv}: {done.returncode}\n{done.stdout}{done.stderr}"
        assert done.stdout == "", "no \"No profiles are configured\" after it"
        first, second = done.stderr.splitlines()
        assert first.startswith(f"error: configuration file {config}: not valid JSON: "), first
        assert re.search(r"\(line 1, column \d+\)$", first), first
        assert second == "Fix the file (or name another with --config FILE); nothing was changed."
    # Valid JSON of the wrong shape, and --config naming no file: the same.
    config.write_text('{"profiles": ["dot"]}')
    done = cli.run("status")
    assert done.returncode == CONFIG
    assert done.stderr.startswith(f'error: configuration file {config}: "profiles" must be an object'), done.stderr
    missing = tmp_path / "nowhere.json"
    done = cli.run("status", "--config", str(missing))
    assert done.returncode == CONFIG
    assert done.stderr.startswith(f"error: configuration file {missing}: cannot read the file (No such file or directory)")
    # No configuration file at the default place is no error: no profiles.
    config.unlink()
    done = cli.run("status")
    assert done.returncode == 0 and done.stdout.startswith("No profiles are configured"), done.stdout + done.stderr
    # The exit code is in the help.
    helped = authbridge("--help")
    assert re.search(r"\b78 the\s+configuration\s+file", helped.stdout), helped.stdout


def test_unknown_keys_in_the_configuration_file_are_warnings_naming_the_file_and_the_key(cli):
    config = cli.root / "config" / "authbridge" / "config.json"
    data = json.loads(config.read_text())
    data["profile"] = {}                                            # misspelt "profiles"
    data["profiles"]["dot"]["setings"] = {"scopes": ["openid"]}     # misspelt "settings"
    config.write_text(json.dumps(data))
    done = cli.run("status", "dot")
    assert done.returncode == NOT_SIGNED_IN, done.stderr
    warnings = [line for line in done.stderr.splitlines() if line.startswith("warning: ")]
    assert warnings == [
        f'warning: configuration file {config}: unknown key "profile" (ignored; the file\'s keys are "profiles" and "gitCredential")',
        f'warning: configuration file {config}: profile "dot": unknown key "setings" (ignored; a profile has "plugin", '
        '"settings" and "gitUsername")'], done.stderr


def test_serve_reports_a_configuration_file_it_cannot_use_in_initialize_and_serves_on(start_host, oidc_plugin_dir):
    host = start_host([oidc_plugin_dir], config_text='{"profiles": {"corp": {"plugin": "oidc",}}}')
    config = host.workdir / "config.json"
    [warning] = host.init_result["warnings"]
    assert warning.startswith(f"configuration file {config}: not valid JSON: ") and "(line 1, column" in warning
    assert warning.endswith("; none of its profiles are loaded"), warning
    assert host.init_result["profiles"] == []
    # The frontend learnt it, and may configure profiles itself: the host serves on.
    assert host.result("configureProfile", {"name": "corp", "plugin": "oidc", "settings": {
        "clientId": "x", "authorizationEndpoint": "http://127.0.0.1:9/a", "tokenEndpoint": "http://127.0.0.1:9/t"}})
    unknown = start_host([oidc_plugin_dir], config_text=json.dumps({"profiles": {}, "profils": {}}))
    assert unknown.init_result["warnings"] == [
        f'configuration file {unknown.workdir / "config.json"}: unknown key "profils" (ignored; the file\'s keys are '
        '"profiles" and "gitCredential")']


def test_logout_warns_when_the_provider_cannot_revoke(cli, dot):
    assert cli.run("login", "norevoke").returncode == 0
    logout = cli.run("logout", "norevoke")
    assert logout.returncode == 0, logout.stderr
    assert logout.stdout.startswith("✓ Signed out of norevoke")
    warnings = [line for line in logout.stderr.splitlines() if line.startswith("warning: could not revoke ")]
    assert {line.split()[4].rstrip(":") for line in warnings} == {"refresh_token", "access_token"}, logout.stderr
    # Forgotten here all the same.
    assert cli.run("token", "norevoke").returncode == NOT_SIGNED_IN


def test_plugins_lists_loaded_and_refused_plugins_with_reasons(cli, tmp_path):
    folder = copy_plugins(tmp_path / "some-plugins", bundled_files("oidc"), cli.plugins)
    careless = folder / "careless.json"
    careless.write_text(json.dumps({"id": "careless", "version": "1.0.0", "abi": "1.0",
                                    "library": "libauthbridge-careless.so", "description": "writable by anyone"}))
    careless.chmod(0o666)
    done = authbridge("plugins", "--no-default-plugins", "--plugins", str(folder), env=cli.env)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    # A --plugins folder is the user's: its plugins run isolated, and the listing says so.
    assert any(re.fullmatch(rf"loaded +oidc +1\.0\.0 +{re.escape(str(folder))}/libauthbridge-oidc\.so +\(isolated\)", line)
               for line in lines), done.stdout
    refused = [line for line in lines if line.startswith("refused")]
    assert len(refused) == 1 and re.match(r"refused +careless +- +insecurePermissions: .*careless\.json", refused[0]), done.stdout
    # Aligned columns under a header, as gh and kubectl print tables: each column starts at one place.
    assert lines[0].split() == ["STATE", "PLUGIN", "VERSION", "PATH", "OR", "REASON"], done.stdout
    for column in ("PLUGIN", "VERSION", "PATH"):
        start = lines[0].index(column)
        assert all(line[start - 2:start] == "  " and line[start] != " " for line in lines[1:]), (column, done.stdout)
    assert "666" in refused[0], "the reason says what is wrong"
    as_json = json.loads(authbridge("plugins", "--json", "--no-default-plugins", "--plugins", str(folder), env=cli.env).stdout)
    assert {entry["id"]: entry["status"] for entry in as_json} == {"oidc": "loaded", "careless": "refused"}
    empty = tmp_path / "no-plugins"
    empty.mkdir(mode=0o755)
    none = authbridge("plugins", "--no-default-plugins", "--plugins", str(empty), env=cli.env)
    assert none.returncode == 0 and none.stdout.strip() == f"No plugins found in: {empty}"


def test_json_output_is_the_documented_shapes_on_stdout_and_failures_go_to_stderr(cli, dot):
    # status --json: a SignInStatus per account, or per profile not signed in; a profile that
    # could not be checked at all has state "error" (or "offline") and a message.
    assert cli.run("login", "dot").returncode == 0
    status = cli.run("status", "--json")
    assert status.returncode == 0, status.stderr
    rows = json.loads(status.stdout)
    by_profile = {row["provider"]: row for row in rows}
    for name in ("dot", "tv", "norevoke"):
        assert not schema_problems(spec().shape("SignInStatus"), by_profile[name]), by_profile[name]
    assert by_profile["dot"]["state"] == "signedIn" and by_profile["tv"]["state"] == "notSignedIn"
    assert by_profile["ghost"]["state"] == "error" and by_profile["ghost"]["message"].startswith('Profile "ghost" uses plugin')
    assert by_profile["down"]["state"] == "offline" and by_profile["down"]["message"]
    for row in (by_profile["ghost"], by_profile["down"]):
        assert set(row) == {"provider", "state", "account", "expiresAt", "reason", "message"}, row

    # token --json: getAccessToken's AccessTokenResult, the token DOT issued in it.
    token = cli.run("token", "dot", "--json")
    assert token.returncode == 0 and token.stderr == ""
    result = json.loads(token.stdout)
    assert not schema_problems(spec().shape("AccessTokenResult"), result), result
    assert dot.is_issued(result["accessToken"]) and result["tokenType"] == "Bearer"
    assert result["headers"] == {"Authorization": f"Bearer {result['accessToken']}"}

    # plugins --json: initialize's PluginStatus entries.
    plugins = json.loads(cli.run("plugins", "--json").stdout)
    for entry in plugins:
        assert not schema_problems(spec().shape("PluginStatus"), entry), entry
    assert [entry["id"] for entry in plugins] == ["oidc"]

    # A failure: nothing on stdout (no half JSON), one line on stderr, the exit code.
    for argv, code in ((["token", "tv", "--json"], NOT_SIGNED_IN), (["token", "down", "--json"], UNAVAILABLE),
                       (["token", "nope", "--json"], FAILED)):
        done = cli.run(*argv)
        assert done.returncode == code and done.stdout == "", (argv, done.returncode, done.stdout)
        assert done.stderr.startswith("error: ") and len(done.stderr.splitlines()) == 1, (argv, done.stderr)
    # status answers for a profile not signed in (its state is the answer), with exit 2.
    done = cli.run("status", "tv", "--json")
    assert done.returncode == NOT_SIGNED_IN and [row["state"] for row in json.loads(done.stdout)] == ["notSignedIn"]


def test_status_storage_says_where_the_vault_key_is(cli, dot, tmp_path):
    from test_keyring import KeyringSession
    keyring = KeyringSession(tmp_path / "keyring")
    try:
        cli.env.update({k: keyring.env[k] for k in ("DBUS_SESSION_BUS_ADDRESS", "XDG_RUNTIME_DIR")})
        assert cli.run("login", "dot").returncode == 0
        status = cli.run("status", "dot")
        assert status.returncode == 0, status.stderr
        assert status.stdout.splitlines()[1].endswith("encrypted file (key in keyring)"), status.stdout
        assert "vault-key" in keyring.search("application", "authbridge", "kind", "vault-key")
        as_json = json.loads(cli.run("status", "--json", "dot").stdout)
        assert as_json[0]["storage"] == {"backend": "encrypted-file", "protection": "keyring"}, "--json keeps the spec's StorageInfo"
    finally:
        keyring.stop()


# ── On a terminal ──────────────────────────────────────────────────────────────────────────────

def test_bare_authbridge_on_a_terminal_prints_help(cli):
    shown = cli.on_terminal()
    assert shown.finish() == 0
    assert "USAGE: authbridge" in shown.text and "SUBCOMMANDS:" in shown.text
    for command in ("serve", "login", "status", "token", "logout", "plugins"):
        assert re.search(rf"^\s+{command}\b", shown.text, re.M), command
    assert "Exit codes:" in shown.text and "sign-in not completed in time" in shown.text


def test_colours_on_a_terminal_only_and_never_with_no_color(cli):
    coloured = cli.on_terminal("status")
    assert coloured.finish() == 0
    assert "\x1b[1mPROFILE" in coloured.text, "a bold header"
    assert re.search(r"\x1b\[31mnotSignedIn", coloured.text), "states in colour"
    plain = cli.on_terminal("status", env={"NO_COLOR": "1"})
    assert plain.finish() == 0
    assert "PROFILE" in plain.text and "\x1b[" not in plain.text
    piped = cli.run("status")
    assert "\x1b[" not in piped.stdout + piped.stderr, "not on a terminal: no colours"


def test_ctrl_c_during_login_cancels_it_and_leaves_nothing_behind(cli, dot):
    login = cli.on_terminal("login", "dot", "--no-browser")
    url = login.wait_for(AUTHORIZE_URL.pattern).group()
    login.wait_for(r"Waiting for the browser to come back… \(Ctrl-C cancels\)")
    redirect = urllib.parse.parse_qs(urllib.parse.urlsplit(url).query)["redirect_uri"][0]
    login.type(b"\x03")                 # Ctrl-C: the terminal sends SIGINT to the login
    assert login.finish() == CANCELLED, login.text
    assert re.search(r"error:.*cancelled", login.text, re.I), login.text
    # Nothing half-done: the loopback listener is closed, and no session was stored.
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(redirect + "?code=late&state=late", timeout=5)
    assert cli.run("status", "dot").returncode == NOT_SIGNED_IN
    vault = cli.root / "data" / "authbridge" / "vault"
    assert not session_records(vault)


COMMANDS = ("serve", "agent", "login", "status", "token", "exchange", "logout", "plugins", "git-credential", "exec-credential",
            "exec")


def option_entries(help_text: str) -> dict[str, str]:
    """`--name <VALUE>` → its whole help paragraph, from ArgumentParser's help."""
    entries: dict[str, str] = {}
    name = None
    for line in help_text.splitlines():
        if match := re.match(r"  (--[a-z-]+(?:/--[a-z-]+)?(?: <[^>]+>)?(?: \.\.\.)?)(?:\s{2,}(.*))?$", line):
            name = match.group(1)
            entries[name] = match.group(2) or ""
        elif name and line.startswith("      "):
            entries[name] += " " + line.strip()
        else:
            name = None
    return entries


def test_help_groups_host_options_says_each_default_once_and_names_each_value_alike():
    placeholders: dict[str, set[str]] = {}
    for command in COMMANDS:
        helped = authbridge(command, "--help").stdout
        every = authbridge(command, "--help-hidden").stdout
        assert "HOST OPTIONS:" in helped, command
        host = helped.split("HOST OPTIONS:")[1].split("\n\n")[0]
        assert "--config <FILE>" in host and "--vault <BACKEND>" in host, command
        # Before: 14 host options in every command's help. The rare ones: --help-hidden (serve
        # and agent, the host itself, show them all).
        shown = len(re.findall(r"^  --", host, re.M))
        assert shown <= 6 or command in ("serve", "agent"), (command, host)
        for rare in ("--plugin-memory-limit", "--vault-key-file", "--require-secure-storage"):
            assert rare in every, (command, rare)
        for option, text in option_entries(every).items():
            # Before: "(default 1024, at least 256). (default: 1024)".
            assert len(re.findall(r"\bdefault\b", text, re.I)) <= 1, (command, option, text)
            if " <" in option:
                flag, value = option.split(" ", 1)
                placeholders.setdefault(flag, set()).add(value)
    # Before: --timeout <timeout> in status, <SECONDS> in login.
    assert {flag: values for flag, values in placeholders.items() if len(values) > 1} == {}
    assert placeholders["--timeout"] == {"<SECONDS>"}


def test_bare_authbridge_serves_a_pipe_and_every_command_has_help(tmp_path):
    # Without a terminal on stdin it is the bridge: an initialize on stdin gets a frame back.
    done = authbridge("--no-default-plugins", input='{"jsonrpc":"2.0","id":1,"method":"initialize",'
                      '"params":{"protocolVersion":"1.0"}}\n',
                      env={**os.environ, "XDG_DATA_HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path)})
    assert json.loads(done.stdout.splitlines()[0])["id"] == 1
    for command in ("login", "status", "token", "logout", "serve", "plugins"):
        helped = authbridge(command, "--help")
        assert helped.returncode == 0 and "USAGE: authbridge " + command in helped.stdout


class HostileProvider:
    """A device-flow provider whose words carry terminal control sequences: a user code that
    retitles the window and clears the screen, and a refusal whose description does more."""

    HOSTILE = "\x1b]0;owned\x07\x1b[2J\x1b[31mRED\x1b[0m\u009b1m\x07\r\nerror: forged line\x7f"

    def __init__(self) -> None:
        import http.server

        hostile = self.HOSTILE

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - the http.server API
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.path == "/device":
                    status, body = 200, {"device_code": "dc-1", "user_code": "CODE-" + hostile, "expires_in": 60,
                                         "verification_uri": "https://example.com/device", "interval": 1}
                else:
                    status, body = 400, {"error": "invalid_client", "error_description": "denied " + hostile}
                http_answer.answer_json(self, status, body)

            def log_message(self, *args) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_provider_text_is_printed_without_terminal_control_characters(cli):
    # Before: the user code and the provider's error_description reached the terminal as sent:
    # escape sequences could retitle the window, clear the screen or forge a line.
    provider = HostileProvider()
    try:
        config = cli.root / "config" / "authbridge" / "config.json"
        profiles = json.loads(config.read_text())
        profiles["profiles"]["hostile"] = {"plugin": "oidc", "settings": {
            "clientId": "x", "tokenEndpoint": f"{provider.base}/token", "deviceAuthorizationEndpoint": f"{provider.base}/device"}}
        config.write_text(json.dumps(profiles))
        for terminal in (False, True):
            if terminal:
                session = cli.on_terminal("login", "hostile", "--device", "--timeout", "30")
                session.finish()
                shown = session.text
            else:
                login = cli.run("login", "hostile", "--device", "--timeout", "30")
                shown = login.stdout + login.stderr
            assert "CODE-" in shown and "denied" in shown, shown
            visible = shown.replace("\x1b[0m", "").replace("\r\n", "\n")
            for style in ("\x1b[1m", "\x1b[2m", "\x1b[31m", "\x1b[36m"):   # the program's own styles, on a terminal only
                visible = visible.replace(style, "")
            for control in ("\x1b", "\x07", "\x9b", "\x7f", "\r"):
                assert control not in visible, f"{control!r} reached the {'terminal' if terminal else 'pipe'}: {shown!r}"
            assert "owned" not in visible, "a sequence's string goes with it"
            assert not any(line.startswith("error: forged line") for line in visible.splitlines()), visible
    finally:
        provider.stop()


def test_a_changed_client_id_ends_the_session_issued_to_the_old_client(cli, dot):
    # Issue 27 §3: a session belongs to the client it was issued to. Each command is a process of
    # its own: the session read from the vault is checked against the profile as the file says now.
    assert cli.run("login", "dot").returncode == 0
    config = cli.root / "config" / "authbridge" / "config.json"
    document = json.loads(config.read_text())
    document["profiles"]["dot"]["settings"]["clientId"] = "authbridge-device"   # another client DOT knows
    config.write_text(json.dumps(document))

    token = cli.run("token", "dot")
    assert token.returncode == NOT_SIGNED_IN and token.stdout == "", token.stdout
    assert "client id changed" in token.stderr and "Sign in again" in token.stderr, token.stderr
    status = cli.run("status", "--json", "dot")
    assert status.returncode == NOT_SIGNED_IN
    [entry] = json.loads(status.stdout)
    assert entry["state"] == "notSignedIn", entry
    # Back to the first client: the session is gone for good (it was discarded, not hidden).
    document["profiles"]["dot"]["settings"]["clientId"] = "authbridge-test"
    config.write_text(json.dumps(document))
    assert cli.run("status", "dot").returncode == NOT_SIGNED_IN
