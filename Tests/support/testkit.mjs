// The Node test kit: what the host's Node suite (Tests/node) and the Node client's tests
// (clients/node/test, through clients/node/test-support/harness.mjs) share, written once.
// Node 20 built-in modules only; every wait is bounded.
//
// Environment: the test targets' variables (the Makefile's header), each with a default so a
// suite also runs by hand from the checkout:
//   AUTHBRIDGE_BIN        the host under test (default <repo>/.build/debug/authbridge)
//   AUTHBRIDGE_BUILD_DIR  its build folder: bundled plugins in plugins/, test plugins in
//                         test-plugins/ (default <repo>/.build/debug)
//   AUTHBRIDGE_PYTHON     the venv's Python: django-oauth-toolkit, the frame validator
//                         (default <repo>/.venv/bin/python)

import { spawn } from 'node:child_process';
import { EventEmitter } from 'node:events';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';

export const REPO = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
export const BUILD_DIR = process.env.AUTHBRIDGE_BUILD_DIR || path.join(REPO, '.build', 'debug');
export const HOST_BIN = process.env.AUTHBRIDGE_BIN || path.join(BUILD_DIR, 'authbridge');
/** The bundled plugins as `make build` stages them. */
export const PLUGINS_DIR = path.join(BUILD_DIR, 'plugins');
/** The test plugins (ctest, swifttest) as `make build` stages them. */
export const TEST_PLUGINS_DIR = path.join(BUILD_DIR, 'test-plugins');
export const PYTHON = process.env.AUTHBRIDGE_PYTHON || path.join(REPO, '.venv', 'bin', 'python');
export const SPEC_PATH = path.join(REPO, 'bridge-spec', 'openrpc.json');
export const VALIDATOR = path.join(REPO, 'Tests', 'tools', 'validate_frames.py');

// ── The isolation recipe ─────────────────────────────────────────────────────

/** A temporary folder removed when the process ends. */
export function tempDir(prefix) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), prefix));
  process.once('exit', () => fs.rmSync(dir, { recursive: true, force: true }));
  return dir;
}

/**
 * The environment of a host living in `dir`: its own XDG_CONFIG_HOME, XDG_DATA_HOME, HOME and
 * XDG_RUNTIME_DIR (created, 0700: an agent's socket is looked for there, never the developer's),
 * no session bus (never the developer's keyring), no vault secret and no agent socket from
 * outside. The same recipe as the Python kit's isolation.py.
 */
export function isolatedEnv(dir, base = process.env) {
  const env = { ...base };
  for (const sub of ['xdg-config', 'xdg-data', 'home', 'xdg-runtime']) fs.mkdirSync(path.join(dir, sub), { recursive: true, mode: 0o700 });
  Object.assign(env, {
    XDG_CONFIG_HOME: path.join(dir, 'xdg-config'), XDG_DATA_HOME: path.join(dir, 'xdg-data'), HOME: path.join(dir, 'home'),
    XDG_RUNTIME_DIR: path.join(dir, 'xdg-runtime'),
  });
  delete env.DBUS_SESSION_BUS_ADDRESS;
  delete env.AUTHBRIDGE_VAULT_KEY;
  delete env.AUTHBRIDGE_AGENT_SOCKET;
  return env;
}

/**
 * A plugin folder (0755) holding private copies (0644) of `files` from `source` (the loader
 * refuses plugin files others can write). `files` defaults to every file of `source`.
 */
export function copyPlugins(folder, source, files = fs.readdirSync(source).filter((name) => fs.statSync(path.join(source, name)).isFile())) {
  fs.mkdirSync(folder, { recursive: true });
  fs.chmodSync(folder, 0o755);
  for (const name of files) {
    if (!fs.existsSync(path.join(source, name))) throw new Error(`${path.join(source, name)} is missing: run make build`);
    fs.copyFileSync(path.join(source, name), path.join(folder, name));
    fs.chmodSync(path.join(folder, name), 0o644);
  }
  return folder;
}

// ── Bounded waits and child processes ────────────────────────────────────────

/** Rejects with a clear message when `promise` has not settled within `ms`. */
export function withTimeout(promise, ms, what) {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: nothing within ${ms} ms`)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

/** Runs a command to its end (bounded); resolves with {code, signal, stdout, stderr}. */
export function run(command, args, { timeoutMs = 60_000, env, cwd, input } = {}) {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, { env, cwd, stdio: ['pipe', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (text) => { stdout += text; });
    child.stderr.setEncoding('utf8').on('data', (text) => { stderr += text; });
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`${path.basename(command)} ${args.join(' ')} still running after ${timeoutMs} ms\n${stdout}\n${stderr}`));
    }, timeoutMs);
    child.once('error', (error) => { clearTimeout(timer); reject(error); });
    child.once('close', (code, signal) => { clearTimeout(timer); resolve({ code, signal, stdout, stderr }); });
    child.stdin.end(input);
  });
}

/** Tests/tools/validate_frames.py over recorded JSONL files (the validators of every suite). */
export function validateFrames(...files) {
  return run(PYTHON, [VALIDATOR, ...files]);
}

// ── A raw JSON-RPC 2.0 driver of the host ────────────────────────────────────

/** An error answer from the host, carrying the JSON-RPC error object. */
export class RpcError extends Error {
  constructor(method, error) {
    super(`${method} failed: ${error.code} ${error.message}`);
    this.name = 'RpcError';
    this.code = error.code;
    this.data = error.data;
    this.rpcError = error;
  }
}

export const isPlainObject = (v) => v !== null && typeof v === 'object' && !Array.isArray(v);
const has = (o, k) => Object.prototype.hasOwnProperty.call(o, k);

/**
 * Checks the minimal envelope of one frame written by the host; returns a problem
 * description, or null when the frame is well formed. (The full schema check is the Python
 * kit's, through validateFrames.)
 */
export function envelopeProblem(msg) {
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
export class RpcClient extends EventEmitter {
  constructor(bin, args, { env, cwd, waitMs = 10_000 } = {}) {
    super();
    this.waitMs = waitMs;
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

  request(method, params, { timeoutMs = this.waitMs } = {}) {
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
  waitForNotification(predicate, { timeoutMs = this.waitMs, what = 'notification' } = {}) {
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
  waitForExit({ timeoutMs = this.waitMs } = {}) {
    return withTimeout(this.exited, timeoutMs, `the host's exit\nhost stderr:\n${this.stderr}\n`);
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
