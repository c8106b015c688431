// Sign in to an MCP server by its URL alone, and step up on its 403 insufficient_scope: the test
// kit's MCP server (Tests/support/authbridge_testkit/mcp_server.py, its own authorization server,
// started with $AUTHBRIDGE_PYTHON) through the real host, whose `oidc` profile of settings
// {resource: URL} discovers the authorization server and registers itself. Examples/mcp_client.mjs's
// McpClient speaks MCP over authorizedFetch. The kit's user approves at once: following the
// authorization URL once (redirect: 'manual') gives the redirect, which the external flow hands to
// completeSignIn, and which the example's $BROWSER follows to the host's loopback listener.

import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';

import { parseChallenges, profileNameForUrl } from '../src/index.js';
import { McpClient } from '../../../Examples/mcp_client.mjs';
import {
  HOST, PYTHON, REPO, WAIT_MS, assertRecordedFramesValid, checkPrerequisites, closeAll, run, sandbox, startBridge, validateFrames,
  withTimeout,
} from '../test-support/harness.mjs';

const FRAME_TAP = path.join(REPO, 'Tests', 'tools', 'frame_tap.py');

/** The kit's MCP server on a free port: {url, issuer, stop()}; it serves until its stdin closes. */
async function startMcpServer() {
  const child = spawn(PYTHON, ['-m', 'authbridge_testkit.mcp_server'], {
    env: { ...process.env, PYTHONPATH: path.join(REPO, 'Tests', 'support') }, stdio: ['pipe', 'pipe', 'inherit'],
  });
  const exited = new Promise((resolve) => child.once('exit', resolve));
  const line = await withTimeout(new Promise((resolve, reject) => {
    let text = '';
    child.once('exit', (code) => reject(new Error(`the MCP server exited (${code})`)));
    child.stdout.setEncoding('utf8').on('data', (chunk) => {
      text += chunk;
      if (text.includes('\n')) resolve(text.slice(0, text.indexOf('\n')));
    });
  }), WAIT_MS, 'the MCP server');
  return { ...JSON.parse(line), stop: () => { child.stdin.end(); return withTimeout(exited, WAIT_MS, 'the MCP server\'s exit'); } };
}

/** The kit's user at the authorization URL: its redirect (code and state). */
async function approve(url) {
  const answer = await fetch(url, { redirect: 'manual', signal: AbortSignal.timeout(WAIT_MS) });
  assert.equal(answer.status, 302);
  return answer.headers.get('location');
}

/** onProgress of the external flow: the user approves, the redirect goes to completeSignIn. */
function external(bridge) {
  const completed = [];
  const onProgress = ({ stage, url, provider }) => {
    if (stage !== 'openUrl') return;
    completed.push(approve(url).then((location) => bridge.completeSignIn({ provider, callbackUrl: location })));
  };
  return { onProgress, completed };
}

const sentParams = (bridge, method) => bridge.tap.sent.filter((frame) => frame.method === method).map((frame) => frame.params);

let server;
let box;
before(async () => {
  checkPrerequisites();
  box = sandbox();
  server = await startMcpServer();
});
after(async () => {
  await closeAll();
  await server?.stop();
});

test('WWW-Authenticate challenges: several, quoted strings with escapes, token68s', () => {
  assert.deepEqual(parseChallenges('Basic realm="a, b", Bearer realm="x\\"y", error=insufficient_scope, scope="a b"').map((c) => [c.scheme, { ...c.params }]),
    [['Basic', { realm: 'a, b' }], ['Bearer', { realm: 'x"y', error: 'insufficient_scope', scope: 'a b' }]]);
  assert.deepEqual(parseChallenges('Negotiate abc==, Bearer').map((c) => [c.scheme, c.token68]), [['Negotiate', 'abc=='], ['Bearer', undefined]]);
  assert.deepEqual(parseChallenges(',, Bearer ,  Basic realm=x').map((c) => c.scheme), ['Bearer', 'Basic']);
  assert.deepEqual(parseChallenges('Bearer realm="unterminated'), []);
  assert.equal(parseChallenges('Bearer SCOPE="a", scope="b"')[0].params.scope, 'a');
  assert.equal(profileNameForUrl('http://127.0.0.1:8080/mcp'), '127.0.0.1-8080');
  assert.equal(profileNameForUrl('https://MCP.example.com:443/mcp'), 'mcp.example.com');
});

test('fetchForUrl signs in by the URL alone; McpClient lists and calls tools; admin_echo steps up once', { timeout: 60_000 }, async () => {
  const bridge = await startBridge(box);
  const user = external(bridge);
  const mcpFetch = await bridge.fetchForUrl(server.url, { flow: 'external', onProgress: user.onProgress });
  await Promise.all(user.completed);
  const profile = profileNameForUrl(server.url);
  assert.deepEqual(sentParams(bridge, 'configureProfile'), [{ name: profile, plugin: 'oidc', settings: { resource: server.url } }]);

  const mcp = new McpClient(server.url, mcpFetch);
  await mcp.initialize();
  assert.deepEqual((await mcp.listTools()).map((tool) => tool.name).sort(), ['admin_echo', 'echo', 'whoami']);
  assert.deepEqual((await mcp.callTool('echo', { message: 'node' })).content, [{ type: 'text', text: 'echo: node' }]);
  const admin = await mcp.callTool('admin_echo', { message: 'stepped up' });
  assert.deepEqual(admin.content, [{ type: 'text', text: 'admin echo: stepped up' }]);
  assert.equal(user.completed.length, 2, 'one step-up sign-in');
  await Promise.all(user.completed);
  assert.deepEqual(sentParams(bridge, 'requestOAuthTokens').slice(1), [{ provider: profile, flow: 'external', scopes: ['mcp:tools', 'mcp:admin'] }]);
  const who = JSON.parse((await mcp.callTool('whoami')).content[0].text);
  assert.ok(who.scopes.includes('mcp:admin'), who.scopes);
});

test('concurrent 403s make one step-up', { timeout: 60_000 }, async () => {
  const bridge = await startBridge(box);
  const user = external(bridge);
  const mcp = new McpClient(server.url, await bridge.fetchForUrl(server.url, { flow: 'external', onProgress: user.onProgress }));
  await mcp.initialize();
  const answers = await Promise.all([1, 2, 3, 4].map((n) => mcp.callTool('admin_echo', { message: `${n}` })));
  assert.deepEqual(answers.map((answer) => answer.content[0].text), ['admin echo: 1', 'admin echo: 2', 'admin echo: 3', 'admin echo: 4']);
  assert.equal(user.completed.length, 2, 'the sign-in and one step-up');
  await Promise.all(user.completed);
});

test('stepUp: false leaves the 403 as the answer', { timeout: 60_000 }, async () => {
  const bridge = await startBridge(box);
  const user = external(bridge);
  const mcp = new McpClient(server.url, await bridge.fetchForUrl(server.url, { flow: 'external', onProgress: user.onProgress, stepUp: false }));
  await mcp.initialize();
  await assert.rejects(mcp.callTool('admin_echo', { message: 'no' }), /tools\/call: HTTP 403/);
  assert.equal(user.completed.length, 1);
  assert.equal(sentParams(bridge, 'requestOAuthTokens').length, 1);
});

/**
 * A folder for a program run as a person would: a new user's folders, the frame tap as the host
 * (recording to frames.jsonl), and $BROWSER playing the kit's user (each page it opens is a line
 * of opened.log): it follows the page to its redirect, and that to the host's loopback listener.
 */
function personAt(name) {
  const dir = path.join(box.root, name);
  fs.mkdirSync(dir);
  const opened = path.join(dir, 'opened.log');
  const browser = path.join(dir, 'browser.mjs');
  fs.writeFileSync(browser, `#!${process.execPath}
import fs from 'node:fs';
fs.appendFileSync(${JSON.stringify(opened)}, 'opened\\n');
const page = await fetch(process.argv[2], { redirect: 'manual', signal: AbortSignal.timeout(15000) });
const done = await fetch(page.headers.get('location'), { signal: AbortSignal.timeout(15000) });
process.exit(done.ok ? 0 : 1);
`, { mode: 0o755 });
  const log = path.join(dir, 'frames.jsonl');
  const { env } = box.hostOptions();
  return { dir, opened, log, env: { ...env, AUTHBRIDGE: FRAME_TAP, AUTHBRIDGE_TAP_TARGET: HOST, AUTHBRIDGE_TAP_LOG: log, BROWSER: browser } };
}

test('the README\'s MCP program runs as written', { timeout: 60_000 }, async () => {
  const readme = fs.readFileSync(path.join(REPO, 'clients', 'node', 'README.md'), 'utf8');
  const section = /### MCP servers\n([\s\S]*?)\n### /.exec(readme)?.[1] ?? '';
  const [code] = [...section.matchAll(/```js\n([\s\S]*?)```/g)].map(([, text]) => text);
  const placeholder = "const url = 'https://mcp.example.com/mcp';\n";
  assert.ok(code?.includes(placeholder), 'the section has the program');
  const person = personAt('readme');
  fs.mkdirSync(path.join(person.dir, 'node_modules', '@authbridge'), { recursive: true });
  fs.symlinkSync(path.join(REPO, 'clients', 'node'), path.join(person.dir, 'node_modules', '@authbridge', 'client'));
  fs.writeFileSync(path.join(person.dir, 'app.mjs'), code.replace(placeholder, `const url = ${JSON.stringify(server.url)};\n`));
  const done = await run(process.execPath, ['app.mjs'], { env: person.env, cwd: person.dir, timeoutMs: 50_000 });
  assert.equal(done.code, 0, done.stdout + done.stderr);
  assert.match(done.stdout, /^initialize: HTTP 200, session [0-9a-f]+\n$/);
  assert.deepEqual(fs.readFileSync(person.opened, 'utf8').trim().split('\n'), ['opened']);
  const { code: valid, stdout, stderr } = await validateFrames(person.log);
  assert.equal(valid, 0, `frames break bridge-spec:\n${stdout}\n${stderr}`);
});

test('Examples/mcp_client.mjs signs in with the browser ($BROWSER), steps up, and finds the session kept the next time', { timeout: 90_000 }, async () => {
  const { opened, log, env: runEnv } = personAt('example');
  const example = path.join(REPO, 'Examples', 'mcp_client.mjs');
  const first = await run(process.execPath, [example, server.url, '--tool', 'admin_echo', '--arg', 'message=hello'], { env: runEnv, timeoutMs: 60_000 });
  assert.equal(first.code, 0, first.stdout + first.stderr);
  assert.deepEqual(first.stdout.trim().split('\n'), ['tools: admin_echo, echo, whoami', 'admin_echo: admin echo: hello']);
  assert.deepEqual(fs.readFileSync(opened, 'utf8').trim().split('\n'), ['opened', 'opened'], 'a sign-in, and a step-up');
  const second = await run(process.execPath, [example, server.url, '--arg', 'message=again'], { env: runEnv, timeoutMs: 60_000 });
  assert.equal(second.code, 0, second.stdout + second.stderr);
  assert.deepEqual(second.stdout.trim().split('\n'), ['tools: admin_echo, echo, whoami', 'echo: echo: again']);
  assert.equal(fs.readFileSync(opened, 'utf8').trim().split('\n').length, 2, 'no sign-in the second time');
  assert.doesNotMatch(first.stdout + first.stderr + second.stdout + second.stderr, /[?&](code|state)=/);
  const { code, stdout, stderr } = await validateFrames(log);
  assert.equal(code, 0, `frames break bridge-spec:\n${stdout}\n${stderr}`);
});

test('every frame validates against bridge-spec', async () => {
  await closeAll();
  assert.ok(await assertRecordedFramesValid() > 0);
});
