"""The host that the platform wheel installed, and `python -m authbridge`, which runs it.

The platform wheel (`make dist`) installs the self-contained host tree beside the package, as the
wheel's data: bin/authbridge (the host binary itself, the `authbridge` command git and kubectl run:
no Python starts on that path) and lib/authbridge/ in the environment's root, the tarball's layout.
The wheel's RECORD names where pip put each file, in every install scheme; the pure-Python install
from source has no host.
"""

from __future__ import annotations

import csv
import os
import sys
from pathlib import Path

__all__ = ["bundled_host", "main"]


def bundled_host() -> str | None:
    """The host the platform wheel installed with this package, or None (installed from source, or
    the file is gone or not executable)."""
    site = Path(__file__).resolve().parent.parent
    for record in site.glob("authbridge-*.dist-info/RECORD"):
        try:
            with record.open(newline="", encoding="utf-8") as file:
                paths = [row[0] for row in csv.reader(file) if row]
        except OSError:
            continue
        for path in paths:
            host = site / path    # RECORD's paths are relative to site-packages (../../../bin/authbridge)
            if host.name == "authbridge" and host.parent.name == "bin" and host.is_file() and os.access(host, os.X_OK):
                return os.path.normpath(host)
    return None


def main() -> None:
    """`python -m authbridge`: the bundled host, with these arguments."""
    host = bundled_host()
    if host is None:
        sys.exit("authbridge: this installation of the Python package carries no host (it was installed "
                 "from source); install the platform wheel, or use a host installed another way")
    # Not git's name for the helper (the wheel's bin/git-credential-authbridge is the binary itself).
    os.execv(host, [host, *sys.argv[1:]])
