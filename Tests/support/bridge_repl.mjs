// A Node client of the bridge (clients/node) driven over stdin, for suites that need Node clients
// next to Python ones in one test (the agent's: Tests/contract/test_agent.py). One JSON line in
// per call, one JSON line out per answer and per event; every frame is recorded for the
// frame validator.
//
//   node bridge_repl.mjs '<AuthBridge.start options as JSON>' FRAMES.jsonl
//   out first:  {"ready": true, "onAgent": bool}            (or {"startError": {...}} and exit 1)
//   in:         {"id": 1, "method": "getAccessToken", "params": {...}}
//   out:        {"id": 1, "result": ...} | {"id": 1, "error": {"name", "message", "code", "data", "agent"}}
//   out:        {"event": "session/changed", "params": {...}, "at": "<CLOCK_MONOTONIC ns>"}
//   in:         {"id": 2, "restart": true}          → {"id": 2, "result": {"onAgent": bool}}
//   stdin ends: close(), then {"closed": true} and exit 0
//
// `at` is process.hrtime.bigint(), CLOCK_MONOTONIC like Python's time.monotonic_ns(): a test
// compares when each client got an event.

import fs from 'node:fs';
import { createInterface } from 'node:readline';

import { AuthBridge } from '../../clients/node/src/index.js';

const [optionsText, framesPath] = process.argv.slice(2);
const frames = fs.openSync(framesPath, 'a');
const out = (message) => process.stdout.write(JSON.stringify(message) + '\n');
const describe = (error) => ({
  name: error?.name, message: error?.message, code: error?.code ?? null, data: error?.data ?? null, agent: error?.agent ?? null,
});

// Each start (a restart's too) is a host of its own for the validator: its ids start again.
let starts = 0;
const options = {
  ...JSON.parse(optionsText),
  onWarning: () => {},
  onFrame: (frame, direction, line) => {
    if (direction === 'out' && frame?.method === 'initialize') starts += 1;
    fs.writeSync(frames, JSON.stringify({ host: `${framesPath}#${starts}`, dir: direction, line }) + '\n');
  },
};

let bridge;
try {
  bridge = await AuthBridge.start(options);
} catch (error) {
  out({ startError: describe(error) });
  process.exit(1);
}
bridge.on('notification', ({ method, params }) => out({ event: method, params, at: String(process.hrtime.bigint()) }));
bridge.on('exit', (info) => out({ exit: { agent: info.agent ?? null, code: info.code } }));
out({ ready: true, onAgent: bridge.onAgent });

const calls = [];
const input = createInterface({ input: process.stdin, crlfDelay: Infinity });
for await (const line of input) {
  if (!line.trim()) continue;
  const command = JSON.parse(line);
  calls.push((async () => {
    try {
      if (command.restart) {
        await bridge.restart();
        out({ id: command.id, result: { onAgent: bridge.onAgent } });
      } else {
        out({ id: command.id, result: await bridge.request(command.method, command.params) });
      }
    } catch (error) {
      out({ id: command.id, error: describe(error) });
    }
  })());
}
await Promise.allSettled(calls);
await bridge.close({ timeoutMs: 5_000 });
out({ closed: true });
process.exit(0);
