// The examples run end to end against django-oauth-toolkit:
// - Examples/node_example.mjs --scripted, as a person runs it (it starts its own test server);
// - Examples/desktop_app.mjs with an injected openExternal that plays the user, and as a
//   program whose default openExternal runs `xdg-open` (a stand-in on PATH plays the user).

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';

import { AbortError } from '../src/index.js';
import { AuthService, main as desktopApp } from '../../../Examples/desktop_app.mjs';
import { startDot, signInAsUser } from '../../../Tests/support/dot.mjs';
import {
  HOST, PYTHON, REPO, assertRecordedFramesValid, checkPrerequisites, closeAll, run, sandbox, startBridge, tempDir, withTimeout,
} from '../test-support/harness.mjs';

const DOT_MODULE = path.join(REPO, 'Tests', 'support', 'dot.mjs');

let dot;
let box;

before(async () => {
  checkPrerequisites();
  box = sandbox();
  dot = await startDot({ state: tempDir('authbridge-dot-'), python: PYTHON });
});

after(async () => {
  await closeAll();
  await dot?.stop();
});

/** The environment of an example run: the host, a private plugin folder, private XDG folders. */
function exampleEnv(extra = {}) {
  const { env } = box.hostOptions();
  return { ...env, AUTHBRIDGE: HOST, AUTHBRIDGE_PLUGINS: box.pluginDir, AUTHBRIDGE_PYTHON: PYTHON, ...extra };
}

/** No code or token DOT handed out appears in `text`. */
async function assertNoSecrets(text) {
  const secrets = (await dot.secrets()).filter((s) => s.length >= 12);
  assert.ok(secrets.length > 0, 'DOT handed out codes and tokens');
  assert.equal(secrets.filter((s) => text.includes(s)).length, 0, 'a code or token was printed');
}

test('node_example.mjs --scripted: sign-in, status, userinfo, session/changed, sign-out (its own test server)', { timeout: 120_000 }, async () => {
  const example = path.join(REPO, 'Examples', 'node_example.mjs');
  const { code, stdout, stderr } = await run(process.execPath, [example, '--scripted'], { env: exampleEnv(), timeoutMs: 100_000 });
  assert.equal(code, 0, `${stdout}\n${stderr}`);
  const expected = [
    /^Status: notSignedIn \(noTokens\)$/m,
    /^Sign-in: the scripted user opens 127\.0\.0\.1:\d+\/o\/authorize\/$/m,
    /^session\/changed: example signedIn \(signedIn\) account \d+$/m,
    /^Signed in: account \d+, access token valid for \d+ s$/m,
    /^Status: signedIn \(valid\)$/m,
    /^userinfo: HTTP 200, sub \d+$/m,
    /^session\/changed: example signedOut \(userSignedOut\) account \d+$/m,
    /^Signed out; revoked at the provider: (refresh_token, access_token|access_token, refresh_token)$/m,
    /^getAccessToken now: NotSignedInError \(noTokens\)$/m,
    /^Host exited with status 0$/m,
  ];
  let at = 0;
  for (const pattern of expected) {
    const match = pattern.exec(stdout.slice(at));
    assert.ok(match, `${pattern} (in order) in:\n${stdout}`);
    at += match.index + match[0].length;
  }
  assert.doesNotMatch(stdout, /code=|state=|Bearer/, 'no query string or token is printed');
});

test('desktop_app.mjs: openExternal is called with the sign-in page; the injected one plays the user', { timeout: 60_000 }, async () => {
  const opened = [];
  const log = [];
  const openExternal = async (url) => {
    opened.push(url);
    await signInAsUser(url);
  };
  const status = await withTimeout(desktopApp(['--host', HOST, '--plugins', box.pluginDir, '--issuer', dot.issuer], { openExternal, log: (line) => log.push(line) }),
    50_000, 'desktop_app');
  assert.equal(status, 0);
  assert.equal(opened.length, 1);
  assert.ok(opened[0].startsWith(`${dot.base}/o/authorize/?`), 'the authorization page');
  assert.equal(new URL(opened[0]).searchParams.get('code_challenge_method'), 'S256');
  assert.deepEqual(log.map((line) => line.replace(/\d+/g, 'N')), [
    '[window] Sign in button shown',
    '[window] sign-in: continue in your browser…',
    '[window] sign-in: waiting',
    '[window] sign-in: exchanging',
    '[window] signed in as N',
    '[main] signed in: signedIn',
    '[main] userinfo: HTTP N, sub N',
    '[window] signed out (signedOut)',
    '[main] signed out; revoked N tokens',
    '[main] API call after sign-out: not signed in',
    '[main] host exited with status N',
  ]);
  assert.ok(log.some((line) => /^\[main\] userinfo: HTTP 200, sub \d+$/.test(line)), 'userinfo answered 200');
  await assertNoSecrets(log.join('\n'));
});

test('desktop_app.mjs as a program: its default openExternal runs xdg-open', { timeout: 60_000 }, async () => {
  // A stand-in xdg-open on PATH: it plays the user in the page it is asked to open.
  const bin = path.join(box.root, 'fake-bin');
  fs.mkdirSync(bin, { recursive: true });
  const calls = path.join(box.root, 'xdg-open-calls');
  fs.writeFileSync(path.join(bin, 'xdg-open'),
    `#!/bin/sh\necho called >> '${calls}'\nexec '${process.execPath}' --input-type=module -e "import { signInAsUser } from '${DOT_MODULE}'; await signInAsUser(process.argv[1]);" "$1"\n`,
    { mode: 0o755 });
  const example = path.join(REPO, 'Examples', 'desktop_app.mjs');
  const env = exampleEnv({ PATH: `${bin}:${process.env.PATH}` });
  const { code, stdout, stderr } = await run(process.execPath, [example, '--issuer', dot.issuer], { env, timeoutMs: 50_000 });
  assert.equal(code, 0, `${stdout}\n${stderr}`);
  assert.equal(fs.readFileSync(calls, 'utf8'), 'called\n', 'xdg-open ran once');
  assert.match(stdout, /^\[main\] userinfo: HTTP 200, sub \d+$/m);
  assert.match(stdout, /^\[main\] host exited with status 0$/m);
  await assertNoSecrets(stdout + stderr);
});

test('the README quick start runs as written (package import, openBrowser with xdg-open, default plugin folders)', { timeout: 60_000 }, async () => {
  const readme = fs.readFileSync(path.join(REPO, 'clients', 'node', 'README.md'), 'utf8');
  const code = /## Quick start\n+```js\n([\s\S]*?)```/.exec(readme)?.[1];
  // The root README shows the same quick start, character for character.
  const root = fs.readFileSync(path.join(REPO, 'README.md'), 'utf8');
  assert.ok(code && root.includes('```js\n' + code + '```'), 'README.md shows the Node client README quick start');
  assert.ok(code?.includes("from '@authbridge/client'"), 'the quick start imports the package by name');
  // An app folder where '@authbridge/client' resolves through node_modules, as after an install.
  const app = path.join(box.root, 'quickstart-app');
  fs.mkdirSync(path.join(app, 'node_modules', '@authbridge'), { recursive: true });
  fs.symlinkSync(path.join(REPO, 'clients', 'node'), path.join(app, 'node_modules', '@authbridge', 'client'));
  fs.writeFileSync(path.join(app, 'app.mjs'), code);
  // The host opens the page with xdg-open: a stand-in on PATH plays the user.
  const bin = path.join(box.root, 'quickstart-bin');
  fs.mkdirSync(bin);
  fs.writeFileSync(path.join(bin, 'xdg-open'),
    `#!/bin/sh\nexec '${process.execPath}' --input-type=module -e "import { signInAsUser } from '${DOT_MODULE}'; await signInAsUser(process.argv[1]);" "$1"\n`,
    { mode: 0o755 });
  const env = exampleEnv({ PATH: `${bin}:${process.env.PATH}`, ISSUER: dot.issuer, CLIENT_ID: 'authbridge-test', USERINFO_URL: `${dot.issuer}/userinfo/` });
  delete env.AUTHBRIDGE_PLUGINS;
  if (!fs.existsSync(path.join(path.dirname(HOST), 'plugins', 'oidc.json'))) {
    // A host without bundled plugins beside it: the user's plugin folder then.
    const userPlugins = path.join(env.XDG_DATA_HOME, 'authbridge', 'plugins');
    fs.mkdirSync(userPlugins, { recursive: true, mode: 0o755 });
    for (const name of fs.readdirSync(box.pluginDir)) fs.copyFileSync(path.join(box.pluginDir, name), path.join(userPlugins, name));
  }
  const result = await run(process.execPath, [path.join(app, 'app.mjs')], { env, timeoutMs: 50_000 });
  assert.equal(result.code, 0, `${result.stdout}\n${result.stderr}`);
  assert.match(result.stdout, /^corp: signedIn \(signedIn\)\nsigned in as \d+\nuserinfo: HTTP 200\ncorp: signedOut \(userSignedOut\)\n$/);
});

test('AuthService: a browser that cannot be opened stops the sign-in at once (AbortError, cause kept)', { timeout: 30_000 }, async () => {
  const bridge = await startBridge(box);
  try {
    await bridge.configureProfile({ name: 'corp', plugin: 'oidc', settings: dot.settings() });
    const noBrowser = Object.assign(new Error('spawn xdg-open ENOENT'), { code: 'ENOENT' });
    const auth = new AuthService({ bridge, provider: 'corp', openExternal: () => { throw noBrowser; } });
    const error = await withTimeout(auth.signIn().then(() => assert.fail('signed in'), (e) => e), 10_000, 'signIn');
    assert.ok(error instanceof AbortError);
    assert.equal(error.cause, noBrowser);
    // Cancel from the window: the same, with the app's reason.
    const cancelling = new AuthService({ bridge, provider: 'corp', openExternal: () => cancelling.cancelSignIn() });
    const cancelled = await withTimeout(cancelling.signIn().then(() => assert.fail('signed in'), (e) => e), 10_000, 'signIn');
    assert.ok(cancelled instanceof AbortError);
    assert.match(cancelled.cause.message, /cancelled in the app/);
    assert.equal((await cancelling.view()).signedIn, false);
  } finally {
    await bridge.close();
  }
});

test('every frame sent and received in this file validates against bridge-spec', { timeout: 60_000 }, async () => {
  await closeAll();
  await assertRecordedFramesValid();
});
