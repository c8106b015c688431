"""`make dev-server` and the README's terminal quick start, as a new user follows them.

`make dev-server` runs the bundled django-oauth-toolkit until Ctrl-C and prints the exports the
quick starts read; the terminal quick start (README.md, "From a terminal") then runs as written
in a shell with only those exports and a fresh home, and then its `--device` sign-in, with the
same config.json. The browser is a stand-in `xdg-open` that plays the user at DOT; the device is
the test kit, typing the code at DOT's verification page.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path

from conftest import BUILD_DIR, HOST_BIN, REPO, TIMEOUT
from authbridge_testkit.dot_auth import DotAuthServer

FAKE_BROWSER = """#!{python}
import sys, urllib.request
sys.path.insert(0, {support!r})
from authbridge_testkit.dot_auth import DotAuthServer
urllib.request.urlopen(DotAuthServer.browse(None, sys.argv[1]), timeout=30).read()
"""

EXPORT = re.compile(r'^  export (\w+)="([^"]*)"$', re.M)


class DevServer:
    """`make dev-server` in its own process group (so Ctrl-C reaches make and the server, as in a terminal)."""

    def __init__(self, state: Path) -> None:
        # -o: the venv is taken as it is (this test runs in it); DEV_PORT=0: any free port.
        argv = ["make", "-s", "--no-print-directory", "-o", ".venv/.ready", "dev-server", "DEV_PORT=0",
                f"DEV_STATE={state}", f"VPY={sys.executable}"]
        self.process = subprocess.Popen(argv, cwd=REPO, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, text=True, start_new_session=True,
                                        # As a terminal starts it: Ctrl-C not ignored, even when this suite
                                        # runs in the background (where the shell ignores SIGINT for it).
                                        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        self.banner = ""
        ready = threading.Event()

        def read() -> None:
            for line in self.process.stdout:
                self.banner += line
                if line.startswith("Sign in as"):
                    ready.set()
            ready.set()
        threading.Thread(target=read, daemon=True).start()
        if not ready.wait(TIMEOUT * 12) or "Sign in as" not in self.banner:  # the first start migrates a database
            self.stop()
            raise AssertionError(f"make dev-server printed no banner:\n{self.banner}\n{self.process.stderr.read()}")
        # The exports a quick start reads, and apart from them those for this checkout's build.
        quick_start, _, self.checkout_block = self.banner.partition("Only to run this checkout's build")
        self.exports = dict(EXPORT.findall(quick_start))
        self.checkout_exports = dict(EXPORT.findall(self.checkout_block))

    def stop(self) -> int:
        """Ctrl-C, as typed in its terminal; the status make exits with."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGINT)
        try:
            return self.process.wait(timeout=TIMEOUT * 3)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            # Not `from None`: when stop() runs in a `finally`, the test's own failure stays in the chain.
            raise AssertionError(f"make dev-server did not stop on Ctrl-C:\n{self.process.stderr.read()}")


def terminal_quick_start() -> str:
    readme = (REPO / "README.md").read_text()
    section = readme[readme.index("### From a terminal"):]
    return re.search(r"```sh\n(.*?)```", section, re.S).group(1)


def device_command() -> str:
    """The terminal quick start's device sign-in, as the README words it."""
    readme = (REPO / "README.md").read_text()
    section = readme[readme.index("### From a terminal"):readme.index("### From Python")]
    return re.search(r"`(authbridge login corp --device)`", section).group(1)


def test_make_dev_server_and_the_terminal_quick_start_as_written(tmp_path):
    server = DevServer(tmp_path / "dev-state")      # a folder that does not exist yet
    try:
        exports = server.exports
        assert set(exports) == {"ISSUER", "CLIENT_ID", "USERINFO_URL"}, "only what a quick start reads, nothing that replaces a host"
        base = re.fullmatch(r"(http://127\.0\.0\.1:\d+)/o", exports["ISSUER"]).group(1)
        assert exports["CLIENT_ID"] == "authbridge-test"
        assert exports["USERINFO_URL"] == f"{base}/o/userinfo/", "with its trailing slash"
        # The lines that would put the checkout's debug build before an installed authbridge come
        # apart, and say so.
        debug = REPO / ".build" / "debug"
        assert server.checkout_exports == {"AUTHBRIDGE": f"{debug}/authbridge", "PATH": f"{debug}:$PATH"}, server.banner
        assert "instead of an installed authbridge" in server.checkout_block.splitlines()[0], server.banner
        assert "ada, password lovelace-test" in server.banner and "Ctrl-C" in server.banner
        with urllib.request.urlopen(exports["ISSUER"] + "/.well-known/openid-configuration", timeout=TIMEOUT) as answer:
            discovery = json.load(answer)
        assert discovery["issuer"] == exports["ISSUER"] and discovery["userinfo_endpoint"] == exports["USERINFO_URL"]

        # The terminal quick start, pasted into a shell with the exports and a fresh home.
        home = tmp_path / "home"
        bin_dir = tmp_path / "bin"
        home.mkdir()
        bin_dir.mkdir()
        browser = bin_dir / "xdg-open"
        browser.write_text(FAKE_BROWSER.format(python=sys.executable, support=str(Path(__file__).resolve().parents[1] / "support")))
        browser.chmod(0o755)
        if not (HOST_BIN.parent / "plugins" / "oidc.json").exists():   # a host without plugins beside it
            user_plugins = home / ".local" / "share" / "authbridge" / "plugins"
            user_plugins.mkdir(parents=True, mode=0o755)
            for name in ("oidc.json", "libauthbridge-oidc.so"):
                (user_plugins / name).write_bytes((BUILD_DIR / "plugins" / name).read_bytes())
        # The exports, with the host under test (normally the same one) first on PATH.
        env = {"HOME": str(home), "PATH": f"{HOST_BIN.parent}:{bin_dir}:/usr/local/bin:/usr/bin:/bin",
               **{name: value for name, value in exports.items() if name != "PATH"}, "AUTHBRIDGE": str(HOST_BIN)}
        done = subprocess.run(["/bin/sh", "-e", "-c", terminal_quick_start()], env=env, cwd=home, capture_output=True,
                              text=True, timeout=TIMEOUT * 12, stdin=subprocess.DEVNULL)
        output = done.stdout + done.stderr
        assert done.returncode == 0, output
        lines = done.stdout.splitlines()
        # The account by name (the server sends email and preferred_username), its numeric sub beside it.
        assert re.fullmatch(r"✓ Signed in to corp as ada@example\.test \(\d+\)", lines[0]), done.stdout
        assert lines[1].split() == ["PROFILE", "ACCOUNT", "STATE", "EXPIRES", "STORAGE"]
        assert lines[2].startswith("corp ") and "signedIn" in lines[2] and lines[2].endswith("encrypted file (key file)")
        assert "ada@example.test" in lines[2], lines[2]
        userinfo = re.search(r"^(\{.*\})✓ Signed out of corp", done.stdout, re.M)   # curl prints no newline
        assert userinfo and json.loads(userinfo.group(1))["sub"], "curl got the userinfo with the token"
        assert "Open this URL in a browser to sign in:" in done.stderr
        with urllib.request.urlopen(f"{base}/test/secrets", timeout=TIMEOUT) as answer:
            secrets = [secret for secret in json.load(answer)["secrets"] if len(secret) >= 12]
        assert secrets and not [secret for secret in secrets if secret in output], "no code or token printed"

        # The device sign-in of the same quick start, with the same config.json: no profile to add
        # by hand (DOT's discovery names its device authorization endpoint; the client may use it).
        config_file = home / ".config" / "authbridge" / "config.json"
        written = config_file.read_text()
        login = subprocess.Popen(["/bin/sh", "-e", "-c", device_command()], env=env, cwd=home, text=True,
                                 stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        code = uri = None
        shown: list[str] = []
        for line in login.stderr:        # bounded: the login ends on its own timeout at worst
            shown.append(line)
            code = code or (re.search(r"one-time code: (\S+)", line) or [None, None])[1]
            uri = uri or (re.search(r"Then open (\S+) on any device", line) or [None, None])[1]
            if code and uri:
                break
        if not (code and uri):
            login.kill()
        assert code and uri and uri == f"{base}/o/device/", "".join(shown) + login.communicate(timeout=TIMEOUT)[1]
        assert f"typed at {uri} on any device" in server.banner, "the banner says where the code is typed"
        DotAuthServer.approve_device(None, code, uri)
        out, err = login.communicate(timeout=TIMEOUT * 3)
        assert login.returncode == 0 and re.fullmatch(r"✓ Signed in to corp as ada@example\.test \(\d+\)\n", out), out + err
        assert config_file.read_text() == written
    finally:
        server.stop()
    # Stopped: nothing answers there any more.
    try:
        urllib.request.urlopen(exports["ISSUER"] + "/.well-known/openid-configuration", timeout=5)
        raise AssertionError("the dev server still answers after Ctrl-C")
    except OSError:
        pass
