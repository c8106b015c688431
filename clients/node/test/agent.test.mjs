// `agent`: the user's running `authbridge agent` instead of a host of the bridge's own — required
// or optional, started on request only (`autostart`), shared by two bridges, and a killed agent.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';

import { AgentNotRunningError, AuthBridge, HostExitedError, HostNotFoundError, agentSocketPath } from '../src/index.js';
import { signInAsUser } from '../../../Tests/support/dot.mjs';
import { WAIT_MS, assertRecordedFramesValid, frameTap, withDotAndSandbox, withTimeout } from '../test-support/harness.mjs';

let dot;
let box;
withDotAndSandbox((started) => ({ dot, box } = started), { accessLifetime: 3600 });

/** The options of a bridge whose host (or agent) lives in a folder of its own, with a frame tap of its own. */
function options(extra = {}) {
  return box.hostOptions({ onFrame: frameTap().onFrame, onWarning: () => {}, ...extra });
}

/** `start` for another bridge: a frame tap of its own (its ids are its own), and `extra`. */
function again(start, extra) {
  return { ...start, onFrame: frameTap().onFrame, ...extra };
}

/** The agent's pid, from the lock file beside its socket (Node cannot ask the socket). */
function agentPid(socket) {
  return Number(fs.readFileSync(`${socket}.lock`, 'utf8').trim());
}

/** SIGTERM, then a bounded wait until the agent has removed its socket (it does so as it ends). */
async function stopAgent(socket) {
  process.kill(agentPid(socket), 'SIGTERM');
  await withTimeout((async () => {
    while (fs.existsSync(socket)) await new Promise((resolve) => setTimeout(resolve, 20)); // polled, bounded
  })(), WAIT_MS, 'the agent to stop');
}

test('agent: true without an agent rejects with AgentNotRunningError naming the socket', async () => {
  const start = options({ agent: true });
  const socket = agentSocketPath(start);
  assert.equal(socket, path.join(start.env.XDG_RUNTIME_DIR, 'authbridge', 'agent.sock'));
  const refused = await AuthBridge.start(start).catch((error) => error);
  assert.ok(refused instanceof AgentNotRunningError && refused instanceof HostNotFoundError, refused);
  assert.equal(refused.socket, socket);
  assert.match(refused.message, /no authbridge agent answers on .*agent\.sock \(ENOENT\)/);
  const { XDG_RUNTIME_DIR, ...withoutRuntime } = start.env;
  assert.ok(XDG_RUNTIME_DIR);
  await assert.rejects(AuthBridge.start({ ...start, env: withoutRuntime }), /XDG_RUNTIME_DIR is not set/);
  await assert.rejects(AuthBridge.start({ ...start, agent: 'always' }), TypeError);
});

test('agent: "auto" without an agent spawns a host of its own', async () => {
  const bridge = await AuthBridge.start(options({ agent: 'auto' }));
  try {
    assert.equal(bridge.onAgent, false);
    assert.ok(bridge.pid > 0);
    assert.deepEqual((await bridge.listProviders()).plugins.map((p) => p.id), ['oidc']);
  } finally {
    await bridge.close();
  }
});

test('a socket in a folder others can write to is not trusted as the agent: nothing is sent to it', async () => {
  // Node cannot ask the kernel who listens (no SO_PEERCRED): the socket and its folder are checked.
  const shared = path.join(box.root, `shared-${process.pid}`);
  fs.mkdirSync(shared);
  fs.chmodSync(shared, 0o1777); // sticky, as /tmp: anyone may put a socket there first
  const socket = path.join(shared, 'agent.sock');
  let connections = 0;
  const listener = net.createServer((connection) => { connections += 1; connection.destroy(); });
  await new Promise((resolve) => listener.listen(socket, resolve));
  try {
    const required = await AuthBridge.start(options({ agent: true, agentSocket: socket })).catch((error) => error);
    assert.ok(required instanceof AgentNotRunningError, required);
    assert.equal(required.socket, socket);
    assert.match(required.message, /others can write to the folder .*shared-\d+ \(owner uid \d+, mode 1777\).*not your authbridge agent/);
    const warnings = [];
    const bridge = await AuthBridge.start(options({ agent: 'auto', agentSocket: socket, onWarning: (w) => warnings.push(w) }));
    try {
      assert.equal(bridge.onAgent, false);
      assert.match(warnings.join('\n'), /not your authbridge agent; starting a host of this bridge's own/);
    } finally {
      await bridge.close();
    }
    assert.equal(connections, 0, 'the untrusted socket was connected to');
  } finally {
    await new Promise((resolve) => listener.close(resolve));
  }
});

test('autostart starts one agent that two bridges share and that outlives them', { timeout: 60_000 }, async () => {
  const start = options({ agent: true, autostart: true });
  const socket = agentSocketPath(start);
  const first = await AuthBridge.start(start);
  try {
    assert.ok(first.onAgent && fs.statSync(socket).isSocket());
    assert.equal(first.pid, undefined, 'Node cannot name the agent\'s pid');
    await first.configureProfile({ name: 'dot', plugin: 'oidc', settings: dot.settings() });
    const second = await AuthBridge.start(again(start, { autostart: false }));
    try {
      assert.ok(second.onAgent);
      const signedIn = new Promise((resolve) => second.on('session/changed', (params) => params.state === 'signedIn' && resolve(params)));
      let page;
      await first.requestOAuthTokens({ provider: 'dot', flow: 'browser' }, {
        onProgress: (params) => { if (params.stage === 'openUrl') page = signInAsUser(params.url); },
      });
      assert.equal((await page).status, 200);
      assert.equal((await withTimeout(signedIn, WAIT_MS, 'session/changed at the other bridge')).provider, 'dot');
      assert.equal((await second.checkSignInStatus('dot')).state, 'signedIn', 'one agent, one session');
      const closed = await second.close();
      assert.equal(closed.agent, socket, 'closing ends only this connection');
    } finally {
      await second.close();
    }
    await first.close();
    const third = await AuthBridge.start(again(start, { autostart: false }));
    assert.equal((await third.checkSignInStatus('dot')).state, 'signedIn', 'the agent went on after both closed');

    // Killed: the pending call fails with HostExitedError naming the agent; "auto" then runs a host of its own.
    const pending = third.requestOAuthTokens({ provider: 'dot', flow: 'browser' }, {
      onProgress: (params) => { if (params.stage === 'waiting') process.kill(agentPid(socket), 'SIGKILL'); },
    });
    const died = await pending.catch((error) => error);
    assert.ok(died instanceof HostExitedError && died.agent === socket, died);
    assert.match(died.message, /the authbridge agent on .* closed the connection/);
    await third.close();
    const fallback = await AuthBridge.start(again(start, { agent: 'auto', autostart: false }));
    assert.equal(fallback.onAgent, false, 'a stale socket: a host of its own');
    await fallback.close();
  } finally {
    await first.close();
    if (fs.existsSync(socket)) {
      const replacing = await AuthBridge.start(again(start, { autostart: true }));   // a new agent replaces the stale socket
      assert.ok(replacing.onAgent);
      await replacing.close();
      await stopAgent(socket);
    }
  }
});

test('every frame of this file validates against bridge-spec', async () => {
  await assertRecordedFramesValid();
});
