// Unit tests without a host: line framing, the error table against the spec, the package's
// declarations. Fast; they pin what the host tests cannot reach (every chunk boundary, every code).

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

import * as client from '../src/index.js';
import { LineDecoder, ErrorCodes, errorClasses, errorFromResponse, AuthBridgeError, hostArguments, resolveHostPath } from '../src/index.js';
import { TailBuffer } from '../src/transport.js';
import { frameKind } from '../src/protocol.js';
import { SPEC_PATH } from '../test-support/harness.mjs';

const PACKAGE = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const spec = JSON.parse(fs.readFileSync(SPEC_PATH, 'utf8'));

/** Feeds `bytes` to a decoder in the given chunk sizes; returns the lines it produced. */
function decode(bytes, sizes, options) {
  const lines = [];
  const decoder = new LineDecoder((line) => lines.push(line), options);
  let at = 0;
  let i = 0;
  while (at < bytes.length) {
    const size = sizes[i++ % sizes.length];
    decoder.push(bytes.subarray(at, at + size));
    at += size;
  }
  decoder.end();
  return lines;
}

test('framing: a frame split at every byte boundary, with multi-byte UTF-8, decodes whole', () => {
  const frames = [
    { jsonrpc: '2.0', method: 'session/changed', params: { provider: 'dot', state: 'signedIn', reason: 'signedIn', account: { name: 'Ådå Lövelace 👩‍💻' } } },
    { jsonrpc: '2.0', id: 7, result: { body: 'ünïcödé ✓ €' } },
  ];
  const bytes = Buffer.from(frames.map((f) => JSON.stringify(f) + '\n').join(''));
  for (let cut = 1; cut < bytes.length; cut++) {
    const lines = [];
    const decoder = new LineDecoder((line) => lines.push(line));
    decoder.push(bytes.subarray(0, cut));
    decoder.push(bytes.subarray(cut));
    assert.deepEqual(lines.map((l) => JSON.parse(l)), frames, `cut at byte ${cut}`);
  }
  // One byte at a time.
  assert.deepEqual(decode(bytes, [1]).map((l) => JSON.parse(l)), frames);
});

test('framing: a 5 MB frame in uneven chunks, between small ones; CRLF and blank lines tolerated', () => {
  const big = { jsonrpc: '2.0', id: 1, result: { body: 'x'.repeat(5 * 1024 * 1024), tail: 'é' } };
  const text = `{"jsonrpc":"2.0","id":0,"result":null}\r\n\n   \n${JSON.stringify(big)}\n{"jsonrpc":"2.0","id":2,"result":{}}\n`;
  const lines = decode(Buffer.from(text), [65_536, 7, 100_003, 1, 4_096]);
  assert.equal(lines.length, 3);
  assert.deepEqual(JSON.parse(lines[0]), { jsonrpc: '2.0', id: 0, result: null });
  assert.deepEqual(JSON.parse(lines[1]), big);
  assert.deepEqual(JSON.parse(lines[2]), { jsonrpc: '2.0', id: 2, result: {} });
});

test('framing: a last line without \\n (the writer died mid-frame) is dropped and only its length reported', () => {
  const partials = [];
  const text = '{"jsonrpc":"2.0","id":1,"result":{}}\n{"jsonrpc":"2.0","id":2,"result":{"accessToken":"at-cut';
  const lines = decode(Buffer.from(text), [5, 64], { onPartial: (n) => partials.push(n) });
  assert.deepEqual(lines, ['{"jsonrpc":"2.0","id":1,"result":{}}']);
  assert.deepEqual(partials, [Buffer.byteLength(text.split('\n')[1])]);
});

test('framing: an over-long line is dropped (reported once) and decoding goes on after it', () => {
  const overflows = [];
  const text = `${'y'.repeat(300)}\n{"ok":1}\n`;
  const lines = decode(Buffer.from(text), [64], { maxLineBytes: 100, onOverflow: (n) => overflows.push(n) });
  assert.deepEqual(lines, ['{"ok":1}']);
  assert.deepEqual(overflows, [300]);
});

test('stderr tail keeps the last lines, split across chunks', () => {
  const tail = new TailBuffer(3);
  tail.push('one\ntw');
  tail.push('o\nthree\nfour\nfi');
  assert.deepEqual(tail.tail(), ['three', 'four', 'fi']);
  tail.end();
  assert.deepEqual(tail.tail(), ['three', 'four', 'fi']);
});

test('frame kinds: responses, notifications and what is neither', () => {
  assert.equal(frameKind({ jsonrpc: '2.0', id: 1, result: null }), 'response');
  assert.equal(frameKind({ jsonrpc: '2.0', id: null, error: { code: -32700, message: 'x' } }), 'response');
  assert.equal(frameKind({ jsonrpc: '2.0', method: 'session/changed', params: {} }), 'notification');
  assert.equal(frameKind({ jsonrpc: '2.0', id: 1, method: 'x' }), 'invalid', 'the host sends no requests');
  assert.equal(frameKind({ jsonrpc: '2.0', id: 1, result: 1, error: {} }), 'invalid');
  assert.equal(frameKind({ id: 1, result: 1 }), 'invalid');
  assert.equal(frameKind([]), 'invalid');
});

test('errors: one class per code of the spec, named after its catalogue entry, carrying error.data', () => {
  const catalogue = spec.components.errors; // Name → {code, message, data}
  const codes = spec.components.schemas.ErrorObject.properties.code.enum;
  assert.deepEqual(Object.values(catalogue).map((e) => e.code).sort(), [...codes].sort(), 'the catalogue lists every code');
  for (const [name, example] of Object.entries(catalogue)) {
    assert.equal(ErrorCodes[name], example.code, `ErrorCodes.${name}`);
    const Class = errorClasses[example.code];
    assert.ok(Class, `a class for ${name} (${example.code})`);
    assert.ok([name, `${name}Error`].includes(Class.name), `${Class.name} is named after ${name}`);
    assert.equal(client[Class.name], Class, `${Class.name} is exported`);
    const error = errorFromResponse(example, { method: 'm', requestId: 3 });
    assert.ok(error instanceof Class && error instanceof AuthBridgeError && error instanceof Error);
    assert.equal(error.name, Class.name);
    assert.equal(error.code, example.code);
    assert.equal(error.message, example.message);
    assert.deepEqual(error.data, example.data);
    assert.equal(error.provider, example.data?.provider);
    assert.equal(error.reason, example.data?.reason);
    assert.equal(error.retryable, example.data?.retryable ?? false);
    assert.equal(error.method, 'm');
    assert.equal(error.requestId, 3);
  }
  const unknown = errorFromResponse({ code: -31999, message: 'new' });
  assert.equal(unknown.constructor, AuthBridgeError, 'a code from a newer host is still an AuthBridgeError');
});

test('client-made errors: AbortError is a RequestCancelledError, RequestTimeoutError a TimeoutError', () => {
  const abort = new client.AbortError('stop', { cause: 'why' });
  assert.equal(abort.name, 'AbortError');
  assert.equal(abort.code, -32800);
  assert.ok(abort instanceof client.RequestCancelledError);
  assert.equal(abort.cause, 'why');
  const timeout = new client.RequestTimeoutError('slow', { timeoutMs: 5 });
  assert.ok(timeout instanceof client.TimeoutError);
  assert.equal(timeout.code, -32006);
  assert.equal(timeout.retryable, true);
  assert.equal(timeout.timeoutMs, 5);
  const exited = new client.HostExitedError('gone', { signal: 'SIGKILL', stderrTail: ['a'] });
  assert.ok(exited instanceof AuthBridgeError);
  assert.equal(exited.signal, 'SIGKILL');
  assert.deepEqual(exited.stderrTail, ['a']);
  assert.equal(exited.retryable, false);
  const missing = new client.HostNotFoundError('no host', { executable: '/x/authbridge', cause: { code: 'ENOENT' } });
  assert.ok(missing instanceof client.HostExitedError && missing instanceof AuthBridgeError);
  assert.equal(missing.name, 'HostNotFoundError');
  assert.equal(missing.executable, '/x/authbridge');
  assert.equal(missing.code, null);
});

test('host path: the option, else AUTHBRIDGE of options.env, else of this process, else authbridge on PATH', () => {
  const saved = process.env.AUTHBRIDGE;
  try {
    process.env.AUTHBRIDGE = '/from/process';
    assert.equal(resolveHostPath({ hostPath: '/given', env: { AUTHBRIDGE: '/from/env' } }), '/given');
    assert.equal(resolveHostPath({ env: { AUTHBRIDGE: '/from/env' } }), '/from/env');
    assert.equal(resolveHostPath({ env: { PATH: '/bin' } }), '/from/process');
    delete process.env.AUTHBRIDGE;
    assert.equal(resolveHostPath({ env: {} }), 'authbridge');
    assert.equal(resolveHostPath(), 'authbridge');
  } finally {
    if (saved === undefined) delete process.env.AUTHBRIDGE;
    else process.env.AUTHBRIDGE = saved;
  }
});

test('host arguments: serve, plugin folders, options, then extra args', () => {
  assert.deepEqual(hostArguments({}), ['serve']);
  assert.deepEqual(
    hostArguments({ noDefaultPlugins: true, plugins: ['/p1', '/p2'], config: '/c.json', logLevel: 'debug', vault: 'memory', args: ['--open-browser'] }),
    ['serve', '--no-default-plugins', '--plugins', '/p1', '--plugins', '/p2', '--config', '/c.json', '--log-level', 'debug', '--vault', 'memory', '--open-browser'],
  );
  assert.deepEqual(hostArguments({ plugins: '/one' }), ['serve', '--plugins', '/one']);
});

test('package: an ES module with exports and types, no dependencies; the .d.ts declares every export', () => {
  const pkg = JSON.parse(fs.readFileSync(path.join(PACKAGE, 'package.json'), 'utf8'));
  assert.equal(pkg.type, 'module');
  assert.equal(pkg.types, './index.d.ts');
  assert.equal(pkg.exports['.'].types, './index.d.ts');
  assert.equal(pkg.exports['.'].default, './src/index.js');
  assert.equal(pkg.dependencies, undefined);
  assert.equal(pkg.version, client.CLIENT_VERSION);
  const dts = fs.readFileSync(path.join(PACKAGE, 'index.d.ts'), 'utf8');
  for (const name of Object.keys(client)) {
    assert.match(dts, new RegExp(`export (declare )?(class|function|const|interface|type) ${name}\\b`), `index.d.ts declares ${name}`);
  }
  // Every schema the client hands to callers has an interface of the same name.
  for (const schema of ['SignInStatus', 'AccessTokenResult', 'FetchResult', 'SignOutResult', 'Account', 'Cookie', 'CookieRef',
    'PluginStatus', 'ProfileInfo', 'StorageInfo', 'InitializeResult', 'ListProvidersResult', 'ListAccountsResult',
    'RemoveProfileResult', 'CompleteSignInResult', 'CompleteSignOutResult', 'SessionChangedParams', 'SignInProgressParams', 'ProfilesChangedParams', 'ErrorData',
    'RevocationFailure', 'ServerCapabilities']) {
    assert.ok(spec.components.schemas[schema], `${schema} is a schema of the spec`);
    assert.match(dts, new RegExp(`export (interface|type) ${schema}\\b`), `index.d.ts declares ${schema}`);
  }
  // Every param of every method the client wraps is a member of its params interface.
  const wrapped = { listAccounts: 'ListAccountsParams', checkSignInStatus: 'CheckSignInStatusParams', requestOAuthTokens: 'RequestOAuthTokensParams',
    completeSignIn: 'CompleteSignInParams', signOut: 'SignOutParams', completeSignOut: 'CompleteSignOutParams',
    getAccessToken: 'GetAccessTokenParams', fetch: 'FetchParams', exchangeToken: 'ExchangeTokenParams',
    configureProfile: 'ConfigureProfileParams', removeProfile: 'RemoveProfileParams' };
  for (const [method, name] of Object.entries(wrapped)) {
    const body = new RegExp(`export interface ${name} \\{([^}]*)\\}`).exec(dts)?.[1];
    assert.ok(body, `index.d.ts declares ${name}`);
    for (const param of spec.methods.find((m) => m.name === method).params) {
      assert.match(body, new RegExp(`\\b${param.name}${param.required ? '' : '\\?'}:`), `${name}.${param.name}${param.required ? '' : '?'}`);
    }
  }
});

const tsc = spawnSync('tsc', ['--version'], { encoding: 'utf8' });
test('index.d.ts type-checks (tsc --strict) against typical uses, and rejects wrong params and events',
  { skip: tsc.status === 0 ? false : 'tsc is not installed (Debian: node-typescript; make deps installs it)', timeout: 120_000 }, () => {
    // An app folder where '@authbridge/client' resolves through node_modules and package.json "exports".
    const app = fs.mkdtempSync(path.join(os.tmpdir(), 'authbridge-tsc-'));
    try {
      const sources = path.join(PACKAGE, 'test-support', 'typecheck');
      for (const name of fs.readdirSync(sources)) fs.copyFileSync(path.join(sources, name), path.join(app, name));
      fs.writeFileSync(path.join(app, 'package.json'), '{"type": "module"}');
      fs.mkdirSync(path.join(app, 'node_modules', '@authbridge'), { recursive: true });
      fs.symlinkSync(PACKAGE, path.join(app, 'node_modules', '@authbridge', 'client'));
      const run = spawnSync('tsc', ['-p', app], { encoding: 'utf8', timeout: 110_000 });
      assert.equal(run.status, 0, `tsc ${tsc.stdout.trim()}:\n${run.stdout}${run.stderr}`);
    } finally {
      fs.rmSync(app, { recursive: true, force: true });
    }
  });

test('-32004 insufficientScope: missingScopes from data.missingScopes; [] on any other error', () => {
  const refused = errorFromResponse({ code: -32004, message: 'The grant does not cover these scopes',
    data: { provider: 'dot', reason: 'insufficientScope', retryable: false, missingScopes: ['write', 'admin'] } }, { method: 'getAccessToken' });
  assert.ok(refused instanceof client.ProviderRefusedError);
  assert.equal(refused.reason, 'insufficientScope');
  assert.deepEqual(refused.missingScopes, ['write', 'admin']);
  assert.deepEqual(errorFromResponse({ code: -32004, message: 'no', data: { reason: 'invalid_grant' } }).missingScopes, []);
});
