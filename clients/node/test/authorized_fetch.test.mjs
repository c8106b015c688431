// bridge.authorizedFetch(profile) against the real host and django-oauth-toolkit's userinfo: the
// token on every request; an access token the server stopped honouring mid-run (DOT ends it
// early; the host does not know) → 401 → one forceRefresh → the request sent again; concurrent
// requests meeting one dead token → one refresh; bodies that cannot be sent twice (a stream, a
// Request's own body); a grant the provider revoked (RFC 7009 at DOT, or an administrator) →
// NotSignedInError; no token over plain http to a named host; cookies by host and path.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';

import { InsecureUrlError, NotSignedInError } from '../src/index.js';
import { authorize } from '../src/authorized_fetch.js';
import { signInAsUser } from '../../../Tests/support/dot.mjs';
import {
  HOST, REPO, WAIT_MS, assertRecordedFramesValid, closeAll, leaks, run, startBridge, tempDir, validateFrames, withDotAndSandbox, withTimeout,
} from '../test-support/harness.mjs';

let dot;
let box;
withDotAndSandbox((started) => ({ dot, box } = started), { accessLifetime: 3600 });

const CONCURRENT = 8;

/** A host signed in to DOT as ada (profile `name`); resolves with the bridge and ada's `sub`. */
async function signedIn({ name = 'dot', settings = dot.settings(), ...options } = {}) {
  const bridge = await startBridge(box, options);
  await bridge.configureProfile({ name, plugin: 'oidc', settings });
  let page = null;
  const status = await withTimeout(bridge.requestOAuthTokens({ provider: name, flow: 'browser' }, {
    onProgress: ({ stage, url }) => { if (stage === 'openUrl') page = signInAsUser(url); },
  }), WAIT_MS, 'the sign-in');
  assert.equal((await page).status, 200);
  return { bridge, sub: status.account.id };
}

const userinfo = () => `${dot.base}/o/userinfo/`;
const refreshes = async () => (await dot.stats()).refreshes;
/** getAccessToken calls sent with forceRefresh. */
const forced = (bridge) => bridge.tap.sent.filter((f) => f.method === 'getAccessToken' && f.params?.forceRefresh).length;

/** Ends the session's access token at DOT, unknown to the host (its refresh token still works). */
async function endCurrentToken(bridge) {
  const { accessToken } = await bridge.getAccessToken('dot');
  await dot.endAccessToken(accessToken);
  const refused = await fetch(userinfo(), { headers: { Authorization: `Bearer ${accessToken}` } });
  assert.equal(refused.status, 401);
  return accessToken;
}

test('a token the server ended mid-run: 401, one forceRefresh, the request sent again', { timeout: 60_000 }, async () => {
  const { bridge, sub } = await signedIn();
  const api = bridge.authorizedFetch('dot');
  const first = await api(userinfo());
  assert.equal(first.status, 200);
  assert.equal((await first.json()).sub, sub);

  const before = await refreshes();
  const ended = await endCurrentToken(bridge);
  const again = await api(new URL(userinfo()));
  assert.equal(again.status, 200);
  assert.equal((await again.json()).sub, sub);
  assert.equal(await refreshes(), before + 1);
  assert.equal(forced(bridge), 1);
  assert.notEqual((await bridge.getAccessToken('dot')).accessToken, ended);

  // Bodies fetch can be given again: text, a form, bytes; and a Request object without a body.
  const sends = [
    () => api(userinfo(), { method: 'POST', body: 'note=text', headers: { 'Content-Type': 'application/x-www-form-urlencoded' } }),
    () => api(userinfo(), { method: 'POST', body: new URLSearchParams({ note: 'form' }) }),
    () => api(userinfo(), { method: 'POST', body: new TextEncoder().encode('note=bytes') }),
    () => api(new Request(userinfo(), { headers: { Accept: 'application/json' } })),
  ];
  for (const send of sends) {
    await endCurrentToken(bridge);
    const answer = await send();
    assert.equal(answer.status, 200);
    assert.equal((await answer.json()).sub, sub);
  }
  assert.equal(await refreshes(), before + 1 + sends.length);

  // Concurrent requests meeting one dead token: every one succeeds, after one refresh.
  const mark = await refreshes();
  await endCurrentToken(bridge);
  const answers = await Promise.all(Array.from({ length: CONCURRENT }, () => api(userinfo())));
  assert.deepEqual(answers.map((a) => a.status), Array(CONCURRENT).fill(200));
  assert.equal(await refreshes(), mark + 1, 'one refresh for every request that met the dead token');
  await Promise.all(answers.map((a) => a.body.cancel()));

  // A body read once (a stream, a Request's own body) is not sent again: the 401 is the answer,
  // and the token is renewed for the caller's own retry, which goes through without a refresh.
  const streamed = () => new ReadableStream({ start(c) { c.enqueue(new TextEncoder().encode('note=stream')); c.close(); } });
  for (const send of [
    () => api(userinfo(), { method: 'POST', body: streamed(), duplex: 'half' }),
    () => api(new Request(userinfo(), { method: 'POST', body: 'note=request' })),
  ]) {
    await endCurrentToken(bridge);
    const counted = await refreshes();
    const refused = await send();
    assert.equal(refused.status, 401);
    await refused.body.cancel();
    assert.equal(await refreshes(), counted + 1, 'renewed');
    const retried = await api(userinfo());
    assert.equal(retried.status, 200);
    await retried.body.cancel();
    assert.equal(await refreshes(), counted + 1, 'no second refresh for the retry');
  }
  assert.deepEqual(leaks(await dot.secrets(), bridge), [], 'no code or token in the log or in frames other than token results');
});

test('a grant the provider revoked: NotSignedInError (revoked) naming the request, no token in it', { timeout: 60_000 }, async () => {
  const { bridge } = await signedIn();
  const api = bridge.authorizedFetch('dot', { minValidityMs: 30_000 });
  const { accessToken } = await bridge.getAccessToken('dot');
  assert.equal((await api(userinfo())).status, 200);
  await dot.revoke(accessToken); // RFC 7009 at DOT: the access token, and with it the grant
  const error = await api(`${userinfo()}?q=secret`, { method: 'POST', body: 'a=1' }).then(() => null, (e) => e);
  assert.ok(error instanceof NotSignedInError, String(error));
  assert.equal(error.reason, 'revoked');
  assert.equal(error.method, 'getAccessToken');
  assert.equal(error.message, `POST ${dot.base}/o/userinfo/ answered 401 (the access token was refused) and the session `
    + 'could not be renewed: invalid_grant; sign in to "dot" again');
  assert.ok(error.cause instanceof NotSignedInError, "the bridge's own error is the cause");
  assert.ok(!error.message.includes(accessToken) && !JSON.stringify(error).includes(accessToken));
  assert.equal((await bridge.checkSignInStatus('dot')).state, 'notSignedIn');
  await assert.rejects(api(userinfo()), NotSignedInError);
  // The test's own call first, then authorizedFetch's, each with the minimum validity it was given:
  // the first request; the POST, its renewal (is the token still the one refused? then force); the last.
  const sent = bridge.tap.sent.filter((f) => f.method === 'getAccessToken').map((f) => f.params).slice(1);
  assert.deepEqual(sent.map((p) => [p.provider, p.minValidityMs, p.forceRefresh]), [
    ['dot', 30_000, undefined], ['dot', 30_000, undefined], ['dot', 30_000, undefined], ['dot', 30_000, true],
    ['dot', 30_000, undefined]]);
});

test('an account of the profile: its token, whoever is the current account', { timeout: 60_000 }, async () => {
  const { bridge, sub: ada } = await signedIn();
  let page = null;
  const grace = (await withTimeout(bridge.requestOAuthTokens({ provider: 'dot', flow: 'browser' }, {
    onProgress: ({ stage, url }) => { if (stage === 'openUrl') page = signInAsUser(url, { user: 'grace', password: 'hopper-test' }); },
  }), WAIT_MS, 'the second sign-in')).account.id;
  assert.equal((await page).status, 200);
  assert.notEqual(ada, grace);
  const subOf = async (api) => (await (await api(userinfo())).json()).sub;
  assert.equal(await subOf(bridge.authorizedFetch('dot')), grace, 'the current account: the latest to sign in');
  assert.equal(await subOf(bridge.authorizedFetch('dot', { account: ada })), ada);
  const [last] = bridge.tap.sent.filter((f) => f.method === 'getAccessToken').slice(-1);
  // The request's method and URL go along (a DPoP-bound session's proof is for exactly them).
  assert.deepEqual(last.params, { provider: 'dot', account: ada, method: 'GET', url: userinfo() });
});

test('scopes and resource (issue 30): on every getAccessToken of authorizedFetch, on fetch, and exchangeToken\'s names', { timeout: 60_000 }, async () => {
  const { bridge, sub } = await signedIn();
  const whole = await bridge.getAccessToken('dot');
  const narrow = await bridge.getAccessToken({ provider: 'dot', scopes: ['openid', 'read'] });
  assert.ok(narrow.accessToken && narrow.accessToken !== whole.accessToken, 'a token of its own for those scopes');
  const scoped = bridge.authorizedFetch('dot', { scopes: ['openid', 'read'] });
  assert.equal((await (await scoped(userinfo())).json()).sub, sub);
  const asked = () => bridge.tap.sent.filter((f) => f.method === 'getAccessToken').at(-1).params;
  assert.deepEqual(asked(), { provider: 'dot', scopes: ['openid', 'read'], method: 'GET', url: userinfo() });
  const resource = 'https://api.example.test/v1';
  // What DOT answers to a resource is the host's and DOT's affair: the names must pass the params check.
  const notInvalidParams = (error) => { assert.notEqual(error.code, -32602, error.message); return true; };
  // DOT revokes a refresh token's earlier access tokens when it is used again: the token of another
  // key (the resource's, next) ends this one, so the fetch comes first.
  const answer = await bridge.fetch({ provider: 'dot', url: userinfo(), scopes: ['openid', 'read'] });
  assert.equal(answer.status, 200);
  await bridge.authorizedFetch('dot', { scopes: ['openid', 'read'], resource: [resource] })(userinfo()).catch(notInvalidParams);
  const withResource = bridge.tap.sent.filter((f) => f.method === 'getAccessToken' && f.params.resource).map((f) => f.params);
  // (Then, if DOT's userinfo refused that token, its renewal with forceRefresh: the same scopes and resource.)
  assert.deepEqual(withResource[0], { provider: 'dot', scopes: ['openid', 'read'], resource: [resource], method: 'GET', url: userinfo() });
  assert.ok(withResource.every((p) => p.resource.length === 1 && p.scopes.length === 2));
  const exchange = { provider: 'dot', audience: 'billing', resource, scopes: ['read'], requestedTokenType: 'accessToken', subjectTokenType: 'idToken', minValidityMs: 30_000 };
  await assert.rejects(bridge.exchangeToken(exchange), notInvalidParams, 'DOT does no token exchange');
  assert.deepEqual(bridge.tap.sent.filter((f) => f.method === 'exchangeToken').at(-1).params, exchange);
});

test('no token over plain http to a named host; nothing is asked of the host', { timeout: 30_000 }, async () => {
  const bridge = await startBridge(box);
  await bridge.configureProfile({ name: 'dot', plugin: 'oidc', settings: dot.settings() });
  const api = bridge.authorizedFetch('dot');
  for (const url of ['http://example.com/me?api_key=secret', 'http://localhost:1/me', 'http://127.0.0.1.example.com/']) {
    const error = await api(url).then(() => null, (e) => e);
    assert.ok(error instanceof InsecureUrlError, String(error));
    assert.equal(error.reason, 'insecureUrl');
    assert.ok(!error.message.includes('secret') && !error.message.includes('/me'), error.message);
  }
  await assert.rejects(api('http://example.com/'), {
    message: 'refusing to send a token to http://example.com: use https (plain http only to 127.0.0.1 or [::1])',
  });
  assert.throws(() => bridge.authorizedFetch(''), TypeError);
  assert.equal(bridge.tap.sent.filter((f) => f.method === 'getAccessToken').length, 0);
});

test('cookies go to their host and path, replacing those of the same name', () => {
  const cookie = (name, extra = {}) => ({ name, value: `${name}-value`, domain: 'tableau.example.com', path: '/', ...extra });
  const token = {
    headers: { 'X-XSRF-TOKEN': 'x1', Authorization: 'Bearer secret-token' },
    cookies: [cookie('access'), cookie('api', { path: '/api' }), cookie('tls', { secure: true }), cookie('other', { domain: 'other.example.com' })],
  };
  const cases = {
    'https://tableau.example.com/api/x': 'keep=1; access=access-value; api=api-value; tls=tls-value',
    'https://tableau.example.com/api': 'keep=1; access=access-value; api=api-value; tls=tls-value',
    'https://tableau.example.com/apix': 'keep=1; access=access-value; tls=tls-value',
    'http://tableau.example.com/api/x': 'keep=1; access=access-value; api=api-value',
    'https://TABLEAU.example.com/': 'keep=1; access=access-value; tls=tls-value',
    'https://sub.tableau.example.com/': 'access=stale; keep=1',
    'http://127.0.0.1/api': 'access=stale; keep=1',
  };
  for (const [url, expected] of Object.entries(cases)) {
    const request = authorize(new Request(url, { headers: { Cookie: 'access=stale; keep=1', Authorization: 'Basic old' } }), token);
    assert.equal(request.headers.get('cookie'), expected, url);
    assert.equal(request.headers.get('authorization'), 'Bearer secret-token');
    assert.equal(request.headers.get('x-xsrf-token'), 'x1');
  }
});

test('the README\'s authorizedFetch example runs as written, after the quick start signed in', { timeout: 60_000 }, async () => {
  const readme = fs.readFileSync(path.join(REPO, 'clients', 'node', 'README.md'), 'utf8');
  const section = /### authorizedFetch\n([\s\S]*?)\n### /.exec(readme)?.[1] ?? '';
  const [code] = [...section.matchAll(/```js\n([\s\S]*?)```/g)].map(([, text]) => text);
  assert.ok(code?.includes("bridge.authorizedFetch('corp')"), 'the section has the program');
  // The quick start's sign-in, in the user's folders.
  const { env } = box.hostOptions();
  const settings = { issuer: dot.issuer, clientId: 'authbridge-test', scopes: ['openid'] };
  const { bridge, sub } = await signedIn({ name: 'corp', settings, env });
  await bridge.close();
  // An app folder where '@authbridge/client' resolves to this package, and the build's host
  // (its bundled plugins beside it) behind the frame tap.
  const app = tempDir('authbridge-readme-fetch-');
  fs.mkdirSync(path.join(app, 'node_modules', '@authbridge'), { recursive: true });
  fs.symlinkSync(path.join(REPO, 'clients', 'node'), path.join(app, 'node_modules', '@authbridge', 'client'));
  fs.writeFileSync(path.join(app, 'app.mjs'), code);
  const log = path.join(app, 'frames.jsonl');
  const tap = { AUTHBRIDGE: path.join(REPO, 'Tests', 'tools', 'frame_tap.py'), AUTHBRIDGE_TAP_TARGET: HOST, AUTHBRIDGE_TAP_LOG: log };
  const done = await run(process.execPath, ['app.mjs'], {
    cwd: app, env: { ...env, ...tap, ISSUER: dot.issuer, CLIENT_ID: 'authbridge-test', USERINFO_URL: userinfo() },
  });
  assert.equal(done.code, 0, `${done.stdout}\n${done.stderr}`);
  assert.equal(done.stdout, `userinfo: HTTP 200, sub ${sub}\n`);
  const checked = await validateFrames(log);
  assert.equal(checked.code, 0, `frames break bridge-spec:\n${checked.stdout}\n${checked.stderr}`);
});

test('every frame sent and received in this file validates against bridge-spec', { timeout: 60_000 }, async () => {
  await closeAll();
  await assertRecordedFramesValid();
});
