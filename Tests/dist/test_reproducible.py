"""Packing the same trees again gives the same four files, byte for byte (time stamps are the
commit's, entries sorted, owners and modes fixed; compressors write no names or times)."""

from __future__ import annotations

import os
import sys

from conftest import DIST, REPO, VERSION, run


def test_packing_again_gives_the_same_checksums(tmp_path):
    stage = REPO / ".build" / "stage"
    again = tmp_path / "dist"
    run([sys.executable, REPO / "scripts" / "dist" / "package.py", "--version", VERSION,
         "--portable", stage / "portable", "--system", stage / "system", "--out", again],
        env=dict(os.environ), timeout=600)
    assert (again / "SHA256SUMS").read_text() == (DIST / "SHA256SUMS").read_text()
