// Types of @authbridge/client, written by hand from bridge-spec/openrpc.json (protocol 1.0).
// Names are the spec's schema names. Results may carry members a newer host adds: receivers
// ignore unknown members (bridge-spec §3), so these interfaces list what 1.0 defines.

import { EventEmitter } from 'node:events';

// ── Shapes (components/schemas) ─────────────────────────────────────────────

/** A JSON-RPC request id. */
export type RequestId = string | number;
/** Milliseconds since the Unix epoch (UTC). */
export type Timestamp = number;
/** How a sign-in is carried out. */
export type Flow = 'browser' | 'external' | 'device' | 'session' | 'clientCredentials';
/** A stable machine word (camelCase, or a provider's own code such as `invalid_grant`). */
export type Reason = string;

/** Who is signed in. Every member is optional. */
export interface Account {
  /** Stable account id at the provider (e.g. OIDC `sub`): what `account` params name. */
  id?: string;
  name?: string;
  email?: string;
}

/** A cookie a frontend must set for its web views to be authorized. */
export interface Cookie {
  name: string;
  value: string;
  domain: string;
  path: string;
  /** Lifetime in seconds. */
  maxAge?: number;
  secure?: boolean;
  httpOnly?: boolean;
}

/** A cookie a frontend's web view should delete; never a value. */
export interface CookieRef {
  name: string;
  domain: string;
  path: string;
}

/** Where tokens are kept and how they are protected. */
export interface StorageInfo {
  backend: 'memory' | 'encrypted-file' | 'secret-service' | 'postgresql';
  protection: 'none' | 'encrypted' | 'keyring';
}

export interface LoadedPlugin {
  id: string;
  status: 'loaded';
  version: string;
  displayName: string;
  description: string;
  flows: Flow[];
  capabilities: string[];
  /** JSON Schema of a profile's `settings`. */
  settings?: object;
  /** The shared library. */
  path: string;
  /** Where the plugin's code runs: its own runner process, or inside the host. */
  isolation: 'process' | 'none';
  /** What loading noticed without refusing the plugin (e.g. describe's description is not the manifest's). */
  warnings?: string[];
  /** Further descriptor fields from the plugin. */
  [member: string]: unknown;
}

export interface RefusedPlugin {
  id?: string;
  status: 'refused';
  reason: 'invalidManifest' | 'insecurePermissions' | 'symlinkEscapes' | 'duplicateId' | 'abiMismatch'
    | 'loadFailed' | 'missingSymbol' | 'badEntry' | 'initFailed' | 'describeFailed' | 'swiftRuntimeMismatch'
    | 'metadataMismatch' | 'libraryChanged' | 'pluginCrashed' | 'pluginTimeout';
  message: string;
  /** The manifest. */
  path: string;
  /** Where the plugin ran or was to run, when that was decided before it was refused. */
  isolation?: 'process' | 'none';
}

/** One plugin manifest the host found: loaded, or refused with a reason. */
export type PluginStatus = LoadedPlugin | RefusedPlugin;

/** A configured provider profile: a plugin plus settings. `provider` params name profiles. */
export interface ProfileInfo {
  name: string;
  plugin: string;
  status: 'ready' | 'error';
  /** Why the profile is in error (present when status is "error"). */
  message?: string;
  flows: Flow[];
  source: 'config' | 'runtime';
  /** Settings neither the plugin nor the host reads (ignored), each with the key probably meant. */
  warnings?: string[];
  /** The authorization server, once resolved (the setting issuer, or discovered from `resource`, RFC 9728). */
  issuer?: string;
  /** true when it signs in with a client AuthBridge registered itself (RFC 7591). */
  dynamicClient?: boolean;
  /** The protected resource the profile is for (setting resource). */
  resource?: string;
}

/** The state of one profile's session. */
/** Provider facts about a session that a frontend may need and that are not secrets
 *  (Salesforce `instanceUrl`, Tableau `server`/`site`, MarketSharp `companyId`). */
export type SessionDetails = Record<string, string | number | boolean | null>;

export interface SignInStatus {
  provider: string;
  /** signedIn (reason valid | refreshed | signedIn), notSignedIn (noTokens, userSignedOut, revoked…),
   *  offline (reason transient; tokens kept, `message` says what failed), licenseRevoked. */
  state: 'signedIn' | 'notSignedIn' | 'offline' | 'licenseRevoked';
  account: Account | null;
  /** Access-token expiry; null when unknown or not signed in. */
  expiresAt: Timestamp | null;
  /** "DPoP" when the session's tokens are bound to its key (RFC 9449), else "Bearer"; absent when not signed in. */
  tokenType?: string;
  /** Non-secret provider facts while signed in (e.g. Salesforce `instanceUrl`); see each plugin's README. */
  details?: SessionDetails;
  reason: Reason | null;
  message?: string;
  storage?: StorageInfo;
  /** listAccounts only: whether this is the profile's current account. */
  current?: boolean;
  /** As ProfileInfo's: the profile's authorization server. */
  issuer?: string;
  /** As ProfileInfo's: the session's client was registered by AuthBridge (RFC 7591). */
  dynamicClient?: boolean;
}

export interface RevocationFailure {
  /** A token name (e.g. "refresh_token"), never a value. */
  token: string;
  reason: Reason;
  message: string;
}

export interface ServerCapabilities {
  batches: false;
  cancellation: true;
  flows: Flow[];
  /** profiles/changed: only a host that re-reads its configuration file (the agent). */
  notifications: Array<'session/changed' | 'signIn/progress' | 'signOut/progress' | 'profiles/changed'>;
}

export interface InitializeParams {
  /** "MAJOR.MINOR"; default the client's PROTOCOL_VERSION. */
  protocolVersion?: string;
  clientInfo?: { name: string; version?: string; [member: string]: unknown };
  capabilities?: object;
}

export interface InitializeResult {
  protocolVersion: string;
  serverInfo: { name: 'authbridge'; version: string };
  capabilities: ServerCapabilities;
  providers: PluginStatus[];
  profiles: ProfileInfo[];
  storage: StorageInfo;
  /** Start-up problems that did not stop the host. */
  warnings?: string[];
  /** Why the configuration file could not be used, while it cannot (it names the file); the host serves the profiles it last read. */
  configurationProblem?: string;
}

// ── Params (methods[].x-params) ─────────────────────────────────────────────

export interface ConfigureProfileParams {
  name: string;
  plugin: string;
  settings?: Record<string, unknown>;
}

export interface RemoveProfileParams {
  name: string;
}

export interface ListAccountsParams {
  provider?: string;
}

export interface CheckSignInStatusParams {
  provider: string;
  /** Account.id; absent: the profile's current account. */
  account?: string;
}

export interface RequestOAuthTokensParams {
  provider: string;
  /** Default: the profile's first flow. */
  flow?: Flow;
  /** Required by (and only used by) flow "session". Secret: never logged. */
  sessionId?: string;
  scopes?: string[];
  loginHint?: string;
  /** How long the host waits for the user (1 000–3 600 000 ms; default 300 000). */
  timeoutMs?: number;
  /** external flow: the redirect URI to register (default the profile's). */
  redirectUri?: string;
  /** The protected resource(s) the sign-in is for (RFC 8707; default: the profile setting `resources`). */
  resource?: Resources;
}

export interface CompleteSignInParams {
  provider: string;
  /** The full redirect URL the frontend intercepted. */
  callbackUrl: string;
}

export interface CompleteSignOutParams {
  provider: string;
  /** The full post-logout redirect URL the frontend intercepted (external end-session). */
  callbackUrl: string;
}

export interface SignOutParams {
  provider: string;
  account?: string;
  /** Also end the provider's own session (RP-Initiated Logout); default: the profile's `endSession`. */
  endSession?: boolean;
  /** endSession: "browser" (the host waits for the provider's redirect; signOut/progress names the page) or "external" (the result's endSession.url). */
  flow?: 'browser' | 'external';
  /** browser flow: how long to wait for the provider's redirect (default 120 000). */
  timeoutMs?: number;
}

export interface GetAccessTokenParams {
  provider: string;
  account?: string;
  /** Refresh first when the token expires sooner than this (default 60 000). */
  minValidityMs?: number;
  /** Renew first whatever the expiry says: the provider just rejected this token. */
  forceRefresh?: boolean;
  /** The method of the request the token is for (default GET): a DPoP-bound session's answer carries its proof (RFC 9449). */
  method?: string;
  /** The URL of the request the token is for: with it, a DPoP-bound session's `headers` include `DPoP`, good for that one request. */
  url?: string;
  /** The `DPoP-Nonce` the server refused that request for (401 `use_dpop_nonce`), for the proof of its retry. */
  dpopNonce?: string;
  /**
   * A token for exactly these scopes (a subset of the sign-in's, or others its grant covers), kept
   * by the host per (scopes, resource). Scopes the grant does not cover: ProviderRefusedError
   * "insufficientScope" with `data.missingScopes`.
   */
  scopes?: string[];
  /** A token for this resource, or these (absolute URIs, RFC 8707). */
  resource?: Resources;
}

/** One absolute URI, or several (RFC 8707 resource indicators). */
export type Resources = string | string[];

export interface ExchangeTokenParams {
  provider: string;
  /** Whose session's token is exchanged (Account.id); default: the current account. */
  account?: string;
  /** The logical name of the service the new token is for (RFC 8693 audience). */
  audience?: string;
  /** The resource(s) the new token is for. */
  resource?: Resources;
  /** The scopes the new token should carry. */
  scopes?: string[];
  /** A token type URI, or the short names 'accessToken', 'idToken', 'jwt'; default: the server's choice. */
  requestedTokenType?: string;
  /** Which of the session's tokens is exchanged (default 'accessToken'). */
  subjectTokenType?: 'accessToken' | 'idToken';
  /** A kept exchanged token expiring sooner than this is exchanged again (default 60 000). */
  minValidityMs?: number;
}

export interface FetchParams {
  provider: string;
  account?: string;
  /** Absolute https URL (loopback IP literals may use http), or a path resolved against the API base URL. */
  url: string;
  method?: 'GET' | 'HEAD' | 'POST' | 'PUT' | 'PATCH' | 'DELETE' | 'OPTIONS';
  headers?: Record<string, string>;
  /** Sent as UTF-8. */
  body?: string;
  /** Whole-request timeout at the host (1 000–300 000 ms; default 30 000). */
  timeoutMs?: number;
  /** Authorize with the token for exactly these scopes (as getAccessToken's). */
  scopes?: string[];
  /** Authorize with this resource's token (default: the configured resource the URL is under, if any). */
  resource?: Resources;
  /**
   * A 403 insufficient_scope naming scopes the sign-in lacks asks the user for them once (a sign-in
   * with those scopes added; its signIn/progress goes to `onProgress`) and replays (default true).
   */
  stepUp?: boolean;
}

// ── Results ─────────────────────────────────────────────────────────────────

export interface ListProvidersResult {
  plugins: PluginStatus[];
  profiles: ProfileInfo[];
  /** As InitializeResult's: why the configuration file could not be used, while it cannot. */
  configurationProblem?: string;
}

export interface RemoveProfileResult {
  removed: boolean;
}

export interface ListAccountsResult {
  accounts: Array<SignInStatus & { current: boolean }>;
}

export interface CompleteSignInResult {
  accepted: true;
}

export interface CompleteSignOutResult {
  accepted: true;
}

export interface SignOutResult {
  provider: string;
  account?: Account | null;
  signedOut: true;
  /** Token names revoked at the provider. */
  revoked: string[];
  failures: RevocationFailure[];
  /** Cookies of this provider to delete from the frontend's web view. */
  clearCookies?: CookieRef[];
  /** What the provider did with its own session, when endSession was asked for. */
  endSession?: EndSessionOutcome;
}

/** confirmed: the provider's redirect came back (browser listener, or completeSignOut); requested: opened or handed out (url), not confirmed; unsupported: no end-session endpoint; noIdToken: nothing to name the session with; failed: see message. */
export interface EndSessionOutcome {
  state: 'confirmed' | 'requested' | 'unsupported' | 'noIdToken' | 'failed';
  /** requested, external flow: the page the frontend was to open in the browser that holds the provider's session. Carries the ID token: never log it. */
  url?: string;
  message?: string;
}

export interface SignOutProgressParams {
  provider: string;
  /** The id of the signOut call. */
  requestId: RequestId;
  stage: 'openUrl' | 'waiting';
  /** openUrl: the provider's end-session page (carries the ID token: open it, never log it). */
  url?: string;
  /** openUrl, external flow: the post-logout redirect to intercept and pass to completeSignOut. */
  callbackPrefix?: string;
  message?: string;
}

export interface AccessTokenResult {
  provider: string;
  account?: Account | null;
  accessToken: string;
  tokenType: string;
  expiresAt: Timestamp | null;
  /** Header fields to add to API requests (e.g. Authorization). */
  headers: Record<string, string>;
  cookies: Cookie[];
  details?: SessionDetails;
}

export interface FetchResult {
  status: number;
  /** Lower-case names; repeated fields joined with ", ". */
  headers: Record<string, string>;
  /** Decoded as UTF-8. */
  body: string;
}

// ── Events (notifications) ──────────────────────────────────────────────────

export interface SessionChangedParams {
  provider: string;
  state: 'signedIn' | 'refreshed' | 'signedOut' | 'licenseRevoked';
  /** signedOut: userSignedOut | revoked | invalidGrant | licenseRevoked | expired | profileChanged | refreshRefused. */
  reason: Reason;
  message?: string;
  account?: Account;
  clearCookies?: CookieRef[];
}

/** profiles/changed: the agent read its configuration file again (it changed, or SIGHUP). */
export interface ProfilesChangedParams {
  added: string[];
  /** Their sessions ended (session/changed signedOut profileChanged, sent before). */
  changed: string[];
  removed: string[];
  /** While the file cannot be used: nothing changed, the profiles last read stay. */
  configurationProblem?: string;
}

export type SignInStage = 'openUrl' | 'deviceCode' | 'waiting' | 'exchanging' | 'plugin';

export interface SignInProgressParams {
  provider: string;
  /** The id of the requestOAuthTokens call this sign-in serves. */
  requestId: RequestId;
  stage: SignInStage;
  /** openUrl: the page to open. */
  url?: string;
  /** external flow: the redirect prefix to intercept and pass to completeSignIn. */
  callbackPrefix?: string;
  userCode?: string;
  verificationUri?: string;
  verificationUriComplete?: string;
  expiresAt?: Timestamp;
  message?: string;
}

export interface ExitInfo {
  /** The exit status, or null when a signal ended the host or it never started. */
  code: number | null;
  signal: NodeJS.Signals | null;
  /** Set when the host could not be started (e.g. ENOENT). */
  error: Error | null;
  /** Its last stderr lines, oldest first (none on the agent). */
  stderrTail: string[];
  /** On the agent: its socket's path (the connection ended; the agent's own status is not known). */
  agent?: string;
}

/** The bridge's events and their listener arguments (a type, not an interface: EventEmitter's event map). */
export type BridgeEvents = {
  'session/changed': [params: SessionChangedParams];
  'signIn/progress': [params: SignInProgressParams];
  'signOut/progress': [params: SignOutProgressParams];
  'profiles/changed': [params: ProfilesChangedParams];
  notification: [notification: { method: string; params: unknown }];
  exit: [info: ExitInfo];
  protocolError: [error: AuthBridgeError];
};

// ── Errors ──────────────────────────────────────────────────────────────────

/** `error.data`. Never contains a token. */
export interface ErrorData {
  provider?: string;
  reason?: Reason;
  retryable?: boolean;
  /** The param or setting concerned (dotted path). */
  field?: string;
  /** -32601: the unknown method. */
  method?: string;
  /** -32010: the protocol versions the host speaks. */
  supported?: string[];
  /** The provider's HTTP status, when there was one. */
  status?: number;
  /** The provider's OAuth error code, when its refusal carried one and `reason` is another word
   *  (-32001 `refreshRefused` after `invalid_request`). */
  oauthError?: string;
  /** -32004 `insufficientScope`: the scopes asked for that the sign-in's grant does not cover. */
  missingScopes?: string[];
}

export declare const PROTOCOL_VERSION: '1.0';
export declare const CLIENT_VERSION: string;

/** Base of every error the client rejects with. */
export declare class AuthBridgeError extends Error {
  constructor(message: string, details?: { code?: number | null; data?: ErrorData; method?: string; requestId?: RequestId; cause?: unknown });
  /** The JSON-RPC error code; null for client-made errors without one (HostExitedError). */
  readonly code: number | null;
  /** `error.data` as the host sent it. */
  readonly data: ErrorData | undefined;
  /** The bridge method of the failed call. */
  readonly method: string | undefined;
  readonly requestId: RequestId | undefined;
  /** `data.provider`. */
  readonly provider: string | undefined;
  /** `data.reason`: a stable word. */
  readonly reason: Reason | undefined;
  /** `data.field`. */
  readonly field: string | undefined;
  /** True when the same request may succeed later without user action. */
  readonly retryable: boolean;
  /** -32004 `insufficientScope`: `data.missingScopes`, the scopes the sign-in's grant does not cover; else []. */
  readonly missingScopes: string[];
}

// BEGIN GENERATED by `make spec` (scripts/spec.py) from bridge-spec/openrpc.json: do not edit
export declare const ErrorCodes: Readonly<{
  ParseError: -32700;
  InvalidRequest: -32600;
  MethodNotFound: -32601;
  InvalidParams: -32602;
  InternalError: -32603;
  ServerNotInitialized: -32002;
  RequestCancelled: -32800;
  NotSignedIn: -32001;
  ProviderUnknown: -32003;
  ProviderRefused: -32004;
  UserCancelled: -32005;
  Timeout: -32006;
  ProviderUnavailable: -32007;
  PluginError: -32008;
  Unsupported: -32009;
  UnsupportedProtocolVersion: -32010;
  StorageError: -32011;
  NoPendingSignIn: -32012;
  ConfigurationError: -32013;
}>;

/** -32700: the host could not parse a frame: invalid JSON or UTF-8, or duplicate keys (a client bug). */
export declare class ParseError extends AuthBridgeError {}
/** -32600: a bad envelope, an id in use, already initialized, or the host is shutting down. */
export declare class InvalidRequestError extends AuthBridgeError {}
/** -32601: the host does not know the method (`data.method`). */
export declare class MethodNotFoundError extends AuthBridgeError {}
/** -32602: a parameter is missing, ill-typed or unknown; `field` is its dotted path. */
export declare class InvalidParamsError extends AuthBridgeError {}
/** -32603: a host bug; the details are only in the host's log. */
export declare class InternalError extends AuthBridgeError {}
/** -32002: a request before `initialize`. */
export declare class ServerNotInitializedError extends AuthBridgeError {}
/** -32800: the request was cancelled (`$/cancelRequest`, `exit`, or the end of the host's input). */
export declare class RequestCancelledError extends AuthBridgeError {}
/** -32001: no usable session; `reason` says why (`noTokens`, `revoked`, `licenseRevoked`…): sign in again. */
export declare class NotSignedInError extends AuthBridgeError {}
/** -32003: no such profile (`unknownProfile`) or plugin (`unknownPlugin`). */
export declare class ProviderUnknownError extends AuthBridgeError {}
/** -32004: the provider refused for good (`invalid_grant`, `stateMismatch`, `issuerMismatch`…). */
export declare class ProviderRefusedError extends AuthBridgeError {}
/** -32005: the sign-in was cancelled (`access_denied`, `cancelled`, `superseded`, `signedOut`). */
export declare class UserCancelledError extends AuthBridgeError {}
/** -32006: something took too long (the user, `fetch`, or a provider call); retryable. */
export declare class TimeoutError extends AuthBridgeError {}
/**
 * -32007: the provider is unreachable or failing for now (network, 5xx, rate limit); retryable; `status` is
 * its HTTP status when there was one.
 */
export declare class ProviderUnavailableError extends AuthBridgeError {
  readonly status: number | undefined;
}
/**
 * -32008: the provider plugin misbehaved, failed or is not loaded (`pluginError`, `pluginCrashed`,
 * `pluginTimeout`, `pluginNotLoaded`, `insecureUrl`); sessions are kept.
 */
export declare class PluginError extends AuthBridgeError {}
/** -32009: the profile cannot do this (`unsupportedFlow`, `unsupported`). */
export declare class UnsupportedError extends AuthBridgeError {}
/** -32010: the host does not speak this protocol version; `supported` lists those it does. */
export declare class UnsupportedProtocolVersionError extends AuthBridgeError {
  readonly supported: string[] | undefined;
}
/**
 * -32011: the token vault failed (`insecurePermissions`, `corruptRecord`, `wrongKey`, `keyringUnavailable`,
 * `accessDenied`…).
 */
export declare class StorageError extends AuthBridgeError {}
/**
 * -32012: `completeSignIn` with no sign-in pending for that provider, `completeSignOut` with no end-session
 * pending.
 */
export declare class NoPendingSignInError extends AuthBridgeError {}
/** -32013: the profile's settings are wrong (`invalidSettings`, `missingSetting`, `relativeUrl`…). */
export declare class ConfigurationError extends AuthBridgeError {}
// END GENERATED

/** The call's AbortSignal fired; the host was sent `$/cancelRequest`. name "AbortError", code -32800, cause = the signal's reason. */
export declare class AbortError extends RequestCancelledError {
  readonly name: 'AbortError';
}

/** The call's `timeoutMs` ran out; the host was sent `$/cancelRequest`. Code -32006, reason "clientTimeout". */
export declare class RequestTimeoutError extends TimeoutError {
  readonly timeoutMs: number;
}

/** The host is gone: pending and later calls reject with this. Start a new bridge. */
export declare class HostExitedError extends AuthBridgeError {
  readonly exitCode: number | null;
  readonly signal: NodeJS.Signals | null;
  readonly stderrTail: string[];
  /** On the agent: its socket's path (the agent closed the connection: it stopped or was killed); else null. */
  readonly agent: string | null;
}

/**
 * No host could be started: the executable is missing or not executable. The message names it and
 * how to point the client at a host; `cause` is the spawn error (`code` "ENOENT", "EACCES"…).
 */
export declare class HostNotFoundError extends HostExitedError {
  /** The executable (path or name) that could not be started. */
  readonly executable: string | undefined;
}

/** `agent: true` and no agent answers on `socket`: start one (`authbridge agent`), or use `agent: 'auto'`. */
export declare class AgentNotRunningError extends HostNotFoundError {
  /** The agent's socket that was tried. */
  readonly socket: string | undefined;
}

/**
 * authorizedFetch() refused to send a token over plain http to a host that is not a loopback IP
 * address; nothing was sent (and nothing asked of the host). `reason` "insecureUrl".
 */
export declare class InsecureUrlError extends AuthBridgeError {
  /** The URL's origin (never its path or query, which may hold secrets of their own). */
  readonly url: string;
}

/** Error class by code. */
export declare const errorClasses: Readonly<Record<number, typeof AuthBridgeError>>;
/** The error for a JSON-RPC error object. */
export declare function errorFromResponse(error: { code: number; message: string; data?: ErrorData }, call?: { method?: string; requestId?: RequestId }): AuthBridgeError;

// ── The client ──────────────────────────────────────────────────────────────

export interface AuthBridgeOptions {
  /** The authbridge executable; default AUTHBRIDGE of `env`, else of this process, else the host bundled in the package, else `authbridge` on PATH. */
  hostPath?: string;
  /** Plugin folders (`--plugins DIR`, repeatable). */
  plugins?: string | string[];
  /** `--no-default-plugins`: only the `plugins` folders. */
  noDefaultPlugins?: boolean;
  /** `--config FILE`. */
  config?: string;
  /** `--log-level` of the host's stderr log. */
  logLevel?: 'trace' | 'debug' | 'info' | 'notice' | 'warning' | 'error' | 'critical';
  /** `--vault`: encrypted-file (default), secret-service, postgresql (with `--vault-url` in `args` or AUTHBRIDGE_VAULT_URL in `env`) or memory. */
  vault?: 'encrypted-file' | 'secret-service' | 'postgresql' | 'memory';
  /** `--vault-dir`. */
  vaultDir?: string;
  /** `serve --open-browser`: the host also runs xdg-open for browser sign-ins (a failure only reaches its log: show the openUrl URL too). */
  openBrowser?: boolean;
  /** Further host arguments, after `serve` and the options above. */
  args?: string[];
  /** The host's environment (default: this process's); its AUTHBRIDGE names the host when `hostPath` does not. */
  env?: NodeJS.ProcessEnv;
  cwd?: string;
  /** initialize's protocolVersion (default PROTOCOL_VERSION). */
  protocolVersion?: string;
  /** initialize's clientInfo (default {name: "authbridge-node-client", version: CLIENT_VERSION}). */
  clientInfo?: { name: string; version?: string };
  capabilities?: object;
  /** Bound of start(): spawn + initialize (default 30 000 ms). */
  startTimeoutMs?: number;
  /** Aborts start(). */
  signal?: AbortSignal;
  /** Default `timeoutMs` of every call (default: none). */
  requestTimeoutMs?: number;
  /** close(): how long the host gets to exit before SIGTERM (default 5 000 ms). */
  closeTimeoutMs?: number;
  /** How many stderr lines to keep for HostExitedError (default 50). */
  stderrLines?: number;
  /** Each line of the host's log (it is drained whether or not this is set). */
  onStderr?: (line: string) => void;
  /** A tap on every frame: `in` from the host (after parsing; `line` is its exact text), `out` to it. */
  onFrame?: (frame: any, direction: 'in' | 'out', line: string) => void;
  /**
   * Each of the host's start-up warnings (initialize's `warnings`, e.g. a config file it could not
   * read) and each profile restart() could not configure again. Default: `process.emitWarning`
   * (type "AuthBridgeWarning", code "AUTHBRIDGE_HOST_WARNING"), printed on stderr like Node's own.
   */
  onWarning?: (warning: string) => void;
  /**
   * The user's agent (`authbridge agent`, one broker per login session), honoured by start() and
   * restart(): false (default) spawns a host of the bridge's own; "auto" uses the agent when it
   * answers on its socket, else spawns; true uses only the agent (AgentNotRunningError when none
   * answers, or when its socket is not surely this user's: a socket of this uid in a folder no
   * one else can write to). The agent has its own plugins, profiles and vault: the host options
   * above configure a spawned host (or one `autostart` starts), and configureProfile() changes
   * the agent's profiles for every app.
   */
  agent?: boolean | 'auto';
  /** The agent's socket; default AUTHBRIDGE_AGENT_SOCKET (of `env`, then of this process), else $XDG_RUNTIME_DIR/authbridge/agent.sock. */
  agentSocket?: string;
  /** With `agent`: start `authbridge agent` (with the host options above) when none answers, and use it; it outlives this program. Never done unless asked. */
  autostart?: boolean;
}

export interface CallOptions {
  /** Aborting sends `$/cancelRequest` and rejects with AbortError. */
  signal?: AbortSignal;
  /** Client-side bound: then `$/cancelRequest` and a RequestTimeoutError. */
  timeoutMs?: number;
}

export interface SignInOptions extends CallOptions {
  /** This sign-in's signIn/progress events (open `url` on stage "openUrl"). */
  onProgress?: (params: SignInProgressParams) => void;
}

/** Options of `bridge.authorizedFetch(profile, options)`. */
export interface AuthorizedFetchOptions {
  /** Which signed-in account of the profile (Account.id); default: the current one. */
  account?: string;
  /** Renew the token first when it expires sooner than this (default: the host's, 60 000 ms). */
  minValidityMs?: number;
  /** Every request gets the token for exactly these scopes (getAccessToken's `scopes`). */
  scopes?: string[];
  /** Every request gets the token for this resource, or these (getAccessToken's `resource`). */
  resource?: Resources;
  /**
   * A 403 whose WWW-Authenticate challenge (Bearer, or DPoP) says `error="insufficient_scope"` with
   * a `scope` asks the user for those scopes once (requestOAuthTokens with `scopes`: incremental
   * consent) and sends the request again (default true; false: the 403 is the answer).
   */
  stepUp?: boolean;
  /** The step-up's sign-in flow (default: the profile's first). */
  flow?: Flow;
  /** The step-up's signIn/progress events (open `url` on stage "openUrl"). */
  onProgress?: (params: SignInProgressParams) => void;
}

/** Options of `bridge.signInToUrl(url, options)` and `bridge.fetchForUrl(url, options)`. */
export interface ResourceSignInOptions extends CallOptions {
  /** The profile to configure (default: profileNameForUrl(url)). */
  profile?: string;
  /** The sign-in's flow (default: the profile's first, the browser). */
  flow?: Flow;
  /** The scopes to sign in with (default: those the resource's metadata lists). */
  scopes?: string[];
  /** The sign-ins' signIn/progress events (default: openInBrowser; null: none). */
  onProgress?: ((params: SignInProgressParams) => void) | null;
  /** fetchForUrl: step up on a 403 insufficient_scope (default true). */
  stepUp?: boolean;
}

/** One challenge of a WWW-Authenticate field (param names in lower case, quoted values unescaped). */
export interface Challenge {
  scheme: string;
  params: Record<string, string>;
  token68?: string;
}

/** What `bridge.authorizedFetch()` returns: a function with fetch's signature. */
export type AuthorizedFetch = (input: string | URL | Request, init?: RequestInit) => Promise<Response>;

export declare class AuthBridge extends EventEmitter<BridgeEvents> {
  /** Spawns and initializes a host. */
  static start(options?: AuthBridgeOptions): Promise<AuthBridge>;
  /** Spawns a host without initializing it (call initialize()). */
  constructor(options?: AuthBridgeOptions);

  readonly initializeResult: InitializeResult | null;
  readonly serverInfo: InitializeResult['serverInfo'] | undefined;
  readonly capabilities: ServerCapabilities | undefined;
  readonly storage: StorageInfo | undefined;
  /** The host's process id (undefined on the agent). */
  readonly pid: number | undefined;
  readonly running: boolean;
  /** Whether this bridge talks to the user's agent. */
  readonly onAgent: boolean;
  /** Resolves when the host is gone. */
  readonly exited: Promise<ExitInfo>;
  stderrTail(): string[];

  initialize(params?: InitializeParams, options?: CallOptions): Promise<InitializeResult>;
  /**
   * Stops this host (cleanly if it runs) and starts a new one with the same options: listeners
   * stay, profiles configured with configureProfile() are configured again in order.
   */
  restart(options?: { signal?: AbortSignal; timeoutMs?: number }): Promise<InitializeResult>;
  /** shutdown, exit, bounded wait, SIGTERM, SIGKILL. */
  close(options?: { timeoutMs?: number }): Promise<ExitInfo>;

  request<T = unknown>(method: string, params?: object, options?: SignInOptions): Promise<T>;
  notify(method: string, params?: object): void;

  listProviders(options?: CallOptions): Promise<ListProvidersResult>;
  configureProfile(params: ConfigureProfileParams, options?: CallOptions): Promise<ProfileInfo>;
  removeProfile(params: RemoveProfileParams | string, options?: CallOptions): Promise<RemoveProfileResult>;
  listAccounts(params?: ListAccountsParams | string, options?: CallOptions): Promise<ListAccountsResult>;
  checkSignInStatus(params: CheckSignInStatusParams | string, options?: CallOptions): Promise<SignInStatus>;
  requestOAuthTokens(params: RequestOAuthTokensParams | string, options?: SignInOptions): Promise<SignInStatus>;
  completeSignIn(params: CompleteSignInParams, options?: CallOptions): Promise<CompleteSignInResult>;
  /** External end-session: hands the provider's post-logout redirect to the pending signOut (which then answers `confirmed`). */
  completeSignOut(params: CompleteSignOutParams, options?: CallOptions): Promise<CompleteSignOutResult>;
  getAccessToken(params: GetAccessTokenParams | string, options?: CallOptions): Promise<AccessTokenResult>;
  /** Token exchange (RFC 8693): the session's access (or ID) token exchanged for one for another audience, resource or scopes. */
  exchangeToken(params: ExchangeTokenParams | string, options?: CallOptions): Promise<AccessTokenResult>;
  /** `options.onProgress`: the signIn/progress of a step-up (`stepUp`). */
  fetch(params: FetchParams, options?: SignInOptions): Promise<FetchResult>;
  signOut(params: SignOutParams | string, options?: CallOptions): Promise<SignOutResult>;
  /** rpc.discover: the OpenRPC document. */
  discover(options?: CallOptions): Promise<Record<string, unknown>>;

  /**
   * A function with fetch's signature (the global fetch underneath) that puts the access token of
   * `profile` on every request: getAccessToken's headers, and its cookies for the URL's host and
   * path. A 401 from the URL's origin renews the token once (forceRefresh) and sends the request
   * again — unless its body was a stream (a ReadableStream, an async iterable, a Request object's
   * own body): then the 401 is the answer, and the token is renewed for a retry. A renewal that
   * fails rejects with the bridge's error class (NotSignedInError "revoked": sign in again), its
   * message naming the request. Only https, or plain http to a loopback IP address, gets a token
   * (else InsecureUrlError). `init.signal` also cancels the token calls.
   */
  authorizedFetch(profile: string, options?: AuthorizedFetchOptions): AuthorizedFetch;

  /**
   * Signs in to the protected resource at `url` (an MCP server's endpoint) knowing nothing else:
   * configures the `oidc` profile `profile` (default profileNameForUrl(url)) with settings
   * `{resource: url}` (the host discovers the authorization server, RFC 9728 and RFC 8414, and
   * registers itself, RFC 7591) and signs in unless that profile is signed in already (the vault
   * keeps sessions across runs). Resolves with the status; `provider` is the profile's name.
   */
  signInToUrl(url: string | URL, options?: ResourceSignInOptions): Promise<SignInStatus>;
  /** signInToUrl(url, options), then authorizedFetch(profile, {flow, onProgress, stepUp}). */
  fetchForUrl(url: string | URL, options?: ResourceSignInOptions): Promise<AuthorizedFetch>;
}

/** The profile signInToUrl configures for a URL: its host, `-PORT` for a port that is not the default ("127.0.0.1-8080"). */
export declare function profileNameForUrl(url: string | URL): string;
/** signIn/progress for a person here: opens `url` with $BROWSER (else xdg-open / open), or prints it on stderr. */
export declare function openInBrowser(params: SignInProgressParams): void;
/** The challenges of a WWW-Authenticate field value (RFC 9110 §11.6.1). */
export declare function parseChallenges(value: string): Challenge[];

/** The argv of `authbridge serve` for the options. */
export declare function hostArguments(options?: AuthBridgeOptions): string[];
/** The host executable for the options: hostPath, AUTHBRIDGE of env, $AUTHBRIDGE, the bundled host, or `authbridge`. */
export declare function resolveHostPath(options?: AuthBridgeOptions): string;
/** The agent's socket for the options: agentSocket, AUTHBRIDGE_AGENT_SOCKET, or $XDG_RUNTIME_DIR/authbridge/agent.sock (undefined: none). */
export declare function agentSocketPath(options?: AuthBridgeOptions): string | undefined;

/** The longest line the host may write: 64 MiB. */
export declare const MAX_LINE_BYTES: number;
/** Cuts a byte stream into lines (frames split across chunks, large frames, CRLF, blank lines). */
export declare class LineDecoder {
  constructor(onLine: (line: string) => void, options?: { maxLineBytes?: number; onOverflow?: (bytes: number) => void });
  push(chunk: Buffer): void;
  end(): void;
}
