// The examples and the README quick start, run end to end against django-oauth-toolkit as a
// person runs them, each with Tests/tools/frame_tap.py standing in for the host (AUTHBRIDGE) so
// every frame they exchange, both ways, is validated against bridge-spec:
// - Examples/node_example.mjs --scripted (it starts its own test server);
// - Examples/desktop_app.mjs with an injected openExternal that plays the user, and as a
//   program whose default openExternal runs `xdg-open` (a stand-in on PATH: one that plays the
//   user, one that fails as on a machine without a desktop);
// - the README's Node quick start: its shell step run literally in a fresh folder outside the
//   repository, then its code with plain `node`, twice (the second run keeps the session).

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';

import { AbortError } from '../src/index.js';
import { AuthService, main as desktopApp } from '../../../Examples/desktop_app.mjs';
import { signInAsUser } from '../../../Tests/support/dot.mjs';
import {
  HOST, PYTHON, REPO, WAIT_MS, assertRecordedFramesValid, closeAll, run, startBridge, tempDir, validateFrames, withDotAndSandbox, withTimeout,
} from '../test-support/harness.mjs';

const DOT_MODULE = path.join(REPO, 'Tests', 'support', 'dot.mjs');
const FRAME_TAP = path.join(REPO, 'Tests', 'tools', 'frame_tap.py');

let dot;
let box;
withDotAndSandbox((started) => ({ dot, box } = started));

let taps = 0;

/** The frame tap in front of the real host: AUTHBRIDGE and its settings, and the log it writes. */
function frameTap() {
  const log = path.join(box.root, `frames-${++taps}.jsonl`);
  return { log, env: { AUTHBRIDGE: FRAME_TAP, AUTHBRIDGE_TAP_TARGET: HOST, AUTHBRIDGE_TAP_LOG: log } };
}

/** Every frame in a tap's log, sent and received, validates against bridge-spec; returns how many. */
async function assertFramesValid(log) {
  assert.ok(fs.existsSync(log), `the frame tap wrote nothing to ${log}: was it the host?`);
  const records = fs.readFileSync(log, 'utf8').trim().split('\n').map((line) => JSON.parse(line));
  assert.ok(records.some((record) => record.dir === 'out') && records.some((record) => record.dir === 'in'), 'frames both ways');
  const { code, stdout, stderr } = await validateFrames(log);
  assert.equal(code, 0, `frames break bridge-spec:\n${stdout}\n${stderr}`);
  return Number(/(\d+) frames checked/.exec(stdout)?.[1]);
}

/** The environment of an example run: the tapped host, a private plugin folder, private XDG folders. */
function exampleEnv(tap, extra = {}) {
  const { env } = box.hostOptions();
  return { ...env, ...tap.env, AUTHBRIDGE_PLUGINS: box.pluginDir, AUTHBRIDGE_PYTHON: PYTHON, ...extra };
}

/** A folder of stand-in commands: `xdg-open` given as a script body, and python3 (for the tap). */
function standInBin(name, xdgOpen) {
  const bin = path.join(box.root, name);
  fs.mkdirSync(bin);
  fs.writeFileSync(path.join(bin, 'xdg-open'), `#!/bin/sh\n${xdgOpen}`, { mode: 0o755 });
  fs.symlinkSync(fs.realpathSync(PYTHON), path.join(bin, 'python3')); // frame_tap.py's interpreter, whatever HOME is
  return bin;
}

/** An xdg-open that plays the user in the page it is asked to open (and records that it ran). */
const PLAYING_XDG_OPEN = (calls) =>
  `echo called >> '${calls}'\nexec '${process.execPath}' --input-type=module -e "import { signInAsUser } from '${DOT_MODULE}'; await signInAsUser(process.argv[1]);" "$1"\n`;

/** An xdg-open as on a machine without a desktop: it starts, finds no browser, exits 3. */
const FAILING_XDG_OPEN = (calls) => `echo "$1" >> '${calls}'\nexit 3\n`;

/**
 * desktop_app.mjs run as a program on a desktop whose xdg-open is `xdgOpen(calls)`: the file its
 * calls go to, the program's path, and the frame tap and environment of the run.
 */
function desktopAppRun(name, xdgOpen) {
  const calls = path.join(box.root, `${name}-xdg-open-calls`);
  const bin = standInBin(`${name}-bin`, xdgOpen(calls));
  const tap = frameTap();
  const env = exampleEnv(tap, { PATH: `${bin}:${process.env.PATH}` });
  return { calls, example: path.join(REPO, 'Examples', 'desktop_app.mjs'), tap, env };
}

/**
 * Runs a program and, once its stdout shows `pattern`, calls `onMatch(match)` (the person at the
 * screen acting on it). Resolves with {code, stdout, stderr} at its end; everything bounded.
 */
function runWatching(command, args, { env, cwd, pattern, onMatch, timeoutMs = 60_000 }) {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, { env, cwd, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    let acted = null;
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`${path.basename(args.at(-1) ?? command)} still running after ${timeoutMs} ms\n${stdout}\n${stderr}`));
    }, timeoutMs);
    child.stdout.setEncoding('utf8').on('data', (text) => {
      stdout += text;
      const match = pattern && acted === null ? pattern.exec(stdout) : null;
      if (match) acted = Promise.resolve().then(() => onMatch(match));
    });
    child.stderr.setEncoding('utf8').on('data', (text) => { stderr += text; });
    child.once('error', (error) => { clearTimeout(timer); reject(error); });
    child.once('close', (code) => {
      clearTimeout(timer);
      Promise.resolve(acted).then(() => resolve({ code, stdout, stderr }), reject);
    });
  });
}

/** No code or token DOT handed out appears in `text`. */
async function assertNoSecrets(text) {
  const secrets = (await dot.secrets()).filter((s) => s.length >= 12);
  assert.ok(secrets.length > 0, 'DOT handed out codes and tokens');
  assert.equal(secrets.filter((s) => text.includes(s)).length, 0, 'a code or token was printed');
}

test('node_example.mjs --scripted: sign-in, status, userinfo, session/changed, sign-out (its own test server)', { timeout: 120_000 }, async () => {
  const example = path.join(REPO, 'Examples', 'node_example.mjs');
  const tap = frameTap();
  const { code, stdout, stderr } = await run(process.execPath, [example, '--scripted'], { env: exampleEnv(tap), timeoutMs: 100_000 });
  assert.equal(code, 0, `${stdout}\n${stderr}`);
  const expected = [
    /^Status: notSignedIn \(noTokens\)$/m,
    /^Sign-in: the scripted user opens 127\.0\.0\.1:\d+\/o\/authorize\/$/m,
    /^session\/changed: example signedIn \(signedIn\) account Ada Lovelace \(\d+\)$/m,
    /^Signed in: account Ada Lovelace \(\d+\), access token valid for \d+ s$/m,
    /^Status: signedIn \(valid\)$/m,
    /^userinfo: HTTP 200, sub \d+$/m,
    /^session\/changed: example signedOut \(userSignedOut\) account Ada Lovelace \(\d+\)$/m,
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
  assert.ok(await assertFramesValid(tap.log) >= 15, 'the whole session went through the tap');
});

test('desktop_app.mjs: openExternal is called with the sign-in page; the injected one plays the user', { timeout: 60_000 }, async () => {
  const opened = [];
  const log = [];
  const openExternal = async (url) => {
    opened.push(url);
    await signInAsUser(url);
  };
  // In this process: the tap's settings go into this process's environment, which the host inherits.
  const tap = frameTap();
  const saved = { ...process.env };
  Object.assign(process.env, tap.env);
  let status;
  try {
    status = await withTimeout(desktopApp(['--host', FRAME_TAP, '--plugins', box.pluginDir, '--issuer', dot.issuer], { openExternal, log: (line) => log.push(line) }),
      50_000, 'desktop_app');
  } finally {
    for (const name of Object.keys(tap.env)) {
      if (name in saved) process.env[name] = saved[name];
      else delete process.env[name];
    }
  }
  assert.equal(status, 0);
  assert.equal(opened.length, 1);
  assert.ok(opened[0].startsWith(`${dot.base}/o/authorize/?`), 'the authorization page');
  assert.equal(new URL(opened[0]).searchParams.get('code_challenge_method'), 'S256');
  assert.deepEqual(log.map((line) => line.replace(/\d+/g, 'N')), [
    '[window] Sign in button shown',
    '[window] sign-in: continue in your browser…',
    '[window] sign-in: waiting',
    '[window] sign-in: exchanging',
    '[window] signed in as Ada Lovelace',
    '[main] signed in: signedIn',
    '[main] userinfo: HTTP N, sub N',
    '[window] signed out (signedOut)',
    '[main] signed out; revoked N tokens',
    '[main] API call after sign-out: not signed in',
    '[main] host exited with status N',
  ]);
  assert.ok(log.some((line) => /^\[main\] userinfo: HTTP 200, sub \d+$/.test(line)), 'userinfo answered 200');
  await assertNoSecrets(log.join('\n'));
  await assertFramesValid(tap.log);
});

test('desktop_app.mjs as a program: its default openExternal runs xdg-open', { timeout: 60_000 }, async () => {
  const { calls, example, tap, env } = desktopAppRun('playing', PLAYING_XDG_OPEN);
  const { code, stdout, stderr } = await run(process.execPath, [example, '--issuer', dot.issuer], { env, timeoutMs: 50_000 });
  assert.equal(code, 0, `${stdout}\n${stderr}`);
  assert.equal(fs.readFileSync(calls, 'utf8'), 'called\n', 'xdg-open ran once');
  assert.match(stdout, /^\[main\] userinfo: HTTP 200, sub \d+$/m);
  assert.match(stdout, /^\[main\] host exited with status 0$/m);
  assert.doesNotMatch(stdout, /could not be opened/);
  await assertNoSecrets(stdout + stderr);
  await assertFramesValid(tap.log);
});

test('desktop_app.mjs when xdg-open fails (no desktop): the window shows the address and the sign-in waits for it', { timeout: 60_000 }, async () => {
  const { calls, example, tap, env } = desktopAppRun('failing', FAILING_XDG_OPEN);
  const shown = /Your browser could not be opened \(xdg-open exited with status 3\)\. Open this address to sign in:\n {2}(\S+)\n/;
  // The user reads the address in the window and opens it in a browser elsewhere.
  const { code, stdout, stderr } = await runWatching(process.execPath, [example, '--issuer', dot.issuer],
    { env, pattern: shown, onMatch: (match) => signInAsUser(match[1]), timeoutMs: 50_000 });
  assert.equal(code, 0, `${stdout}\n${stderr}`);
  const url = shown.exec(stdout)[1];
  assert.equal(fs.readFileSync(calls, 'utf8'), `${url}\n`, 'xdg-open was asked to open that address');
  assert.ok(url.startsWith(`${dot.base}/o/authorize/?`));
  assert.match(stdout, /^\[window\] signed in as Ada Lovelace$/m);
  assert.match(stdout, /^\[main\] userinfo: HTTP 200, sub \d+$/m);
  assert.match(stdout, /^\[main\] host exited with status 0$/m);
  await assertNoSecrets(stdout + stderr);
  await assertFramesValid(tap.log);
});

test('the README quick start works verbatim with plain node, in a fresh folder, with only its environment', { timeout: 120_000 }, async () => {
  const readme = fs.readFileSync(path.join(REPO, 'clients', 'node', 'README.md'), 'utf8');
  const section = /## Quick start\n([\s\S]*?)\n## /.exec(readme)?.[1] ?? '';
  const blocks = [...section.matchAll(/```(\w+)\n([\s\S]*?)```/g)].map(([, language, text]) => ({ language, text }));
  const setup = blocks.find((block) => block.language === 'sh')?.text;
  const code = blocks.find((block) => block.language === 'js')?.text;
  assert.ok(setup && code, 'the quick start has a shell step and the program');
  assert.match(section, /`app\.mjs`/, 'it names the file');
  // The root README shows the same, character for character.
  const root = fs.readFileSync(path.join(REPO, 'README.md'), 'utf8');
  assert.ok(root.includes('```sh\n' + setup + '```'), 'README.md shows the Node client README\'s shell step');
  assert.ok(root.includes('```js\n' + code + '```'), 'README.md shows the Node client README\'s quick start');

  // A new user's app folder, outside the repository: the shell step, as written.
  const app = tempDir('authbridge-quickstart-');
  const bin = standInBin('quickstart-bin', FAILING_XDG_OPEN(path.join(box.root, 'quickstart-xdg-open-calls')));
  const shellPath = `${bin}:/usr/local/bin:/usr/bin:/bin`;
  const step = await run('/bin/sh', ['-e', '-c', setup], { env: { PATH: shellPath, HOME: app, AUTHBRIDGE_REPO: REPO }, cwd: app });
  assert.equal(step.code, 0, `the shell step failed:\n${step.stdout}\n${step.stderr}`);
  fs.writeFileSync(path.join(app, 'app.mjs'), code);

  // Only what the quick start asks for: the provider, the host (through the frame tap), and a fresh home.
  const home = path.join(app, 'home');
  fs.mkdirSync(home, { mode: 0o700 });
  const tap = frameTap();
  const env = {
    PATH: shellPath, HOME: home, XDG_CONFIG_HOME: path.join(home, '.config'), XDG_DATA_HOME: path.join(home, '.local', 'share'),
    ISSUER: dot.issuer, CLIENT_ID: 'authbridge-test', USERINFO_URL: `${dot.issuer}/userinfo/`, ...tap.env,
  };
  if (!fs.existsSync(path.join(path.dirname(HOST), 'plugins', 'oidc.json'))) {
    // A host without bundled plugins beside it: the user's plugin folder then.
    const userPlugins = path.join(env.XDG_DATA_HOME, 'authbridge', 'plugins');
    fs.mkdirSync(userPlugins, { recursive: true, mode: 0o755 });
    for (const name of fs.readdirSync(box.pluginDir)) fs.copyFileSync(path.join(box.pluginDir, name), path.join(userPlugins, name));
  }
  // No desktop here (xdg-open fails): the user opens the printed URL in a browser elsewhere.
  const printed = /^Open this page to sign in: (\S+)$/m;
  const first = await runWatching(process.execPath, ['app.mjs'], { env, cwd: app, pattern: printed, onMatch: (match) => signInAsUser(match[1]) });
  assert.equal(first.code, 0, `${first.stdout}\n${first.stderr}`);
  assert.match(first.stdout, /^Open this page to sign in: http:\/\/127\.0\.0\.1:\d+\/o\/authorize\/\?\S+\ncorp: signedIn \(signedIn\)\nsigned in as Ada Lovelace\nuserinfo: HTTP 200\n$/);
  // The second run finds the session the host kept: no sign-in.
  const second = await run(process.execPath, ['app.mjs'], { env, cwd: app });
  assert.equal(second.code, 0, `${second.stdout}\n${second.stderr}`);
  assert.match(second.stdout, /^signed in as Ada Lovelace\nuserinfo: HTTP 200\n$/);
  await assertFramesValid(tap.log);
});

test('AuthService: a browser that cannot be opened leaves the sign-in waiting and tells the window; Cancel stops it', { timeout: 30_000 }, async () => {
  const bridge = await startBridge(box);
  try {
    await bridge.configureProfile({ name: 'corp', plugin: 'oidc', settings: dot.settings() });
    const noBrowser = Object.assign(new Error('spawn xdg-open ENOENT'), { code: 'ENOENT' });
    const auth = new AuthService({ bridge, provider: 'corp', openExternal: () => { throw noBrowser; } });
    const failed = new Promise((resolve) => auth.once('browserFailed', resolve));
    const signingIn = auth.signIn();
    const { url, error } = await withTimeout(failed, WAIT_MS, 'browserFailed');
    assert.equal(error, noBrowser);
    assert.ok(url.startsWith(`${dot.base}/o/authorize/?`), 'the window can show the address');
    await signInAsUser(url); // the user opens it in a browser elsewhere
    assert.equal((await withTimeout(signingIn, WAIT_MS, 'signIn')).state, 'signedIn');
    await bridge.signOut('corp');
    // Cancel from the window: the sign-in stops at once, with the app's reason.
    const cancelling = new AuthService({ bridge, provider: 'corp', openExternal: () => cancelling.cancelSignIn() });
    const cancelled = await withTimeout(cancelling.signIn().then(() => assert.fail('signed in'), (e) => e), WAIT_MS, 'signIn');
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
