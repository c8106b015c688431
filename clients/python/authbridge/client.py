"""The asyncio API: `AuthBridge`, one method per bridge method, and `connect()`.

    async with authbridge.connect(plugins=["/opt/authbridge/plugins"]) as bridge:
        status = await bridge.check_sign_in_status("corp")

Why a class that owns the process: the host's lifetime *is* the session's lifetime (held
refresh tokens, pending sign-ins, the loopback listener), so starting it, initializing it and
shutting it down cleanly belong together, in one `async with`.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import os
import re
import subprocess
import sys
import threading
import urllib.parse
from collections.abc import Generator, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, overload

from . import __version__
from .errors import AgentNotRunning, AuthBridgeError, BridgeClosed, HostExited, ProviderUnknown
from .protocol import Connection, EventStream, FrameTap, Listeners, ProgressCallback
from .transport import DEFAULT_MAX_FRAME_BYTES, AgentNotYours, AgentSocket, HostProcess, agent_socket_path, find_executable
from .types import (AccessTokenResult, Event, FetchResult, Flow, InitializeResult, ProfileInfo, ProvidersList,
                    SessionChanged, SignInProgress, SignInStatus, SignOutProgress, SignOutResult, ProfilesChanged)

if TYPE_CHECKING:   # imported only when asked for: each needs its HTTP library
    from . import httpx as _httpx
    from . import httpx2 as _httpx2
    from . import requests as _requests

__all__ = ["AuthBridge", "connect", "PROTOCOL_VERSION", "open_in_browser", "profile_name_for_url"]

#: The HTTP libraries `auth_for_url` makes an `auth=` object for.
HttpLibrary = Literal["httpx", "httpx2", "requests"]

log = logging.getLogger("authbridge")

#: The protocol version this client speaks (bridge-spec/README.md §9).
PROTOCOL_VERSION = "1.0"

def _drop_none(**params: Any) -> dict[str, Any]:
    """Params with the unset ones left out: the host treats absent and default alike, and
    rejects unknown members, so nothing is sent that the caller did not set."""
    return {name: value for name, value in params.items() if value is not None}


def _resource(resource: str | Sequence[str] | None) -> str | list[str] | None:
    """`resource` as the wire takes it: one URI as a string, several as an array (a lone string
    is never split into characters)."""
    if resource is None or isinstance(resource, str):
        return resource
    return list(resource)


def profile_name_for_url(url: str) -> str:
    """The profile `sign_in_to_url` and `auth_for_url` configure for a protected resource's URL:
    its host in lower case, with `-PORT` when the URL names a port that is not the scheme's
    default ("mcp.example.com", "127.0.0.1-8080"); any other character than a letter, digit,
    dot or hyphen becomes a hyphen (an IPv6 address)."""
    parts = urllib.parse.urlsplit(url)
    host = (parts.hostname or "").lower()
    if parts.scheme.lower() not in ("http", "https") or not host:
        raise ValueError(f"not an http(s) URL with a host: {url!r}")
    try:
        port = parts.port
    except ValueError:
        raise ValueError(f"not a valid port in {url!r}") from None
    try:
        host = str(ipaddress.ip_address(host))
    except ValueError:
        pass
    name = re.sub(r"[^a-z0-9.-]", "-", host)
    default = 443 if parts.scheme.lower() == "https" else 80
    return f"{name}-{port}" if port is not None and port != default else name


def open_in_browser(event: SignInProgress) -> None:
    """A sign-in's progress for a person at this computer: at stage "openUrl" the page opens in
    their browser (`webbrowser`: `$BROWSER`, else the desktop's), or its address is printed on
    stderr when none opens; at "deviceCode" the code and where to enter it are printed. The
    browser is started on a thread of its own (the bridge's loop goes on meanwhile)."""
    if event.stage == "deviceCode" and event.user_code:
        print(f"To sign in, open {event.verification_uri} and enter the code {event.user_code}", file=sys.stderr,
              flush=True)
        return
    if event.stage != "openUrl" or not event.url:
        return
    url = event.url

    def run() -> None:
        import webbrowser   # only when a page is to be opened
        try:
            opened = webbrowser.open(url)
        except Exception:  # noqa: BLE001 - a broken browser setting: show the page instead
            opened = False
        if not opened:
            print(f"Open this page to sign in: {url}", file=sys.stderr, flush=True)
    threading.Thread(target=run, name="authbridge-browser", daemon=True).start()


class AuthBridge(Listeners):
    """A client of one `authbridge serve` process, or of the user's running `authbridge agent`.

    Start it with `async with AuthBridge(...)` / `async with connect(...)`, or `await connect(...)`
    and later `await bridge.close()`. Methods raise the `authbridge.errors` class of the host's
    error code; `HostExited` when the host died (then `restart()` starts a new one).

    With the agent (one broker per login session, shared by every app of the user) refreshes are
    shared with the other apps, and a sign-in or sign-out in any of them, or `authbridge login` in
    a terminal, reaches this bridge at once as `session/changed`. The agent has its own plugins,
    profiles and vault: `plugins`, `config`, `args`… configure a host of this bridge's own (or one
    `autostart` starts), and `configure_profile` changes the agent's profiles for every app.

    Arguments:
      executable: path or name of the host; default: `AUTHBRIDGE` of `env`, else of this process's
        environment, else the host bundled in the platform wheel, else `authbridge` on PATH
        (`env`'s PATH when it has one).
      plugins: plugin folders (`--plugins`, repeatable); config: profiles file (`--config`);
      no_default_plugins: only the given folders (`--no-default-plugins`); args: further host
      arguments (e.g. `["--vault", "memory"]`); env / cwd: the host's environment and folder.
      request_timeout: default per-call deadline in seconds (None: the host's own bounds apply —
      a sign-in waits up to its `timeout_ms`, a fetch up to 30 s).
      start_timeout: bound on start-up and `initialize`; shutdown_timeout: bound on each step of
      `close()` (shutdown → exit → SIGTERM → SIGKILL).
      max_frame_bytes: longest frame accepted from the host (default 64 MiB, the spec's limit);
      a longer answer fails its call with `FrameTooLarge` and the bridge goes on.
      on_frame: `fn(direction, raw_line, parsed)` for every frame sent and received — for tests
      and debugging only: frames carry tokens.
      agent: False (default): start a host of this bridge's own (`authbridge serve`); "auto": use
      the agent when it answers on its socket, else start a host as with False; True: the agent
      only (`AgentNotRunning` when none answers). What answers must run as this user (the
      kernel names the peer, SO_PEERCRED): another user's socket counts as no agent.
      agent_socket: the agent's socket; default `AUTHBRIDGE_AGENT_SOCKET` (of `env`, then of this
      process), else `$XDG_RUNTIME_DIR/authbridge/agent.sock`.
      autostart: with `agent`, start `authbridge agent` (with this bridge's plugins, config and
      args) when none answers, and use it: it outlives this program and serves the user's other
      apps. Never done unless asked: without it a missing agent means a host of this bridge's
      own ("auto") or `AgentNotRunning` (True).
    """

    def __init__(self, executable: str | os.PathLike[str] | None = None, *,
                 plugins: Iterable[str | os.PathLike[str]] = (), config: str | os.PathLike[str] | None = None,
                 no_default_plugins: bool = False, args: Sequence[str] = (), env: Mapping[str, str] | None = None,
                 cwd: str | os.PathLike[str] | None = None, client_name: str = "authbridge-python",
                 client_version: str = __version__, protocol_version: str = PROTOCOL_VERSION,
                 request_timeout: float | None = None, start_timeout: float = 30.0,
                 shutdown_timeout: float = 5.0, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
                 stderr_lines: int = 200, on_frame: FrameTap | None = None,
                 agent: bool | Literal["auto"] = False, agent_socket: str | os.PathLike[str] | None = None,
                 autostart: bool = False) -> None:
        if agent not in (True, False, "auto"):
            raise ValueError(f'agent must be True, False or "auto", not {agent!r}')
        self.agent = agent
        self._agent_socket = agent_socket
        self._autostart = autostart
        self._executable = executable
        argv_tail = ["serve"]
        if no_default_plugins:
            argv_tail.append("--no-default-plugins")
        for folder in plugins:
            argv_tail += ["--plugins", os.fspath(folder)]
        if config is not None:
            argv_tail += ["--config", os.fspath(config)]
        argv_tail += list(args)
        self._argv_tail = argv_tail
        self._env = dict(env) if env is not None else None
        self._cwd = cwd
        self._client_info = {"name": client_name, "version": client_version}
        self._protocol_version = protocol_version
        self.request_timeout = request_timeout
        self.start_timeout = start_timeout
        self.shutdown_timeout = shutdown_timeout
        self._max_frame_bytes = max_frame_bytes
        self._stderr_lines = stderr_lines
        self._on_frame = on_frame
        super().__init__()
        self._streams: set[EventStream[Event]] = set()
        # Runtime profiles (configure_profile), in the order they were configured: a new host
        # knows only its configuration file, so `start()` configures them again.
        self._profiles: dict[str, tuple[str, dict[str, Any] | None]] = {}
        self._connection: Connection | None = None
        self._process: HostProcess | AgentSocket | None = None
        self._info: InitializeResult | None = None

    # ── Life cycle ──────────────────────────────────────────────────────────

    @property
    def argv(self) -> list[str]:
        """The host's command line (the executable resolved now)."""
        return [find_executable(self._executable, self._env), *self._argv_tail]

    async def start(self) -> InitializeResult:
        """Starts the host (or connects to the agent, see `agent`) and runs `initialize` /
        `initialized`, within `start_timeout`; then configures again, in order, the profiles
        `configure_profile` added to an earlier host of this bridge (if one fails, the others are
        still configured and the first error is raised; the host keeps running)."""
        if self._connection is not None and not self._connection.closed.done():
            raise RuntimeError("this AuthBridge is already running")
        if self.agent is not False:
            info = await self._start_on_agent()
            if info is not None:
                return info
        process = HostProcess(self.argv, env=self._env, cwd=self._cwd, max_frame_bytes=self._max_frame_bytes,
                              stderr_lines=self._stderr_lines)
        await process.start()
        return await self._start_on(process)

    async def _start_on(self, process: HostProcess | AgentSocket) -> InitializeResult:
        connection = Connection(process, subscribers=self._subscribers, streams=self._streams, on_frame=self._on_frame)
        connection.start()
        self._process, self._connection = process, connection
        try:
            result = await connection.request(
                "initialize", {"protocolVersion": self._protocol_version, "clientInfo": self._client_info},
                timeout=self.start_timeout)
            await connection.notify("initialized", {})
        except BaseException:
            # Whatever went wrong (version refused, host died, deadline), leave no process behind.
            await connection.close(min(self.shutdown_timeout, 2.0))
            raise
        self._info = InitializeResult.from_wire(result)
        for warning in self._info.warnings:
            log.warning("authbridge: %s", warning)
        await self._replay_profiles()
        return self._info

    @property
    def agent_socket(self) -> str | None:
        """The agent's socket this bridge uses or would use (see `agent_socket` of `connect`)."""
        return agent_socket_path(self._agent_socket, self._env)

    @property
    def on_agent(self) -> bool:
        """Whether this bridge talks to the agent (rather than a host of its own)."""
        return isinstance(self._process, AgentSocket) and self.running

    async def _start_on_agent(self) -> InitializeResult | None:
        """Initialized on the agent; None when there is none and `agent` is "auto"."""
        path = self.agent_socket
        if path is None:
            if self.agent is True:
                raise AgentNotRunning("no agent socket to use: XDG_RUNTIME_DIR is not set; set AUTHBRIDGE_AGENT_SOCKET "
                                      "or pass agent_socket=")
            return None
        started = False
        while True:
            socket = AgentSocket(path, max_frame_bytes=self._max_frame_bytes)
            try:
                await socket.start()
            except AgentNotYours as error:
                # Another user's socket at the path: no agent of ours can be started there either.
                if self.agent is True:
                    raise AgentNotRunning(str(error), socket=path) from error
                log.warning("authbridge: %s; starting a host of this bridge's own", error)
                return None
            except OSError as error:
                if self._autostart and not started:
                    started = True
                    await self._start_agent(path)
                    continue
                if self.agent is True:
                    raise AgentNotRunning(
                        f"no authbridge agent answers on {path} ({error.strerror or error}); start one with "
                        "`authbridge agent` (or `systemctl --user enable --now authbridge.socket`)", socket=path) from error
                log.debug("no authbridge agent on %s (%s): starting a host", path, error.strerror or error)
                return None
            try:
                return await self._start_on(socket)
            except HostExited as error:
                if error.agent is None or self.agent is True:
                    raise
                log.warning("authbridge: the agent on %s closed the connection; starting a host of this bridge's own", path)
                return None

    async def _start_agent(self, path: str) -> None:
        """`authbridge agent` for `autostart`, detached from this program (its own session; a
        shell in between exits at once, so the agent is nobody's child here and outlives us).
        Returns once it listens (it writes its socket's path) or has ended (another agent won
        the race to the socket: the connection that follows finds that one)."""
        argv = [find_executable(self._executable, self._env), "agent", "--socket", path, *self._argv_tail[1:]]
        launcher = subprocess.Popen(["/bin/sh", "-c", 'exec </dev/null 2>/dev/null; "$0" "$@" &', *argv],
                                    stdout=subprocess.PIPE, env=self._env, cwd=self._cwd, start_new_session=True)
        try:
            loop = asyncio.get_running_loop()
            assert launcher.stdout is not None
            ready = await asyncio.wait_for(loop.run_in_executor(None, launcher.stdout.readline), self.start_timeout)
            log.debug("started an authbridge agent on %s (%s)", path, "ready" if ready else "it ended at once")
        finally:
            if launcher.stdout is not None:
                launcher.stdout.close()
            launcher.wait()

    async def _replay_profiles(self) -> None:
        failures: list[AuthBridgeError] = []
        for name, (plugin, settings) in list(self._profiles.items()):
            try:
                await self.configure_profile(name, plugin, settings, timeout=self.start_timeout)
            except AuthBridgeError as error:
                log.warning("authbridge: profile %r could not be configured again: %s", name, error)
                failures.append(error)
        if failures:
            raise failures[0]

    async def close(self) -> int | None:
        """Shuts the host down cleanly and waits for it (bounded, see `shutdown_timeout`).
        Calls still running are cancelled by the host (`RequestCancelled`), or fail with
        `BridgeClosed` if it ended without answering; event streams end. Returns the exit status
        (0 after a clean shutdown; None on the agent, which goes on serving the user's other
        apps: only this connection ends). Closing twice is harmless."""
        if self._connection is None:
            return None
        code = await self._connection.close(self.shutdown_timeout)
        log.debug("the authbridge host exited with status %s", code)
        return code

    async def restart(self) -> InitializeResult:
        """Stops the current host (cleanly if it still runs) and starts a new one with the same
        arguments. Callbacks from `on()`, open event streams and the profiles added with
        `configure_profile` carry over; stored sessions are the vault's, so they do too."""
        if self._connection is not None:
            await self._connection.close(self.shutdown_timeout, end_streams=False)
        return await self.start()

    async def __aenter__(self) -> AuthBridge:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def __await__(self) -> Generator[Any, None, AuthBridge]:
        """`bridge = await connect(...)`: started; call `close()` when done."""
        async def started() -> AuthBridge:
            await self.start()
            return self
        return started().__await__()

    @property
    def info(self) -> InitializeResult:
        """The host's `initialize` answer (plugins, profiles, storage, warnings)."""
        if self._info is None:
            raise BridgeClosed("the bridge has not been started")
        return self._info

    @property
    def running(self) -> bool:
        return self._connection is not None and not self._connection.closed.done()

    @property
    def pid(self) -> int | None:
        """The host's process id (the agent's, on the agent)."""
        return self._process.pid if self._process else None

    @property
    def returncode(self) -> int | None:
        """The host's exit status once it has exited, else None."""
        return self._process.returncode if self._process else None

    def stderr_tail(self, lines: int = 20) -> list[str]:
        """The host's last log lines (never tokens): for diagnostics and bug reports."""
        return self._process.stderr_tail(lines) if self._process else []

    # ── Events ──────────────────────────────────────────────────────────────

    @overload
    def events(self, method: Literal["session/changed"], /) -> EventStream[SessionChanged]: ...
    @overload
    def events(self, method: Literal["signIn/progress"], /) -> EventStream[SignInProgress]: ...
    @overload
    def events(self, method: Literal["signOut/progress"], /) -> EventStream[SignOutProgress]: ...
    @overload
    def events(self, method: Literal["profiles/changed"], /) -> EventStream[ProfilesChanged]: ...
    @overload
    def events(self, *methods: str) -> EventStream[Event]: ...

    def events(self, *methods: str) -> EventStream[Any]:
        """`async for event in bridge.events("session/changed"):` — the notifications (of
        `methods`, or all) from now on. Subscribed at once, so create it *before* the call whose
        events you want."""
        return EventStream(self._live(), methods)

    def _live(self) -> Connection:
        if self._connection is None or self._connection.closed.done():
            raise self._connection._closed_error() if self._connection else BridgeClosed("the bridge has not been started")
        return self._connection

    # ── Raw access ──────────────────────────────────────────────────────────

    async def request(self, method: str, params: dict[str, Any] | None = None, *,
                      timeout: float | None = None, on_progress: ProgressCallback | None = None) -> Any:
        """Any method by name, with its raw JSON result: for methods newer than this client.
        `timeout` (s) defaults to `request_timeout`; when it runs out the request is cancelled at
        the host and `asyncio.TimeoutError` is raised. Cancelling the calling task cancels the
        request at the host too (`$/cancelRequest`)."""
        connection = self._live()
        return await connection.request(method, params, timeout=timeout if timeout is not None else self.request_timeout,
                                        on_progress=on_progress)

    async def notify(self, method: str, params: dict[str, Any] | None = None) -> None:
        await self._live().notify(method, params)

    async def discover(self, *, timeout: float | None = None) -> dict[str, Any]:
        """`rpc.discover`: the host's OpenRPC document."""
        document = await self.request("rpc.discover", timeout=timeout)
        return document if isinstance(document, dict) else {}

    # ── The bridge's methods (bridge-spec/README.md §4) ─────────────────────

    async def list_providers(self, *, timeout: float | None = None) -> ProvidersList:
        """Every plugin manifest found (loaded or refused, with why) and every profile."""
        return ProvidersList.from_wire(await self.request("listProviders", {}, timeout=timeout))

    async def configure_profile(self, name: str, plugin: str, settings: Mapping[str, Any] | None = None, *,
                                timeout: float | None = None) -> ProfileInfo:
        """Adds or replaces a runtime profile (never written to the configuration file; this
        bridge configures it again on a new host, see `start()`). Replacing one with other
        settings discards its session. A plugin the host has not loaded raises `ProviderUnknown`
        (reason "unknownPlugin") saying which plugins it did load and where to put the missing one."""
        kept = dict(settings) if settings is not None else None
        params = _drop_none(name=name, plugin=plugin, settings=kept)
        try:
            result = await self.request("configureProfile", params, timeout=timeout)
        except ProviderUnknown as error:
            if error.reason != "unknownPlugin":
                raise
            raise ProviderUnknown(f"{error.message} {self._plugin_hint(plugin)}", code=error.code, data=error.data,
                                  request_method=error.request_method) from None
        self._profiles.pop(name, None)
        self._profiles[name] = (plugin, kept)
        return ProfileInfo.from_wire(result)

    def _plugin_hint(self, plugin: str) -> str:
        """What the host found at start-up (its `initialize` answer) and what to do about a
        plugin it lacks: the host's own message names only the folders it searched."""
        found = self._info.providers if self._info else []
        loaded = sorted(p.id for p in found if p.loaded and p.id)
        folders = sorted({os.path.dirname(p.path) for p in found if p.loaded})
        if loaded:
            parts = [f"Loaded plugins: {', '.join(loaded)} (from {', '.join(folders)})."]
        else:
            parts = ["The host loaded no plugin."]
        refused = [p for p in found if not p.loaded and (p.id == plugin or os.path.basename(p.path) == f"{plugin}.json")]
        if refused:
            parts += [f"It refused {p.path}: {p.message or p.reason}." for p in refused]
            parts.append("Fix that and start the bridge again.")
        else:
            parts.append(f"To add {plugin!r}, put its manifest and library ({plugin}.json, a .so) in a plugin folder "
                         "(one given with connect(plugins=[...]), or $XDG_DATA_HOME/authbridge/plugins) "
                         "and start the bridge again.")
        return " ".join(parts)

    async def remove_profile(self, name: str, *, timeout: float | None = None) -> bool:
        """Removes a profile and discards its session (nothing is revoked: `sign_out` first for
        that). False when no profile had that name. A new host will not have it either."""
        result = await self.request("removeProfile", {"name": name}, timeout=timeout)
        self._profiles.pop(name, None)
        return bool(result.get("removed")) if isinstance(result, dict) else False

    async def list_accounts(self, provider: str | None = None, *,
                            timeout: float | None = None) -> list[SignInStatus]:
        """The signed-in accounts (of `provider`, or of all profiles), current ones first. Local
        knowledge only: never contacts a provider."""
        result = await self.request("listAccounts", _drop_none(provider=provider), timeout=timeout)
        accounts = result.get("accounts") if isinstance(result, dict) else None
        return [SignInStatus.from_wire(a) for a in accounts or []]

    async def check_sign_in_status(self, provider: str, *, account: str | None = None,
                                   timeout: float | None = None) -> SignInStatus:
        """Whether `provider` (or that `account` of it) is signed in. May refresh the tokens; a
        provider that cannot be reached gives state "offline", never an error."""
        params = _drop_none(provider=provider, account=account)
        return SignInStatus.from_wire(await self.request("checkSignInStatus", params, timeout=timeout))

    async def request_oauth_tokens(self, provider: str, *, flow: Flow | None = None,
                                   session_id: str | None = None, scopes: Sequence[str] | None = None,
                                   login_hint: str | None = None, redirect_uri: str | None = None,
                                   timeout_ms: int | None = None, resource: str | Sequence[str] | None = None,
                                   on_progress: ProgressCallback | None = None,
                                   timeout: float | None = None) -> SignInStatus:
        """Signs in and answers when the sign-in has finished.

        `on_progress(event)` receives this sign-in's `SignInProgress` events: at stage "openUrl"
        open `event.url` (browser flow: in the system browser; the redirect comes back to the
        host), at "deviceCode" show `event.user_code`. `timeout_ms` bounds the wait for the user
        at the host (`Timeout` error); `timeout` is the client's own deadline.

        `flow="clientCredentials"`: no user and no browser, the profile's own client (a machine
        identity). `scopes` beyond those an account holds ask the user again (incremental
        consent), keeping the account. `resource`: the protected resource(s) the sign-in is for
        (RFC 8707; default: the profile setting `resources`).
        """
        params = _drop_none(provider=provider, flow=flow, sessionId=session_id,
                            scopes=list(scopes) if scopes is not None else None, loginHint=login_hint,
                            redirectUri=redirect_uri, timeoutMs=timeout_ms, resource=_resource(resource))
        result = await self.request("requestOAuthTokens", params, timeout=timeout, on_progress=on_progress)
        return SignInStatus.from_wire(result)

    async def complete_sign_in(self, provider: str, callback_url: str, *, timeout: float | None = None) -> bool:
        """External flow: hands the intercepted redirect to the pending sign-in. Only
        acknowledges (True); the outcome is the answer of `request_oauth_tokens`."""
        result = await self.request("completeSignIn", {"provider": provider, "callbackUrl": callback_url},
                                    timeout=timeout)
        return bool(result.get("accepted")) if isinstance(result, dict) else False

    async def complete_sign_out(self, provider: str, callback_url: str, *, timeout: float | None = None) -> bool:
        """External end-session: hands the provider's post-logout redirect (the navigation that
        starts with the "signOut/progress" event's `callback_prefix`) to the pending sign-out.
        Only acknowledges (True); the outcome is `sign_out`'s `end_session` ("confirmed")."""
        result = await self.request("completeSignOut", {"provider": provider, "callbackUrl": callback_url},
                                    timeout=timeout)
        return bool(result.get("accepted")) if isinstance(result, dict) else False

    async def get_access_token(self, provider: str, *, account: str | None = None,
                               min_validity_ms: int | None = None, force_refresh: bool | None = None,
                               method: str | None = None, url: str | None = None, dpop_nonce: str | None = None,
                               scopes: Sequence[str] | None = None, resource: str | Sequence[str] | None = None,
                               timeout: float | None = None) -> AccessTokenResult:
        """A valid access token (renewed first when it has less than `min_validity_ms` left,
        default 60 s, or when `force_refresh` says the provider just rejected it) and the
        headers/cookies to attach. Prefer `fetch`, which never exposes it.

        `method` and `url`: the request the token is for. A DPoP-bound session's answer
        (`token_type` "DPoP", RFC 9449) then carries the proof for exactly that request in its
        headers; ask again for every request. `dpop_nonce`: the `DPoP-Nonce` that request was
        refused for (401 `use_dpop_nonce`), for the proof of its retry.

        `scopes` and `resource` (one absolute URI or several, RFC 8707): a token for exactly
        those, kept by the host per (scopes, resource) beside the session's own. Scopes the
        sign-in's grant does not cover raise `ProviderRefused` (reason "insufficientScope") whose
        `missing_scopes` says which: sign in again with them (`request_oauth_tokens(scopes=...)`)."""
        params = _drop_none(provider=provider, account=account, minValidityMs=min_validity_ms,
                            forceRefresh=force_refresh, method=method, url=url, dpopNonce=dpop_nonce,
                            scopes=list(scopes) if scopes is not None else None, resource=_resource(resource))
        return AccessTokenResult.from_wire(await self.request("getAccessToken", params, timeout=timeout))

    async def exchange_token(self, provider: str, *, account: str | None = None, audience: str | None = None,
                             resource: str | Sequence[str] | None = None, scopes: Sequence[str] | None = None,
                             requested_token_type: str | None = None,
                             subject_token_type: Literal["accessToken", "idToken"] | None = None,
                             min_validity_ms: int | None = None, timeout: float | None = None) -> AccessTokenResult:
        """Token exchange (RFC 8693): the session's access token (or, with `subject_token_type`
        "idToken", its ID token) exchanged at the provider for a token for another `audience`,
        `resource` or `scopes`; `requested_token_type` a token type URI or one of the short names
        "accessToken", "idToken", "jwt". The host keeps the result and answers from it until it
        is about to expire (`min_validity_ms`), as `get_access_token` does."""
        params = _drop_none(provider=provider, account=account, audience=audience, resource=_resource(resource),
                            scopes=list(scopes) if scopes is not None else None,
                            requestedTokenType=requested_token_type, subjectTokenType=subject_token_type,
                            minValidityMs=min_validity_ms)
        return AccessTokenResult.from_wire(await self.request("exchangeToken", params, timeout=timeout))

    async def fetch(self, provider: str, url: str, *, method: str | None = None,
                    headers: Mapping[str, str] | None = None, body: str | None = None,
                    account: str | None = None, timeout_ms: int | None = None,
                    scopes: Sequence[str] | None = None, resource: str | Sequence[str] | None = None,
                    step_up: bool | None = None, on_progress: ProgressCallback | None = None,
                    timeout: float | None = None) -> FetchResult:
        """An HTTP request made and authorized by the host (refreshing and replaying once on an
        expired session). `url` is absolute, or a path against the profile's `apiBaseUrl`. Any
        HTTP status is a result. `scopes` / `resource`: authorize it with the token for exactly
        those (as `get_access_token`'s; default: the configured resource `url` is under, if any).
        A 403 `insufficient_scope` asks the user for the scopes it names once and replays (unless
        `step_up=False`); that sign-in's progress goes to `on_progress`."""
        params = _drop_none(provider=provider, account=account, url=url, method=method,
                            headers=dict(headers) if headers is not None else None, body=body, timeoutMs=timeout_ms,
                            scopes=list(scopes) if scopes is not None else None, resource=_resource(resource),
                            stepUp=step_up)
        return FetchResult.from_wire(await self.request("fetch", params, timeout=timeout, on_progress=on_progress))

    async def sign_out(self, provider: str, *, account: str | None = None, end_session: bool | None = None,
                       flow: Literal["browser", "external"] | None = None, end_session_timeout_ms: int | None = None,
                       timeout: float | None = None) -> SignOutResult:
        """Revokes at the provider (best effort) and deletes the tokens whatever it said. A
        pending sign-in of that provider ends with `UserCancelled` (reason "signedOut").
        `end_session` also ends the provider's own session (default: the profile's `endSession`
        setting), after a "signOut/progress" event with the page to open: with flow "browser" the
        host waits (`end_session_timeout_ms`) for the provider's redirect to its listener; with
        "external" the app opens the page and hands the redirect back with `complete_sign_out`
        (the result's `end_session.state` is then "confirmed"; "requested" with `url` if none came)."""
        params = _drop_none(provider=provider, account=account, endSession=end_session, flow=flow,
                            timeoutMs=end_session_timeout_ms)
        return SignOutResult.from_wire(await self.request("signOut", params, timeout=timeout))


    # ── A protected resource by its URL alone (RFC 9728) ─────────────────────

    async def sign_in_to_url(self, url: str, *, profile: str | None = None, flow: Flow | None = None,
                             scopes: Sequence[str] | None = None,
                             on_progress: ProgressCallback | None = open_in_browser, timeout_ms: int | None = None,
                             timeout: float | None = None) -> SignInStatus:
        """Signs in to the protected resource at `url` (an MCP server's endpoint, an API) knowing
        nothing else: configures the `oidc` profile `profile` (default `profile_name_for_url(url)`)
        with settings `{"resource": url}` — the host finds the authorization server from the
        resource's metadata (RFC 9728, RFC 8414) and registers itself there (RFC 7591) — and, unless
        that profile is signed in already (a session kept in the vault from an earlier run counts),
        signs in with `flow` (default the profile's first, the browser) and `scopes`, `on_progress`
        getting the sign-in's progress (default `open_in_browser`). Returns the status; its
        `provider` is the profile's name. Configuring a profile again with other settings ends its
        session: give each resource of one host its own `profile`."""
        name = profile if profile is not None else profile_name_for_url(url)
        await self.configure_profile(name, "oidc", {"resource": url}, timeout=timeout)
        status = await self.check_sign_in_status(name, timeout=timeout)
        if status.state in ("signedIn", "offline"):
            return status
        return await self.request_oauth_tokens(name, flow=flow, scopes=scopes, on_progress=on_progress,
                                               timeout_ms=timeout_ms, timeout=timeout)

    @overload
    async def auth_for_url(self, url: str, *, library: Literal["httpx"] = ..., profile: str | None = ...,
                           flow: Flow | None = ..., scopes: Sequence[str] | None = ...,
                           on_progress: ProgressCallback | None = ..., step_up: bool = ...,
                           timeout_ms: int | None = ..., timeout: float | None = ...) -> _httpx.AuthBridgeAuth: ...
    @overload
    async def auth_for_url(self, url: str, *, library: Literal["httpx2"], profile: str | None = ...,
                           flow: Flow | None = ..., scopes: Sequence[str] | None = ...,
                           on_progress: ProgressCallback | None = ..., step_up: bool = ...,
                           timeout_ms: int | None = ..., timeout: float | None = ...) -> _httpx2.AuthBridgeAuth: ...

    async def auth_for_url(self, url: str, *, library: Literal["httpx", "httpx2"] = "httpx",
                           profile: str | None = None, flow: Flow | None = None, scopes: Sequence[str] | None = None,
                           on_progress: ProgressCallback | None = open_in_browser, step_up: bool = True,
                           timeout_ms: int | None = None,
                           timeout: float | None = None) -> _httpx.AuthBridgeAuth | _httpx2.AuthBridgeAuth:
        """`sign_in_to_url(url, ...)`, then the `auth=` object of that profile for `library`:
        `authbridge.httpx.AuthBridgeAuth` (default) or `authbridge.httpx2.AuthBridgeAuth` (the
        `mcp` SDK's HTTP library). Its step-ups (a 403 `insufficient_scope`) sign in with the same
        `flow` and `on_progress`; `step_up=False` turns them off."""
        status = await self.sign_in_to_url(url, profile=profile, flow=flow, scopes=scopes, on_progress=on_progress,
                                           timeout_ms=timeout_ms, timeout=timeout)
        auth: _httpx.AuthBridgeAuth | _httpx2.AuthBridgeAuth = _auth_object(
            library, self, status.provider, flow=flow, on_progress=on_progress, step_up=step_up)
        return auth


def _auth_object(library: HttpLibrary, bridge: Any, profile: str, *, flow: Flow | None,
                 on_progress: ProgressCallback | None, step_up: bool) -> Any:
    """The `auth=` object of `library` (imported now: each needs its HTTP library)."""
    if library == "httpx":
        from .httpx import AuthBridgeAuth as HttpxAuth
        return HttpxAuth(bridge, profile, flow=flow, on_progress=on_progress, step_up=step_up)
    if library == "httpx2":
        from .httpx2 import AuthBridgeAuth as Httpx2Auth
        return Httpx2Auth(bridge, profile, flow=flow, on_progress=on_progress, step_up=step_up)
    if library == "requests":
        from .requests import AuthBridgeAuth as RequestsAuth
        return RequestsAuth(bridge, profile, flow=flow, on_progress=on_progress, step_up=step_up)
    raise ValueError(f'library must be "httpx", "httpx2" or "requests", not {library!r}')


#: `async with connect(...) as bridge:` or `bridge = await connect(...)`: the class itself, so
#: the options (see `AuthBridge`) are typed and documented in one place.
connect = AuthBridge

