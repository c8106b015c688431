// AuthBridge: a promise API over one `authbridge serve` host.
//
// Each bridge method sends one JSON-RPC request and settles with its answer: the result, or an
// error of the class that matches the error code (protocol.js). The host's notifications are
// EventEmitter events named as in the spec ('session/changed', 'signIn/progress').
//
// Ids are integers from 1, one per call, so an answer finds its call in `#pending` whatever order
// the host answers in (it answers as requests finish, bridge-spec §1).

import { Buffer } from 'node:buffer';
import { spawn } from 'node:child_process';
import { EventEmitter } from 'node:events';
import { accessSync, constants } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { authorizedFetch } from './authorized_fetch.js';
import { openInBrowser, profileNameForUrl } from './resource_url.js';
import { AgentSocket, HostProcess, agentSocketPath } from './transport.js';
import {
  AbortError,
  AgentNotRunningError,
  AuthBridgeError,
  HostExitedError,
  HostNotFoundError,
  PROTOCOL_VERSION,
  RequestTimeoutError,
  errorFromResponse,
  frameKind,
  notificationFrame,
  requestFrame,
} from './protocol.js';

/**
 * Options of one call.
 * @typedef {object} CallOptions
 * @property {AbortSignal} [signal] aborting sends `$/cancelRequest` and rejects with AbortError
 * @property {number} [timeoutMs] the client's bound: then `$/cancelRequest` and RequestTimeoutError
 * @property {(params: object) => void} [onProgress] requestOAuthTokens: this call's signIn/progress events
 */

/** This package's version (sent as `clientInfo.version`); kept equal to package.json by a test. */
export const CLIENT_VERSION = '0.1.0';

const DEFAULT_START_TIMEOUT_MS = 30_000;
const DEFAULT_CLOSE_TIMEOUT_MS = 5_000;
/** After SIGTERM, how long the host gets before SIGKILL. */
const KILL_GRACE_MS = 2_000;
/** spawn() errors that mean there is no host to run at that path (HostNotFoundError). */
const HOST_NOT_FOUND_CODES = new Set(['ENOENT', 'EACCES', 'ENOTDIR', 'ELOOP']);
/** How many of the host's last stderr lines an error message quotes (all are in `stderrTail`). */
const STDERR_LINES_IN_MESSAGE = 10;

/** `'dot'` → `{provider: 'dot'}`: the common case of methods that only need a profile name. */
const providerParams = (params) => (typeof params === 'string' ? { provider: params } : params);

/**
 * The argv of `authbridge serve` for the options (see AuthBridgeOptions in index.d.ts).
 * @param {object} options
 */
export function hostArguments(options = {}) {
  const args = ['serve'];
  if (options.noDefaultPlugins) args.push('--no-default-plugins');
  for (const folder of [].concat(options.plugins ?? [])) args.push('--plugins', folder);
  if (options.config) args.push('--config', options.config);
  if (options.logLevel) args.push('--log-level', options.logLevel);
  if (options.vault) args.push('--vault', options.vault);
  if (options.vaultDir) args.push('--vault-dir', options.vaultDir);
  if (options.openBrowser) args.push('--open-browser');
  return args.concat(options.args ?? []);
}

/**
 * Where the host executable is: the option, else AUTHBRIDGE of the host's environment
 * (`options.env`), else of this process's, else the host bundled in this package (`make dist`
 * puts one in `host/<platform>-<arch>/`), else `authbridge` on PATH.
 */
export function resolveHostPath(options = {}) {
  return options.hostPath || options.env?.AUTHBRIDGE || process.env.AUTHBRIDGE || bundledHost() || 'authbridge';
}

/**
 * The host that came inside this package for the running platform, or undefined. The npm
 * package of `make dist` carries the linux-x64 host itself (rather than esbuild's optional
 * per-platform packages, which only a registry can resolve): one tarball installs offline.
 */
export function bundledHost() {
  const host = fileURLToPath(new URL(`../host/${process.platform}-${process.arch}/bin/authbridge`, import.meta.url));
  try {
    accessSync(host, constants.X_OK);
    return host;
  } catch {
    return undefined;
  }
}

/**
 * The connection to the agent that `options.agent` asks for: an AgentSocket, or null for a host
 * of the bridge's own (`agent` false, or "auto" with no agent answering). Rejects with
 * AgentNotRunningError when `agent` is true and none answers. With `autostart`, a missing agent
 * is started first (never otherwise).
 * @param {object} options AuthBridgeOptions
 * @returns {Promise<AgentSocket|null>}
 */
async function openAgent(options) {
  if (![undefined, false, true, 'auto'].includes(options.agent)) {
    throw new TypeError(`agent must be true, false or "auto", not ${JSON.stringify(options.agent)}`);
  }
  if (!options.agent) return null;
  const path = agentSocketPath(options);
  if (!path) {
    if (options.agent !== true) return null;
    throw new AgentNotRunningError('no agent socket to use: XDG_RUNTIME_DIR is not set; set AUTHBRIDGE_AGENT_SOCKET or pass agentSocket');
  }
  for (let started = false; ; started = true) {
    try {
      return await AgentSocket.connect(path);
    } catch (error) {
      if (error.code === 'EAGENTNOTYOURS') {
        // Another user's socket (or folder): no agent of ours can be started there either.
        if (options.agent === true) throw new AgentNotRunningError(error.message, { socket: path, cause: error });
        warn(options, `${error.message}; starting a host of this bridge's own`);
        return null;
      }
      if (options.autostart && !started) {
        await startAgent(path, options);
        continue;
      }
      if (options.agent !== true) return null;
      throw new AgentNotRunningError(
        `no authbridge agent answers on ${path} (${error.code ?? error.message}); start one with \`authbridge agent\` ` +
        '(or `systemctl --user enable --now authbridge.socket`)', { socket: path, cause: error });
    }
  }
}

/** A start-up warning, to `options.onWarning` or Node's process warnings. */
function warn(options, message) {
  if (options.onWarning) userCode(() => options.onWarning(message));
  else process.emitWarning(message, { type: 'AuthBridgeWarning', code: 'AUTHBRIDGE_HOST_WARNING' });
}

/**
 * `authbridge agent` for `autostart`: detached (a session of its own, unref'd), it outlives this
 * program and serves the user's other apps. Resolves once it listens (it writes its socket's
 * path) or has ended (another agent won the race to the socket: the next connect finds that one).
 */
function startAgent(path, options) {
  const args = ['agent', '--socket', path, ...hostArguments(options).slice(1)];
  const child = spawn(resolveHostPath(options), args, {
    env: options.env, cwd: options.cwd, detached: true, stdio: ['ignore', 'pipe', 'ignore'],
  });
  return new Promise((resolve) => {
    let settled = false;
    const done = () => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      child.stdout?.destroy();
      child.unref();
      resolve();
    };
    const timer = setTimeout(done, options.startTimeoutMs ?? DEFAULT_START_TIMEOUT_MS);
    child.once('error', done);
    child.stdout?.on('data', (chunk) => { if (chunk.includes(0x0a)) done(); });
    child.stdout?.once('close', done);
  });
}

/**
 * A running `authbridge` host (or a connection to the user's agent) and the calls made to it.
 *
 * Events:
 * - `'session/changed'` (params): a session changed (signed in, refreshed, signed out, license revoked);
 * - `'signIn/progress'` (params): a sign-in moved on (`stage` `openUrl`: open `params.url`);
 * - `'profiles/changed'` (params): the agent read its configuration file again: `{added, changed,
 *   removed, configurationProblem?}` (call `listProviders()` for the profiles now);
 * - `'notification'` ({method, params}): every notification, including ones this client does not know;
 * - `'exit'` ({code, signal, error, stderrTail}): the host is gone (after close(), restart(), or it died);
 * - `'protocolError'` (Error): the host wrote something that is not a valid frame, answered a
 *   request that was never sent, or its output ended inside a line. The message gives lengths,
 *   never the line's text (it may be part of a token). Never thrown: the bridge goes on.
 *
 * The host's start-up warnings (initialize's `warnings`, e.g. a config.json it could not read) go
 * to the `onWarning` option, by default to `process.emitWarning` (printed on stderr like Node's own
 * warnings, unless the program handles `process.on('warning')` or runs with --no-warnings).
 */
export class AuthBridge extends EventEmitter {
  /** @type {HostProcess} */
  #host;
  #nextId = 1;
  /** id → {method, resolve, reject, onProgress} of calls waiting for their answer */
  #pending = new Map();
  /** ids the client cancelled: their late answer (-32800 or a result) is expected and dropped */
  #cancelled = new Set();
  #closing = null;
  #onFrame;
  #requestTimeoutMs;
  #closeTimeoutMs;
  #options;
  /** initialize's params as last sent, for restart() */
  #initializeParams = {};
  /** profile name → configureProfile params that succeeded (in order), replayed by restart() */
  #profiles = new Map();

  /**
   * Starts a host and initializes it: the usual way to get a bridge.
   * Rejects (and stops the host) when the host cannot be started or refuses `initialize`
   * (e.g. UnsupportedProtocolVersionError), or when `startTimeoutMs` passes first.
   * @param {object} [options] AuthBridgeOptions
   * @returns {Promise<AuthBridge>}
   */
  static async start(options = {}) {
    let agent = await openAgent(options);
    for (;;) {
      const bridge = new AuthBridge(options, agent);
      try {
        await bridge.initialize(
          { protocolVersion: options.protocolVersion, clientInfo: options.clientInfo, capabilities: options.capabilities },
          { timeoutMs: options.startTimeoutMs ?? DEFAULT_START_TIMEOUT_MS, signal: options.signal },
        );
        return bridge;
      } catch (error) {
        await bridge.close({ timeoutMs: 2_000 }).catch(() => {});
        if (agent && options.agent === 'auto' && error instanceof HostExitedError && error.agent) {
          bridge.#warn(`the agent on ${error.agent} closed the connection; starting a host of this bridge's own`);
          agent = null;
          continue;
        }
        throw error;
      }
    }
  }

  /**
   * Spawns the host without initializing it (start() does both). For callers that want to
   * send `initialize` themselves, e.g. to retry it with another protocol version. The `agent`
   * option is start()'s and restart()'s: this always spawns a host of the bridge's own.
   * @param {object} [options] AuthBridgeOptions
   */
  constructor(options = {}, agent = null) {
    super();
    this.#options = options;
    this.#onFrame = options.onFrame;
    this.#requestTimeoutMs = options.requestTimeoutMs;
    this.#closeTimeoutMs = options.closeTimeoutMs ?? DEFAULT_CLOSE_TIMEOUT_MS;
    this.#attach(agent ?? this.#spawnHost());
  }

  /** A new host process for this bridge's options. */
  #spawnHost() {
    const options = this.#options;
    return new HostProcess(resolveHostPath(options), hostArguments(options), {
      env: options.env,
      cwd: options.cwd,
      stderrLines: options.stderrLines,
    });
  }

  /** Wires a host process (or agent connection) to this bridge; events of an earlier one are ignored. */
  #attach(host) {
    /** The InitializeResult, once initialize() succeeded. */
    this.initializeResult = null;
    this.#host = host;
    const current = (handler) => (value) => { if (this.#host === host) handler(value); };
    host.on('line', current((line) => this.#receive(line)));
    host.on('overflow', current((bytes) =>
      this.#protocolError(`the host wrote a line of ${bytes} bytes, over the 64 MiB frame limit; it was dropped`)));
    host.on('partial', current((bytes) =>
      this.#protocolError(`the host's output ended inside a line (${bytes} bytes without a newline: it stopped mid-frame); it was dropped`)));
    if (this.#options.onStderr) host.on('stderr', this.#options.onStderr);
    host.on('exit', current((info) => this.#hostExited(info)));
    /** Resolves with {code, signal, error, stderrTail} when the host is gone (the current one, after restart()). */
    this.exited = host.exited;
  }

  // ── Lifecycle ──────────────────────────────────────────────────────────

  /**
   * Sends `initialize` (then the `initialized` notification). start() calls it for you.
   * @param {{protocolVersion?: string, clientInfo?: {name: string, version?: string}, capabilities?: object}} [params]
   * @param {CallOptions} [options]
   */
  async initialize(params = {}, options = {}) {
    this.#initializeParams = params;
    const result = await this.request('initialize', {
      protocolVersion: params.protocolVersion ?? PROTOCOL_VERSION,
      clientInfo: params.clientInfo ?? { name: 'authbridge-node-client', version: CLIENT_VERSION },
      capabilities: params.capabilities ?? {},
    }, options);
    this.initializeResult = result;
    this.notify('initialized', {});
    for (const warning of result.warnings ?? []) this.#warn(warning);
    return result;
  }

  /**
   * Stops this host (cleanly, if it still runs) and starts a new one with the same options:
   * after the host died (HostExitedError), or to pick up new plugins or a changed config file.
   * Listeners stay; the profiles configured with configureProfile() are configured again, in the
   * order they were first configured (a profile that fails now is reported through `onWarning`,
   * and retried by the next restart). Resolves with the new InitializeResult; rejects, leaving
   * no process behind, when the new host cannot be started or initialized.
   * @param {{signal?: AbortSignal, timeoutMs?: number}} [options] bound and abort of the start
   */
  async restart({ signal, timeoutMs = this.#options.startTimeoutMs ?? DEFAULT_START_TIMEOUT_MS } = {}) {
    await this.close();
    let agent = await openAgent(this.#options);
    let result;
    for (;;) {
      this.#closing = null;
      this.#attach(agent ?? this.#spawnHost());
      try {
        result = await this.initialize(this.#initializeParams, { timeoutMs, signal });
        break;
      } catch (error) {
        await this.close({ timeoutMs: 2_000 }).catch(() => {});
        if (agent && this.#options.agent === 'auto' && error instanceof HostExitedError && error.agent) {
          agent = null;
          continue;
        }
        throw error;
      }
    }
    for (const [name, params] of this.#profiles) {
      try {
        await this.request('configureProfile', params, { timeoutMs, signal });
      } catch (error) {
        this.#warn(`profile "${name}" could not be configured again after the restart: ${error.message}`);
      }
    }
    return result;
  }

  /** A start-up warning of the host, to `onWarning` or Node's process warnings. */
  #warn(message) {
    warn(this.#options, message);
  }

  /** `serverInfo` of the InitializeResult ({name: "authbridge", version}). */
  get serverInfo() { return this.initializeResult?.serverInfo; }
  /** `capabilities` of the InitializeResult (flows, notifications…). */
  get capabilities() { return this.initializeResult?.capabilities; }
  /** Where the host keeps tokens ({backend, protection}). */
  get storage() { return this.initializeResult?.storage; }
  /** The host's process id (undefined when it could not be started, and on the agent). */
  get pid() { return this.#host.pid; }
  /** Whether this bridge talks to the user's agent (rather than a host of its own). */
  get onAgent() { return this.#host instanceof AgentSocket && this.running; }
  /** Whether the host is still there (false after close() or once it died). */
  get running() { return this.#host.running && this.#closing === null; }
  /** The host's last stderr lines (its log), oldest first. */
  stderrTail() { return this.#host.stderrTail(); }

  /**
   * Stops the host cleanly: `shutdown`, then `exit` and end of input; if it has not exited within
   * `timeoutMs`, SIGTERM, and SIGKILL 2 s later. On the agent only this connection ends (the agent
   * goes on serving the user's other apps). Calls still pending are answered by the host
   * (-32800 when `exit` cancels them) or reject with HostExitedError. Safe to call twice.
   * @param {{timeoutMs?: number}} [options]
   * @returns {Promise<{code: number|null, signal: string|null, error: Error|null, stderrTail: string[]}>}
   */
  close({ timeoutMs = this.#closeTimeoutMs } = {}) {
    this.#closing ??= (async () => {
      const host = this.#host;
      const deadline = Date.now() + timeoutMs;
      if (host.running) {
        try {
          await this.#call('shutdown', undefined, { timeoutMs: Math.max(timeoutMs, 1) });
        } catch {
          // Gone already, not initialized, or too slow: exit / EOF / signals below still stop it.
        }
        this.notify('exit');
        host.endInput();
        if (!(await exitedWithin(host, deadline - Date.now()))) {
          host.kill('SIGTERM');
          if (!(await exitedWithin(host, KILL_GRACE_MS))) {
            host.kill('SIGKILL');
          }
        }
      }
      return host.exited;
    })();
    return this.#closing;
  }

  // ── Raw JSON-RPC ───────────────────────────────────────────────────────

  /**
   * Sends a request and resolves with its result (or rejects with the error class of its code).
   * @param {string} method
   * @param {object} [params]
   * @param {CallOptions} [options] `signal` (abort → `$/cancelRequest`, AbortError),
   *   `timeoutMs` (→ `$/cancelRequest`, RequestTimeoutError), `onProgress` (this call's
   *   `signIn/progress` events)
   */
  request(method, params, options = {}) {
    if (this.#closing !== null) {
      return Promise.reject(new HostExitedError(`the bridge was closed; cannot send ${method}`, { method, ...this.#exitDetails() }));
    }
    return this.#call(method, params, options);
  }

  /** Sends a notification (no answer). Ignored once the host is gone. */
  notify(method, params) {
    this.#send(notificationFrame(method, params));
  }

  #call(method, params, { signal, timeoutMs = this.#requestTimeoutMs, onProgress } = {}) {
    return new Promise((resolve, reject) => {
      if (!this.#host.running) {
        reject(this.#hostExitedError(this.#host.exitInfo, method));
        return;
      }
      if (signal?.aborted) {
        reject(new AbortError(`${method} was aborted before it was sent`, { method, cause: signal.reason }));
        return;
      }
      const id = this.#nextId++;
      let timer = null;
      const onAbort = () => {
        this.#cancel(id);
        settle(reject, new AbortError(`${method} (#${id}) was aborted`, { method, requestId: id, cause: signal.reason }));
      };
      const settle = (how, value) => {
        if (!this.#pending.delete(id)) return;
        clearTimeout(timer);
        signal?.removeEventListener('abort', onAbort);
        how(value);
      };
      this.#pending.set(id, {
        method,
        onProgress,
        resolve: (result) => settle(resolve, result),
        reject: (error) => settle(reject, error),
      });
      signal?.addEventListener('abort', onAbort, { once: true });
      if (timeoutMs !== undefined && timeoutMs !== null) {
        timer = setTimeout(() => {
          this.#cancel(id);
          settle(reject, new RequestTimeoutError(`${method} (#${id}) got no answer within ${timeoutMs} ms; it was cancelled`,
            { method, requestId: id, timeoutMs }));
        }, timeoutMs);
      }
      this.#send(requestFrame(id, method, params));
    });
  }

  /** Tells the host to stop request `id`; its answer (-32800, or a result that won the race) is dropped. */
  #cancel(id) {
    if (!this.#host.running) return;
    this.#cancelled.add(id);
    this.notify('$/cancelRequest', { id });
  }

  #send(frame) {
    const line = JSON.stringify(frame);
    if (this.#host.writeLine(line) && this.#onFrame) userCode(() => this.#onFrame(frame, 'out', line));
  }

  #receive(line) {
    let frame;
    try {
      frame = JSON.parse(line);
    } catch {
      // Not the parser's error as a cause: its message quotes the line.
      this.#protocolError(`the host wrote a line that is not JSON (${byteLength(line)} bytes); it was ignored`);
      return;
    }
    if (this.#onFrame) userCode(() => this.#onFrame(frame, 'in', line));
    switch (frameKind(frame)) {
      case 'notification':
        this.#dispatchNotification(frame.method, frame.params);
        return;
      case 'response':
        this.#dispatchResponse(frame, line);
        return;
      default:
        this.#protocolError(`the host wrote a frame that is neither a response nor a notification (${byteLength(line)} bytes); it was ignored`);
    }
  }

  #dispatchResponse(frame, line) {
    const entry = this.#pending.get(frame.id);
    if (!entry) {
      if (this.#cancelled.delete(frame.id)) return; // the answer to a call we cancelled
      if (frame.id === null && frame.error) {
        // The host could not tell which request a frame was (-32700/-32600 with id null).
        this.#protocolError(`the host refused a frame: ${frame.error.code} ${frame.error.message}`, errorFromResponse(frame.error));
      } else {
        this.#protocolError(`the host answered id ${describeId(frame.id)}, which no call is waiting for (${byteLength(line)} bytes); it was ignored`);
      }
      return;
    }
    if ('error' in frame) entry.reject(errorFromResponse(frame.error, { method: entry.method, requestId: frame.id }));
    else entry.resolve(frame.result);
  }

  #dispatchNotification(method, params) {
    if (method === 'signIn/progress' && params) {
      const entry = this.#pending.get(params.requestId);
      if (entry?.onProgress) userCode(() => entry.onProgress(params));
    }
    userCode(() => this.emit('notification', { method, params }));
    userCode(() => this.emit(method, params));
  }

  #protocolError(message, cause) {
    const error = new AuthBridgeError(message, cause === undefined ? {} : { cause });
    userCode(() => this.emit('protocolError', error));
  }

  #hostExited(info) {
    for (const [id, entry] of this.#pending) entry.reject(this.#hostExitedError(info, entry.method, id));
    this.#pending.clear();
    this.#cancelled.clear();
    userCode(() => this.emit('exit', info));
  }

  #exitDetails() {
    const info = this.#host.exitInfo;
    return info ? { exitCode: info.code, signal: info.signal, stderrTail: info.stderrTail } : { stderrTail: this.#host.stderrTail() };
  }

  #hostExitedError(info, method, id) {
    if (HOST_NOT_FOUND_CODES.has(info.error?.code)) {
      const what = info.error.code === 'EACCES' ? 'is not executable' : 'was not found';
      return new HostNotFoundError(
        `the authbridge host ${this.#host.command} ${what} (${info.error.code}), so ${method} could not be sent; ` +
        'pass its path (hostPath), set AUTHBRIDGE, or put authbridge on PATH (make install PREFIX=DIR installs DIR/bin/authbridge)',
        { method, requestId: id, executable: this.#host.command, cause: info.error });
    }
    const call = id === undefined ? `cannot send ${method}` : `before answering ${method} (#${id})`;
    if (info.agent) {
      return new HostExitedError(`the authbridge agent on ${info.agent} closed the connection (it stopped or was killed): ${call}`, {
        method, requestId: id, exitCode: null, signal: null, stderrTail: [], agent: info.agent,
      });
    }
    let how;
    if (info.error) how = `could not be started (${info.error.message})`;
    else if (info.signal) how = `was killed by ${info.signal}`;
    else how = `exited with code ${info.code}`;
    const tail = info.stderrTail.slice(-STDERR_LINES_IN_MESSAGE);
    const log = tail.length ? `; its last log lines:\n  ${tail.join('\n  ')}` : '; it logged nothing';
    return new HostExitedError(`authbridge ${how}: ${call}${log}`, {
      method, requestId: id, exitCode: info.code, signal: info.signal, stderrTail: info.stderrTail, cause: info.error ?? undefined,
    });
  }

  // ── Bridge methods (bridge-spec §4) ─────────────────────────────────────
  // `params` are the spec's named params; where only a profile is needed, a string is accepted.

  /** The plugins the host found (loaded or refused, and why) and the configured profiles. */
  listProviders(options) { return this.request('listProviders', {}, options); }

  /**
   * Adds or replaces a profile for this host process (never written to the config file).
   * restart() configures it again in the new host.
   */
  async configureProfile(params, options) {
    const result = await this.request('configureProfile', params, options);
    if (typeof params?.name === 'string') this.#profiles.set(params.name, params);
    return result;
  }

  /**
   * Removes a profile for this host process and discards its stored session (nothing is revoked).
   * restart() no longer configures it (one from the config file comes back, as in any new host).
   */
  async removeProfile(params, options) {
    const named = typeof params === 'string' ? { name: params } : params;
    const result = await this.request('removeProfile', named, options);
    this.#profiles.delete(named?.name);
    return result;
  }

  /** Every signed-in account (of one provider, or of all). Local knowledge: never calls a provider. */
  listAccounts(params = {}, options) { return this.request('listAccounts', providerParams(params), options); }

  /** The state of a profile's session (`signedIn`, `notSignedIn`, `offline`, `licenseRevoked`). Never an error for a bad session. */
  checkSignInStatus(params, options) { return this.request('checkSignInStatus', providerParams(params), options); }

  /**
   * Signs in; resolves when the sign-in has finished. Watch `signIn/progress` (or pass
   * `options.onProgress`) for the URL to open (`stage: 'openUrl'`) or the device code.
   * `params.timeoutMs` bounds the host's wait for the user; `options.timeoutMs` the client's.
   */
  requestOAuthTokens(params, options) { return this.request('requestOAuthTokens', providerParams(params), options); }

  /** Hands an intercepted redirect (external flow) to the pending sign-in. */
  completeSignIn(params, options) { return this.request('completeSignIn', params, options); }
  completeSignOut(params, options) { return this.request('completeSignOut', params, options); }

  /** An access token (refreshed first when needed) and the headers/cookies to authorize requests with. */
  getAccessToken(params, options) { return this.request('getAccessToken', providerParams(params), options); }

  /**
   * Token exchange (RFC 8693): the session's access token (or ID token, `subjectTokenType:
   * 'idToken'`) exchanged for a token for another `audience`, `resource` or `scopes`; answered
   * like getAccessToken, and kept by the host until it is about to expire.
   */
  exchangeToken(params, options) { return this.request('exchangeToken', providerParams(params), options); }

  /** An HTTP request made by the host with the session's authorization; any HTTP status is a result. */
  fetch(params, options) { return this.request('fetch', params, options); }

  /** Revokes at the provider (best effort), then deletes the tokens. */
  signOut(params, options) { return this.request('signOut', providerParams(params), options); }

  /** The OpenRPC document of the protocol (`rpc.discover`). */
  discover(options) { return this.request('rpc.discover', undefined, options); }

  // ── For HTTP libraries ──────────────────────────────────────────────────

  /**
   * A function with fetch's signature (the global fetch underneath) that puts the access token of
   * `profile` on every request: getAccessToken's headers, and its cookies for the URL's host and
   * path. A 401 from the URL's origin renews the token once (forceRefresh) and sends the request
   * again, unless its body was a stream. Only https, or http to a loopback IP address, gets a
   * token (else InsecureUrlError). See the README ("authorizedFetch").
   * @param {string} profile
   * @param {{account?: string, minValidityMs?: number, scopes?: string[], resource?: string | string[]}} [options]
   */
  authorizedFetch(profile, options) { return authorizedFetch(this, profile, options); }

  // ── A protected resource by its URL alone (RFC 9728) ────────────────────

  /**
   * Signs in to the protected resource at `url` (an MCP server's endpoint, an API) knowing nothing
   * else: configures the `oidc` profile `profile` (default profileNameForUrl(url)) with settings
   * `{resource: url}` — the host finds the authorization server from the resource's metadata and
   * registers itself there — and, unless that profile is signed in already (a session the vault
   * kept counts), signs in with `flow` (default the profile's first) and `scopes`, `onProgress`
   * getting its progress (default openInBrowser). Resolves with the SignInStatus (`provider`: the
   * profile's name).
   * @param {string | URL} url
   * @param {{profile?: string, flow?: string, scopes?: string[], onProgress?: Function | null, timeoutMs?: number, signal?: AbortSignal}} [options]
   */
  async signInToUrl(url, { profile, flow, scopes, onProgress = openInBrowser, timeoutMs, signal } = {}) {
    const resource = String(url);
    const name = profile ?? profileNameForUrl(resource);
    const options = { ...(signal && { signal }), ...(timeoutMs !== undefined && { timeoutMs }) };
    await this.configureProfile({ name, plugin: 'oidc', settings: { resource } }, options);
    const status = await this.checkSignInStatus({ provider: name }, options);
    if (status.state === 'signedIn' || status.state === 'offline') return status;
    return this.requestOAuthTokens({ provider: name, ...(flow !== undefined && { flow }), ...(scopes !== undefined && { scopes }) },
      { ...options, ...(onProgress && { onProgress }) });
  }

  /**
   * signInToUrl(url, options), then authorizedFetch for that profile (its step-ups sign in with the
   * same `flow` and `onProgress`; `stepUp: false` turns them off).
   * @param {string | URL} url
   * @param {{profile?: string, flow?: string, scopes?: string[], onProgress?: Function | null, stepUp?: boolean, timeoutMs?: number, signal?: AbortSignal}} [options]
   */
  async fetchForUrl(url, options = {}) {
    const status = await this.signInToUrl(url, options);
    const { flow, onProgress = openInBrowser, stepUp } = options;
    return authorizedFetch(this, status.provider, {
      ...(flow !== undefined && { flow }), ...(onProgress && { onProgress }), ...(stepUp !== undefined && { stepUp }),
    });
  }
}

/**
 * Runs a listener or callback of the application. If it throws, the error is rethrown on its own
 * tick (an uncaught exception, as from any EventEmitter listener) instead of here, where it would
 * cut short the frames that came in the same chunk and leave their calls unanswered.
 */
function userCode(callback) {
  try {
    callback();
  } catch (error) {
    process.nextTick(() => { throw error; });
  }
}

/** Resolves true when the host exits within `ms`, false otherwise; never leaves a timer behind. */
function exitedWithin(host, ms) {
  if (!host.running) return Promise.resolve(true);
  return new Promise((resolve) => {
    const timer = setTimeout(() => resolve(false), Math.max(ms, 0));
    host.exited.then(() => {
      clearTimeout(timer);
      resolve(true);
    });
  });
}

// Protocol errors say how long a line was, never what it held: a broken or cut frame may be part
// of an answer carrying a token (as the Python client does).
function byteLength(line) {
  return Buffer.byteLength(line, 'utf8');
}

/** An id as a problem report may show it: a number, or a short string; else only its type. */
function describeId(id) {
  if (typeof id === 'number' || (typeof id === 'string' && id.length <= 40)) return JSON.stringify(id);
  return `of type ${id === null ? 'null' : typeof id}`;
}
