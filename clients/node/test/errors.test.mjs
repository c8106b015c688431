// Each error class, from a real error of the real host (oidc plugin, django-oauth-toolkit):
// the class matches the code, and `error.data` (provider, reason, field, retryable…) is there.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';

import * as bridgeErrors from '../src/index.js';
import { AuthBridge, AuthBridgeError } from '../src/index.js';
import {
  WAIT_MS, assertRecordedFramesValid, closeAll, frameTap, startBridge, withDotAndSandbox, withTimeout,
} from '../test-support/harness.mjs';

/** The redirect URI registered at DOT for the external flow (any loopback port). */
const EXTERNAL_REDIRECT = 'http://127.0.0.1:53682/callback';

let dot;
let box;
let bridge; // one host for the tests that need nothing special
withDotAndSandbox(async (started) => {
  ({ dot, box } = started);
  bridge = await startBridge(box);
  await bridge.configureProfile({ name: 'dot', plugin: 'oidc', settings: dot.settings({ redirectUri: EXTERNAL_REDIRECT }) });
});

/**
 * Awaits a call that must fail with `Class` and code `code`; checks the shared members and
 * returns the error for the test's own checks.
 */
async function expectError(promise, Class, code) {
  const error = await withTimeout(promise.then(
    (result) => assert.fail(`expected ${Class.name}, got a result: ${JSON.stringify(result)}`),
    (e) => e,
  ), WAIT_MS, `${Class.name}`);
  assert.ok(error instanceof Class, `expected ${Class.name}, got ${error?.name}: ${error?.message}`);
  assert.ok(error instanceof AuthBridgeError);
  assert.equal(error.code, code);
  assert.equal(error.name, Class.name);
  assert.ok(error.message.length > 0);
  return error;
}

/** A sign-in with the external flow, waiting at the point where the frontend hands over the redirect. */
async function externalSignIn() {
  let opened;
  const urlSeen = new Promise((resolve) => { opened = resolve; });
  const pending = bridge.requestOAuthTokens({ provider: 'dot', flow: 'external' }, {
    onProgress: (params) => { if (params.stage === 'openUrl') opened(params); },
  });
  pending.catch(() => {}); // awaited by the test
  const progress = await withTimeout(urlSeen, WAIT_MS, 'openUrl');
  return { pending, progress, state: new URL(progress.url).searchParams.get('state') };
}

test('-32001 NotSignedInError: no session', async () => {
  const error = await expectError(bridge.getAccessToken('dot'), bridgeErrors.NotSignedInError, -32001);
  assert.deepEqual(error.data, { provider: 'dot', reason: 'noTokens', retryable: false });
  assert.equal(error.provider, 'dot');
  assert.equal(error.reason, 'noTokens');
  assert.equal(error.retryable, false);
  assert.equal(error.method, 'getAccessToken');
  assert.ok(Number.isInteger(error.requestId));
});

test('-32003 ProviderUnknownError: no such profile, no such plugin', async () => {
  let error = await expectError(bridge.checkSignInStatus('nope'), bridgeErrors.ProviderUnknownError, -32003);
  assert.equal(error.reason, 'unknownProfile');
  assert.equal(error.provider, 'nope');
  error = await expectError(bridge.configureProfile({ name: 'x', plugin: 'nope' }), bridgeErrors.ProviderUnknownError, -32003);
  assert.equal(error.reason, 'unknownPlugin');
  assert.equal(error.field, 'plugin');
});

test('-32004 ProviderRefusedError: the provider\'s error redirect; one with another state is refused and the sign-in goes on', async () => {
  const { pending, state } = await externalSignIn();
  const refused = await expectError(bridge.completeSignIn({ provider: 'dot', callbackUrl: `${EXTERNAL_REDIRECT}?code=forged&state=forged` }),
    bridgeErrors.InvalidParamsError, -32602);
  assert.equal(refused.reason, 'stateMismatch');
  assert.equal(refused.field, 'callbackUrl');
  await bridge.completeSignIn({ provider: 'dot', callbackUrl: `${EXTERNAL_REDIRECT}?error=invalid_request&state=${state}` });
  const error = await expectError(pending, bridgeErrors.ProviderRefusedError, -32004);
  assert.equal(error.reason, 'invalid_request');
  assert.equal(error.retryable, false);
  assert.equal(error.method, 'requestOAuthTokens');
});

test('-32005 UserCancelledError: the user denied access at the provider; a sign-in superseded', async () => {
  let { pending, state } = await externalSignIn();
  await bridge.completeSignIn({ provider: 'dot', callbackUrl: `${EXTERNAL_REDIRECT}?error=access_denied&state=${state}` });
  let error = await expectError(pending, bridgeErrors.UserCancelledError, -32005);
  assert.equal(error.provider, 'dot');
  assert.equal(error.reason, 'access_denied');

  ({ pending } = await externalSignIn());
  const second = await externalSignIn();
  error = await expectError(pending, bridgeErrors.UserCancelledError, -32005);
  assert.equal(error.reason, 'superseded');
  await bridge.completeSignIn({ provider: 'dot', callbackUrl: `${EXTERNAL_REDIRECT}?error=access_denied&state=${second.state}` });
  await expectError(second.pending, bridgeErrors.UserCancelledError, -32005);
});

test('-32006 TimeoutError: the user did not sign in within the sign-in\'s timeoutMs', async () => {
  const error = await expectError(bridge.requestOAuthTokens({ provider: 'dot', flow: 'browser', timeoutMs: 1000 }),
    bridgeErrors.TimeoutError, -32006);
  assert.ok(!(error instanceof bridgeErrors.RequestTimeoutError), 'the host\'s timeout, not the client\'s');
  assert.equal(error.reason, 'timeout');
  assert.equal(error.retryable, true);
});

test('-32007 ProviderUnavailableError: the issuer does not answer', async () => {
  const port = await closedPort();
  const error = await expectError(
    bridge.configureProfile({ name: 'down', plugin: 'oidc', settings: { issuer: `http://127.0.0.1:${port}/o`, clientId: 'c' } }),
    bridgeErrors.ProviderUnavailableError, -32007);
  assert.equal(error.reason, 'refused');
  assert.equal(error.retryable, true);
});

test('-32008 PluginError: a configured profile whose plugin is not loaded', async () => {
  const config = path.join(box.root, 'ghost.json');
  fs.writeFileSync(config, JSON.stringify({ profiles: { ghost: { plugin: 'ghost' } } }));
  const other = await startBridge(box, { config });
  assert.equal(other.initializeResult.profiles[0].status, 'error');
  const error = await expectError(other.checkSignInStatus('ghost'), bridgeErrors.PluginError, -32008);
  assert.equal(error.reason, 'pluginNotLoaded');
  assert.equal(error.provider, 'ghost');
  // Where the host looked, and how to find out why (missing, or refused).
  assert.ok(error.message.includes(`searched: ${box.pluginDir}`), error.message);
  assert.match(error.message, /authbridge plugins/);
});

test('-32009 UnsupportedError: a flow the plugin does not offer', async () => {
  const error = await expectError(bridge.requestOAuthTokens({ provider: 'dot', flow: 'session', sessionId: 's' }),
    bridgeErrors.UnsupportedError, -32009);
  assert.equal(error.reason, 'unsupportedFlow');
  assert.equal(error.field, 'flow');
});

test('-32010 UnsupportedProtocolVersionError: start() with a protocol version the host does not speak', async () => {
  const tap = frameTap();
  const options = box.hostOptions({ protocolVersion: '9.0', onFrame: tap.onFrame });
  const error = await expectError(AuthBridge.start(options), bridgeErrors.UnsupportedProtocolVersionError, -32010);
  assert.deepEqual(error.supported, ['1.0']);
  assert.equal(error.reason, 'unsupportedProtocolVersion');
});

test('-32011 StorageError: a vault folder other users can open', async () => {
  const vaultDir = path.join(box.root, 'open-vault');
  fs.mkdirSync(vaultDir);
  fs.chmodSync(vaultDir, 0o777);
  const other = await startBridge(box, { vaultDir });
  await other.configureProfile({ name: 'dot', plugin: 'oidc', settings: dot.settings() });
  const error = await expectError(other.checkSignInStatus('dot'), bridgeErrors.StorageError, -32011);
  assert.equal(error.reason, 'insecurePermissions');
  assert.match(error.message, /chmod 700/);
});

test('-32012 NoPendingSignInError: a callback with no sign-in waiting', async () => {
  const error = await expectError(bridge.completeSignIn({ provider: 'dot', callbackUrl: `${EXTERNAL_REDIRECT}?code=x&state=y` }),
    bridgeErrors.NoPendingSignInError, -32012);
  assert.equal(error.reason, 'noPendingSignIn');
});

test('-32013 ConfigurationError: settings the plugin\'s schema refuses', async () => {
  const error = await expectError(bridge.configureProfile({ name: 'bad', plugin: 'oidc', settings: { issuer: dot.issuer, clientId: 42 } }),
    bridgeErrors.ConfigurationError, -32013);
  assert.equal(error.reason, 'invalidSettings');
  assert.match(error.message, /clientId/);
});

test('-32013 ConfigurationError: no clientId, and a server that offers no dynamic client registration', async () => {
  const error = await expectError(bridge.configureProfile({ name: 'bad', plugin: 'oidc', settings: { issuer: dot.issuer } }),
    bridgeErrors.ConfigurationError, -32013);
  assert.equal(error.reason, 'missingSetting');
  assert.match(error.message, /"clientId"/);
});

test('-32602 InvalidParamsError, -32601 MethodNotFoundError, -32600 InvalidRequestError', async () => {
  // Frames the spec does not allow, sent on purpose: this host's sent frames are not validated.
  const careless = await startBridge(box, {}, { checkSent: false });
  await careless.configureProfile({ name: 'dot', plugin: 'oidc', settings: dot.settings() });
  let error = await expectError(careless.request('checkSignInStatus', { provider: 'dot', bogus: 1 }), bridgeErrors.InvalidParamsError, -32602);
  assert.equal(error.field, 'bogus');
  error = await expectError(careless.request('no/such', {}), bridgeErrors.MethodNotFoundError, -32601);
  assert.equal(error.data.method, 'no/such');
  error = await expectError(careless.initialize(), bridgeErrors.InvalidRequestError, -32600);
  assert.match(error.message, /already initialized/);
  // The bridge goes on after each.
  assert.equal((await careless.checkSignInStatus('dot')).state, 'notSignedIn');
});

test('-32002 ServerNotInitializedError: a request before initialize; initialize() then works', async () => {
  const tap = frameTap();
  const raw = new AuthBridge(box.hostOptions({ onFrame: tap.onFrame }));
  try {
    await expectError(raw.listProviders(), bridgeErrors.ServerNotInitializedError, -32002);
    const result = await raw.initialize();
    assert.equal(result.serverInfo.name, 'authbridge');
    assert.ok(Array.isArray((await raw.listProviders()).plugins));
  } finally {
    await raw.close();
  }
});

test('every frame sent and received in this file validates against bridge-spec', { timeout: 60_000 }, async () => {
  await closeAll();
  await assertRecordedFramesValid();
});

/** A loopback port nobody listens on. */
function closedPort() {
  return new Promise((resolve) => {
    const server = net.createServer().listen(0, '127.0.0.1', () => {
      const { port } = server.address();
      server.close(() => resolve(port));
    });
  });
}
