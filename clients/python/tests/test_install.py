"""The package built into a wheel offline and installed into a fresh venv with
`pip install --no-index`, then `import authbridge` there: never touches the network.

A fresh venv has no complete build backend (Python < 3.12: setuptools but not the `wheel` that
setuptools < 70.1 needs; 3.12+: no setuptools at all), so the wheel is built with the test
venv's setuptools and wheel (requirements-test.txt). `pip install ./clients/python` as a user
types it (which fetches the backend) is run by test_readme.py, followed by the README's quick
start.
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys

import pytest
from conftest import CLIENT_DIR, PIP_TIMEOUT, check_installed, fresh_venv


def source_copy(tmp_path):
    """The package's files, copied: setuptools builds in the source folder (build/, *.egg-info),
    and the tests must leave the checkout clean."""
    copy = tmp_path / "src"
    shutil.copytree(CLIENT_DIR, copy, ignore=shutil.ignore_patterns("tests", "build", "*.egg-info", "__pycache__"))
    return copy


def run(argv, **kwargs):
    return subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=PIP_TIMEOUT, **kwargs)


def test_offline_install_of_a_locally_built_wheel(tmp_path):
    missing = [name for name in ("setuptools", "wheel") if importlib.util.find_spec(name) is None]
    if missing:
        pytest.fail(f"the test venv lacks {', '.join(missing)}: pip install -r requirements-test.txt")
    wheels = tmp_path / "wheels"
    built = run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-index", "--no-build-isolation",
                 "--wheel-dir", wheels, source_copy(tmp_path)])
    assert built.returncode == 0, built.stdout + built.stderr
    [wheel] = list(wheels.glob("authbridge-0.1.0-py3-none-any.whl"))
    python = fresh_venv(tmp_path / "venv")
    installed = run([python, "-m", "pip", "install", "--no-index", wheel])
    assert installed.returncode == 0, installed.stdout + installed.stderr
    check_installed(python, tmp_path)
