"""The host bundled in a platform wheel, and the `authbridge` command that runs it.

A platform wheel (`make dist`) carries a self-contained host tree in `authbridge/_host/`
(bin/authbridge, lib/authbridge/ with its runtime and plugins); the pure-Python install from
source has none. `pip install` of the wheel also writes an `authbridge` console script into the
environment's bin/, which replaces itself with the bundled host (`os.execv`: same process, its
exit status, its signals), as the `cmake` and `ninja` wheels do.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

__all__ = ["bundled_host", "main"]


def bundled_host() -> str | None:
    """The bundled host's path, or None when this install carries none (or it is not executable)."""
    host = Path(__file__).resolve().parent / "_host" / "bin" / "authbridge"
    return str(host) if host.is_file() and os.access(host, os.X_OK) else None


def main() -> None:
    """The `authbridge` console script of the platform wheel."""
    host = bundled_host()
    if host is None:
        sys.exit("authbridge: this installation of the Python package carries no host (it was installed "
                 "from source); install the platform wheel, or use a host installed another way")
    # argv[0] is kept: started as `git-credential-authbridge`, the host is git's credential helper.
    os.execv(host, [sys.argv[0], *sys.argv[1:]])
