// End-to-end tests of the `authbridge` host from a Node frontend's point of view, over the Node
// test kit (Tests/support/testkit.mjs: its raw JSON-RPC driver and isolation recipe).
//
// Run by `make test-node`, with the test targets' variables (the Makefile's header):
//   AUTHBRIDGE_BIN=<abs path to authbridge> AUTHBRIDGE_BUILD_DIR=<abs .build/debug> node --test Tests/node/
//
// Node 20 built-in modules only. The host is spawned with `--no-default-plugins` and a
// private plugin folder holding copies of the test plugins (ctest, swifttest), with its own
// XDG folders and HOME, so nothing on the machine leaks into the run. Every wait is bounded;
// nothing sleeps to synchronise.

import { test, describe, before, after, afterEach } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import {
  HOST_BIN as BIN, RpcClient, RpcError, TEST_PLUGINS_DIR, copyPlugins, isPlainObject, isolatedEnv,
} from '../support/testkit.mjs';

/** Default bound for one request / notification / exit wait. */
const WAIT_MS = 10_000;
/** Bound for a whole test (a few waits each). */
const TEST_TIMEOUT_MS = 30_000;

// ── Fixtures ───────────────────────────────────────────────────────────────

let root;
let pluginDir;
let configFile;
let env;
const clients = new Set();

before(() => {
  assert.ok(fs.existsSync(BIN), `host binary not found at ${BIN} (run make build)`);
  const testPlugins = TEST_PLUGINS_DIR;
  assert.ok(fs.existsSync(testPlugins), `test plugins not found at ${testPlugins} (run make build)`);

  root = fs.mkdtempSync(path.join(os.tmpdir(), 'authbridge-node-'));
  // The plugin folder and its files must not be group/other-writable.
  pluginDir = copyPlugins(path.join(root, 'plugins'), testPlugins);
  for (const id of ['ctest', 'swifttest']) {
    assert.ok(fs.existsSync(path.join(pluginDir, `${id}.json`)), `manifest ${id}.json missing from ${testPlugins}`);
  }

  configFile = path.join(root, 'config.json');
  fs.writeFileSync(
    configFile,
    JSON.stringify({ profiles: { c: { plugin: 'ctest', settings: { server: 'https://ctest.example' } } } }),
    { mode: 0o644 },
  );

  env = isolatedEnv(root);
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
  const client = new RpcClient(BIN, args, { env, cwd: root, waitMs: WAIT_MS });
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
