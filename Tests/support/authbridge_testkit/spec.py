"""bridge-spec/openrpc.json as validators (jsonschema, draft 2020-12), and what is wrong with one
frame each way: the checks every suite's frames go through, whoever drives the host."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import best_match
from referencing import Registry
from referencing.jsonschema import DRAFT202012

from .paths import SPEC_PATH

SPEC_URI = "urn:authbridge:bridge-spec:openrpc.json"


class Spec:
    """Validators for the frames the host may write, built from openrpc.json."""

    def __init__(self, path: Path):
        self.path = path
        self.document = json.loads(path.read_text(encoding="utf-8"))
        resource = DRAFT202012.create_resource(self.document)
        self.registry = Registry().with_resource(SPEC_URI, resource)
        self.envelope = self._validator("#/components/schemas/Envelope")
        self.envelope_kinds = {kind: self._validator(f"#/components/schemas/Envelope/$defs/{kind}")
                               for kind in ("Response", "ErrorResponse", "Notification")}
        self.results: dict[str, Draft202012Validator] = {}
        self.notification_params: dict[str, Draft202012Validator] = {}
        # What a frontend may send: requests and client-to-server notifications, by method.
        self.request_params: dict[str, Draft202012Validator] = {}
        self.client_notifications: set[str] = set()
        for index, method in enumerate(self.document["methods"]):
            name = method["name"]
            if "result" in method:
                self.results[name] = self._validator(f"#/methods/{index}/result/schema")
            if method.get("x-notification") and method.get("x-direction") == "server-to-client":
                self.notification_params[name] = self._validator(f"#/methods/{index}/x-params")
            else:
                self.request_params[name] = self._validator(f"#/methods/{index}/x-params")
                if method.get("x-notification"):
                    self.client_notifications.add(name)

    def _validator(self, pointer: str) -> Draft202012Validator:
        return Draft202012Validator({"$ref": SPEC_URI + pointer}, registry=self.registry)

    def shape(self, name: str) -> Draft202012Validator:
        """The validator of one of the spec's shapes (components/schemas/NAME), e.g. for the
        command line's --json output, which prints the bridge's shapes."""
        return self._validator(f"#/components/schemas/{name}")


_SPEC: Spec | None = None


def spec() -> Spec:
    global _SPEC
    if _SPEC is None:
        _SPEC = Spec(SPEC_PATH)
    return _SPEC


def schema_problems(validator: Draft202012Validator, instance: Any, skip: tuple = ()) -> list[str]:
    """One line per way `instance` fails `validator` (empty when it is valid), leaving out
    errors located under the instance path `skip`."""
    problems = []
    for error in validator.iter_errors(instance):
        best = best_match([error])  # descends into oneOf/anyOf to the most relevant cause
        if skip and tuple(best.absolute_path)[:len(skip)] == skip:
            continue
        where = "/".join(str(p) for p in best.absolute_path) or "(root)"
        schema_where = "/".join(str(p) for p in best.absolute_schema_path)
        problems.append(f"at {where}: {best.message} [schema {schema_where}]")
    return problems


def schema_problem(validator: Draft202012Validator, instance: Any) -> str | None:
    """A one-line description of why `instance` fails, or None."""
    problems = schema_problems(validator, instance)
    return "; ".join(problems) if problems else None


def short(value: Any, limit: int = 600) -> str:
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= limit else text[:limit] + f"… ({len(text)} chars)"


def error_code(response: dict[str, Any]) -> int | None:
    """The error code of a response, or None when it is a result."""
    error = response.get("error")
    return error.get("code") if isinstance(error, dict) else None


def id_key(value: Any) -> tuple[str, Any] | None:
    """A hashable key that keeps 1 and "1" apart (and refuses bools/floats)."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, str)):
        return (type(value).__name__, value)
    return None


def no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            raise ValueError(f"duplicate key {key!r}")
        seen[key] = value
    return seen


def frame_problems(spec: Spec, frame: object, method: str | None) -> list[str]:
    """What is wrong with one frame the host wrote; `method` is the request it answers, when known."""
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


_no_duplicate_keys = no_duplicate_keys   # the name the frame tools used
