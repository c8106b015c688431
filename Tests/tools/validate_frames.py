#!/usr/bin/env python3
"""Validates recorded host frames against bridge-spec/openrpc.json, as the contract tests do.

    .venv/bin/python Tests/tools/validate_frames.py FILE.jsonl [FILE.jsonl ...]

For frontends written in languages without a JSON Schema library (the Node client's tests):
they record what they exchanged with the host, and this script checks it with the same
validators as Tests/contract/conftest.py (its `Spec`, built from openrpc.json with jsonschema,
draft 2020-12). Each line of a FILE is one JSON record:

  {"host": H, "dir": "in",  "line": "<a frame's exact text, as the host wrote it>"}
  {"host": H, "dir": "out", "line": "<a frame's exact text, as the frontend wrote it>"}
  {"host": H, "dir": "out", "id": ID, "method": "M"}      a request the frontend sent (not checked)
  {"jsonrpc": "2.0", ...}                                   a bare host frame (no host, no request map)

`host` names one host process (ids are per host). For every received frame, as conftest's
`Host._validate`: the line is a JSON object without duplicate keys; it fits its kind of
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

import collections
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "Tests" / "contract"))

from conftest import Spec, SPEC_PATH, _no_duplicate_keys, id_key, schema_problems, short  # noqa: E402


def frame_problems(spec: Spec, frame: object, method: str | None) -> list[str]:
    """What is wrong with one received frame (conftest's Host._validate, less the id bookkeeping)."""
    if not isinstance(frame, dict):
        return ["frame is not a JSON object"]
    if "method" in frame:
        kind = "Notification"
    elif "error" in frame:
        kind = "ErrorResponse"
    elif "result" in frame:
        kind = "Response"
    else:
        kind = None
    validator = spec.envelope_kinds[kind] if kind else spec.envelope
    params_validator = spec.notification_params.get(frame.get("method")) if kind == "Notification" else None
    skip = ("params",) if params_validator is not None else ()
    problems = [f"frame breaks Envelope{'/' + kind if kind else ''} {problem}"
                for problem in schema_problems(validator, frame, skip=skip)]
    if kind == "Notification":
        if params_validator is None:
            problems.append(f"unknown notification {frame.get('method')!r}")
        else:
            problems += [f"{frame['method']} params break the schema {problem}"
                         for problem in schema_problems(params_validator, frame.get("params"))]
    elif kind == "Response" and method is not None:
        result_validator = spec.results.get(method)
        if result_validator is not None:
            problems += [f"result of {method} breaks its schema {problem}"
                         for problem in schema_problems(result_validator, frame["result"])]
    return problems


def sent_frame_problems(spec: Spec, frame: object) -> tuple[str | None, list[str]]:
    """(the method, what is wrong) of one frame a frontend sent: a JSON-RPC 2.0 request or a
    client-to-server notification the spec lists, whose params fit the method's `x-params`."""
    if not isinstance(frame, dict):
        return None, ["a sent frame is not a JSON object"]
    problems = []
    if frame.get("jsonrpc") != "2.0":
        problems.append('a sent frame lacks "jsonrpc": "2.0"')
    method = frame.get("method")
    if not isinstance(method, str):
        return None, problems + ["a sent frame has no method"]
    extra = set(frame) - {"jsonrpc", "id", "method", "params"}
    if extra:
        problems.append(f"a sent frame has members JSON-RPC does not define: {sorted(extra)}")
    validator = spec.request_params.get(method)
    if validator is None:
        return method, problems + [f"sent a method the spec does not list: {method!r}"]
    is_notification = method in spec.client_notifications
    if is_notification and "id" in frame:
        problems.append(f"{method} is a notification but was sent with an id")
    if not is_notification and id_key(frame.get("id")) is None:
        problems.append(f"{method} is a request but was sent without an integer or string id")
    problems += [f"{method} params break the schema {problem}"
                 for problem in schema_problems(validator, frame.get("params", {}))]
    return method, problems


def parse_frame(line: str, where: str, problems: list[str], complaint: str) -> object | None:
    """The frame's JSON (duplicate keys refused), or None with `complaint` recorded."""
    try:
        return json.loads(line, object_pairs_hook=_no_duplicate_keys)
    except ValueError as error:
        problems.append(f"{where}: {complaint} ({error}): {short(line)}")
        return None


def validate(paths: list[Path]) -> tuple[int, list[str]]:
    """(frames checked, problems) over the files, in order."""
    spec = Spec(SPEC_PATH)
    sent: dict[tuple, str] = {}                         # (host, id key) → method
    answers: collections.Counter = collections.Counter()
    first_answer: dict[tuple, str] = {}
    problems: list[str] = []
    checked = 0
    for path in paths:
        for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            where = f"{path}:{number}"
            if not raw.strip():
                continue
            try:
                record = json.loads(raw)
            except ValueError as error:
                raise RecordError(f"{where}: not a JSON record ({error})") from None
            if isinstance(record, dict) and "jsonrpc" in record and "dir" not in record:
                host, direction, line = None, "in", raw     # a bare frame
            elif isinstance(record, dict) and record.get("dir") in ("in", "out"):
                host, direction, line = record.get("host"), record["dir"], record.get("line")
            else:
                raise RecordError(f"{where}: neither a record with dir in/out nor a bare frame")
            if direction == "out" and isinstance(line, str):
                checked += 1
                frame = parse_frame(line, where, problems, "a sent frame is not JSON")
                if frame is None:
                    continue
                method, sent_problems = sent_frame_problems(spec, frame)
                problems += [f"{where}: {problem}\n    frame: {short(line)}" for problem in sent_problems]
                key = id_key(frame.get("id")) if isinstance(frame, dict) else None
                if method is not None and key is not None:
                    sent[(host, key)] = method
                continue
            if direction == "out":
                key = id_key(record.get("id"))
                if key is None or not isinstance(record.get("method"), str):
                    raise RecordError(f"{where}: an out record needs the frame's text in `line`, or an integer or string id and a method")
                sent[(host, key)] = record["method"]
                continue
            if not isinstance(line, str):
                raise RecordError(f"{where}: an in record needs the frame's text in `line`")
            checked += 1
            frame = parse_frame(line, where, problems, "not a JSON frame")
            if frame is None:
                continue
            method = None
            if isinstance(frame, dict) and "method" not in frame and ("result" in frame or "error" in frame):
                key = id_key(frame.get("id"))
                if key is not None:
                    answers[(host, key)] += 1
                    if answers[(host, key)] == 1:
                        first_answer[(host, key)] = where
                    elif answers[(host, key)] == 2:
                        problems.append(f"{where}: request id {key[1]!r} answered again (first at {first_answer[(host, key)]})")
                    if host is not None:
                        method = sent.get((host, key))
                        if method is None:
                            problems.append(f"{where}: answer to an id that was never sent: {short(line)}")
            for problem in frame_problems(spec, frame, method):
                problems.append(f"{where}: {problem}\n    frame: {short(line)}")
    return checked, problems


class RecordError(Exception):
    pass


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
