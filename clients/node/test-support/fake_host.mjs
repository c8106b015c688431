// A stand-in for `authbridge serve`, for what the real host never does on purpose: flood its
// stderr, ignore shutdown and SIGTERM, write broken frames, die mid-request with an exit code.
// The mode comes from FAKE_HOST_MODE. It speaks just enough of the protocol for the client.
//
//   flood     writes 20 MB to stderr (blocking writes) before it reads anything: a client that
//             does not drain stderr never gets the initialize answer
//   stubborn  ignores shutdown, exit, end of input and SIGTERM: only SIGKILL stops it
//   garbage   answers listProviders after a line that is not JSON, an answer to an id never
//             sent, and a -32700 with id null
//   crash     on listProviders: logs a last line and exits with status 3
//   burst     answers listProviders in the same write as a session/changed notification before it
//   cut       on listProviders: writes a line that is not JSON, an answer to an id never sent and
//             the first part of an answer holding a token, then dies (no newline after it)

import fs from 'node:fs';
import { createInterface } from 'node:readline';

const mode = process.env.FAKE_HOST_MODE ?? 'normal';
const send = (frame) => fs.writeSync(1, JSON.stringify(frame) + '\n');
const answer = (id, result) => send({ jsonrpc: '2.0', id, result });

const INITIALIZE_RESULT = {
  protocolVersion: '1.0',
  serverInfo: { name: 'authbridge', version: '0.0.0-fake' },
  capabilities: { batches: false, cancellation: true, flows: [], notifications: ['session/changed', 'signIn/progress'] },
  providers: [],
  profiles: [],
  storage: { backend: 'memory', protection: 'none' },
};

if (mode === 'flood') {
  const line = `${'x'.repeat(1000)}\n`;
  for (let written = 0; written < 20_000_000; written += line.length) fs.writeSync(2, line);
  fs.writeSync(2, 'fake host: flood done\n');
}

if (mode === 'stubborn') {
  process.on('SIGTERM', () => fs.writeSync(2, 'fake host: SIGTERM ignored\n'));
  setInterval(() => {}, 60_000); // stays up after end of input too
}

const lines = createInterface({ input: process.stdin });
lines.on('line', (text) => {
  const message = JSON.parse(text);
  switch (message.method) {
    case 'initialize':
      answer(message.id, INITIALIZE_RESULT);
      break;
    case 'shutdown':
      if (mode !== 'stubborn') answer(message.id, null);
      break;
    case 'exit':
      if (mode !== 'stubborn') process.exit(0);
      break;
    case 'listProviders':
      if (mode === 'garbage') {
        fs.writeSync(1, 'this is not JSON\n');
        answer(999_999, {});
        send({ jsonrpc: '2.0', id: null, error: { code: -32700, message: 'Parse error' } });
      }
      if (mode === 'cut') {
        fs.writeSync(1, '{"jsonrpc":"2.0","id":7,"result":{"accessToken":"at-broken-6161"\n');
        fs.writeSync(1, '{"jsonrpc":"2.0","id":424242,"result":{"accessToken":"at-unknown-6262"}}\n');
        fs.writeSync(1, `{"jsonrpc":"2.0","id":${message.id},"result":{"accessToken":"at-cut-6363`);
        process.exit(9);
      }
      if (mode === 'crash') {
        fs.writeSync(2, 'fake host: the database is on fire\n');
        process.exit(3);
      }
      if (mode === 'burst') {
        const event = { jsonrpc: '2.0', method: 'session/changed', params: { provider: 'p', state: 'signedOut', reason: 'revoked' } };
        fs.writeSync(1, `${JSON.stringify(event)}\n${JSON.stringify({ jsonrpc: '2.0', id: message.id, result: { plugins: [], profiles: [] } })}\n`);
        break;
      }
      answer(message.id, { plugins: [], profiles: [] });
      break;
    default:
      if ('id' in message) send({ jsonrpc: '2.0', id: message.id, error: { code: -32601, message: 'Method not found', data: { method: message.method } } });
  }
});
lines.on('close', () => {
  if (mode !== 'stubborn') process.exit(0);
});
