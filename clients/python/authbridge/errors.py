"""Exceptions: one class per JSON-RPC error code of bridge-spec/README.md §7, plus the
client's own failures (the host died, the bridge is closed, a frame was too large).

Why a class per code: callers branch on *what* went wrong (`except NotSignedIn:` → show the
sign-in button) rather than on numbers, and `retryable` / `reason` / `provider` are lifted out of
`error.data` so they need no dictionary digging. Messages come from the host, which never puts a
token in them (spec §8).
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = [
    "AuthBridgeError", "ParseError", "InvalidRequest", "MethodNotFound", "InvalidParams",
    "InternalError", "ServerNotInitialized", "RequestCancelled", "NotSignedIn", "ProviderUnknown",
    "ProviderRefused", "UserCancelled", "Timeout", "ProviderUnavailable", "PluginError",
    "Unsupported", "UnsupportedProtocolVersion", "StorageError", "NoPendingSignIn",
    "ConfigurationError", "HostExited", "HostNotFound", "BridgeClosed", "FrameTooLarge", "ProtocolError",
    "RequestTimeout", "error_from_wire",
]


class AuthBridgeError(Exception):
    """Base of every error this package raises.

    For an error answered by the host, `code`, `message` and `data` are the JSON-RPC error
    object's members; `provider`, `reason`, `retryable`, `field` are copied out of `data`
    (None when absent). `request_method` is the method of the call that failed. Errors made by
    the client itself (`HostExited`, `HostNotFound`, `BridgeClosed`, `FrameTooLarge`) have `code`
    None; `RequestTimeout` has the code of `Timeout`.
    """

    code: int | None = None

    def __init__(self, message: str, *, code: int | None = None, data: Mapping[str, Any] | None = None,
                 request_method: str | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code
        self.message = message
        self.data: dict[str, Any] = dict(data or {})
        self.request_method = request_method
        self.provider: str | None = self.data.get("provider")
        self.reason: str | None = self.data.get("reason")
        self.retryable: bool = bool(self.data.get("retryable", False))
        self.field: str | None = self.data.get("field")

    def __str__(self) -> str:
        where = f"{self.request_method}: " if self.request_method else ""
        code = f" [{self.code}]" if self.code is not None else ""
        reason = f" ({self.reason})" if self.reason else ""
        return f"{where}{self.message}{code}{reason}"

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r}, code={self.code}, data={self.data!r})"


# ── JSON-RPC's own codes ───────────────────────────────────────────────────

class ParseError(AuthBridgeError):
    """-32700: the host could not parse a frame (a client bug)."""
    code = -32700


class InvalidRequest(AuthBridgeError):
    """-32600: bad envelope, id in use, already initialized, or the host is shutting down."""
    code = -32600


class MethodNotFound(AuthBridgeError):
    """-32601: the host does not know the method (`data["method"]`)."""
    code = -32601


class InvalidParams(AuthBridgeError):
    """-32602: a parameter is missing, ill-typed or unknown; `field` is its dotted path."""
    code = -32602


class InternalError(AuthBridgeError):
    """-32603: a host bug; the details are only in the host's log (see `bridge.stderr_tail()`)."""
    code = -32603


class ServerNotInitialized(AuthBridgeError):
    """-32002: a request before `initialize` (the context manager makes this impossible)."""
    code = -32002


class RequestCancelled(AuthBridgeError):
    """-32800: the host cancelled the request although this caller did not ask for it (the host
    is exiting, or its stdin was closed). A caller that cancels its own call gets
    `asyncio.CancelledError` instead."""
    code = -32800


# ── AuthBridge's application codes (error.data always has reason and retryable) ──

class NotSignedIn(AuthBridgeError):
    """-32001: no usable session; `reason` says why (`noTokens`, `revoked`, `licenseRevoked`…)."""
    code = -32001


class ProviderUnknown(AuthBridgeError):
    """-32003: no such profile (`unknownProfile`) or plugin (`unknownPlugin`)."""
    code = -32003


class ProviderRefused(AuthBridgeError):
    """-32004: the provider said no for good (`invalid_grant`, `stateMismatch`…)."""
    code = -32004


class UserCancelled(AuthBridgeError):
    """-32005: the sign-in was cancelled (`access_denied`, `superseded`, `signedOut`…)."""
    code = -32005


class Timeout(AuthBridgeError):
    """-32006: the *host* gave up waiting (the user, `fetch`, or a provider call); retryable.
    A deadline of the client's own (`timeout=`) raises the subclass `RequestTimeout`."""
    code = -32006


class ProviderUnavailable(AuthBridgeError):
    """-32007: a transient failure (network, 5xx, rate limit); retryable. `data["status"]` holds
    the provider's HTTP status when there was one."""
    code = -32007

    @property
    def status(self) -> int | None:
        return self.data.get("status")


class PluginError(AuthBridgeError):
    """-32008: the provider plugin misbehaved or is not loaded (`pluginNotLoaded`)."""
    code = -32008


class Unsupported(AuthBridgeError):
    """-32009: the profile cannot do this (`unsupportedFlow`, `unsupported`)."""
    code = -32009


class UnsupportedProtocolVersion(AuthBridgeError):
    """-32010: the host speaks another major version; `supported` lists its versions."""
    code = -32010

    @property
    def supported(self) -> Sequence[str]:
        return tuple(self.data.get("supported") or ())


class StorageError(AuthBridgeError):
    """-32011: the token vault failed (`insecurePermissions`, `corruptRecord`, `keyringUnavailable`…)."""
    code = -32011


class NoPendingSignIn(AuthBridgeError):
    """-32012: `complete_sign_in` without a pending sign-in for that provider."""
    code = -32012


class ConfigurationError(AuthBridgeError):
    """-32013: the profile's settings are wrong (`invalidSettings`, `missingSetting`, `relativeUrl`…)."""
    code = -32013


# ── The client's own failures ──────────────────────────────────────────────

class ProtocolError(AuthBridgeError):
    """The host said something the client cannot use (an answer with an unknown id is only logged;
    this is raised for answers it cannot turn into a result)."""


class BridgeClosed(AuthBridgeError):
    """The bridge was closed (or never started) when the call was made or while it waited."""


class HostExited(BridgeClosed):
    """The host process ended while calls were pending, or before a call was made.

    `returncode` is its exit status (negative: killed by that signal, as in `subprocess`);
    `stderr_tail` the last lines it logged (the host never logs tokens). Start a new host with
    `bridge.restart()` or a new `connect()`.
    """

    def __init__(self, returncode: int | None, stderr_tail: Sequence[str] = (), *, request_method: str | None = None) -> None:
        self.returncode = returncode
        self.stderr_tail = list(stderr_tail)
        if returncode is None:
            status = "with an unknown status"
        elif returncode < 0:
            status = f"killed by signal {-returncode}"
        else:
            status = f"with status {returncode}"
        text = f"the authbridge host exited {status}"
        if self.stderr_tail:
            text += "; its last log lines:\n  " + "\n  ".join(self.stderr_tail)
        super().__init__(text, request_method=request_method)


class HostNotFound(AuthBridgeError, FileNotFoundError):
    """The host executable could not be found, or is not executable, so no host was started.

    The message names what was looked for and how to point the client at a host. Also a
    `FileNotFoundError`, which is what this used to raise.
    """

    def __init__(self, message: str, *, executable: str | None = None) -> None:
        super().__init__(message)
        self.executable = executable


if sys.version_info >= (3, 11):
    _BuiltinTimeout = TimeoutError
else:
    class _BuiltinTimeout(TimeoutError, asyncio.TimeoutError):
        """Python 3.10: asyncio's TimeoutError is a class of its own (3.11: the built-in one)."""


class RequestTimeout(Timeout, _BuiltinTimeout):
    """The client's own deadline (`timeout=`, `request_timeout`, `start_timeout`) ran out before the
    answer came; the request was cancelled at the host (`$/cancelRequest`). `timeout` is that
    deadline in seconds, `reason` "clientTimeout", `retryable` True.

    A `Timeout` (−32006) like the host's own deadlines, and a built-in `TimeoutError`
    (= `asyncio.TimeoutError`), which is what this used to raise (with an empty message).
    """

    def __init__(self, request_method: str, timeout: float) -> None:
        super().__init__(f"no answer within {timeout:g} s; the request was cancelled at the host", code=Timeout.code,
                         data={"reason": "clientTimeout", "retryable": True}, request_method=request_method)
        self.timeout = timeout


class FrameTooLarge(AuthBridgeError):
    """An answer was longer than `max_frame_bytes`; it was skipped and the bridge goes on."""


_BY_CODE: dict[int, type[AuthBridgeError]] = {
    cls.code: cls for cls in (
        ParseError, InvalidRequest, MethodNotFound, InvalidParams, InternalError, ServerNotInitialized,
        RequestCancelled, NotSignedIn, ProviderUnknown, ProviderRefused, UserCancelled, Timeout,
        ProviderUnavailable, PluginError, Unsupported, UnsupportedProtocolVersion, StorageError,
        NoPendingSignIn, ConfigurationError)
    if cls.code is not None
}


def error_from_wire(error: Any, request_method: str | None = None) -> AuthBridgeError:
    """The exception for a JSON-RPC `error` object; an unknown code (from a newer host) gives the
    base class with that code."""
    if not isinstance(error, dict):
        return ProtocolError(f"malformed error object: {type(error).__name__}", request_method=request_method)
    code = error.get("code")
    message = error.get("message")
    if not isinstance(message, str):
        message = "error"
    data = error.get("data") if isinstance(error.get("data"), dict) else None
    cls = _BY_CODE.get(code, AuthBridgeError) if isinstance(code, int) else AuthBridgeError
    return cls(message, code=code if isinstance(code, int) else None, data=data, request_method=request_method)
