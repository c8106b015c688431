"""Bridge-contract tests of the `authbridge` host: fixtures over the Python test kit
(Tests/support/authbridge_testkit).

Every test talks to a real `authbridge serve` child process over its stdin/stdout, one JSON
message per line (bridge-spec/README.md). The kit's `Host` validates EVERY frame the host writes
against bridge-spec/openrpc.json (the envelope, results against their method's schema,
notification params against their x-params, each id answered once); a violation fails the test
that caused it at teardown (reported by pytest as an error of that test), and so does a code or
token in the host's log or frames (the kit's leak_scan).

Environment: the test targets' variables (Makefile header), AUTHBRIDGE_BIN and
AUTHBRIDGE_BUILD_DIR; AUTHBRIDGE_CONTRACT_IGNORE is the kit's debugging aid (host.py).
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Iterable

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))

from authbridge_testkit import leak_scan  # noqa: E402
from authbridge_testkit.host import (  # noqa: E402,F401 - the names the test files import from here
    DEFAULT_PROFILES, KEPT_CONFIGURATION_PREFIX, TIMEOUT, Host, HostError, advance_clock, begin_sign_in, host_command,
    session_records, sign_in_external, sign_in_session, start_on_data_home, stop_cleanly)
from authbridge_testkit.isolation import copy_plugins, make_plugin_dir  # noqa: E402,F401
from authbridge_testkit.paths import (  # noqa: E402,F401
    BUILD_DIR, HOST_BIN, PLUGINS_DIR, REPO, SPEC_PATH, TEST_PLUGIN_FILES, TEST_PLUGINS_DIR, bundled_files)
from authbridge_testkit.spec import Spec, error_code, id_key, schema_problem, schema_problems, short, spec  # noqa: E402,F401

CTEST_BUILD_SCRIPT = REPO / "Tests" / "Plugins" / "CTestPlugin" / "build.sh"


# ── Plugin folders ──────────────────────────────────────────────────────────


class CTestVariants:
    """Builds C test plugin variants once per session (build.sh), then copies them."""

    def __init__(self, root: Path):
        self.root = root
        self.lock = threading.Lock()
        self.built: dict[tuple, Path] = {}

    def build(self, plugin_id: str, *flags: str, abi: str | None = None, manifest_extra: str | None = None) -> Path:
        """`manifest_extra`: raw members added to the manifest (build.sh's MANIFEST_EXTRA)."""
        key = (plugin_id, flags, abi, manifest_extra)
        with self.lock:
            if key not in self.built:
                out = self.root / f"{plugin_id}-{len(self.built)}"
                env = dict(os.environ, ID=plugin_id)
                if abi is not None:
                    env["ABI"] = abi
                if manifest_extra is not None:
                    env["MANIFEST_EXTRA"] = manifest_extra
                done = subprocess.run(["sh", str(CTEST_BUILD_SCRIPT), str(out), *flags], env=env,
                                      capture_output=True, text=True, timeout=120)
                if done.returncode != 0:
                    pytest.fail(f"build.sh {plugin_id} {flags} failed:\n{done.stdout}\n{done.stderr}")
                self.built[key] = out
            return self.built[key]

    def install(self, dest: Path, plugin_id: str, *flags: str, abi: str | None = None,
                manifest_extra: str | None = None) -> Path:
        """Copies the variant's library and manifest into `dest` (0644); returns the manifest path."""
        built = self.build(plugin_id, *flags, abi=abi, manifest_extra=manifest_extra)
        copy_plugins(dest, sorted(item.name for item in built.iterdir() if not item.name.startswith(".")), built)
        return dest / f"{plugin_id}.json"


# ── Fixtures ────────────────────────────────────────────────────────────────


def pytest_configure(config):
    if not HOST_BIN.exists():
        raise pytest.UsageError(f"host binary {HOST_BIN} not found: run `make build` (or set AUTHBRIDGE_BIN)")
    spec()  # fail early on an unreadable spec


@pytest.fixture(scope="session")
def ctest_variants(tmp_path_factory) -> CTestVariants:
    return CTestVariants(tmp_path_factory.mktemp("ctest-variants"))


@pytest.fixture
def plugin_dir(tmp_path) -> Path:
    return make_plugin_dir(tmp_path / "plugins")


@pytest.fixture
def start_host(tmp_path):
    """Factory: start_host(plugin_dirs=[...], profiles={...} | config_text="...", ...) → Host.

    Every host gets its own folder (config, XDG homes, stderr). Hosts are
    stopped at teardown, and the frame violations they recorded fail the test.
    `default_plugins=True` also loads the default folders (the build folder's
    plugins/, in-process; $XDG_DATA_HOME/authbridge/plugins, which `env` may move).
    """
    hosts: list[Host] = []

    def start(plugin_dirs: Iterable[Path] = (), profiles: dict | None = None, config_text: str | None = None,
              log_level: str = "debug", test_clock: bool = False, extra_args: Iterable[str] = (),
              initialize: bool = True, env: dict[str, str] | None = None, default_plugins: bool = False) -> Host:
        workdir = tmp_path / f"host{len(hosts)}"
        argv, environment = host_command(workdir, plugin_dirs, profiles=profiles, config_text=config_text,
                                         log_level=log_level, test_clock=test_clock, extra_args=extra_args,
                                         default_plugins=default_plugins)
        environment.update(env or {})
        host = Host(argv, environment, workdir)
        hosts.append(host)
        if initialize:
            host.initialize()
        return host

    yield start

    problems: dict[str, list[str]] = {}   # first line → the full texts (same problem, several frames)
    for index, host in enumerate(hosts):
        host.stop()
        for violation in host.violations:
            problems.setdefault(f"host{index}: {violation.splitlines()[0]}", []).append(violation)
        for place in leak_scan.leaks(host.stderr_text(), host.frames):
            problems.setdefault(f"host{index}: a code or token appeared in {place}", []).append("")
    if problems:
        lines = []
        for head, texts in problems.items():
            times = f" (×{len(texts)})" if len(texts) > 1 else ""
            lines.append(head + times + "".join("\n" + extra for extra in texts[0].splitlines()[1:]))
        pytest.fail("the host broke the bridge contract:\n- " + "\n- ".join(lines), pytrace=False)


@pytest.fixture
def host(start_host, plugin_dir) -> Host:
    """An initialized host with profiles c → ctest and s → swifttest."""
    return start_host([plugin_dir], profiles=DEFAULT_PROFILES)


@pytest.fixture
def clock_host(start_host, plugin_dir) -> Host:
    """Like `host`, with `--test-clock` ($/test/advanceClock)."""
    return start_host([plugin_dir], profiles=DEFAULT_PROFILES, test_clock=True)


# ── The bundled oidc plugin and an authorization server (fake or django-oauth-toolkit) ───────

@pytest.fixture
def bundled_plugin_dir(tmp_path) -> Path:
    """A plugin folder (0755) holding copies (0644) of every bundled plugin as `make build` stages it."""
    return make_plugin_dir(tmp_path / "bundled-plugins", sorted(path.name for path in PLUGINS_DIR.iterdir()), PLUGINS_DIR)


@pytest.fixture
def oidc_plugin_dir(tmp_path) -> Path:
    """A plugin folder (0755) holding copies (0644) of the bundled oidc plugin as `make build` stages it."""
    return make_plugin_dir(tmp_path / "plugins", bundled_files("oidc"), PLUGINS_DIR)
