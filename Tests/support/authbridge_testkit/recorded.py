"""Recorded frames (JSON lines, in the format Tests/tools/validate_frames.py documents, which
Tests/tools/frame_tap.py and the Node client's tests write) checked against bridge-spec, both
ways, with the ids of each host process followed across the records."""

from __future__ import annotations

import collections
import json
from pathlib import Path

from .spec import SPEC_PATH, Spec, frame_problems, id_key, no_duplicate_keys, sent_frame_problems, short


def parse_frame(line: str, where: str, problems: list[str], complaint: str) -> object | None:
    """The frame's JSON (duplicate keys refused), or None with `complaint` recorded."""
    try:
        return json.loads(line, object_pairs_hook=no_duplicate_keys)
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
