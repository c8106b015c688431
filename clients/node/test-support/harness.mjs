// Test harness of the Node client (outside test/, because `node --test test/` runs every .mjs
// file under test/ as a test file), over the Node test kit (Tests/support/testkit.mjs).
//
// Environment: the test targets' variables (the Makefile's header, read by the kit):
// AUTHBRIDGE_BIN (the host), AUTHBRIDGE_BUILD_DIR (its build folder, whose plugins/ holds the
// bundled oidc plugin), AUTHBRIDGE_PYTHON (the Python with Django, DOT and jsonschema); and
//   AUTHBRIDGE_FRAMES_FILE
//                       optional: a JSONL file every test file appends the frames to, both ways
//                       (default: one private file per test file). Each test file ends with a
//                       test that runs Tests/tools/validate_frames.py over it.
//
// Every host runs isolated (the kit's recipe): its own plugin folder (a copy of oidc,
// 0755/0644), XDG folders and HOME, no default plugin folders, no session bus. Every wait is
// bounded.

import assert from 'node:assert/strict';
import { after, before } from 'node:test';
import { EventEmitter } from 'node:events';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

import { AuthBridge } from '../src/index.js';
import { startDot } from '../../../Tests/support/dot.mjs';
import {
  HOST_BIN as HOST, PLUGINS_DIR as PLUGINS, PYTHON, REPO, SPEC_PATH, VALIDATOR, copyPlugins, isolatedEnv, run, tempDir,
  validateFrames, withTimeout,
} from '../../../Tests/support/testkit.mjs';

export { HOST, PLUGINS, PYTHON, REPO, SPEC_PATH, VALIDATOR, run, tempDir, validateFrames, withTimeout };

/** Bound of one wait (a request, an event, a process exit). */
export const WAIT_MS = 15_000;

const OIDC_FILES = ['oidc.json', 'libauthbridge-oidc.so'];

/** Fails early, with the way to fix it, when the host, plugins or Python are missing. */
export function checkPrerequisites() {
  assert.ok(fs.existsSync(HOST), `host not found at ${HOST}: set AUTHBRIDGE_BIN (or run make build)`);
  for (const name of OIDC_FILES) {
    assert.ok(fs.existsSync(path.join(PLUGINS, name)), `${name} not found in ${PLUGINS}: set AUTHBRIDGE_BUILD_DIR (or run make build)`);
  }
  assert.ok(fs.existsSync(PYTHON), `Python not found at ${PYTHON}: set AUTHBRIDGE_PYTHON (or run make deps)`);
}

/**
 * A test file's shared setup: before its tests, the prerequisites are checked and a sandbox and
 * django-oauth-toolkit (`startDot` options) are started and handed to `ready({dot, box})`, which
 * is awaited (a file's other top-level `before` hooks may run at the same time: more setup goes
 * into `ready`); after them, every bridge startBridge() started is closed and DOT stopped.
 */
export function withDotAndSandbox(ready, dotOptions = {}) {
  let dot;
  before(async () => {
    checkPrerequisites();
    const box = sandbox();
    dot = await startDot({ state: tempDir('authbridge-dot-'), python: PYTHON, ...dotOptions });
    await ready({ dot, box });
  });
  after(async () => {
    await closeAll();
    await dot?.stop();
  });
}

/**
 * A private place for hosts: plugins/ (oidc copied with safe modes), and per host its own
 * XDG folders and HOME. Returns a factory of `AuthBridge.start` options.
 */
export function sandbox() {
  const root = tempDir('authbridge-nodeclient-');
  const pluginDir = copyPlugins(path.join(root, 'plugins'), PLUGINS, OIDC_FILES);
  let hosts = 0;
  return {
    root,
    pluginDir,
    /** Start options of an isolated host (its own folder under root). */
    hostOptions(extra = {}) {
      const dir = path.join(root, `host${hosts++}`);
      const env = isolatedEnv(dir);
      return { hostPath: HOST, noDefaultPlugins: true, plugins: [pluginDir], logLevel: 'debug', env, cwd: dir, ...extra };
    },
  };
}

// ── Frames: recorded for the validator, and observable by the tests ─────────

let hostCount = 0;

/**
 * Where this test file's frames go: $AUTHBRIDGE_FRAMES_FILE, else a private file.
 * Records are JSON lines: {"host", "dir": "in", "line"} for each frame received (its exact text,
 * access tokens replaced) and {"host", "dir": "out", "line"} for each frame sent (its text,
 * authorization codes in callback URLs replaced): the validator checks both, and a sent request
 * tells it which result schema applies to the answer. A test that sends invalid frames on
 * purpose uses a tap with `checkSent: false`, which records only {"dir": "out", "id", "method"}.
 */
export const FRAMES_FILE = process.env.AUTHBRIDGE_FRAMES_FILE
  || path.join(tempDir('authbridge-frames-'), `${path.basename(process.argv[1] ?? 'frames')}.jsonl`);

/** A code-free copy of a sent line: the `code` of a completeSignIn callback URL is replaced. */
function redactSent(frame, line) {
  const callback = frame?.params?.callbackUrl;
  if (typeof callback !== 'string') return line;
  let url;
  try {
    url = new URL(callback);
  } catch {
    return line;
  }
  if (!url.searchParams.has('code')) return line;
  url.searchParams.set('code', 'redacted-code');
  return JSON.stringify({ ...frame, params: { ...frame.params, callbackUrl: url.href } });
}

/** A token-free copy of a received line: every access token a result carries is replaced. */
function redact(frame, line) {
  const token = frame?.result?.accessToken;
  if (typeof token !== 'string' || token.length === 0) return line;
  const inJson = JSON.stringify(token).slice(1, -1);
  return line.split(inJson).join('<redacted-access-token>');
}

/**
 * A frame tap (the `onFrame` option): appends to FRAMES_FILE and keeps the received frames in
 * memory, with `waitFor(predicate)` to wait (bounded) for one. `checkSent: false` for a host the
 * test sends invalid frames to on purpose.
 */
export function frameTap({ checkSent = true } = {}) {
  const host = `${process.pid}-${++hostCount}`;
  const events = new EventEmitter();
  const received = [];
  const sent = [];
  let largestLine = 0;
  const write = (record) => fs.appendFileSync(FRAMES_FILE, JSON.stringify(record) + '\n');
  return {
    received,
    /** Every frame sent (in memory only). */
    sent,
    /** Size in bytes of the longest line received. */
    get largestLine() { return largestLine; },
    onFrame(frame, direction, line) {
      if (direction === 'in') {
        received.push(frame);
        largestLine = Math.max(largestLine, Buffer.byteLength(line));
        write({ host, dir: 'in', line: redact(frame, line) });
        events.emit('frame', frame);
      } else {
        sent.push(frame);
        if (checkSent) write({ host, dir: 'out', line: redactSent(frame, line) });
        else if ('id' in frame) write({ host, dir: 'out', id: frame.id, method: frame.method });
      }
    },
    /** The first received frame (already here or to come) matching `predicate`. */
    waitFor(predicate, { timeoutMs = WAIT_MS, what = 'a frame' } = {}) {
      const seen = received.find(predicate);
      if (seen) return Promise.resolve(seen);
      return withTimeout(new Promise((resolve) => {
        const onFrame = (frame) => {
          if (!predicate(frame)) return;
          events.off('frame', onFrame);
          resolve(frame);
        };
        events.on('frame', onFrame);
      }), timeoutMs, what);
    },
  };
}

/**
 * Starts an isolated, initialized host with a frame tap. `bridge.tap` is the tap,
 * `bridge.log` every stderr line. Hosts are closed by `closeAll()`. `tapOptions`: frameTap's.
 */
const started = new Set();
export async function startBridge(box, extra = {}, tapOptions = {}) {
  const tap = frameTap(tapOptions);
  const log = [];
  const bridge = await AuthBridge.start(box.hostOptions({ onFrame: tap.onFrame, onStderr: (line) => log.push(line), ...extra }));
  started.add(bridge);
  bridge.tap = tap;
  bridge.log = log;
  const protocolErrors = [];
  bridge.on('protocolError', (error) => protocolErrors.push(error.message));
  bridge.protocolErrors = protocolErrors;
  return bridge;
}

/** Closes every host startBridge() started (test clean-up); bounded. */
export async function closeAll() {
  await Promise.all([...started].map((bridge) => bridge.close({ timeoutMs: 3_000 })));
  started.clear();
}

const FAKE_HOST = path.join(path.dirname(fileURLToPath(import.meta.url)), 'fake_host.mjs');

/** Start options of test-support/fake_host.mjs in `mode` (an executable, as the real host is). */
export function fakeHostOptions(box, mode, extra = {}) {
  const wrapper = path.join(box.root, 'fake-authbridge');
  if (!fs.existsSync(wrapper)) {
    fs.writeFileSync(wrapper, `#!/bin/sh\nexec '${process.execPath}' '${FAKE_HOST}' "$@"\n`, { mode: 0o755 });
  }
  return { hostPath: wrapper, env: { ...process.env, FAKE_HOST_MODE: mode }, ...extra };
}

/**
 * The test that ends each test file: every frame this file's hosts and client sent validates
 * against bridge-spec/openrpc.json.
 */
export async function assertRecordedFramesValid() {
  assert.ok(fs.existsSync(FRAMES_FILE), `no frame was recorded in ${FRAMES_FILE}`);
  const { code, stdout, stderr } = await validateFrames(FRAMES_FILE);
  assert.equal(code, 0, `frames break bridge-spec:\n${stdout}\n${stderr}`);
  const checked = Number(/(\d+) frames checked/.exec(stdout)?.[1]);
  assert.ok(checked > 0, `the validator checked frames: ${stdout}`);
  return checked;
}

/**
 * Codes and tokens that appear where the contract does not put them: in the host's log, or in
 * any frame other than getAccessToken's and fetch's results (the Python kit's leak_scan.py).
 * Returns places, never the secrets.
 */
export function leaks(secrets, bridge) {
  const long = secrets.filter((secret) => secret.length >= 12);
  for (const frame of bridge.tap.received) if (typeof frame.result?.accessToken === 'string') long.push(frame.result.accessToken);
  const found = [];
  bridge.log.forEach((line, index) => { if (long.some((s) => line.includes(s))) found.push(`stderr line ${index + 1}`); });
  bridge.tap.received.forEach((frame, index) => {
    const result = frame.result;
    if (result && typeof result === 'object' && ('accessToken' in result || ('status' in result && 'body' in result))) return;
    const text = JSON.stringify(frame);
    if (long.some((s) => text.includes(s))) found.push(`frame ${index} (${frame.method ?? (frame.error ? 'error' : 'result')})`);
  });
  return found;
}
