"""A program run as a user runs it who signs in when it prints a URL: the Python quick starts'
first run (clients/python/tests/test_readme.py, Tests/dist/test_wheel.py)."""

from __future__ import annotations

import queue
import subprocess
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

PROMPT = "Open this page to sign in: "


def run_signing_in(argv: Sequence[str | Path], *, cwd: Path, env: dict[str, str], sign_in: Callable[[str], int],
                   timeout: float, prompt: str = PROMPT) -> str:
    """Runs argv (stderr into stdout); when a line starts with `prompt`, calls sign_in with the URL
    after it, which must answer 200. Returns everything printed; the program must exit 0 within
    `timeout` of each wait. The process is killed if anything fails."""
    process = subprocess.Popen([str(a) for a in argv], cwd=cwd, env=env, text=True, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    lines: queue.Queue = queue.Queue()

    def read() -> None:
        for line in process.stdout:
            lines.put(line)
        lines.put(None)
    threading.Thread(target=read, daemon=True).start()
    seen: list[str] = []
    try:
        while not any(line.startswith(prompt) for line in seen):
            line = lines.get(timeout=timeout)
            assert line is not None, "".join(seen)
            seen.append(line)
        assert sign_in(seen[-1][len(prompt):].strip()) == 200
        assert process.wait(timeout) == 0, "".join(seen)
        while (line := lines.get(timeout=timeout)) is not None:
            seen.append(line)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    return "".join(seen)
