// Cancellation, timeouts, shutdown and a dying host. Against the real host (a browser sign-in
// is a request that waits as long as we like) and, for what the real host never does on
// purpose, test-support/fake_host.mjs.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';

import {
  AbortError, AuthBridge, AuthBridgeError, HostExitedError, HostNotFoundError, RequestCancelledError, RequestTimeoutError, TimeoutError,
} from '../src/index.js';
import { signInAsUser } from '../../../Tests/support/dot.mjs';
import {
  PYTHON, WAIT_MS, assertRecordedFramesValid, closeAll, fakeHostOptions, run, startBridge, tempDir, withDotAndSandbox, withTimeout,
} from '../test-support/harness.mjs';

let dot;
let box;
withDotAndSandbox((started) => ({ dot, box } = started));

/** A host with profile "dot". */
async function dotBridge(extra) {
  const bridge = await startBridge(box, extra);
  await bridge.configureProfile({ name: 'dot', plugin: 'oidc', settings: dot.settings() });
  return bridge;
}

/**
 * Starts a browser sign-in nobody completes; resolves once the host waits for the user,
 * with the pending call and the loopback redirect URI it listens on.
 */
async function waitingSignIn(bridge, options = {}) {
  let ready;
  const waiting = new Promise((resolve) => { ready = resolve; });
  let redirectUri;
  const pending = bridge.requestOAuthTokens({ provider: 'dot', flow: 'browser' }, {
    ...options,
    onProgress: (params) => {
      if (params.stage === 'openUrl') redirectUri = new URL(params.url).searchParams.get('redirect_uri');
      if (params.stage === 'waiting') ready();
    },
  });
  pending.catch(() => {}); // the test awaits it
  await withTimeout(waiting, WAIT_MS, 'signIn/progress waiting');
  return { pending, redirectUri };
}

/** The error a promise rejects with (fails when it resolves or takes longer than WAIT_MS). */
async function rejection(promise, what) {
  return withTimeout(promise.then((result) => assert.fail(`${what} resolved: ${JSON.stringify(result)}`), (error) => error), WAIT_MS, what);
}

/** Whether anything listens at `url` (the host's loopback listener). */
async function listening(url) {
  try {
    await fetch(url, { signal: AbortSignal.timeout(5_000) });
    return true;
  } catch {
    return false;
  }
}

test('AbortSignal: aborting sends $/cancelRequest, rejects with AbortError, and the host answers -32800', async () => {
  const bridge = await dotBridge();
  const controller = new AbortController();
  const { pending, redirectUri } = await waitingSignIn(bridge, { signal: controller.signal });
  assert.equal(await listening(redirectUri), true, 'the host listens for the redirect');
  const reason = new Error('the user pressed Cancel');
  controller.abort(reason);
  const error = await rejection(pending, 'the aborted sign-in');
  assert.ok(error instanceof AbortError);
  assert.ok(error instanceof RequestCancelledError && error instanceof AuthBridgeError);
  assert.equal(error.name, 'AbortError');
  assert.equal(error.code, -32800);
  assert.equal(error.cause, reason);
  // What went over the wire: the cancellation, and the host's -32800 answer to that id.
  assert.ok(bridge.tap.sent.some((f) => f.method === '$/cancelRequest' && f.params.id === error.requestId));
  const answer = await bridge.tap.waitFor((f) => f.id === error.requestId, { what: 'the host\'s answer to the cancelled call' });
  assert.equal(answer.error.code, -32800);
  assert.equal(await listening(redirectUri), false, 'the host stopped the sign-in (listener closed)');
  // The late answer was expected, not a protocol error; the bridge goes on.
  assert.equal((await bridge.checkSignInStatus('dot')).state, 'notSignedIn');
  assert.deepEqual(bridge.protocolErrors, []);
});

test('AbortSignal: an already aborted signal rejects at once and sends nothing', async () => {
  const bridge = await dotBridge();
  const before = bridge.tap.sent.length;
  const error = await rejection(bridge.getAccessToken('dot', { signal: AbortSignal.abort() }), 'the call');
  assert.ok(error instanceof AbortError);
  assert.equal(bridge.tap.sent.length, before, 'no frame was sent');
});

test('timeoutMs: the call is cancelled at the host and rejects with RequestTimeoutError', async () => {
  const bridge = await dotBridge();
  const started = Date.now();
  const error = await rejection(bridge.requestOAuthTokens({ provider: 'dot', flow: 'browser' }, { timeoutMs: 1_000 }), 'the sign-in');
  const elapsed = Date.now() - started;
  assert.ok(error instanceof RequestTimeoutError && error instanceof TimeoutError);
  assert.equal(error.code, -32006);
  assert.equal(error.reason, 'clientTimeout');
  assert.equal(error.retryable, true);
  assert.equal(error.timeoutMs, 1_000);
  assert.ok(elapsed >= 1_000 && elapsed < 5_000, `rejected after ${elapsed} ms`);
  const answer = await bridge.tap.waitFor((f) => f.id === error.requestId, { what: 'the host\'s answer' });
  assert.equal(answer.error.code, -32800, 'cancelled at the host');
  // requestTimeoutMs: the same bound for every call of a bridge.
  const bounded = await dotBridge({ requestTimeoutMs: 1_000 });
  assert.ok((await rejection(bounded.requestOAuthTokens({ provider: 'dot', flow: 'browser' }), 'sign-in')) instanceof RequestTimeoutError);
  assert.equal((await bounded.checkSignInStatus('dot')).state, 'notSignedIn', 'fast calls are unaffected');
});

test('close() while a sign-in waits: the host cancels it (-32800 RequestCancelledError) and exits 0', async () => {
  const bridge = await dotBridge();
  const { pending } = await waitingSignIn(bridge);
  const exit = await withTimeout(bridge.close(), WAIT_MS, 'close');
  assert.deepEqual([exit.code, exit.signal], [0, null]);
  const error = await rejection(pending, 'the pending sign-in');
  assert.ok(error instanceof RequestCancelledError && !(error instanceof AbortError), `${error.name}: ${error.message}`);
  assert.equal(error.code, -32800);
  assert.equal(bridge.running, false);
  // Later calls fail at once, and close() again is harmless.
  assert.ok((await rejection(bridge.listProviders(), 'a call after close')) instanceof HostExitedError);
  assert.equal(await bridge.close(), exit);
});

test('the host killed mid-request: pending calls reject at once with HostExitedError; a new host works', { timeout: 60_000 }, async () => {
  // A configured profile and one data home, so a second host finds the first one's session.
  const config = path.join(box.root, 'dot-config.json');
  fs.writeFileSync(config, JSON.stringify({ profiles: { dot: { plugin: 'oidc', settings: dot.settings() } } }));
  const options = box.hostOptions({ config });
  const bridge = await startBridge(box, { ...options });
  const signedIn = await bridge.requestOAuthTokens({ provider: 'dot', flow: 'browser' }, {
    onProgress: (params) => { if (params.stage === 'openUrl') signInAsUser(params.url).catch(() => {}); },
  });
  assert.equal(signedIn.state, 'signedIn');

  const exits = [];
  bridge.on('exit', (info) => exits.push(info));
  const { pending } = await waitingSignIn(bridge);
  const other = bridge.listAccounts();
  other.catch(() => {});
  process.kill(bridge.pid, 'SIGKILL');
  const error = await rejection(pending, 'the pending sign-in');
  assert.ok(error instanceof HostExitedError, `${error.name}: ${error.message}`);
  assert.equal(error.signal, 'SIGKILL');
  assert.equal(error.exitCode, null);
  assert.equal(error.method, 'requestOAuthTokens');
  assert.match(error.message, /killed by SIGKILL/);
  assert.ok(error.stderrTail.length > 0, 'the last log lines come with the error');
  assert.ok(error.message.includes(error.stderrTail.at(-1)), 'and are quoted in its message');
  assert.equal(exits.length, 1);
  assert.equal(exits[0].signal, 'SIGKILL');
  assert.equal(bridge.running, false);
  // Every call still pending rejected, and later ones reject at once.
  const otherError = await rejection(other, 'listAccounts');
  assert.ok(otherError instanceof HostExitedError);
  assert.ok((await rejection(bridge.checkSignInStatus('dot'), 'a later call')) instanceof HostExitedError);

  const again = await startBridge(box, { ...options });
  const status = await again.checkSignInStatus('dot');
  assert.equal(status.state, 'signedIn', 'the new host has the session the first one stored');
  assert.equal((await again.fetch({ provider: 'dot', url: '/userinfo/' })).status, 200);
  await again.signOut('dot');
});

test('restart(): after the host died, a new host with the same listeners; run-time profiles configured again, in order', { timeout: 60_000 }, async () => {
  const bridge = await startBridge(box);
  await bridge.configureProfile({ name: 'second', plugin: 'oidc', settings: dot.settings({ scopes: ['openid'] }) });
  await bridge.configureProfile({ name: 'dot', plugin: 'oidc', settings: dot.settings() });
  await bridge.configureProfile({ name: 'second', plugin: 'oidc', settings: dot.settings() }); // replaced: the latest counts
  await bridge.configureProfile({ name: 'gone', plugin: 'oidc', settings: dot.settings() });
  await bridge.removeProfile('gone');
  await assert.rejects(bridge.configureProfile({ name: 'broken', plugin: 'oidc', settings: {} })); // never configured
  const signedIn = await bridge.requestOAuthTokens({ provider: 'dot', flow: 'browser' }, {
    onProgress: (params) => { if (params.stage === 'openUrl') signInAsUser(params.url).catch(() => {}); },
  });
  assert.equal(signedIn.state, 'signedIn');
  const changes = [];
  bridge.on('session/changed', (change) => changes.push([change.provider, change.state]));
  const exits = [];
  bridge.on('exit', (info) => exits.push(info));

  const firstPid = bridge.pid;
  process.kill(firstPid, 'SIGKILL');
  assert.ok((await rejection(bridge.listProviders(), 'a call to the dead host')) instanceof HostExitedError);
  const sentBefore = bridge.tap.sent.length;
  const result = await withTimeout(bridge.restart(), WAIT_MS, 'restart');
  assert.equal(result.serverInfo.name, 'authbridge');
  assert.equal(bridge.initializeResult, result);
  assert.equal(bridge.running, true);
  assert.notEqual(bridge.pid, firstPid);
  const replayed = bridge.tap.sent.slice(sentBefore).filter((frame) => frame.method === 'configureProfile').map((frame) => frame.params);
  assert.deepEqual(replayed, [
    { name: 'second', plugin: 'oidc', settings: dot.settings() },
    { name: 'dot', plugin: 'oidc', settings: dot.settings() },
  ]);
  assert.deepEqual((await bridge.listProviders()).profiles.map((profile) => profile.name).sort(), ['dot', 'second']);
  assert.equal((await bridge.checkSignInStatus('dot')).state, 'signedIn', 'the session the first host stored');
  await bridge.signOut('dot');
  assert.deepEqual(changes, [['dot', 'signedOut']], 'a listener attached before the restart hears the new host');

  // restart() of a running host stops it cleanly first.
  const secondPid = bridge.pid;
  await withTimeout(bridge.restart(), WAIT_MS, 'restart');
  assert.deepEqual(exits.map((exit) => exit.signal ?? exit.code), ['SIGKILL', 0]);
  assert.notEqual(bridge.pid, secondPid);
  assert.equal((await bridge.checkSignInStatus('second')).state, 'notSignedIn');
});

test('restart() when no new host can be started rejects with HostExitedError and leaves the bridge closed', async () => {
  const link = path.join(box.root, 'authbridge-link');
  fs.symlinkSync(box.hostOptions().hostPath, link);
  const bridge = await startBridge(box, { hostPath: link });
  fs.unlinkSync(link);
  const error = await rejection(bridge.restart(), 'restart');
  assert.ok(error instanceof HostExitedError, `${error.name}: ${error.message}`);
  assert.equal(error.cause?.code, 'ENOENT');
  assert.equal(bridge.running, false);
  assert.ok((await rejection(bridge.listProviders(), 'a later call')) instanceof HostExitedError);
});

test('initialize warnings (a config file the host cannot read) go to onWarning, else to process warnings', async () => {
  const config = path.join(box.root, 'broken-config.json');
  fs.writeFileSync(config, '{"profiles": {');
  const seen = [];
  const bridge = await startBridge(box, { config, onWarning: (warning) => seen.push(warning) });
  assert.equal(seen.length, 1);
  assert.match(seen[0], /broken-config\.json/);
  assert.deepEqual(bridge.initializeResult.warnings, seen);
  await bridge.restart();
  assert.equal(seen.length, 2, 'and again from the new host');

  const warned = new Promise((resolve) => process.once('warning', resolve));
  await startBridge(box, { config });
  const warning = await withTimeout(warned, WAIT_MS, 'a process warning');
  assert.equal(warning.name, 'AuthBridgeWarning');
  assert.equal(warning.code, 'AUTHBRIDGE_HOST_WARNING');
  assert.match(warning.message, /broken-config\.json/);
});

test('start() with an aborted signal rejects with AbortError and stops the host it spawned', async () => {
  const exits = [];
  const options = box.hostOptions({ signal: AbortSignal.abort(new Error('app quitting')) });
  const error = await rejection(AuthBridge.start(options), 'start');
  assert.ok(error instanceof AbortError);
  assert.equal(error.cause.message, 'app quitting');
  // The same through the constructor, where the bridge (and its exit) can be seen.
  const bridge = new AuthBridge(box.hostOptions());
  bridge.on('exit', (info) => exits.push(info));
  assert.ok((await rejection(bridge.initialize({}, { signal: AbortSignal.abort() }), 'initialize')) instanceof AbortError);
  const exit = await withTimeout(bridge.close(), WAIT_MS, 'close');
  assert.equal(exit.signal, null, 'stopped by exit / end of input, not a signal');
  assert.equal(exits.length, 1);
});

test('a host that cannot be started: start() rejects with HostNotFoundError, saying what and how', async () => {
  const missing = path.join(box.root, 'no-such-authbridge');
  const error = await rejection(AuthBridge.start({ hostPath: missing }), 'start');
  assert.ok(error instanceof HostNotFoundError, `${error.name}: ${error.message}`);
  assert.ok(error instanceof HostExitedError && error instanceof AuthBridgeError, 'still what callers caught before');
  assert.equal(error.name, 'HostNotFoundError');
  assert.equal(error.executable, missing);
  assert.equal(error.cause.code, 'ENOENT');
  assert.equal(error.method, 'initialize');
  assert.ok(error.message.startsWith(`the authbridge host ${missing} was not found (ENOENT)`), error.message);
  assert.match(error.message, /AUTHBRIDGE/);
  // A file that is not executable: the same error, saying so.
  const unexecutable = path.join(box.root, 'authbridge-not-executable');
  fs.writeFileSync(unexecutable, '#!/bin/sh\n', { mode: 0o644 });
  const refused = await rejection(AuthBridge.start({ hostPath: unexecutable }), 'start');
  assert.ok(refused instanceof HostNotFoundError, `${refused.name}: ${refused.message}`);
  assert.match(refused.message, /is not executable \(EACCES\)/);
});

test('stderr is drained: a host that logs 20 MB before answering still starts', { timeout: 60_000 }, async () => {
  const bridge = await AuthBridge.start(fakeHostOptions(box, 'flood', { startTimeoutMs: 15_000 }));
  assert.equal(bridge.serverInfo.version, '0.0.0-fake');
  assert.equal(bridge.stderrTail().at(-1), 'fake host: flood done');
  assert.ok(bridge.stderrTail().length <= 50, 'only the tail is kept');
  assert.equal((await bridge.close()).code, 0);
});

test('close() on a host that ignores shutdown, exit, EOF and SIGTERM ends with SIGKILL, bounded', async () => {
  const bridge = await AuthBridge.start(fakeHostOptions(box, 'stubborn'));
  const started = Date.now();
  const exit = await withTimeout(bridge.close({ timeoutMs: 500 }), WAIT_MS, 'close');
  const elapsed = Date.now() - started;
  assert.equal(exit.signal, 'SIGKILL');
  assert.ok(elapsed < 500 + 2_000 + 2_000, `closed in ${elapsed} ms`);
  assert.ok(exit.stderrTail.includes('fake host: SIGTERM ignored'), 'SIGTERM came first');
});

test('broken frames are reported as protocolError events and the bridge goes on', async () => {
  const bridge = await AuthBridge.start(fakeHostOptions(box, 'garbage'));
  const problems = [];
  bridge.on('protocolError', (error) => problems.push(error));
  assert.deepEqual(await bridge.listProviders(), { plugins: [], profiles: [] });
  assert.equal(problems.length, 3);
  assert.match(problems[0].message, /not JSON/);
  assert.match(problems[1].message, /999999/);
  assert.equal(problems[2].cause.code, -32700);
  await bridge.close();
});

test('protocol errors give lengths, never the text of a broken, unknown or cut frame', async () => {
  // Before: the first 200 characters of the line went into the message (and the parser's error,
  // which quotes it, into its cause), and a last line cut by the host's death was delivered.
  const bridge = await AuthBridge.start(fakeHostOptions(box, 'cut'));
  const problems = [];
  bridge.on('protocolError', (error) => problems.push(error));
  const error = await rejection(bridge.listProviders(), 'listProviders');
  assert.ok(error instanceof HostExitedError);
  await bridge.exited;
  const text = problems.map((p) => `${p.message} ${p.cause?.message ?? ''}`).join('\n');
  assert.equal(problems.length, 3, text);
  assert.match(problems[0].message, /not JSON \(\d+ bytes\)/);
  assert.match(problems[1].message, /id 424242, which no call is waiting for \(\d+ bytes\)/);
  assert.match(problems[2].message, /ended inside a line \(\d+ bytes without a newline/);
  for (const secret of ['at-broken-6161', 'at-unknown-6262', 'at-cut-6363', 'accessToken']) {
    assert.ok(!text.includes(secret), `${secret} in: ${text}`);
    assert.ok(!error.message.includes(secret), `${secret} in the rejection`);
  }
  await bridge.close();
});

test('a listener that throws does not cost the frames after it: the call in the same chunk is answered', async () => {
  // In a child process: the listener's error must surface as an uncaught exception, as from any
  // EventEmitter, which would end this test runner.
  const script = `
    import { AuthBridge } from ${JSON.stringify(new URL('../src/index.js', import.meta.url).href)};
    const bridge = await AuthBridge.start(${JSON.stringify(fakeHostOptions(box, 'burst'))});
    bridge.on('session/changed', () => { throw new Error('listener bug'); });
    process.on('uncaughtException', (error) => { console.log('uncaught: ' + error.message); });
    const answer = await bridge.listProviders();
    console.log('answered: ' + JSON.stringify(answer));
    await bridge.close();
  `;
  const result = await run(process.execPath, ['--input-type=module', '-e', script], { timeoutMs: 20_000 });
  assert.equal(result.code, 0, result.stdout + result.stderr);
  assert.match(result.stdout, /^answered: \{"plugins":\[\],"profiles":\[\]\}$/m);
  assert.match(result.stdout, /^uncaught: listener bug$/m);
});

test('a host that exits with a status mid-request: HostExitedError with the code and its last log line', async () => {
  const bridge = await AuthBridge.start(fakeHostOptions(box, 'crash'));
  const error = await rejection(bridge.listProviders(), 'listProviders');
  assert.ok(error instanceof HostExitedError);
  assert.equal(error.exitCode, 3);
  assert.equal(error.signal, null);
  assert.match(error.message, /exited with code 3/);
  assert.match(error.message, /the database is on fire/);
});

test('every frame sent and received in this file validates against bridge-spec', { timeout: 60_000 }, async () => {
  await closeAll();
  await assertRecordedFramesValid();
});
