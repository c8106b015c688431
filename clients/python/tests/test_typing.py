"""The package (its optional modules for requests and httpx too), the examples and the READMEs'
Python code type-check with `mypy --strict` for Python 3.10: correctly typed user code (a
`SessionChanged` listener, a `SignInProgress` callback) must be accepted as written, and the
package's own annotations must hold."""

from __future__ import annotations

import subprocess
import sys

from conftest import CLIENT_DIR, CLIENT_README, REPO, code_blocks, root_quick_start

TIMEOUT = 300
EXAMPLES = ("python_example.py", "salesforce_session.py", "salesforce_requests.py", "salesforce_simple.py",
            "authorized_request.py", "mcp_client.py")


def test_mypy_strict_accepts_the_package_the_example_and_the_readmes(tmp_path):
    sources = {"root_readme_quick_start.py": root_quick_start()}
    for number, block in enumerate(code_blocks(CLIENT_README.read_text(encoding="utf-8"), "python"), start=1):
        sources[f"client_readme_{number}.py"] = block
    assert len(sources) == 5, "the root quick start, and the client README's async, blocking, requests and httpx, and MCP ones"
    for name, code in sources.items():
        (tmp_path / name).write_text(code, encoding="utf-8")
    argv = [sys.executable, "-m", "mypy", "--strict", "--python-version", "3.10", "--cache-dir", str(tmp_path / "cache"),
            str(CLIENT_DIR / "authbridge"), *(str(REPO / "Examples" / name) for name in EXAMPLES),
            *(str(tmp_path / name) for name in sources)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith("Success: no issues found in"), done.stdout
