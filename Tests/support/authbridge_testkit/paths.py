"""Where things are. The host under test and its build folder come from the test targets'
variables (the Makefile's header): AUTHBRIDGE_BIN and AUTHBRIDGE_BUILD_DIR, with the checkout's
debug build as the default, so a suite also runs by hand."""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
SUPPORT_DIR = REPO / "Tests" / "support"
SPEC_PATH = REPO / "bridge-spec" / "openrpc.json"

BUILD_DIR = Path(os.environ.get("AUTHBRIDGE_BUILD_DIR") or REPO / ".build" / "debug").resolve()
HOST_BIN = Path(os.environ.get("AUTHBRIDGE_BIN") or BUILD_DIR / "authbridge").resolve()
#: The bundled plugins as `make build` stages them.
PLUGINS_DIR = BUILD_DIR / "plugins"
#: The test plugins (ctest, swifttest) as `make build` stages them.
TEST_PLUGINS_DIR = BUILD_DIR / "test-plugins"
#: The files of the two test plugins, as `make build` stages them in TEST_PLUGINS_DIR.
TEST_PLUGIN_FILES = ("ctest.json", "libauthbridge-ctest.so", "swifttest.json", "libauthbridge-testplugin-swift.so")


def bundled_files(*plugins: str) -> tuple[str, ...]:
    """The files (manifest, library) `make build` stages in PLUGINS_DIR for each bundled plugin named."""
    return tuple(name for plugin in plugins for name in (f"{plugin}.json", f"libauthbridge-{plugin}.so"))
