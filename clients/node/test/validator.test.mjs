// Tests/tools/validate_frames.py, the JSON Schema check of the frames the Node tests record:
// it passes valid frames and fails on every kind of invalid one (else a green run proves nothing).

import { test, before } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';

import { checkPrerequisites, tempDir, validateFrames } from '../test-support/harness.mjs';

let dir;
before(() => {
  checkPrerequisites();
  dir = tempDir('authbridge-validator-');
});

const H = 'h1';
const out = (id, method) => ({ host: H, dir: 'out', id, method });
const inn = (frame) => ({ host: H, dir: 'in', line: typeof frame === 'string' ? frame : JSON.stringify(frame) });
const status = { provider: 'dot', state: 'notSignedIn', account: null, expiresAt: null, reason: 'noTokens' };

/** Writes the records to a file and runs the validator over it. */
async function check(name, records) {
  const file = path.join(dir, `${name}.jsonl`);
  fs.writeFileSync(file, records.map((r) => JSON.stringify(r) + '\n').join(''));
  return validateFrames(file);
}

test('valid frames pass: results by method, errors, notifications, bare frames', async () => {
  const { code, stdout, stderr } = await check('valid', [
    out(1, 'checkSignInStatus'),
    inn({ jsonrpc: '2.0', method: 'session/changed', params: { provider: 'dot', state: 'signedOut', reason: 'userSignedOut' } }),
    inn({ jsonrpc: '2.0', id: 1, result: status }),
    out('a', 'getAccessToken'),
    inn({ jsonrpc: '2.0', id: 'a', error: { code: -32001, message: 'Not signed in', data: { provider: 'dot', reason: 'noTokens', retryable: false } } }),
    { jsonrpc: '2.0', id: null, error: { code: -32700, message: 'Parse error' } },
  ]);
  assert.equal(code, 0, stdout + stderr);
  assert.match(stdout, /4 frames checked/);
});

const invalid = {
  'a result that breaks its method\'s schema': [[out(1, 'checkSignInStatus'), inn({ jsonrpc: '2.0', id: 1, result: { ...status, state: 'bogus' } })], /result of checkSignInStatus breaks its schema/],
  'a notification with a member the spec does not have': [[inn({ jsonrpc: '2.0', method: 'signIn/progress', params: { provider: 'dot', requestId: 1, stage: 'waiting', token: 'x' } })], /signIn\/progress params break the schema/],
  'an openUrl progress without url': [[inn({ jsonrpc: '2.0', method: 'signIn/progress', params: { provider: 'dot', requestId: 1, stage: 'openUrl' } })], /signIn\/progress params break/],
  'an application error without data.reason': [[out(2, 'getAccessToken'), inn({ jsonrpc: '2.0', id: 2, error: { code: -32001, message: 'x', data: { provider: 'dot', retryable: false } } })], /ErrorResponse/],
  'an envelope with an extra member': [[out(3, 'listProviders'), inn({ jsonrpc: '2.0', id: 3, result: { plugins: [], profiles: [] }, extra: 1 })], /Envelope\/Response/],
  'duplicate keys': [[out(4, 'removeProfile'), inn('{"jsonrpc":"2.0","id":4,"result":{"removed":true,"removed":false}}')], /duplicate key/],
  'a line that is not JSON': [[inn('{"jsonrpc":"2.0",')], /not a JSON frame/],
  'an unknown notification': [[inn({ jsonrpc: '2.0', method: 'session/exploded', params: {} })], /unknown notification/],
  'an answer to an id never sent': [[inn({ jsonrpc: '2.0', id: 77, result: null })], /never sent/],
  'an id answered twice': [[out(5, 'shutdown'), inn({ jsonrpc: '2.0', id: 5, result: null }), inn({ jsonrpc: '2.0', id: 5, result: null })], /answered again/],
};

for (const [what, [records, message]] of Object.entries(invalid)) {
  test(`fails on ${what}`, async () => {
    const { code, stdout, stderr } = await check(what.replace(/\W+/g, '-'), records);
    assert.equal(code, 1, `exit status 1 expected:\n${stdout}${stderr}`);
    assert.match(stdout, message);
    assert.match(stdout, /\.jsonl:\d+: /, 'the problem names the file and line');
  });
}

test('a malformed record is a usage error (status 2), not a pass', async () => {
  const { code, stderr } = await check('malformed', [{ something: 'else' }]);
  assert.equal(code, 2);
  assert.match(stderr, /neither a record/);
});
