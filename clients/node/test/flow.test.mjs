// The client against the real host and django-oauth-toolkit: a browser sign-in played by a
// scripted user, status, token, an authorized call, events, sign-out, a large frame, a clean close.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';

import { AuthBridge, NotSignedInError, PROTOCOL_VERSION } from '../src/index.js';
import { signInAsUser, USER } from '../../../Tests/support/dot.mjs';
import {
  PYTHON, SPEC_PATH, WAIT_MS, assertRecordedFramesValid, closeAll, leaks, startBridge, tempDir, withDotAndSandbox, withTimeout,
} from '../test-support/harness.mjs';

let dot;
let box;
withDotAndSandbox((started) => ({ dot, box } = started), { accessLifetime: 3600 });

/** The user signs in when the host asks for a URL to be opened; resolves with the host's page. */
function userOpensUrls(bridge) {
  let page = null;
  const onProgress = (params) => {
    if (params.stage === 'openUrl') page = signInAsUser(params.url);
  };
  return { onProgress, page: () => page };
}

test('browser sign-in, status, access token, fetch userinfo, session/changed events, sign-out', { timeout: 60_000 }, async () => {
  const bridge = await startBridge(box);
  assert.equal(bridge.initializeResult.protocolVersion, PROTOCOL_VERSION);
  assert.equal(bridge.serverInfo.name, 'authbridge');
  assert.ok(bridge.capabilities.flows.includes('browser'));
  assert.equal(bridge.storage.backend, 'encrypted-file');

  const profile = await bridge.configureProfile({ name: 'dot', plugin: 'oidc', settings: dot.settings() });
  assert.equal(profile.status, 'ready');
  assert.deepEqual((await bridge.listProviders()).profiles.map((p) => p.name), ['dot']);

  const before = await bridge.checkSignInStatus('dot');
  assert.equal(before.state, 'notSignedIn');
  assert.equal(before.reason, 'noTokens');
  await assert.rejects(bridge.getAccessToken('dot'), NotSignedInError);

  const changes = [];
  bridge.on('session/changed', (params) => changes.push(params));
  const progress = [];
  bridge.on('signIn/progress', (params) => progress.push(params.stage));

  const user = userOpensUrls(bridge);
  const status = await withTimeout(bridge.requestOAuthTokens({ provider: 'dot', flow: 'browser' }, { onProgress: user.onProgress }), WAIT_MS, 'the sign-in');
  assert.equal(status.state, 'signedIn');
  assert.equal(status.reason, 'signedIn');
  assert.ok(status.account?.id, 'the account is known (ID token sub)');
  assert.ok(Number.isInteger(status.expiresAt));
  const page = await user.page();
  assert.equal(page.status, 200);
  assert.match(page.text, /Signed in/);
  assert.deepEqual(progress, ['openUrl', 'waiting', 'exchanging']);
  // Events a request causes are written before its response: the event is already here.
  assert.deepEqual(changes.map((c) => [c.state, c.reason]), [['signedIn', 'signedIn']]);
  assert.equal(changes[0].provider, 'dot');

  const now = await bridge.checkSignInStatus({ provider: 'dot' });
  assert.equal(now.state, 'signedIn');
  assert.equal(now.reason, 'valid');
  assert.deepEqual(now.account, status.account);

  const accounts = await bridge.listAccounts();
  assert.equal(accounts.accounts.length, 1);
  assert.equal(accounts.accounts[0].current, true);
  // The spec's `account` param: the signed-in account by id, and one that is not signed in.
  assert.equal((await bridge.checkSignInStatus({ provider: 'dot', account: status.account.id })).state, 'signedIn');
  assert.equal((await bridge.checkSignInStatus({ provider: 'dot', account: 'nobody' })).reason, 'noTokens');

  const token = await bridge.getAccessToken({ provider: 'dot', account: status.account.id });
  assert.equal(token.tokenType, 'Bearer');
  assert.equal(token.headers.Authorization, `Bearer ${token.accessToken}`);
  assert.ok(await dot.isIssued(token.accessToken), 'DOT issued this token');

  const userinfo = await bridge.fetch({ provider: 'dot', url: '/userinfo/' });
  assert.equal(userinfo.status, 200);
  assert.equal(JSON.parse(userinfo.body).sub, status.account.id);
  assert.match(userinfo.headers['content-type'], /application\/json/);

  // Large frames both ways, through an API on loopback: a 4 MB response (one frame of ~60 pipe
  // chunks, multi-byte characters cut anywhere) and a 2 MB request body.
  const api = await bigApi();
  try {
    const big = await bridge.fetch({ provider: 'dot', url: `${api.base}/big` });
    assert.equal(big.status, 200);
    assert.equal(big.body, api.bigBody, 'the 4 MB body arrived whole');
    assert.ok(bridge.tap.largestLine > 4_000_000, `one frame of ${bridge.tap.largestLine} bytes`);
    const upload = 'ü'.repeat(1024 * 1024);
    const echo = await bridge.fetch({ provider: 'dot', url: `${api.base}/echo`, method: 'POST', body: upload, headers: { 'Content-Type': 'text/plain; charset=utf-8' } });
    assert.deepEqual(JSON.parse(echo.body), { bytes: 2 * 1024 * 1024, sha256: createHash('sha256').update(upload).digest('hex'), authorized: true });
  } finally {
    await api.close();
  }

  const out = await bridge.signOut('dot');
  assert.equal(out.signedOut, true);
  assert.deepEqual([...out.revoked].sort(), ['access_token', 'refresh_token']);
  assert.deepEqual(out.failures, []);
  assert.deepEqual(changes.map((c) => [c.state, c.reason]), [['signedIn', 'signedIn'], ['signedOut', 'userSignedOut']]);
  assert.equal((await bridge.checkSignInStatus('dot')).state, 'notSignedIn');
  assert.equal(await dot.isIssued(token.accessToken), true, 'issued once (revoked now)');

  const exit = await withTimeout(bridge.close(), WAIT_MS, 'close');
  assert.deepEqual([exit.code, exit.signal], [0, null], 'shutdown + exit: status 0');
  assert.equal(bridge.running, false);
  assert.deepEqual(bridge.protocolErrors, []);
  assert.deepEqual(leaks(await dot.secrets(), bridge), [], 'no code or token in the log or in frames other than the token and fetch results');
  // The user was ada: the userinfo body names the same subject DOT gives ada.
  const ada = await (await fetch(`${dot.base}/test/user?name=${USER}`)).json();
  assert.equal(ada.sub, status.account.id);
});

/** A loopback API: GET /big answers 4 MB of text; POST /echo answers the body's size and hash. */
async function bigApi() {
  const bigBody = 'é✓x'.repeat(700_000); // 4.2 MB of UTF-8
  const server = http.createServer((request, response) => {
    const chunks = [];
    request.on('data', (chunk) => chunks.push(chunk));
    request.on('end', () => {
      const authorized = /^Bearer \S+$/.test(request.headers.authorization ?? '');
      if (request.url === '/big') {
        response.writeHead(200, { 'Content-Type': 'text/plain; charset=utf-8' }).end(bigBody);
        return;
      }
      const body = Buffer.concat(chunks);
      response.writeHead(200, { 'Content-Type': 'application/json' })
        .end(JSON.stringify({ bytes: body.length, sha256: createHash('sha256').update(body).digest('hex'), authorized }));
    });
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    bigBody,
    base: `http://127.0.0.1:${server.address().port}`,
    close: () => new Promise((resolve) => server.close(resolve)),
  };
}

test('rpc.discover (a 60 KB frame) equals bridge-spec; concurrent calls each get their own answer', { timeout: 30_000 }, async () => {
  const bridge = await startBridge(box);
  const expected = JSON.parse(fs.readFileSync(SPEC_PATH, 'utf8'));
  const document = await bridge.discover();
  assert.deepEqual(document, expected);
  assert.ok(bridge.tap.largestLine > 50_000, `the answer was one line of ${bridge.tap.largestLine} bytes`);
  // Many requests at once: answers come back as they finish, each to its own call.
  const answers = await Promise.all([bridge.discover(), bridge.listProviders(), bridge.discover(), bridge.checkSignInStatus('nope').catch((e) => e)]);
  assert.deepEqual(answers[0], expected);
  assert.deepEqual(answers[2], expected);
  assert.ok(Array.isArray(answers[1].plugins));
  assert.equal(answers[3].code, -32003);
  await bridge.close();
});

test('AuthBridge.start finds the host through $AUTHBRIDGE when no hostPath is given', { timeout: 30_000 }, async () => {
  const options = box.hostOptions();
  delete options.hostPath;
  delete options.env.AUTHBRIDGE;
  const saved = process.env.AUTHBRIDGE;
  process.env.AUTHBRIDGE = box.hostOptions().hostPath;
  try {
    const bridge = await AuthBridge.start(options);
    assert.equal(bridge.serverInfo.name, 'authbridge');
    assert.equal((await bridge.close()).code, 0);
  } finally {
    if (saved === undefined) delete process.env.AUTHBRIDGE;
    else process.env.AUTHBRIDGE = saved;
  }
});

test('AuthBridge.start finds `authbridge` on PATH', { timeout: 30_000 }, async () => {
  const options = box.hostOptions();
  const bin = path.join(box.root, 'bin');
  fs.mkdirSync(bin, { recursive: true });
  fs.symlinkSync(options.hostPath, path.join(bin, 'authbridge'));
  delete options.hostPath;
  delete options.env.AUTHBRIDGE;
  const saved = process.env.AUTHBRIDGE;
  delete process.env.AUTHBRIDGE;
  try {
    const bridge = await AuthBridge.start({ ...options, env: { ...options.env, PATH: `${bin}:${process.env.PATH}` } });
    assert.equal(bridge.serverInfo.name, 'authbridge');
    await bridge.close();
  } finally {
    if (saved !== undefined) process.env.AUTHBRIDGE = saved;
  }
});

test('AUTHBRIDGE in options.env (the host\'s environment) wins over this process\'s', { timeout: 30_000 }, async () => {
  const options = box.hostOptions();
  const host = options.hostPath;
  delete options.hostPath;
  const saved = process.env.AUTHBRIDGE;
  process.env.AUTHBRIDGE = path.join(box.root, 'not-this-one');
  try {
    const bridge = await AuthBridge.start({ ...options, env: { ...options.env, AUTHBRIDGE: host } });
    assert.equal(bridge.serverInfo.name, 'authbridge');
    await bridge.close();
  } finally {
    if (saved === undefined) delete process.env.AUTHBRIDGE;
    else process.env.AUTHBRIDGE = saved;
  }
});

test('every frame sent and received in this file validates against bridge-spec', { timeout: 60_000 }, async () => {
  await closeAll();
  await assertRecordedFramesValid();
});
