"""Typed mirrors of the shapes in bridge-spec/openrpc.json (results and notifications).

Frozen dataclasses with snake_case attributes, each built by `from_wire(dict)`. Why
dataclasses and not the raw dicts: attribute access, editor completion, and reprs that can
hide secrets (an `AccessTokenResult` or `Cookie` printed by accident shows no token). Members a
newer host adds are ignored (spec §3 "Receivers"); nothing is validated here: the host is the
authority on its own output, and the tests check every frame against the schemas.

The `Literal` aliases list the values of protocol 1.0; the client asks for 1.0, and the host
sends nothing the negotiated version lacks (spec §9), so they are complete.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = [
    "Flow", "SignInState", "SessionState", "SignInStage", "Account", "StorageInfo", "SignInStatus",
    "Cookie", "CookieRef", "AccessTokenResult", "FetchResult", "RevocationFailure", "EndSessionState", "EndSessionOutcome",
    "SignOutResult",
    "ProfileInfo", "PluginStatus", "ProvidersList", "ServerInfo", "ServerCapabilities",
    "InitializeResult", "SessionChanged", "SignInProgress", "SignOutStage", "SignOutProgress", "ProfilesChanged", "Notification",
    "Event", "event_from_wire",
]

Flow = Literal["browser", "external", "device", "session", "clientCredentials"]
SignInState = Literal["signedIn", "notSignedIn", "offline", "licenseRevoked"]
SessionState = Literal["signedIn", "refreshed", "signedOut", "licenseRevoked"]
SignInStage = Literal["openUrl", "deviceCode", "waiting", "exchanging", "plugin"]
SignOutStage = Literal["openUrl", "waiting"]


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _details(value: Any) -> dict[str, str | int | float | bool | None] | None:
    """SessionDetails: non-secret provider facts (Salesforce instanceUrl…), None when absent."""
    return dict(value) if isinstance(value, dict) else None


@dataclass(frozen=True)
class Account:
    """Who is signed in; every member is optional (the provider may name nobody)."""
    id: str | None = None
    name: str | None = None
    email: str | None = None

    @classmethod
    def from_wire(cls, data: Any) -> Account | None:
        if not isinstance(data, dict):
            return None
        return cls(id=data.get("id"), name=data.get("name"), email=data.get("email"))


@dataclass(frozen=True)
class StorageInfo:
    """Where a profile's tokens are kept: backend memory|encrypted-file|secret-service|postgresql,
    protection none|encrypted|keyring."""
    backend: str
    protection: str

    @classmethod
    def from_wire(cls, data: Any) -> StorageInfo | None:
        if not isinstance(data, dict):
            return None
        return cls(backend=data.get("backend", ""), protection=data.get("protection", ""))


@dataclass(frozen=True)
class SignInStatus:
    """The state of one profile's (or account's) session. `expires_at`: the access token's
    expiry in ms since the epoch. `current` is set by `list_accounts` only."""
    provider: str
    state: SignInState
    reason: str | None = None
    account: Account | None = None
    expires_at: int | None = None
    message: str | None = None
    storage: StorageInfo | None = None
    current: bool | None = None
    details: dict[str, str | int | float | bool | None] | None = None
    #: "DPoP" when the session's tokens are bound to its key (RFC 9449), else "Bearer"; None when signed out.
    token_type: str | None = None
    #: As `ProfileInfo`'s: the profile's authorization server, and whether AuthBridge registered its client.
    issuer: str | None = None
    dynamic_client: bool | None = None

    @property
    def signed_in(self) -> bool:
        return self.state == "signedIn"

    @classmethod
    def from_wire(cls, data: Any) -> SignInStatus:
        data = _dict(data)
        return cls(provider=data.get("provider", ""), state=data.get("state", "notSignedIn"),
                   reason=data.get("reason"), account=Account.from_wire(data.get("account")),
                   expires_at=data.get("expiresAt"), message=data.get("message"),
                   storage=StorageInfo.from_wire(data.get("storage")), current=data.get("current"),
                   details=_details(data.get("details")), token_type=data.get("tokenType"), issuer=data.get("issuer"),
                   dynamic_client=data.get("dynamicClient"))


@dataclass(frozen=True)
class Cookie:
    """A cookie a web view must carry to be authorized. Its value is a secret: not in the repr."""
    name: str
    value: str = field(repr=False)
    domain: str
    path: str
    max_age: int | None = None
    secure: bool | None = None
    http_only: bool | None = None

    @classmethod
    def from_wire(cls, data: Any) -> Cookie:
        data = _dict(data)
        return cls(name=data.get("name", ""), value=data.get("value", ""), domain=data.get("domain", ""),
                   path=data.get("path", "/"), max_age=data.get("maxAge"), secure=data.get("secure"),
                   http_only=data.get("httpOnly"))


@dataclass(frozen=True)
class CookieRef:
    """A provider cookie a web view should delete at sign-out (never a value)."""
    name: str
    domain: str
    path: str

    @classmethod
    def from_wire(cls, data: Any) -> CookieRef:
        data = _dict(data)
        return cls(name=data.get("name", ""), domain=data.get("domain", ""), path=data.get("path", "/"))


@dataclass(frozen=True)
class AccessTokenResult:
    """An access token and what to attach to API calls. `access_token`, `headers` and `cookies`
    are secrets and stay out of the repr, so logging this object by mistake leaks nothing."""
    provider: str
    access_token: str = field(repr=False)
    token_type: str
    expires_at: int | None
    headers: dict[str, str] = field(repr=False, default_factory=dict)
    cookies: list[Cookie] = field(repr=False, default_factory=list)
    account: Account | None = None
    details: dict[str, str | int | float | bool | None] | None = None

    @classmethod
    def from_wire(cls, data: Any) -> AccessTokenResult:
        data = _dict(data)
        return cls(provider=data.get("provider", ""), access_token=data.get("accessToken", ""),
                   token_type=data.get("tokenType", "Bearer"), expires_at=data.get("expiresAt"),
                   headers=dict(_dict(data.get("headers"))),
                   cookies=[Cookie.from_wire(c) for c in _list(data.get("cookies"))],
                   account=Account.from_wire(data.get("account")), details=_details(data.get("details")))


@dataclass(frozen=True)
class FetchResult:
    """The provider's answer to `fetch`: any HTTP status is a result, not an error. `headers` have
    lower-case names; `body` is decoded as UTF-8."""
    status: int
    headers: dict[str, str]
    body: str = field(repr=False)

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    def json(self) -> Any:
        """The body parsed as JSON (raises `json.JSONDecodeError` when it is not)."""
        return json.loads(self.body)

    @classmethod
    def from_wire(cls, data: Any) -> FetchResult:
        data = _dict(data)
        return cls(status=data.get("status", 0), headers=dict(_dict(data.get("headers"))), body=data.get("body", ""))


@dataclass(frozen=True)
class RevocationFailure:
    """One token the provider did not revoke at sign-out (`token` is a name, never a value)."""
    token: str
    reason: str
    message: str

    @classmethod
    def from_wire(cls, data: Any) -> RevocationFailure:
        data = _dict(data)
        return cls(token=data.get("token", ""), reason=data.get("reason", ""), message=data.get("message", ""))


EndSessionState = Literal["confirmed", "requested", "unsupported", "noIdToken", "failed"]


@dataclass(frozen=True)
class EndSessionOutcome:
    """What the provider did when asked to end its own session (`sign_out(end_session=True)`,
    OpenID Connect RP-Initiated Logout). `url` (state "requested", external flow) is the page to
    open in the browser that holds the provider's session: it carries the ID token, never log it."""
    state: EndSessionState
    url: str | None = field(default=None, repr=False)
    message: str | None = None

    @classmethod
    def from_wire(cls, data: Any) -> EndSessionOutcome | None:
        if not isinstance(data, dict):
            return None
        return cls(state=data.get("state", "failed"), url=data.get("url"), message=data.get("message"))


@dataclass(frozen=True)
class SignOutResult:
    """Signing out always deletes the tokens; `revoked` / `failures` say what the provider did,
    `end_session` (when asked for) what it did with its own session."""
    provider: str
    signed_out: bool
    revoked: list[str]
    failures: list[RevocationFailure]
    account: Account | None = None
    clear_cookies: list[CookieRef] = field(default_factory=list)
    end_session: EndSessionOutcome | None = None

    @classmethod
    def from_wire(cls, data: Any) -> SignOutResult:
        data = _dict(data)
        return cls(provider=data.get("provider", ""), signed_out=bool(data.get("signedOut", True)),
                   revoked=list(_list(data.get("revoked"))),
                   failures=[RevocationFailure.from_wire(f) for f in _list(data.get("failures"))],
                   account=Account.from_wire(data.get("account")),
                   clear_cookies=[CookieRef.from_wire(c) for c in _list(data.get("clearCookies"))],
                   end_session=EndSessionOutcome.from_wire(data.get("endSession")))


@dataclass(frozen=True)
class ProfileInfo:
    """A configured profile (a plugin plus settings); `provider` parameters name profiles."""
    name: str
    plugin: str
    status: Literal["ready", "error"]
    flows: list[Flow]
    source: Literal["config", "runtime"]
    message: str | None = None
    #: Settings neither the plugin nor the host reads (ignored), each named with the key probably meant.
    warnings: list[str] = field(default_factory=list)
    #: The authorization server, once resolved (the setting issuer, or discovered from `resource`, RFC 9728).
    issuer: str | None = None
    #: True when it signs in with a client AuthBridge registered itself (RFC 7591).
    dynamic_client: bool | None = None
    #: The protected resource the profile is for (setting resource).
    resource: str | None = None

    @classmethod
    def from_wire(cls, data: Any) -> ProfileInfo:
        data = _dict(data)
        return cls(name=data.get("name", ""), plugin=data.get("plugin", ""), status=data.get("status", "error"),
                   flows=list(_list(data.get("flows"))), source=data.get("source", "runtime"),
                   message=data.get("message"), warnings=list(_list(data.get("warnings"))), issuer=data.get("issuer"),
                   dynamic_client=data.get("dynamicClient"), resource=data.get("resource"))


@dataclass(frozen=True)
class PluginStatus:
    """A plugin manifest the host found: `status` "loaded" (with its descriptor) or "refused"
    (with `reason` and `message`). `raw` keeps every member, including descriptor extras."""
    status: Literal["loaded", "refused"]
    path: str
    id: str | None = None
    version: str | None = None
    display_name: str | None = None
    description: str | None = None
    flows: list[Flow] = field(default_factory=list)
    capabilities: list[str] = field(default_factory=list)
    settings: dict[str, Any] | None = field(default=None, repr=False)
    reason: str | None = None
    message: str | None = None
    #: Where the plugin's code runs: "process" (its own runner process) or "none" (inside the
    #: host); always given for loaded plugins, sometimes for refused ones.
    isolation: Literal["process", "none"] | None = None
    #: What loading noticed without refusing the plugin (e.g. describe's description is not the manifest's).
    warnings: list[str] = field(default_factory=list)
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def loaded(self) -> bool:
        return self.status == "loaded"

    @classmethod
    def from_wire(cls, data: Any) -> PluginStatus:
        data = _dict(data)
        return cls(status=data.get("status", "refused"), path=data.get("path", ""), id=data.get("id"),
                   version=data.get("version"), display_name=data.get("displayName"),
                   description=data.get("description"), flows=list(_list(data.get("flows"))),
                   capabilities=list(_list(data.get("capabilities"))),
                   settings=data.get("settings") if isinstance(data.get("settings"), dict) else None,
                   reason=data.get("reason"), message=data.get("message"), isolation=data.get("isolation"),
                   warnings=list(_list(data.get("warnings"))), raw=dict(data))


@dataclass(frozen=True)
class ProvidersList:
    """`listProviders`: every plugin manifest found and every profile; `configuration_problem`:
    why the host could not use its configuration file when it last read it (None when it could)."""
    plugins: list[PluginStatus]
    profiles: list[ProfileInfo]
    configuration_problem: str | None = None

    @classmethod
    def from_wire(cls, data: Any) -> ProvidersList:
        data = _dict(data)
        return cls(plugins=[PluginStatus.from_wire(p) for p in _list(data.get("plugins"))],
                   profiles=[ProfileInfo.from_wire(p) for p in _list(data.get("profiles"))],
                   configuration_problem=data.get("configurationProblem"))


@dataclass(frozen=True)
class ServerInfo:
    name: str
    version: str


@dataclass(frozen=True)
class ServerCapabilities:
    flows: list[Flow]
    notifications: list[str]
    cancellation: bool = True
    batches: bool = False


@dataclass(frozen=True)
class InitializeResult:
    """The host's answer to `initialize`: negotiated version, plugins, profiles, storage, and
    start-up `warnings` (e.g. an unreadable configuration file) worth showing to someone;
    `configuration_problem`: why the configuration file could not be used, while it cannot (the
    host serves the profiles it last read; the agent says when this changes: `ProfilesChanged`)."""
    protocol_version: str
    server_info: ServerInfo
    capabilities: ServerCapabilities
    providers: list[PluginStatus]
    profiles: list[ProfileInfo]
    storage: StorageInfo | None
    warnings: list[str] = field(default_factory=list)
    configuration_problem: str | None = None

    @classmethod
    def from_wire(cls, data: Any) -> InitializeResult:
        data = _dict(data)
        server, caps = _dict(data.get("serverInfo")), _dict(data.get("capabilities"))
        return cls(protocol_version=data.get("protocolVersion", ""),
                   server_info=ServerInfo(name=server.get("name", ""), version=server.get("version", "")),
                   capabilities=ServerCapabilities(flows=list(_list(caps.get("flows"))),
                                                   notifications=list(_list(caps.get("notifications"))),
                                                   cancellation=bool(caps.get("cancellation", True)),
                                                   batches=bool(caps.get("batches", False))),
                   providers=[PluginStatus.from_wire(p) for p in _list(data.get("providers"))],
                   profiles=[ProfileInfo.from_wire(p) for p in _list(data.get("profiles"))],
                   storage=StorageInfo.from_wire(data.get("storage")),
                   warnings=[w for w in _list(data.get("warnings")) if isinstance(w, str)],
                   configuration_problem=data.get("configurationProblem"))


# ── Notifications (events) ─────────────────────────────────────────────────

@dataclass(frozen=True)
class SessionChanged:
    """`session/changed`: a session began, was renewed, ended, or lost its license. Never
    carries a token. `clear_cookies` (signedOut): provider cookies a web view should delete."""
    provider: str
    state: SessionState
    reason: str
    message: str | None = None
    account: Account | None = None
    clear_cookies: list[CookieRef] = field(default_factory=list)
    method: Literal["session/changed"] = field(default="session/changed", init=False, repr=False)

    @classmethod
    def from_wire(cls, data: Any) -> SessionChanged:
        data = _dict(data)
        return cls(provider=data.get("provider", ""), state=data.get("state", "signedOut"),
                   reason=data.get("reason", ""), message=data.get("message"),
                   account=Account.from_wire(data.get("account")),
                   clear_cookies=[CookieRef.from_wire(c) for c in _list(data.get("clearCookies"))])


@dataclass(frozen=True)
class SignInProgress:
    """`signIn/progress`: a step of the sign-in that `request_id` (a `requestOAuthTokens` call)
    is running. `openUrl` → open `url`; `deviceCode` → show `user_code` and `verification_uri`.
    The URL carries `state` and PKCE values: show it to the user, do not log it."""
    provider: str
    request_id: int | str
    stage: SignInStage
    url: str | None = field(default=None, repr=False)
    callback_prefix: str | None = None
    user_code: str | None = None
    verification_uri: str | None = None
    verification_uri_complete: str | None = field(default=None, repr=False)
    expires_at: int | None = None
    message: str | None = None
    method: Literal["signIn/progress"] = field(default="signIn/progress", init=False, repr=False)

    @classmethod
    def from_wire(cls, data: Any) -> SignInProgress:
        data = _dict(data)
        return cls(provider=data.get("provider", ""), request_id=data.get("requestId", 0),
                   stage=data.get("stage", "plugin"), url=data.get("url"),
                   callback_prefix=data.get("callbackPrefix"), user_code=data.get("userCode"),
                   verification_uri=data.get("verificationUri"),
                   verification_uri_complete=data.get("verificationUriComplete"),
                   expires_at=data.get("expiresAt"), message=data.get("message"))


@dataclass(frozen=True)
class SignOutProgress:
    """`signOut/progress`: a step of ending the provider's session for the sign-out `request_id`
    (a `signOut` with `end_session`). `openUrl` → open `url` in the browser that signed in; with
    the external flow, hand the redirect that starts with `callback_prefix` to
    `complete_sign_out`. The URL carries the ID token (`id_token_hint`): open it, never log it."""
    provider: str
    request_id: int | str
    stage: SignOutStage
    url: str | None = field(default=None, repr=False)
    callback_prefix: str | None = None
    message: str | None = None
    method: Literal["signOut/progress"] = field(default="signOut/progress", init=False, repr=False)

    @classmethod
    def from_wire(cls, data: Any) -> SignOutProgress:
        data = _dict(data)
        return cls(provider=data.get("provider", ""), request_id=data.get("requestId", 0), stage=data.get("stage", "waiting"),
                   url=data.get("url"), callback_prefix=data.get("callbackPrefix"), message=data.get("message"))


@dataclass(frozen=True)
class ProfilesChanged:
    """`profiles/changed`: the host (the agent) read its configuration file again and these
    profiles were added, changed (their sessions ended) or removed; `configuration_problem` while
    the file cannot be used (nothing changed then). `list_providers()` gives the profiles now."""
    added: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    configuration_problem: str | None = None
    method: Literal["profiles/changed"] = field(default="profiles/changed", init=False, repr=False)

    @classmethod
    def from_wire(cls, data: Any) -> ProfilesChanged:
        data = _dict(data)
        return cls(added=[n for n in _list(data.get("added")) if isinstance(n, str)],
                   changed=[n for n in _list(data.get("changed")) if isinstance(n, str)],
                   removed=[n for n in _list(data.get("removed")) if isinstance(n, str)],
                   configuration_problem=data.get("configurationProblem"))


@dataclass(frozen=True)
class Notification:
    """A notification this client does not know (from a newer host), passed on as is."""
    method: str
    params: dict[str, Any] = field(default_factory=dict)


Event = SessionChanged | SignInProgress | SignOutProgress | ProfilesChanged | Notification

_EVENT_TYPES: Mapping[str, Any] = {"session/changed": SessionChanged, "signIn/progress": SignInProgress,
                                   "signOut/progress": SignOutProgress, "profiles/changed": ProfilesChanged}


def event_from_wire(method: str, params: Any) -> Event:
    kind = _EVENT_TYPES.get(method)
    return kind.from_wire(params) if kind is not None else Notification(method, dict(_dict(params)))
