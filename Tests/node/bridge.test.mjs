// End-to-end tests of the `authbridge` host from a Node frontend's point of view.
//
// Run by `make test-node`:
//   AUTHBRIDGE_BIN=<abs path to authbridge> AUTHBRIDGE_BUILD_DIR=<abs .build/debug> node --test Tests/node/
//
// Node 20 built-in modules only. The host is spawned with `--no-default-plugins` and a
// private plugin folder holding copies of the test plugins (ctest, swifttest), with
// XDG_CONFIG_HOME / XDG_DATA_HOME pointed at temporary folders, so nothing on the machine
// leaks into the run. Every wait is bounded; nothing sleeps to synchronise.

import { test, describe, before, after, afterEach } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { EventEmitter } from 'node:events';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const REPO = path.resolve(HERE, '..', '..');
const BUILD_DIR = process.env.AUTHBRIDGE_BUILD_DIR || path.join(REPO, '.build', 'debug');
const BIN = process.env.AUTHBRIDGE_BIN || path.join(BUILD_DIR, 'authbridge');

/** Default bound for one request / notification / exit wait. */
const WAIT_MS = 10_000;
/** Bound for a whole test (a few waits each). */
const TEST_TIMEOUT_MS = 30_000;

// ── A tiny JSON-RPC 2.0 client over a child's stdio ────────────────────────

/** An error answer from the host, carrying the JSON-RPC error object. */
class RpcError extends Error {
  constructor(method, error) {
    super(`${method} failed: ${error.code} ${error.message}`);
    this.name = 'RpcError';
    this.code = error.code;
    this.data = error.data;
    this.rpcError = error;
  }
}

const isPlainObject = (v) => v !== null && typeof v === 'object' && !Array.isArray(v);
const has = (o, k) => Object.prototype.hasOwnProperty.call(o, k);

/**
 * Checks the minimal envelope of one frame written by the host; returns a problem
 * description, or null when the frame is well formed.
 */
function envelopeProblem(msg) {
  if (!isPlainObject(msg)) return 'frame is not a JSON object';
  if (msg.jsonrpc !== '2.0') return `jsonrpc is ${JSON.stringify(msg.jsonrpc)}, not "2.0"`;
  if (has(msg, 'method')) {
    if (typeof msg.method !== 'string' || msg.method === '') return 'notification method is not a non-empty string';
    if (has(msg, 'id')) return 'the host sent a request (a frame with method and id); it must only send notifications';
    if (has(msg, 'params') && !isPlainObject(msg.params) && !Array.isArray(msg.params)) return 'params is neither object nor array';
    if (has(msg, 'result') || has(msg, 'error')) return 'notification carries result/error';
    return null;
  }
  if (!has(msg, 'id')) return 'response has no id';
  const id = msg.id;
  if (!(id === null || typeof id === 'string' || Number.isInteger(id))) return `response id ${JSON.stringify(id)} is not string/integer/null`;
  const hasResult = has(msg, 'result');
  const hasError = has(msg, 'error');
  if (hasResult === hasError) return 'response must carry exactly one of result / error';
  if (hasError) {
    const e = msg.error;
    if (!isPlainObject(e)) return 'error is not an object';
    if (!Number.isInteger(e.code)) return 'error.code is not an integer';
    if (typeof e.message !== 'string') return 'error.message is not a string';
  }
  return null;
}

/**
 * Spawns the host and speaks JSON-RPC 2.0 with it, one JSON message per line.
 *  - `request(method, params)` resolves with `result` or rejects with an `RpcError`
 *    (or a timeout Error); ids are integers from 1, tracked in a pending map.
 *  - `notify(method, params)` sends a notification.
 *  - host notifications are emitted as 'notification' events and kept in `notifications`;
 *    `waitForNotification(predicate)` looks at what already arrived, then waits.
 *  - every frame's envelope is checked; problems collect in `protocolErrors`.
 */
class RpcClient extends EventEmitter {
  constructor(bin, args, { env, cwd } = {}) {
    super();
    this.nextId = 1;
    this.pending = new Map(); // id → { method, resolve, reject, timer }
    this.notifications = [];
    this.frames = [];
    this.protocolErrors = [];
    this.stderr = '';
    this.exitInfo = null; // { code, signal } once exited

    this.child = spawn(bin, args, { env, cwd, stdio: ['pipe', 'pipe', 'pipe'] });
    this.exited = new Promise((resolve) => {
      this.child.once('exit', (code, signal) => {
        this.exitInfo = { code, signal };
        for (const [id, p] of this.pending) {
          clearTimeout(p.timer);
          p.reject(new Error(`host exited (code ${code}, signal ${signal}) before answering ${p.method} #${id}`));
        }
        this.pending.clear();
        this.emit('exit', this.exitInfo);
        resolve(this.exitInfo);
      });
    });
    this.child.once('error', (err) => this.protocolErrors.push(`spawn failed: ${err.message}`));
    // Writes after the host closed stdin (EPIPE) must not crash the test process.
    this.child.stdin.on('error', () => {});
    this.child.stderr.setEncoding('utf8');
    this.child.stderr.on('data', (chunk) => {
      // Keep the tail only: enough to explain a failure.
      this.stderr = (this.stderr + chunk).slice(-20_000);
    });
    this.lines = createInterface({ input: this.child.stdout, crlfDelay: Infinity });
    this.lines.on('line', (line) => this.#onLine(line));
  }

  #onLine(line) {
    if (line.trim() === '') {
      this.protocolErrors.push('host wrote a blank line');
      return;
    }
    let msg;
    try {
      msg = JSON.parse(line);
    } catch (err) {
      this.protocolErrors.push(`host wrote a line that is not JSON: ${line.slice(0, 200)}`);
      return;
    }
    this.frames.push(msg);
    const problem = envelopeProblem(msg);
    if (problem) {
      this.protocolErrors.push(`${problem}: ${line.slice(0, 300)}`);
      if (!isPlainObject(msg)) return;
    }
    if (has(msg, 'method')) {
      this.notifications.push(msg);
      this.emit('notification', msg);
      return;
    }
    const p = this.pending.get(msg.id);
    if (!p) {
      this.protocolErrors.push(`response for an id with no pending request: ${line.slice(0, 300)}`);
      return;
    }
    this.pending.delete(msg.id);
    clearTimeout(p.timer);
    if (has(msg, 'error')) p.reject(new RpcError(p.method, msg.error));
    else p.resolve(msg.result);
  }

  #write(frame) {
    this.child.stdin.write(JSON.stringify(frame) + '\n');
  }

  request(method, params, { timeoutMs = WAIT_MS } = {}) {
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      if (this.exitInfo) {
        reject(new Error(`host already exited; cannot send ${method}`));
        return;
      }
      const timer = setTimeout(() => {
        this.pending.delete(id);
        reject(new Error(`no answer to ${method} #${id} within ${timeoutMs} ms\nhost stderr:\n${this.stderr}`));
      }, timeoutMs);
      this.pending.set(id, { method, resolve, reject, timer });
      const frame = { jsonrpc: '2.0', id, method };
      if (params !== undefined) frame.params = params;
      this.#write(frame);
    });
  }

  notify(method, params) {
    const frame = { jsonrpc: '2.0', method };
    if (params !== undefined) frame.params = params;
    this.#write(frame);
  }

  /** The first notification (already received or future) matching `predicate`. */
  waitForNotification(predicate, { timeoutMs = WAIT_MS, what = 'notification' } = {}) {
    const seen = this.notifications.find(predicate);
    if (seen) return Promise.resolve(seen);
    return new Promise((resolve, reject) => {
      const onNote = (msg) => {
        if (!predicate(msg)) return;
        cleanup();
        resolve(msg);
      };
      const onExit = (info) => {
        cleanup();
        reject(new Error(`host exited (${JSON.stringify(info)}) while waiting for ${what}`));
      };
      const timer = setTimeout(() => {
        cleanup();
        reject(new Error(`no ${what} within ${timeoutMs} ms; got: ${JSON.stringify(this.notifications)}`));
      }, timeoutMs);
      const cleanup = () => {
        clearTimeout(timer);
        this.off('notification', onNote);
        this.off('exit', onExit);
      };
      this.on('notification', onNote);
      this.once('exit', onExit);
    });
  }

  /** Resolves with {code, signal} when the host exits; rejects after `timeoutMs`. */
  waitForExit({ timeoutMs = WAIT_MS } = {}) {
    let timer;
    const timeout = new Promise((_, reject) => {
      timer = setTimeout(() => reject(new Error(`host did not exit within ${timeoutMs} ms\nhost stderr:\n${this.stderr}`)), timeoutMs);
    });
    return Promise.race([this.exited, timeout]).finally(() => clearTimeout(timer));
  }

  /** Closes the host's stdin (end of input). */
  closeInput() {
    this.child.stdin.end();
  }

  /** Makes sure the host is gone (test clean-up); SIGKILL after a bounded grace. */
  async dispose() {
    this.lines.close();
    if (this.exitInfo) return;
    this.child.stdin.end();
    try {
      await this.waitForExit({ timeoutMs: 3_000 });
    } catch {
      this.child.kill('SIGKILL');
      await this.exited;
    }
  }
}

// ── Fixtures ───────────────────────────────────────────────────────────────

let root;
let pluginDir;
let configFile;
let env;
const clients = new Set();

before(() => {
  assert.ok(fs.existsSync(BIN), `host binary not found at ${BIN} (run make build)`);
  const testPlugins = path.join(BUILD_DIR, 'test-plugins');
  assert.ok(fs.existsSync(testPlugins), `test plugins not found at ${testPlugins} (run make build)`);

  root = fs.mkdtempSync(path.join(os.tmpdir(), 'authbridge-node-'));
  // The plugin folder and its files must not be group/other-writable.
  pluginDir = path.join(root, 'plugins');
  fs.mkdirSync(pluginDir);
  fs.chmodSync(pluginDir, 0o755);
  for (const name of fs.readdirSync(testPlugins)) {
    const src = path.join(testPlugins, name);
    if (!fs.statSync(src).isFile()) continue;
    const dst = path.join(pluginDir, name);
    fs.copyFileSync(src, dst);
    fs.chmodSync(dst, 0o644);
  }
  for (const id of ['ctest', 'swifttest']) {
    assert.ok(fs.existsSync(path.join(pluginDir, `${id}.json`)), `manifest ${id}.json missing from ${testPlugins}`);
  }

  configFile = path.join(root, 'config.json');
  fs.writeFileSync(
    configFile,
    JSON.stringify({ profiles: { c: { plugin: 'ctest', settings: { server: 'https://ctest.example' } } } }),
    { mode: 0o644 },
  );

  const xdgConfig = path.join(root, 'xdg-config');
  const xdgData = path.join(root, 'xdg-data');
  fs.mkdirSync(xdgConfig, { mode: 0o700 });
  fs.mkdirSync(xdgData, { mode: 0o700 });
  env = { ...process.env, XDG_CONFIG_HOME: xdgConfig, XDG_DATA_HOME: xdgData };
  delete env.DBUS_SESSION_BUS_ADDRESS; // never the developer's own keyring
});

after(() => {
  if (root) fs.rmSync(root, { recursive: true, force: true });
});

afterEach(async () => {
  for (const client of clients) await client.dispose();
  clients.clear();
});

function startHost({ config = true } = {}) {
  const args = ['serve', '--no-default-plugins', '--plugins', pluginDir, '--log-level', 'warning'];
  if (config) args.push('--config', configFile);
  const client = new RpcClient(BIN, args, { env, cwd: root });
  clients.add(client);
  return client;
}

async function initialize(client) {
  const result = await client.request('initialize', {
    protocolVersion: '1.0',
    clientInfo: { name: 'node-test', version: '1.0.0' },
    capabilities: {},
  });
  client.notify('initialized', {});
  return result;
}

/** Every frame the host wrote had a valid envelope. */
function assertCleanProtocol(client) {
  assert.deepEqual(client.protocolErrors, [], `protocol problems; host stderr:\n${client.stderr}`);
  assert.ok(client.frames.length > 0, 'the host wrote no frame at all');
}

async function assertRpcError(promise, code) {
  await assert.rejects(promise, (err) => {
    assert.ok(err instanceof RpcError, `expected an RpcError ${code}, got: ${err && err.stack}`);
    assert.equal(err.code, code, `expected error ${code}, got ${err.code} (${err.message})`);
    return true;
  });
  return promise.catch((err) => err);
}

// ── Tests ──────────────────────────────────────────────────────────────────

describe('authbridge over stdio', { timeout: TEST_TIMEOUT_MS * 6 }, () => {
  test('lifecycle: initialize → initialized → shutdown → exit (code 0)', { timeout: TEST_TIMEOUT_MS }, async () => {
    const host = startHost({ config: false });
    const result = await host.request('initialize', {
      protocolVersion: '1.0',
      clientInfo: { name: 'node-test', version: '1.0.0' },
    });
    assert.equal(result.protocolVersion, '1.0');
    assert.ok(isPlainObject(result.serverInfo), 'serverInfo is an object');
    assert.equal(result.serverInfo.name, 'authbridge');
    assert.equal(typeof result.serverInfo.version, 'string');
    assert.ok(Array.isArray(result.providers), 'providers is an array');
    for (const id of ['ctest', 'swifttest']) {
      const provider = result.providers.find((p) => p.id === id);
      assert.ok(provider, `provider ${id} is listed: ${JSON.stringify(result.providers)}`);
      assert.equal(provider.status, 'loaded', `provider ${id}: ${JSON.stringify(provider)}`);
    }
    assert.equal(result.capabilities?.batches, false);
    assert.equal(result.capabilities?.cancellation, true);

    host.notify('initialized', {});

    const shutdown = await host.request('shutdown');
    assert.equal(shutdown, null);

    host.notify('exit');
    const { code, signal } = await host.waitForExit();
    assert.equal(signal, null);
    assert.equal(code, 0);
    assertCleanProtocol(host);
  });

  test('a request before initialize is refused with -32002', { timeout: TEST_TIMEOUT_MS }, async () => {
    const host = startHost();
    const err = await assertRpcError(host.request('listProviders', {}), -32002);
    assert.equal(typeof err.rpcError.message, 'string');

    // The host is still usable: initialize works afterwards.
    const result = await initialize(host);
    assert.equal(result.protocolVersion, '1.0');
    assertCleanProtocol(host);
  });

  test('a call through a plugin: session sign-in, access token, sign-out', { timeout: TEST_TIMEOUT_MS }, async () => {
    const host = startHost();
    const init = await initialize(host);
    const profile = init.profiles.find((p) => p.name === 'c');
    assert.ok(profile, `profile "c" from the config file: ${JSON.stringify(init.profiles)}`);
    assert.equal(profile.plugin, 'ctest');
    assert.equal(profile.status, 'ready');

    const signedInEvent = host.waitForNotification(
      (m) => m.method === 'session/changed' && m.params?.provider === 'c' && m.params?.state === 'signedIn',
      { what: 'session/changed signedIn' },
    );
    const status = await host.request('requestOAuthTokens', { provider: 'c', flow: 'session', sessionId: 'n1' });
    assert.equal(status.provider, 'c');
    assert.equal(status.state, 'signedIn');
    assert.equal(status.reason, 'signedIn');
    const event = await signedInEvent;
    assert.equal(event.params.reason, 'signedIn');
    assert.ok(!JSON.stringify(event).includes('at-n1'), 'events never carry tokens');

    const token = await host.request('getAccessToken', { provider: 'c' });
    assert.equal(token.provider, 'c');
    assert.equal(token.accessToken, 'at-n1');
    assert.equal(token.tokenType, 'Bearer');
    assert.equal(token.headers?.Authorization, 'Bearer at-n1');

    const signedOutEvent = host.waitForNotification(
      (m) => m.method === 'session/changed' && m.params?.provider === 'c' && m.params?.state === 'signedOut',
      { what: 'session/changed signedOut' },
    );
    const out = await host.request('signOut', { provider: 'c' });
    assert.equal(out.provider, 'c');
    assert.equal(out.signedOut, true);
    assert.ok(Array.isArray(out.revoked), 'revoked is a list of token names');
    assert.ok(Array.isArray(out.failures), 'failures is a list');
    assert.equal((await signedOutEvent).params.reason, 'userSignedOut');

    // Signed out: no token any more.
    const err = await assertRpcError(host.request('getAccessToken', { provider: 'c' }), -32001);
    assert.equal(err.data?.provider, 'c');

    await host.request('shutdown');
    host.notify('exit');
    assert.equal((await host.waitForExit()).code, 0);
    assertCleanProtocol(host);
  });

  test('an unknown method answers -32601', { timeout: TEST_TIMEOUT_MS }, async () => {
    const host = startHost();
    await initialize(host);
    const err = await assertRpcError(host.request('no/suchMethod', {}), -32601);
    assert.equal(err.data?.method, 'no/suchMethod');
    // The host keeps serving.
    const listed = await host.request('listProviders', {});
    assert.ok(Array.isArray(listed.plugins));
    assertCleanProtocol(host);
  });

  test('stdin EOF ends the host with exit code 0', { timeout: TEST_TIMEOUT_MS }, async () => {
    const host = startHost();
    await initialize(host);
    host.closeInput();
    const { code, signal } = await host.waitForExit();
    assert.equal(signal, null);
    assert.equal(code, 0);
    assert.equal(host.pending.size, 0);
    assertCleanProtocol(host);
  });
});
