"""The suite-wide leak scan: no code or token may appear in a host's log (stderr) or in any
message it sends, except where the contract puts one (getAccessToken's result, and a provider's
own answer relayed by fetch).

Test servers register what they hand out (`register`); every host the suites start is scanned
when its test ends, against those secrets and every access token the host itself returned. Reports name where a secret appeared, never the secret.
"""

from __future__ import annotations

import json
from typing import Any, Callable, Iterable

MIN_LENGTH = 12  # shorter test tokens ("sat-x") could match ordinary text by chance

_SOURCES: list[Callable[[], Iterable[str]]] = []


def register(source: Callable[[], Iterable[str]]) -> None:
    _SOURCES.append(source)


def unregister(source: Callable[[], Iterable[str]]) -> None:
    if source in _SOURCES:
        _SOURCES.remove(source)


def _without_end_session_urls(frame: dict[str, Any]) -> dict[str, Any]:
    """The frame without the end-session URLs the contract hands out (signOut's endSession.url,
    signOut/progress openUrl): they carry the ID token as id_token_hint (OpenID Connect
    RP-Initiated Logout 1.0), which is how the provider knows whose session to end. The rest
    of such a frame is scanned as any other."""
    result = frame.get("result")
    if isinstance(result, dict) and isinstance(result.get("endSession"), dict) and "url" in result["endSession"]:
        return {**frame, "result": {**result, "endSession": {**result["endSession"], "url": "(end-session URL)"}}}
    params = frame.get("params")
    if frame.get("method") == "signOut/progress" and isinstance(params, dict) and "url" in params:
        return {**frame, "params": {**params, "url": "(end-session URL)"}}
    return frame


def _carries_token_by_contract(frame: dict[str, Any]) -> bool:
    result = frame.get("result")
    if not isinstance(result, dict):
        return False
    return "accessToken" in result or {"status", "headers", "body"} <= result.keys()


def secrets_of(frames: list[dict[str, Any]]) -> set[str]:
    """Access tokens the host handed out through getAccessToken."""
    return {frame["result"]["accessToken"] for frame in frames
            if isinstance(frame.get("result"), dict) and isinstance(frame["result"].get("accessToken"), str)}


def leaks(stderr: str, frames: list[dict[str, Any]]) -> list[str]:
    secrets: set[str] = set(secrets_of(frames))
    for source in list(_SOURCES):
        try:
            secrets.update(source())
        except OSError:  # a server already stopped keeps its last list (see the sources)
            continue
    secrets = {secret for secret in secrets if len(secret) >= MIN_LENGTH}
    found = []
    for index, line in enumerate(stderr.splitlines()):
        if any(secret in line for secret in secrets):
            found.append(f"stderr line {index + 1}")
    for index, frame in enumerate(frames):
        if _carries_token_by_contract(frame):
            continue
        text = json.dumps(_without_end_session_urls(frame))
        if any(secret in text for secret in secrets):
            kind = frame.get("method") or ("error" if "error" in frame else "result")
            found.append(f"frame {index} ({kind})")
    return found
