// The bridge protocol as the client sees it: the version it speaks, how JSON-RPC frames are
// built and told apart, and one error class per error code of bridge-spec/README.md §7.
//
// Why one class per code: callers branch on *what went wrong* (`err instanceof NotSignedInError`
// → show the sign-in button; `err.retryable` → try again later) without comparing magic numbers,
// and `error.data` from the host (provider, reason, field, retryable, status…) stays reachable
// on every error as `err.data`.

/** The protocol version this client speaks (bridge-spec `x-protocol-version`). */
export const PROTOCOL_VERSION = '1.0';

/** Error codes of bridge-spec/README.md §7, by the spec's names. */
export const ErrorCodes = Object.freeze({
  ParseError: -32700,
  InvalidRequest: -32600,
  MethodNotFound: -32601,
  InvalidParams: -32602,
  InternalError: -32603,
  ServerNotInitialized: -32002,
  RequestCancelled: -32800,
  NotSignedIn: -32001,
  ProviderUnknown: -32003,
  ProviderRefused: -32004,
  UserCancelled: -32005,
  Timeout: -32006,
  ProviderUnavailable: -32007,
  PluginError: -32008,
  Unsupported: -32009,
  UnsupportedProtocolVersion: -32010,
  StorageError: -32011,
  NoPendingSignIn: -32012,
  ConfigurationError: -32013,
});

// ── Errors ─────────────────────────────────────────────────────────────────

/**
 * Base class of every error this client rejects with. Host errors carry the JSON-RPC error
 * object's `code`, `message` and `data`; the members of `data` most callers need are lifted
 * onto the error (`provider`, `reason`, `retryable`, `field`) so they read naturally.
 * Errors the client makes itself (host exited, aborted, timed out) fill in what applies.
 */
export class AuthBridgeError extends Error {
  /**
   * @param {string} message
   * @param {{code?: number|null, data?: object, method?: string, requestId?: string|number,
   *          cause?: unknown, retryable?: boolean}} [details]
   */
  constructor(message, details = {}) {
    super(message, details.cause === undefined ? undefined : { cause: details.cause });
    this.name = new.target.name;
    /** The JSON-RPC error code (null for errors the client makes without a code). */
    this.code = details.code ?? null;
    /** `error.data` as the host sent it (ErrorData), or undefined. */
    this.data = details.data;
    /** The bridge method of the call that failed (e.g. "getAccessToken"). */
    this.method = details.method;
    /** The JSON-RPC id of that call. */
    this.requestId = details.requestId;
  }

  /** The profile concerned (`data.provider`). */
  get provider() { return this.data?.provider; }
  /** A stable word saying why (`data.reason`), e.g. "noTokens", "access_denied", "timeout". */
  get reason() { return this.data?.reason; }
  /** The param or setting concerned (`data.field`), e.g. "provider", "settings.clientId". */
  get field() { return this.data?.field; }
  /** True when repeating the same request later, without user action, may succeed. */
  get retryable() { return this.data?.retryable ?? false; }
}

// Protocol errors (JSON-RPC 2.0 and LSP codes).
export class ParseError extends AuthBridgeError {}
export class InvalidRequestError extends AuthBridgeError {}
export class MethodNotFoundError extends AuthBridgeError {}
export class InvalidParamsError extends AuthBridgeError {}
export class InternalError extends AuthBridgeError {}
export class ServerNotInitializedError extends AuthBridgeError {}
/** -32800: the request was cancelled (`$/cancelRequest`, `exit`, or end of input). */
export class RequestCancelledError extends AuthBridgeError {}

// Application errors: `data` always has `reason` and `retryable` (and `provider` when one is involved).
/** -32001: no usable session (`noTokens`, `revoked`, `licenseRevoked`, …): sign in again. */
export class NotSignedInError extends AuthBridgeError {}
/** -32003: no such profile (`unknownProfile`) or plugin (`unknownPlugin`). */
export class ProviderUnknownError extends AuthBridgeError {}
/** -32004: the provider refused for good (`invalid_grant`, `stateMismatch`, `issuerMismatch`, …). */
export class ProviderRefusedError extends AuthBridgeError {}
/** -32005: the sign-in was cancelled (`access_denied`, `cancelled`, `superseded`, `signedOut`). */
export class UserCancelledError extends AuthBridgeError {}
/** -32006: something took too long (the user, `fetch`, a provider call). Retryable. */
export class TimeoutError extends AuthBridgeError {}
/** -32007: the provider is unreachable or failing for now (`refused`, `serverError`, …). Retryable. */
export class ProviderUnavailableError extends AuthBridgeError {}
/** -32008: the plugin misbehaved or is not loaded (`pluginError`, `pluginNotLoaded`, `insecureUrl`). */
export class PluginError extends AuthBridgeError {}
/** -32009: the flow or operation is not supported (`unsupportedFlow`, `unsupported`). */
export class UnsupportedError extends AuthBridgeError {}
/** -32010: the host does not speak this protocol version (`data.supported` lists what it does). */
export class UnsupportedProtocolVersionError extends AuthBridgeError {
  /** Protocol versions the host speaks. */
  get supported() { return this.data?.supported; }
}
/** -32011: the token store failed (`insecurePermissions`, `corruptRecord`, `wrongKey`, …). */
export class StorageError extends AuthBridgeError {}
/** -32012: `completeSignIn` with no sign-in pending for that provider. */
export class NoPendingSignInError extends AuthBridgeError {}
/** -32013: the profile's settings are wrong (`invalidSettings`, `relativeUrl`, `issuerMismatch`, …). */
export class ConfigurationError extends AuthBridgeError {}

/** Error class by code; a code not listed maps to AuthBridgeError itself. */
export const errorClasses = Object.freeze({
  [ErrorCodes.ParseError]: ParseError,
  [ErrorCodes.InvalidRequest]: InvalidRequestError,
  [ErrorCodes.MethodNotFound]: MethodNotFoundError,
  [ErrorCodes.InvalidParams]: InvalidParamsError,
  [ErrorCodes.InternalError]: InternalError,
  [ErrorCodes.ServerNotInitialized]: ServerNotInitializedError,
  [ErrorCodes.RequestCancelled]: RequestCancelledError,
  [ErrorCodes.NotSignedIn]: NotSignedInError,
  [ErrorCodes.ProviderUnknown]: ProviderUnknownError,
  [ErrorCodes.ProviderRefused]: ProviderRefusedError,
  [ErrorCodes.UserCancelled]: UserCancelledError,
  [ErrorCodes.Timeout]: TimeoutError,
  [ErrorCodes.ProviderUnavailable]: ProviderUnavailableError,
  [ErrorCodes.PluginError]: PluginError,
  [ErrorCodes.Unsupported]: UnsupportedError,
  [ErrorCodes.UnsupportedProtocolVersion]: UnsupportedProtocolVersionError,
  [ErrorCodes.StorageError]: StorageError,
  [ErrorCodes.NoPendingSignIn]: NoPendingSignInError,
  [ErrorCodes.ConfigurationError]: ConfigurationError,
});

/**
 * The error to reject a call with, from the host's JSON-RPC error object.
 * @param {{code: number, message: string, data?: object}} error
 * @param {{method?: string, requestId?: string|number}} [call]
 */
export function errorFromResponse(error, call = {}) {
  const Class = errorClasses[error?.code] ?? AuthBridgeError;
  const message = typeof error?.message === 'string' && error.message ? error.message : `error ${error?.code}`;
  return new Class(message, { code: error?.code, data: error?.data, method: call.method, requestId: call.requestId });
}

/**
 * The call was aborted through its AbortSignal. The client told the host (`$/cancelRequest`),
 * so this is a RequestCancelledError (-32800) too; its name is "AbortError", as for fetch(),
 * so the usual `err.name === 'AbortError'` checks work. `cause` is the signal's reason.
 */
export class AbortError extends RequestCancelledError {
  constructor(message, details = {}) {
    super(message, { code: ErrorCodes.RequestCancelled, ...details });
    this.name = 'AbortError';
  }
}

/**
 * The call's own `timeoutMs` ran out. The client cancelled it at the host (`$/cancelRequest`).
 * A TimeoutError (code -32006, retryable) like the host's timeouts, with `timeoutMs` set.
 */
export class RequestTimeoutError extends TimeoutError {
  constructor(message, details = {}) {
    super(message, { code: ErrorCodes.Timeout, ...details });
    this.timeoutMs = details.timeoutMs;
  }

  get reason() { return 'clientTimeout'; }
  get retryable() { return true; }
}

/**
 * The host process is gone (it crashed, was killed, or could not be started): every call still
 * pending rejects with this at once, and so does every later call on this bridge. Start a new
 * bridge to go on. Carries the exit code or signal and the host's last stderr lines, which
 * usually say why.
 */
export class HostExitedError extends AuthBridgeError {
  /**
   * @param {string} message
   * @param {{exitCode?: number|null, signal?: string|null, stderrTail?: string[], method?: string,
   *          requestId?: string|number, cause?: unknown}} [details]
   */
  constructor(message, details = {}) {
    super(message, details);
    /** The host's exit status, or null when a signal ended it (or it never started). */
    this.exitCode = details.exitCode ?? null;
    /** The signal that ended the host (e.g. "SIGKILL"), or null. */
    this.signal = details.signal ?? null;
    /** The host's last stderr lines (its log), oldest first. */
    this.stderrTail = details.stderrTail ?? [];
  }
}

/**
 * No host could be started: the executable is missing or not executable (spawn's ENOENT,
 * EACCES…). The message names it and how to point the client at a host; `executable` is the
 * path or name tried and `cause` the spawn error (its `code`, e.g. "ENOENT"). A HostExitedError
 * too (there is no host), which is what this used to be.
 */
export class HostNotFoundError extends HostExitedError {
  /**
   * @param {string} message
   * @param {{executable?: string, method?: string, requestId?: string|number, cause?: unknown}} [details]
   */
  constructor(message, details = {}) {
    super(message, details);
    /** The executable that could not be started. */
    this.executable = details.executable;
  }
}

// ── Frames ─────────────────────────────────────────────────────────────────

const has = (object, key) => Object.prototype.hasOwnProperty.call(object, key);

/** A JSON-RPC request frame. Params are omitted when undefined (the host treats absent as {}). */
export function requestFrame(id, method, params) {
  const frame = { jsonrpc: '2.0', id, method };
  if (params !== undefined) frame.params = params;
  return frame;
}

/** A JSON-RPC notification frame (no id: never answered). */
export function notificationFrame(method, params) {
  const frame = { jsonrpc: '2.0', method };
  if (params !== undefined) frame.params = params;
  return frame;
}

/**
 * What a frame from the host is: "notification" (has `method`), "response" (has `id` and
 * exactly one of `result`/`error`), or "invalid". The host never sends requests.
 * @returns {'notification'|'response'|'invalid'}
 */
export function frameKind(frame) {
  if (frame === null || typeof frame !== 'object' || Array.isArray(frame) || frame.jsonrpc !== '2.0') return 'invalid';
  if (has(frame, 'method')) return typeof frame.method === 'string' && !has(frame, 'id') ? 'notification' : 'invalid';
  if (!has(frame, 'id') || has(frame, 'result') === has(frame, 'error')) return 'invalid';
  return 'response';
}
