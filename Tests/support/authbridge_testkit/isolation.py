"""The isolation recipe, written once: nothing on the machine leaks into a host under test, and
nothing of the test leaks out.

* its own XDG_CONFIG_HOME, XDG_DATA_HOME and HOME (so its config, vault, key file and default
  plugin folder are the test's), and its own XDG_RUNTIME_DIR (0700: where an agent's socket is
  looked for, so a command under test never reaches the developer's agent);
* no DBUS_SESSION_BUS_ADDRESS (never the developer's keyring: keyring tests bring a private one),
  no AUTHBRIDGE_VAULT_KEY and no AUTHBRIDGE_AGENT_SOCKET;
* plugin files as private copies (0644) in a folder of their own (0755): the loader refuses
  files others can write, and a build folder's modes are not the test's to rely on.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable, Mapping
from pathlib import Path

from .paths import TEST_PLUGIN_FILES, TEST_PLUGINS_DIR

#: Variables a host under test never inherits.
NEVER_INHERITED = ("DBUS_SESSION_BUS_ADDRESS", "AUTHBRIDGE_VAULT_KEY", "AUTHBRIDGE_AGENT_SOCKET")


def isolated_environment(home: Path, data_home: Path | None = None,
                         base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a host living in `home` (its xdg-config, xdg-data and home folders are
    created). `data_home` replaces xdg-data, for hosts of one test that share a vault like several
    runs of one user."""
    for sub in ("xdg-config", "xdg-data", "home"):
        (home / sub).mkdir(parents=True, exist_ok=True)
    (home / "xdg-runtime").mkdir(mode=0o700, exist_ok=True)
    env = dict(os.environ if base is None else base)
    env.update(XDG_CONFIG_HOME=str(home / "xdg-config"), XDG_DATA_HOME=str(data_home or home / "xdg-data"),
               HOME=str(home / "home"), XDG_RUNTIME_DIR=str(home / "xdg-runtime"))
    for name in NEVER_INHERITED:
        env.pop(name, None)
    return env


def copy_plugins(folder: Path, files: Iterable[str], source: Path) -> Path:
    """A plugin folder (0755) holding private copies (0644) of `files` from `source` (a build
    folder's plugins/ or test-plugins/)."""
    folder.mkdir(parents=True, exist_ok=True)
    os.chmod(folder, 0o755)
    for name in files:
        if not (source / name).exists():
            raise FileNotFoundError(f"{source / name} is missing: run `make build` first")
        shutil.copyfile(source / name, folder / name)
        os.chmod(folder / name, 0o644)
    return folder


def make_plugin_dir(path: Path, files: Iterable[str] = TEST_PLUGIN_FILES, source: Path = TEST_PLUGINS_DIR) -> Path:
    """A plugin folder of the test plugins (ctest, swifttest), or of `files` from `source` (e.g. the
    bundled plugins: PLUGINS_DIR), as private copies."""
    return copy_plugins(path, files, source)
