"""The fixtures each provider's test file (test_salesforce, test_tableau, test_marketsharp,
test_duke) opens with, written once. Not in conftest: the Python client's tests import
test_tableau and test_marketsharp, with a conftest of their own."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import pytest

from authbridge_testkit.isolation import make_plugin_dir
from authbridge_testkit.paths import PLUGINS_DIR, bundled_files
from simulators.sim_http import simulators


def provider_fixtures(plugin: str, simulator: Callable[..., Any], protocol: str, sim: str = "sim"):
    """`a, b, c = provider_fixtures(…)` at module level; pytest knows them by these names:
      `<plugin>_plugin_dir`: a plugin folder (0755) holding copies (0644) of the bundled plugin;
      `make_<sim>`: factory make(**options) → a started `simulator`; every one made is stopped at
        teardown and fails the test if it saw the client break `protocol` (sim_http.simulators);
      `<sim>`: one made with the default options."""
    @pytest.fixture(name=f"{plugin}_plugin_dir")
    def plugin_dir(tmp_path) -> Path:
        return make_plugin_dir(tmp_path / "plugins", bundled_files(plugin), PLUGINS_DIR)

    @pytest.fixture(name=f"make_{sim}")
    def make():
        with simulators(simulator, protocol) as make:
            yield make

    @pytest.fixture(name=sim)
    def started(request):
        return request.getfixturevalue(f"make_{sim}")()

    return plugin_dir, make, started
