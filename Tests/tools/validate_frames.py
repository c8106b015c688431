#!/usr/bin/env python3
"""Validates recorded host frames against bridge-spec/openrpc.json, as the contract tests do.

    .venv/bin/python Tests/tools/validate_frames.py FILE.jsonl [FILE.jsonl ...]

For frontends written in languages without a JSON Schema library (the Node client's tests):
they record what they exchanged with the host, and this script checks it with the same
validators as every suite (the test kit's `authbridge_testkit.spec`, built from openrpc.json
with jsonschema, draft 2020-12). Each line of a FILE is one JSON record:

  {"host": H, "dir": "in",  "line": "<a frame's exact text, as the host wrote it>"}
  {"host": H, "dir": "out", "line": "<a frame's exact text, as the frontend wrote it>"}
  {"host": H, "dir": "out", "id": ID, "method": "M"}      a request the frontend sent (not checked)
  {"jsonrpc": "2.0", ...}                                   a bare host frame (no host, no request map)

`host` names one host process (ids are per host). For every received frame, as the kit's
`Host`: the line is a JSON object without duplicate keys; it fits its kind of
`#/components/schemas/Envelope` (Notification / ErrorResponse / Response, which checks
ErrorObject and ErrorData); a notification is one the spec lists, and its params fit its
`x-params`; a response answers a request that was sent, only once, and a result fits the
result schema of that request's method. A sent frame given with its text must be a request
or a client-to-server notification the spec lists, with params that fit its `x-params`
(absent params count as {}).

Tests/tools/frame_tap.py records both directions in this format for any frontend run as a
child process (examples, quick starts).

Exit status: 0 when every frame is valid, 1 when any is not (each problem is printed as
FILE:LINE: what), 2 when a file cannot be read or a record is malformed.
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "Tests" / "support"))

from authbridge_testkit.recorded import RecordError, validate  # noqa: E402
from authbridge_testkit.spec import SPEC_PATH  # noqa: E402


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if argv else 2
    try:
        checked, problems = validate([Path(name) for name in argv])
    except (OSError, RecordError) as error:
        print(f"validate_frames: {error}", file=sys.stderr)
        return 2
    for problem in problems:
        print(problem)
    print(f"validate_frames: {checked} frames checked against {SPEC_PATH.name}, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
