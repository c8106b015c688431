"""AuthBridge where git, kubectl and scripts already look for credentials: `git-credential` (a git
credential helper), `exec-credential` (a kubectl exec credential plugin) and `exec` (a command
with the token in its environment), each against the real tool and django-oauth-toolkit.

git 2.39 clones and pushes over smart HTTP from `git http-backend` behind a server that lets in
only a token DOT's userinfo accepts; kubectl runs `authbridge exec-credential` from a kubeconfig
against an https API server (a self-signed CA made here) that checks the bearer token the same
way. git never prompts (GIT_TERMINAL_PROMPT=0, a clean HOME and global configuration).
"""

from __future__ import annotations

import base64
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from authbridge_testkit import leak_scan
from authbridge_testkit.dot_auth import dot_fixture
from authbridge_testkit.tls import self_signed
from authbridge_testkit.token_gated import GitHTTPServer, KubeAPIServer, dot_accepts
from conftest import HOST_BIN, TIMEOUT
from test_cli import CLI, NOT_SIGNED_IN

dot = dot_fixture("module")
#: Access tokens of 8 s: long enough for two requests in a row, short enough to outlive.
short_dot = dot_fixture("module", access_lifetime=8)

KUBECTL = shutil.which("kubectl")


def exec_api_version() -> str:
    """The ExecCredential version this kubectl speaks: v1 from 1.22 on; before (Debian 12's
    kubernetes-client is 1.20), v1beta1, without interactiveMode."""
    done = subprocess.run([KUBECTL, "version", "--client", "-o", "json"], capture_output=True, text=True, timeout=TIMEOUT,
                          check=True)
    minor = int(re.match(r"\d+", json.loads(done.stdout)["clientVersion"]["minor"]).group())
    return "client.authentication.k8s.io/" + ("v1" if minor >= 22 else "v1beta1")


@pytest.fixture
def cli(tmp_path, oidc_plugin_dir, dot):
    runner = CLI(tmp_path, oidc_plugin_dir, dot)
    # `authbridge` on PATH, as a user has it after installing, and the name git runs for a helper
    # named without '!' (`git credential-authbridge`), which every install tree has beside it.
    (tmp_path / "bin" / "authbridge").symlink_to(HOST_BIN)
    (tmp_path / "bin" / "git-credential-authbridge").symlink_to(HOST_BIN)
    yield runner
    places = leak_scan.leaks("\n".join(runner.outputs), [])
    assert not places, f"a token was printed where none belongs: {places}"


def helper_command(cli: CLI, *extra: str, shell: bool = True) -> str:
    """The credential.helper value, as the README writes it: '!' + a shell command, or (`shell`
    False) the helper's name, which git runs as `git credential-authbridge git-credential …`."""
    return ("!" if shell else "") + "authbridge git-credential " + " ".join(shlex.quote(arg) for arg in [*cli.common, *extra])


class Git:
    """The real git, with a clean HOME and global configuration, never prompting."""

    def __init__(self, cli: CLI) -> None:
        self.cli = cli
        self.home = cli.root / "git-home"
        self.home.mkdir()
        self.config = self.home / ".gitconfig"
        self.env = {**cli.env, "HOME": str(self.home), "GIT_CONFIG_GLOBAL": str(self.config), "GIT_CONFIG_NOSYSTEM": "1",
                    "GIT_TERMINAL_PROMPT": "0", "GIT_AUTHOR_NAME": "Ada", "GIT_AUTHOR_EMAIL": "ada@example.test",
                    "GIT_COMMITTER_NAME": "Ada", "GIT_COMMITTER_EMAIL": "ada@example.test"}
        for name in ("GIT_ASKPASS", "SSH_ASKPASS", "GIT_DIR", "GIT_WORK_TREE"):
            self.env.pop(name, None)

    def __call__(self, *args: str, cwd: Path | None = None, input: str | None = None) -> subprocess.CompletedProcess:
        """`git ARGS…`; its output goes to the leak scan but for `git credential fill`'s answer."""
        done = subprocess.run(["git", *args], cwd=cwd, env=self.env, capture_output=True, text=True, input=input,
                              timeout=TIMEOUT * 6)
        self.cli.outputs += [done.stderr] if "fill" in args else [done.stdout, done.stderr]
        return done

    def configure(self, key: str, value: str) -> None:
        assert self("config", "--global", "--add", key, value).returncode == 0


def credential(cli: CLI, operation: str, lines: dict[str, str], *extra: str) -> subprocess.CompletedProcess:
    """`authbridge git-credential … OPERATION` with git's request on stdin, as git runs it."""
    request = "".join(f"{key}={value}\n" for key, value in lines.items()) + "\n"
    done = subprocess.run([str(HOST_BIN), "git-credential", *cli.common, *extra, operation], input=request, env=cli.env,
                          capture_output=True, text=True, timeout=TIMEOUT * 6)
    cli.outputs += [done.stderr] + ([] if operation == "get" else [done.stdout])
    return done


def answer(done: subprocess.CompletedProcess) -> dict[str, str]:
    return dict(line.split("=", 1) for line in done.stdout.splitlines())


def refreshes(dot) -> int:
    return dot.snapshot()["refreshes"]


def current_token(cli: CLI) -> str:
    done = cli.run("token", "dot")
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.fixture
def git_server(tmp_path, dot):
    server = GitHTTPServer(tmp_path / "served", dot.base).start()
    yield server
    server.stop()


def signed_in_clone(cli: CLI, git_server) -> tuple[Git, Path]:
    """git with the helper for the server, the profile signed in, and a clone of a new repository."""
    git_server.create_repository("app.git")
    git = Git(cli)
    git.configure(f"credential.{git_server.url}.helper", helper_command(cli, "--profile", "dot"))
    assert cli.run("login", "dot").returncode == 0
    clone = cli.root / "app"
    assert git("clone", f"{git_server.url}/app.git", str(clone)).returncode == 0
    return git, clone


# ── git ────────────────────────────────────────────────────────────────────────────────────────

def test_git_credential_authbridge_is_the_helper_by_its_name_in_gits_usual_form(cli, dot, git_server):
    # Before: `credential.helper 'authbridge --profile corp'` made git run
    # `git-credential-authbridge --profile corp get`, a bare symlink to the host: "Error: Unknown
    # option '--profile'", serve's usage, then "fatal: could not read Username".
    git_server.create_repository("app.git")
    git = Git(cli)
    git.configure(f"credential.{git_server.url}.helper",
                  "authbridge " + " ".join(shlex.quote(arg) for arg in [*cli.common, "--profile", "dot"]))
    assert cli.run("login", "dot").returncode == 0
    filled = git("credential", "fill", input=f"url={git_server.url}/app.git\n\n")
    assert filled.returncode == 0, filled.stderr
    assert dot.is_issued(answer(filled)["password"]) and answer(filled)["username"] == "oauth2"
    assert git("clone", f"{git_server.url}/app.git", str(cli.root / "app")).returncode == 0
    assert len(git_server.seen.accepted) > 0

    # A usage error names the helper's form, not serve's.
    helper = cli.root / "bin" / "git-credential-authbridge"
    wrong = subprocess.run([str(helper), "--profil", "dot", "get"], input="protocol=https\nhost=x\n\n", env=cli.env,
                           capture_output=True, text=True, timeout=TIMEOUT)
    cli.outputs += [wrong.stdout, wrong.stderr]
    assert wrong.returncode == 64 and wrong.stdout == ""
    assert "Error: Unknown option '--profil'" in wrong.stderr
    assert "Usage: git-credential-authbridge [--profile <PROFILE>] [<options>] get|store|erase" in wrong.stderr, wrong.stderr
    assert "authbridge serve" not in wrong.stderr
    # Under that name, no arguments is no bridge on stdin either (git always names an operation).
    bare = subprocess.run([str(helper)], input="", env=cli.env, capture_output=True, text=True, timeout=TIMEOUT)
    assert bare.returncode == 64 and "git-credential-authbridge [--profile <PROFILE>]" in bare.stderr and bare.stdout == "", bare.stderr
    assert "USAGE: authbridge" not in bare.stderr and "authbridge serve" not in bare.stderr
    assert subprocess.run([str(helper), "--version"], env=cli.env, capture_output=True, text=True,
                          timeout=TIMEOUT).stdout.strip() == authbridge_version(cli)


def authbridge_version(cli: CLI) -> str:
    return subprocess.run([str(HOST_BIN), "--version"], env=cli.env, capture_output=True, text=True, timeout=TIMEOUT).stdout.strip()


def test_git_clones_and_pushes_with_the_profiles_token_and_falls_through_when_not_signed_in(cli, dot, git_server):
    bare = git_server.create_repository("app.git")
    git = Git(cli)
    # Configured as a helper name, as issue 16 writes it (git prefixes `credential-`).
    git.configure(f"credential.{git_server.url}.helper", helper_command(cli, "--profile", "dot", shell=False))
    remote = f"{git_server.url}/app.git"

    # Not signed in: nothing for git, a message on stderr, and git goes on to its next helper
    # (none here, and no prompt: it fails at once).
    refused = git("clone", remote, str(cli.root / "nope"))
    assert refused.returncode != 0
    assert 'authbridge: Profile "dot" is not signed in. Sign in with: authbridge login dot' in refused.stderr, refused.stderr
    assert "terminal prompts disabled" in refused.stderr, "git asked on: the helper gave it nothing"
    assert git_server.seen.accepted == [] and git_server.seen.refused == []

    assert cli.run("login", "dot").returncode == 0
    clone = cli.root / "app"
    cloned = git("clone", remote, str(clone))
    assert cloned.returncode == 0, cloned.stderr
    assert (clone / "README").read_text() == "seed\n"
    (clone / "CHANGES").write_text("one change\n")
    assert git("add", "CHANGES", cwd=clone).returncode == 0
    assert git("commit", "-q", "-m", "a change", cwd=clone).returncode == 0
    pushed = git("push", "-q", "origin", "main", cwd=clone)
    assert pushed.returncode == 0, pushed.stderr
    assert pushed.stdout == "" and "authbridge" not in pushed.stderr, "quiet on success"
    served = subprocess.run(["git", "--git-dir", str(bare), "log", "--format=%s", "main"], capture_output=True, text=True,
                            timeout=TIMEOUT, check=True)
    assert served.stdout.splitlines() == ["a change", "seed"], "the push reached the server's repository"

    # Every request carried the session's token (one DOT accepts) and the default user name.
    token = current_token(cli)
    assert dot.is_issued(token)
    assert {user for user, _ in git_server.seen.accepted} == {"oauth2"}
    assert set(git_server.seen.tokens()) == {token}
    # Nothing was written for git: no credential file, nothing in git's configuration but the helper.
    assert not (git.home / ".git-credentials").exists()
    assert token not in git.config.read_text()


def test_a_token_ended_at_the_server_fails_git_cleanly_and_the_next_get_has_a_renewed_one(cli, dot, git_server):
    git, clone = signed_in_clone(cli, git_server)
    old = current_token(cli)
    before = refreshes(dot)

    dot.end_access_token(old)          # the server no longer takes it; its refresh token still works
    failed = git("fetch", cwd=clone)
    assert failed.returncode == 128, failed.stderr
    assert re.search(r"Authentication failed for '.*/app\.git/'", failed.stderr), failed.stderr
    assert "terminal prompts disabled" not in failed.stderr and "Username for" not in failed.stderr, "no prompt"
    assert git_server.seen.refused[-1][1] == old, "git sent the old token and the server refused it"
    # git's erase renewed the token at once: one refresh, the session kept (never a sign-out).
    assert refreshes(dot) == before + 1
    new = current_token(cli)
    assert new != old and dot_accepts(dot.base, new)
    assert cli.run("status", "dot").returncode == 0

    # The next git command gets the renewed token.
    (clone / "CHANGES").write_text("after renewal\n")
    assert git("add", "CHANGES", cwd=clone).returncode == 0
    assert git("commit", "-q", "-m", "after renewal", cwd=clone).returncode == 0
    pushed = git("push", "-q", "origin", "main", cwd=clone)
    assert pushed.returncode == 0, pushed.stderr
    assert git_server.seen.tokens()[-1] == new
    assert refreshes(dot) == before + 1, "the get found the renewed token: no second refresh"


def test_a_grant_revoked_at_the_server_fails_git_and_leaves_the_profile_signed_out_by_the_provider(cli, dot, git_server):
    git, clone = signed_in_clone(cli, git_server)

    dot.revoke(current_token(cli))     # RFC 7009: the refresh token goes with it
    failed = git("fetch", cwd=clone)
    assert failed.returncode == 128 and "Authentication failed" in failed.stderr, failed.stderr
    assert "could not be renewed" in failed.stderr, "erase says the renewal failed"
    # The provider refused the grant (a definitive answer): the session is over, and git is told so next time.
    again = git("fetch", cwd=clone)
    assert again.returncode == 128
    assert 'authbridge: Profile "dot" is not signed in.' in again.stderr, again.stderr


def test_erase_renews_only_the_token_git_saw_refused_and_store_keeps_nothing(cli, dot):
    assert cli.run("login", "dot").returncode == 0
    request = {"protocol": "http", "host": "127.0.0.1:9"}
    token = answer(credential(cli, "get", request, "--profile", "dot"))["password"]
    before = refreshes(dot)

    # A token that is no longer the session's (another process renewed it already): nothing to do.
    stale = credential(cli, "erase", {**request, "username": "oauth2", "password": "an-older-token-than-this-one"},
                       "--profile", "dot")
    assert stale.returncode == 0 and stale.stdout == "" and stale.stderr == ""
    assert refreshes(dot) == before and current_token(cli) == token

    # store is a no-op: what git hands it is not kept, and nothing changes.
    stored = credential(cli, "store", {**request, "username": "oauth2", "password": "something-git-would-keep"},
                        "--profile", "dot")
    assert stored.returncode == 0 and stored.stdout == "" and stored.stderr == ""
    assert answer(credential(cli, "get", request, "--profile", "dot"))["password"] == token

    # The session's own token refused: renewed, once, and quietly.
    erased = credential(cli, "erase", {**request, "username": "oauth2", "password": token}, "--profile", "dot")
    assert erased.returncode == 0 and erased.stdout == "" and erased.stderr == ""
    assert refreshes(dot) == before + 1
    assert answer(credential(cli, "get", request, "--profile", "dot"))["password"] != token

    # Unknown operations are ignored, as git asks of helpers.
    future = credential(cli, "capability", request, "--profile", "dot")
    assert future.returncode == 0 and future.stdout == "" and future.stderr == ""


def test_get_answers_user_name_token_and_expiry_and_only_over_a_secure_transport(cli, dot):
    assert cli.run("login", "dot").returncode == 0
    got = credential(cli, "get", {"protocol": "https", "host": "git.example.com"}, "--profile", "dot")
    assert got.returncode == 0 and got.stderr == ""
    fields = answer(got)
    assert list(fields) == ["username", "password", "password_expiry_utc"]
    assert fields["username"] == "oauth2" and dot.is_issued(fields["password"])
    assert 3000 < int(fields["password_expiry_utc"]) - time.time() <= 3600, "the token's expiry, in seconds since 1970 UTC"
    # The request's user name (https://alice@…) is kept; --username sets another.
    assert answer(credential(cli, "get", {"url": "https://alice@git.example.com/x.git"}, "--profile", "dot"))["username"] == "alice"
    assert answer(credential(cli, "get", {"protocol": "https", "host": "h"}, "--profile", "dot", "--username", "x-token"))[
        "username"] == "x-token"

    # No token over plain http to another host, nor to a protocol that is not HTTP.
    for request in ({"protocol": "http", "host": "git.example.com"}, {"protocol": "smtp", "host": "mail.example.com"}):
        refused = credential(cli, "get", request, "--profile", "dot")
        assert refused.returncode != 0 and refused.stdout == "", request
        assert "only over https (or http to a loopback address)" in refused.stderr, refused.stderr


def test_the_configuration_file_maps_url_prefixes_to_profiles_the_longest_first(cli, dot, git_server):
    config = cli.root / "config" / "authbridge" / "config.json"
    data = json.loads(config.read_text())
    # A second profile on the same server, for one path below it.
    data["profiles"]["team"] = {**data["profiles"]["dot"], "gitUsername": "team-bot"}
    data["gitCredential"] = {git_server.url: "dot", f"{git_server.url}/team": "team"}
    config.write_text(json.dumps(data))
    assert cli.run("login", "dot").returncode == 0
    git = Git(cli)
    git.configure("credential.helper", helper_command(cli))

    def fill(url: str, *config: str) -> subprocess.CompletedProcess:
        return git(*config, "credential", "fill", input=f"url={url}\n\n")

    # git sends no path by default: the host's profile answers.
    filled = fill(f"{git_server.url}/team/app.git")
    assert filled.returncode == 0, filled.stderr
    assert answer(filled)["username"] == "oauth2" and dot.is_issued(answer(filled)["password"])
    # With credential.useHttpPath, the longer prefix wins: profile team, its gitUsername, not signed in yet.
    unsigned = fill(f"{git_server.url}/team/app.git", "-c", "credential.useHttpPath=true")
    assert unsigned.returncode != 0 and 'Profile "team" is not signed in.' in unsigned.stderr, unsigned.stderr
    assert cli.run("login", "team").returncode == 0
    team = answer(fill(f"{git_server.url}/team/app.git", "-c", "credential.useHttpPath=true"))
    assert team["username"] == "team-bot" and dot.is_issued(team["password"])
    # A path prefix matches whole segments only: /teamwork is the host's.
    other = answer(fill(f"{git_server.url}/teamwork/app.git", "-c", "credential.useHttpPath=true"))
    assert other["username"] == "oauth2"
    # A URL no prefix matches is not ours: nothing said, git goes on (and cannot prompt).
    elsewhere = fill("https://git.example.org/x.git")
    assert elsewhere.returncode != 0 and "authbridge" not in elsewhere.stderr, elsewhere.stderr

    # Only paths are mapped for a host, and git sends none: the fix is named.
    data["gitCredential"] = {f"{git_server.url}/team": "team"}
    config.write_text(json.dumps(data))
    hint = fill(f"{git_server.url}/team/app.git")
    assert "git config credential.useHttpPath true" in hint.stderr, hint.stderr

    # A prefix that is not a URL: the file is named, as for every configuration problem.
    data["gitCredential"] = {"git.example.com": "dot"}
    config.write_text(json.dumps(data))
    broken = credential(cli, "get", {"protocol": "https", "host": "git.example.com"})
    assert broken.returncode == 78 and broken.stdout == ""
    assert f"configuration file {config}: \"gitCredential\" \"git.example.com\": not a URL prefix" in broken.stderr


#: Hosts git 2.39 hands a helper for `https://git.example.com%2f%40evil.example/x.git` and its
#: like (it decodes %-escapes in the host); each, joined into a URL, used to parse as git.example.com.
DECODED_HOSTS = {"git.example.com%2f%40evil.example": "git.example.com/@evil.example",
                 "git.example.com%23.evil.example": "git.example.com#.evil.example",
                 "git.example.com%3f.evil.example": "git.example.com?.evil.example",
                 "evil.example%40git.example.com": "evil.example@git.example.com"}


def test_a_host_that_is_not_a_host_name_gets_nothing(cli, dot):
    config = cli.root / "config" / "authbridge" / "config.json"
    data = json.loads(config.read_text())
    data["gitCredential"] = {"https://git.example.com": "dot"}
    config.write_text(json.dumps(data))
    assert cli.run("login", "dot").returncode == 0
    git = Git(cli)
    git.configure("credential.helper", helper_command(cli))

    filled = git("credential", "fill", input="url=https://git.example.com/x.git\n\n")
    assert filled.returncode == 0 and dot.is_issued(answer(filled)["password"]), filled.stderr
    for escaped, host in DECODED_HOSTS.items():
        # The real git: what it hands the helper, and that it gets nothing back.
        refused = git("credential", "fill", input=f"url=https://{escaped}/x.git\n\n")
        assert refused.returncode != 0 and "password=" not in refused.stdout, (host, refused.stdout)
        assert f"git's request names https://{host}, which is not a host name or IP address" in refused.stderr, refused.stderr
        # Nor with the profile named: the host is refused before anything else.
        named = credential(cli, "get", {"protocol": "https", "host": host}, "--profile", "dot")
        assert named.returncode == 1 and named.stdout == "", (host, named.stdout)


def test_a_request_with_crlf_line_ends_is_answered_and_its_blank_line_ends_it(cli, dot):
    assert cli.run("login", "dot").returncode == 0
    request = b"protocol=https\r\nhost=git.example.com\r\nusername=ada\r\n\r\n"
    argv = [str(HOST_BIN), "git-credential", *cli.common, "--profile", "dot", "get"]
    done = subprocess.run(argv, input=request, env=cli.env, capture_output=True, timeout=TIMEOUT * 6)
    cli.outputs.append(done.stderr.decode())
    assert done.returncode == 0, done.stderr
    fields = dict(line.split("=", 1) for line in done.stdout.decode().splitlines())
    assert fields["username"] == "ada" and dot.is_issued(fields["password"])

    # A caller that keeps its end open after the request: the blank line ends it, not the end of input.
    with subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=cli.env) as helper:
        try:
            helper.stdin.write(request)
            helper.stdin.flush()
            status = helper.wait(TIMEOUT * 6)   # bounded: the old helper waited for an end of input that never came
        finally:
            helper.kill()
            stdout, stderr = helper.stdout.read().decode(), helper.stderr.read().decode()
            helper.stdin.close()
        cli.outputs.append(stderr)
        assert status == 0, stderr
        assert dict(line.split("=", 1) for line in stdout.splitlines())["password"] == fields["password"]


# ── kubectl ────────────────────────────────────────────────────────────────────────────────────

needs_kubectl = pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed (make deps-test installs Debian's "
                                                           "kubernetes-client)")


def kubeconfig(cli: CLI, server: KubeAPIServer, profile: str = "dot", mode: str = "IfAvailable",
               command: str = "authbridge") -> Path:
    """A kubeconfig whose user runs `authbridge exec-credential PROFILE` (kubectl writes YAML; JSON is YAML)."""
    path = cli.root / f"kubeconfig-{profile}-{mode}.json"
    ca = base64.b64encode(server.certificate.cert.read_bytes()).decode()
    version = exec_api_version()
    exec_section = {"apiVersion": version, "command": command, "args": ["exec-credential", profile, *cli.common],
                    "provideClusterInfo": False, **({"interactiveMode": mode} if version.endswith("/v1") else {})}
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "test", "preferences": {},
        "clusters": [{"name": "test", "cluster": {"server": server.url, "certificate-authority-data": ca}}],
        "contexts": [{"name": "test", "context": {"cluster": "test", "user": "ada"}}],
        "users": [{"name": "ada", "user": {"exec": exec_section}}]}))
    return path


def kubectl(cli: CLI, config: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**cli.env, "KUBECONFIG": str(config), "KUBECACHEDIR": str(cli.root / "kube-cache")}
    done = subprocess.run([KUBECTL, *args], env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL,
                          timeout=TIMEOUT * 6)
    cli.outputs += [done.stdout, done.stderr]
    return done


@pytest.fixture
def kube_server(tmp_path, dot):
    server = KubeAPIServer(dot.base, self_signed(tmp_path / "kube-tls")).start()
    yield server
    server.stop()


@needs_kubectl
def test_kubectl_runs_exec_credential_and_the_api_server_gets_the_token(cli, dot, kube_server):
    config = kubeconfig(cli, kube_server, mode="Never")
    assert cli.run("login", "dot").returncode == 0
    done = kubectl(cli, config, "get", "--raw", "/api")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["kind"] == "APIVersions"
    assert set(kube_server.seen.tokens()) == {current_token(cli)} and kube_server.seen.refused == []


@needs_kubectl
def test_kubectl_without_a_session_and_no_terminal_fails_clearly_and_starts_no_sign_in(cli, kube_server):
    done = kubectl(cli, kubeconfig(cli, kube_server), "get", "--raw", "/api")
    assert done.returncode != 0
    assert ('Profile "dot" is not signed in. Sign in with: authbridge login dot, then run kubectl again: it runs authbridge '
            "without a terminal, so no sign-in was started.") in done.stderr, done.stderr
    assert not cli.browser_calls.exists(), "no browser was opened"
    assert kube_server.seen.accepted == [] and kube_server.seen.refused == []


@needs_kubectl
def test_kubectl_keeps_the_token_until_its_expiry_then_runs_authbridge_again(tmp_path, oidc_plugin_dir, short_dot):
    cli = CLI(tmp_path, oidc_plugin_dir, short_dot)
    (tmp_path / "bin" / "authbridge").symlink_to(HOST_BIN)
    server = KubeAPIServer(short_dot.base, self_signed(tmp_path / "kube-tls")).start()
    proxy = None
    try:
        assert cli.run("login", "dot").returncode == 0
        # authbridge, counting how often kubectl runs it.
        runs = tmp_path / "runs"
        counted = tmp_path / "bin" / "authbridge-counted"
        counted.write_text(f"#!/bin/sh\necho run >> '{runs}'\nexec authbridge \"$@\"\n")
        counted.chmod(0o755)
        config = kubeconfig(cli, server, command="authbridge-counted")
        # One kubectl process that makes a request whenever asked: kubectl proxy.
        env = {**cli.env, "KUBECONFIG": str(config), "KUBECACHEDIR": str(tmp_path / "kube-cache")}
        proxy = subprocess.Popen([KUBECTL, "proxy", "--port=0", "--address=127.0.0.1"], env=env, stdin=subprocess.DEVNULL,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = proxy.stdout.readline()      # bounded: the proxy prints its address or ends
        port = re.search(r"127\.0\.0\.1:(\d+)", line)
        assert port, line + proxy.stderr.read() if proxy.poll() is not None else line

        def through_proxy() -> str:
            """The token of a request made through the proxy."""
            count = len(server.seen.tokens())
            with urllib.request.urlopen(f"http://127.0.0.1:{port.group(1)}/api", timeout=TIMEOUT * 3) as response:
                assert json.loads(response.read())["kind"] == "APIVersions"
            [token] = set(server.seen.tokens()[count:])
            return token

        first = through_proxy()
        # The token kubectl got was issued before this moment (at the sign-in), for 8 s.
        expiry = time.time() + 8
        second = through_proxy()
        assert first == second and runs.read_text() == "run\n", "kubectl kept the credential for its second request"
        # Waiting for the expiry is what this test is about (bounded: 8 s from the first request).
        while time.time() <= expiry + 1:
            time.sleep(0.2)
        third = through_proxy()
        assert runs.read_text() == "run\n" * 2, "after the expiry, kubectl ran authbridge again, once"
        assert third != first and dot_accepts(short_dot.base, third), "and got a renewed token"
        assert server.seen.refused == [], "never a request with an expired token"
    finally:
        if proxy is not None:
            proxy.terminate()
            proxy.communicate(timeout=TIMEOUT)
        server.stop()
    places = leak_scan.leaks("\n".join(cli.outputs), [])
    assert not places, places


def test_exec_credential_reads_kubernetes_exec_info_and_signs_in_only_when_interactive(cli, dot):
    def run(info: dict | str | None) -> subprocess.CompletedProcess:
        env = dict(cli.env)
        if info is not None:
            env["KUBERNETES_EXEC_INFO"] = info if isinstance(info, str) else json.dumps(info)
        done = subprocess.run([str(HOST_BIN), "exec-credential", "dot", *cli.common], env=env, capture_output=True,
                              text=True, stdin=subprocess.DEVNULL, timeout=TIMEOUT * 6)
        cli.outputs.append(done.stderr)
        return done

    v1 = "client.authentication.k8s.io/v1"
    quiet = run({"apiVersion": v1, "kind": "ExecCredential", "spec": {"interactive": False}})
    assert quiet.returncode == NOT_SIGNED_IN and quiet.stdout == ""
    assert not cli.browser_calls.exists()
    # Interactive: the browser sign-in of `authbridge login` (the stand-in browser plays the user).
    signed = run({"apiVersion": v1, "kind": "ExecCredential", "spec": {"interactive": True}})
    assert signed.returncode == 0, signed.stderr
    assert "Open this URL in a browser to sign in:" in signed.stderr and cli.browser_calls.exists()
    credential_json = json.loads(signed.stdout)
    assert credential_json["apiVersion"] == v1 and credential_json["kind"] == "ExecCredential"
    assert credential_json["spec"] == {"interactive": True}
    assert dot.is_issued(credential_json["status"]["token"])
    stamp = credential_json["status"]["expirationTimestamp"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", stamp), stamp
    expires = time.mktime(time.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ")) - time.timezone
    assert 3000 < expires - time.time() <= 3600
    # v1beta1 is answered in v1beta1; without KUBERNETES_EXEC_INFO (by hand), v1.
    beta = run({"apiVersion": "client.authentication.k8s.io/v1beta1", "kind": "ExecCredential", "spec": {}})
    assert json.loads(beta.stdout)["apiVersion"] == "client.authentication.k8s.io/v1beta1"
    assert json.loads(run(None).stdout)["apiVersion"] == v1
    # An apiVersion it does not speak, or no JSON: a clear error.
    old = run({"apiVersion": "client.authentication.k8s.io/v1alpha1", "kind": "ExecCredential"})
    assert old.returncode == 1 and old.stdout == "" and "asks for client.authentication.k8s.io/v1alpha1" in old.stderr
    assert "not an ExecCredential" in run("{").stderr


# ── exec ───────────────────────────────────────────────────────────────────────────────────────

#: Run by `authbridge exec`: reports on its token without ever printing it.
PROBE = """
import json, os, sys, urllib.request
fds = sorted(int(fd) for fd in os.listdir("/proc/self/fd"))   # first: nothing of its own open yet but this listing
token = os.environ.get(sys.argv[1], "")
request = urllib.request.Request(sys.argv[2] + "/o/userinfo/", headers={"Authorization": "Bearer " + token})
try:
    with urllib.request.urlopen(request, timeout=10) as response:
        status = response.status
except Exception as error:
    status = getattr(error, "code", str(error))
parent = os.getppid()
cmdline = open(f"/proc/{parent}/cmdline", "rb").read().decode(errors="replace")
mine = open("/proc/self/cmdline", "rb").read().decode(errors="replace")
print(json.dumps({"userinfo": status, "tokenOnACommandLine": bool(token) and (token in cmdline or token in mine),
                  "fds": fds, "stdin": sys.stdin.read()}))
"""


def test_exec_runs_the_command_with_the_token_in_its_environment_only(cli, dot):
    assert cli.run("login", "dot").returncode == 0
    extra_read, extra_write = os.pipe()      # a descriptor the caller hands on, as `3<file` in a shell
    try:
        done = subprocess.run(
            [str(HOST_BIN), "exec", "dot", *cli.common, "--", sys.executable, "-c", PROBE, "AUTHBRIDGE_TOKEN", dot.base],
            env=cli.env, capture_output=True, text=True, input="from stdin", timeout=TIMEOUT * 6, pass_fds=(extra_read,))
    finally:
        os.close(extra_write)
        os.close(extra_read)
    cli.outputs += [done.stdout, done.stderr]
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["userinfo"] == 200, "a token DOT accepts"
    assert report["tokenOnACommandLine"] is False
    assert report["stdin"] == "from stdin"
    # stdin, stdout, stderr and what authbridge was given (and the listing's own descriptor): no
    # vault lock, socket or pipe authbridge opened itself.
    assert extra_read in report["fds"]
    assert len(set(report["fds"]) - {0, 1, 2, extra_read}) <= 1, report["fds"]
    assert done.stderr == "", "quiet on success"

    named = subprocess.run(
        [str(HOST_BIN), "exec", "dot", "--env", "API_TOKEN", *cli.common, "--", sys.executable, "-c", PROBE, "API_TOKEN",
         dot.base], env=cli.env, capture_output=True, text=True, timeout=TIMEOUT * 6)
    cli.outputs += [named.stdout, named.stderr]
    assert json.loads(named.stdout)["userinfo"] == 200


def test_exec_passes_the_exit_status_through_and_signals_as_a_shell_does(cli):
    assert cli.run("login", "dot").returncode == 0

    def run(*command: str) -> subprocess.CompletedProcess:
        done = subprocess.run([str(HOST_BIN), "exec", "dot", *cli.common, "--", *command], env=cli.env,
                              capture_output=True, text=True, timeout=TIMEOUT * 6)
        cli.outputs += [done.stdout, done.stderr]
        return done

    assert run("sh", "-c", "exit 7").returncode == 7
    assert run("sh", "-c", 'kill -TERM "$$"').returncode == 128 + signal.SIGTERM
    missing = run("no-such-command-anywhere")
    assert missing.returncode == 127 and "no-such-command-anywhere: command not found" in missing.stderr
    assert run(str(cli.root)).returncode == 126, "a folder cannot be run"


def test_exec_without_a_session_runs_nothing(cli):
    marker = cli.root / "ran"
    done = subprocess.run([str(HOST_BIN), "exec", "dot", *cli.common, "--", "touch", str(marker)], env=cli.env,
                          capture_output=True, text=True, timeout=TIMEOUT * 6)
    cli.outputs += [done.stdout, done.stderr]
    assert done.returncode == NOT_SIGNED_IN and "not signed in" in done.stderr
    assert not marker.exists()


#: Says which signal it got; SIGUSR1 reports every one and ends it.
COUNTER = """
import signal, sys
seen = []
def note(number, frame):
    seen.append(signal.Signals(number).name)
    print("got " + seen[-1], flush=True)
def report(number, frame):
    print("seen " + ",".join(seen), flush=True)
    sys.exit(42)
signal.signal(signal.SIGINT, note)
signal.signal(signal.SIGTERM, note)
signal.signal(signal.SIGUSR1, report)
print("ready", flush=True)
while True:
    signal.pause()
"""


def test_exec_forwards_signals_sent_to_authbridge_and_a_ctrl_c_arrives_once(cli):
    assert cli.run("login", "dot").returncode == 0
    # Sent to authbridge by another process (a service manager's stop, kill): on to the command.
    running = subprocess.Popen([str(HOST_BIN), "exec", "dot", *cli.common, "--", sys.executable, "-c", COUNTER],
                               env=cli.env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert running.stdout.readline() == "ready\n"
    for number, name in ((signal.SIGTERM, "SIGTERM"), (signal.SIGINT, "SIGINT")):
        running.send_signal(number)
        assert running.stdout.readline() == f"got {name}\n"
    running.send_signal(signal.SIGUSR1)
    out, err = running.communicate(timeout=TIMEOUT * 3)
    cli.outputs += [out, err]
    assert out == "seen SIGTERM,SIGINT\n" and running.returncode == 42, (out, err)

    # Ctrl-C on a terminal reaches the whole foreground process group: the command gets it from
    # the terminal, once (authbridge does not send it a second time). By the time the command
    # says it got it, authbridge has had it too (one signal to the group); anything it sent on
    # would reach the command before the SIGUSR1 sent after.
    shown = cli.on_terminal("exec", "dot", "--", sys.executable, "-c", COUNTER)
    shown.wait_for("ready")
    shown.type(b"\x03")
    shown.wait_for("got SIGINT")
    os.kill(shown.process.pid, signal.SIGUSR1)
    assert shown.finish() == 42, shown.text
    assert re.search(r"seen SIGINT\r?\n", shown.text), shown.text
