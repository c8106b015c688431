// bridge.authorizedFetch(profile) against servers that bind tokens to a key (RFC 9449 DPoP):
// glewlwyd and the idpyoidc OP of the test kit advertise it, so the profile's tokens are
// DPoP-bound with no setting. Code written for bearer tokens works unchanged: every request asks
// the host for its own proof (its method and URL go along), and a 401 that asks for the server's
// nonce (`use_dpop_nonce`) is answered with a new proof that carries it. The key stays in the host.

import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import path from 'node:path';
import readline from 'node:readline';

import {
  PYTHON, REPO, WAIT_MS, assertRecordedFramesValid, checkPrerequisites, closeAll, sandbox, startBridge, tempDir, withTimeout,
} from '../test-support/harness.mjs';

const SERVER = path.join(REPO, 'Tests', 'support', 'openid_server.py');

/** Tests/support/openid_server.py: the server's facts, and `browse(url)` → the redirect back. */
async function startServer(name, ...flags) {
  const child = spawn(PYTHON, [SERVER, name, tempDir(`authbridge-${name}-`), ...flags], { stdio: ['pipe', 'pipe', 'inherit'] });
  const lines = readline.createInterface({ input: child.stdout })[Symbol.asyncIterator]();
  const next = async (what) => {
    const { value, done } = await withTimeout(lines.next(), 120_000, what);
    assert.ok(!done, `the ${name} server ended before ${what}`);
    return value;
  };
  const ready = await next('READY');
  assert.match(ready, /^READY /);
  const facts = JSON.parse(ready.slice(6));
  let turn = Promise.resolve();
  const browse = (url) => {
    const answer = turn.then(async () => {
      child.stdin.write(`browse ${url}\n`);
      const line = await next('the sign-in page');
      assert.match(line, /^LOCATION /, line);
      return line.slice(9);
    });
    turn = answer.catch(() => {});
    return answer;
  };
  const stop = async () => {
    child.stdin.end();
    await withTimeout(new Promise((resolve) => child.once('exit', resolve)), 30_000, `the ${name} server to stop`);
  };
  return { ...facts, browse, stop };
}

let box;
const servers = {};
before(async () => {
  checkPrerequisites();
  box = sandbox();
  [servers.glewlwyd, servers.idpyoidc, servers.nonce] = await Promise.all([
    startServer('glewlwyd'), startServer('idpyoidc'), startServer('glewlwyd', '--nonce'),
  ]);
});
after(async () => {
  await closeAll();
  await Promise.all(Object.values(servers).map((server) => server.stop()));
});

/** A host signed in (external flow) to `server` as its test user; resolves with the bridge and the `sub`. */
async function signedIn(server) {
  const bridge = await startBridge(box);
  await bridge.configureProfile({ name: 'p', plugin: 'oidc', settings: server.settings });
  let callback = null;
  const signingIn = bridge.requestOAuthTokens({ provider: 'p', flow: 'external' }, {
    onProgress: ({ stage, url }) => { if (stage === 'openUrl') callback = server.browse(url); },
  });
  const status = await withTimeout((async () => {
    while (callback === null) await new Promise((resolve) => setImmediate(resolve));
    await bridge.completeSignIn({ provider: 'p', callbackUrl: await callback });
    return signingIn;
  })(), WAIT_MS * 4, 'the sign-in');
  assert.equal(status.tokenType, 'DPoP');
  return { bridge, sub: status.account.id };
}

for (const name of ['glewlwyd', 'idpyoidc']) {
  test(`authorizedFetch against ${name}: a proof for every request, the same code as for bearer tokens`, async () => {
    const server = servers[name];
    const { bridge, sub } = await signedIn(server);
    const api = bridge.authorizedFetch('p');
    for (let i = 0; i < 3; i += 1) {
      const response = await api(`${server.userinfo}?n=${i}`);
      assert.equal(response.status, 200);
      assert.equal((await response.json()).sub, sub);
    }
    const token = await bridge.getAccessToken({ provider: 'p', method: 'GET', url: server.userinfo });
    assert.equal(token.tokenType, 'DPoP');
    assert.deepEqual(Object.keys(token.headers).sort(), ['Authorization', 'DPoP']);
    // The Authorization header alone, as a thief would copy it: refused.
    const stolen = await fetch(server.userinfo, { headers: { Authorization: token.headers.Authorization } });
    assert.ok([400, 401].includes(stolen.status), `a token without its proof was accepted (${stolen.status})`);
  });
}

test('authorizedFetch answers a resource server that asks for its nonce', async () => {
  const server = servers.nonce;
  const { bridge, sub } = await signedIn(server);
  const api = bridge.authorizedFetch('p');
  for (let i = 0; i < 6; i += 1) {
    const response = await api(server.userinfo);
    assert.equal(response.status, 200);
    assert.equal((await response.json()).sub, sub);
  }
  const asked = [];
  for (const frame of bridge.tap.sent) if (frame.method === 'getAccessToken' && frame.params.dpopNonce) asked.push(frame);
  assert.ok(asked.length > 0, 'the server asked for new nonces along the way, and the requests were answered');
});

test('every frame of this file validates against bridge-spec', assertRecordedFramesValid);
