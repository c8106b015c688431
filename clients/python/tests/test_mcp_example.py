"""Examples/mcp_client.py end to end: signed in by the MCP server's URL alone (the browser flow),
against the kit's MCP server and the real host. The browser is `$BROWSER`, a script playing the
kit's user: it follows the sign-in page to its redirect, and that to the host's loopback listener.
The first run signs in and steps up for admin_echo (two pages opened); the second finds the
session kept. Every frame it exchanges with the host is recorded by Tests/tools/frame_tap.py and
validated."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from conftest import CLIENT_README, REPO, code_blocks

EXAMPLE = REPO / "Examples" / "mcp_client.py"
TIMEOUT = 120

BROWSER = textwrap.dedent("""\
    #!{python}
    import sys, urllib.error, urllib.request
    class Stay(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args, **kwargs):
            return None
    with open({log!r}, "a") as log:
        log.write("opened\\n")
    try:
        urllib.request.build_opener(Stay).open(sys.argv[1], timeout=15)
        sys.exit("the sign-in page did not redirect")
    except urllib.error.HTTPError as answer:
        location = answer.headers["Location"]
    with urllib.request.urlopen(location, timeout=15) as done:   # the host's loopback listener
        sys.exit(0 if done.status == 200 else 1)
""")


def environment(tmp_path, frame_tap) -> dict[str, str]:
    """A new user's folders, the tap as the host, and the scripted browser (it logs each page to opened.log)."""
    browser = tmp_path / "browser.py"
    browser.write_text(BROWSER.format(python=sys.executable, log=str(tmp_path / "opened.log")))
    browser.chmod(0o755)
    env = dict(os.environ, **frame_tap.env, XDG_CONFIG_HOME=str(tmp_path / "config"),
               XDG_DATA_HOME=str(tmp_path / "data"), HOME=str(tmp_path), BROWSER=str(browser),
               PYTHONPATH=str(REPO / "clients" / "python"))
    env.pop("DBUS_SESSION_BUS_ADDRESS", None)
    env.pop("AUTHBRIDGE_VAULT_KEY", None)
    return env


def test_the_readmes_mcp_program_lists_the_tools(tmp_path, frame_tap):
    from authbridge_testkit.mcp_server import McpServer
    [program] = [block for block in code_blocks(CLIENT_README.read_text(encoding="utf-8"), "python") if "mcp" in block]
    placeholder = 'URL = "https://mcp.example.com/mcp"\n'
    assert placeholder in program
    server = McpServer().start()
    try:
        (tmp_path / "mcp_readme.py").write_text(program.replace(placeholder, f"URL = {server.url!r}\n"))
        done = subprocess.run([sys.executable, "mcp_readme.py"], env=environment(tmp_path, frame_tap), cwd=tmp_path,
                              capture_output=True, text=True, timeout=TIMEOUT)
    finally:
        server.stop()
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout == "['echo', 'whoami', 'admin_echo']\n", done.stdout
    assert (tmp_path / "opened.log").read_text().splitlines() == ["opened"]


def test_the_example_signs_in_by_the_url_steps_up_and_keeps_the_session(tmp_path, frame_tap):
    from authbridge_testkit.mcp_server import McpServer
    opened = tmp_path / "opened.log"
    env = environment(tmp_path, frame_tap)
    server = McpServer().start()
    try:
        def run(*arguments: str) -> str:
            done = subprocess.run([sys.executable, str(EXAMPLE), server.url, *arguments], env=env, cwd=tmp_path,
                                  capture_output=True, text=True, timeout=TIMEOUT)
            assert done.returncode == 0, done.stdout + done.stderr
            assert "code=" not in done.stdout + done.stderr and "state=" not in done.stdout + done.stderr
            return done.stdout

        first = run("--tool", "admin_echo", "--arg", "message=hello")
        assert first.splitlines() == ["tools: admin_echo, echo, whoami", "admin_echo: admin echo: hello"], first
        assert opened.read_text().splitlines() == ["opened", "opened"], "a sign-in, and a step-up"
        assert len(server.clients) == 1

        second = run("--arg", "message=again")
        assert second.splitlines() == ["tools: admin_echo, echo, whoami", "echo: echo: again"], second
        assert len(opened.read_text().splitlines()) == 2, "no sign-in the second time"
        assert len(server.clients) == 1, "the registration was kept"
    finally:
        server.stop()
    methods = frame_tap.sent_methods()
    assert methods.count("requestOAuthTokens") == 2 and methods.count("configureProfile") == 2, methods
