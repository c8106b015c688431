#!/usr/bin/env node
// An MCP client signed in by the server's URL alone: it lists the server's tools and calls one.
//
//   node Examples/mcp_client.mjs https://mcp.example.com/mcp [--tool echo] [--arg message=hello]...
//
// AuthBridge does the OAuth: from the URL the host finds the server's authorization server (RFC
// 9728, RFC 8414), registers itself there (RFC 7591), and the sign-in page opens in your browser
// ($BROWSER, else xdg-open). The session is kept (encrypted) for the next run, under the profile
// named after the host. A tool that needs more scopes (a 403 insufficient_scope) asks you for them
// once, then is called again. McpClient is a tiny MCP client (streamable HTTP) over any fetch.

import { parseArgs } from 'node:util';
import { fileURLToPath } from 'node:url';
import { AuthBridge } from '../clients/node/src/index.js'; // in an app: from '@authbridge/client'

/** The JSON-RPC message answering `id` in a text/event-stream body (its `data:` events). */
function answerInEvents(text, id) {
  for (const event of text.split(/\r?\n\r?\n/)) {
    const data = event.split(/\r?\n/).filter((line) => line.startsWith('data:')).map((line) => line.slice(5).replace(/^ /, ''));
    if (!data.length) continue;
    const message = JSON.parse(data.join('\n'));
    if (message.id === id) return message;
  }
  throw new Error(`no answer to request ${id} in the event stream`);
}

/** MCP over streamable HTTP (JSON-RPC POSTs; answers as JSON or as an event stream) with `fetch`. */
export class McpClient {
  #nextId = 1;
  #sessionId;
  #protocolVersion;

  constructor(url, fetch = globalThis.fetch) {
    this.url = url;
    this.fetch = fetch;
  }

  async #post(message) {
    const headers = {
      'content-type': 'application/json',
      accept: 'application/json, text/event-stream',
      ...(this.#sessionId && { 'mcp-session-id': this.#sessionId }),
      ...(this.#protocolVersion && { 'mcp-protocol-version': this.#protocolVersion }),
    };
    const response = await this.fetch(this.url, { method: 'POST', headers, body: JSON.stringify(message) });
    this.#sessionId = response.headers.get('mcp-session-id') ?? this.#sessionId;
    if (!response.ok) throw new Error(`${message.method}: HTTP ${response.status} ${(await response.text()).slice(0, 200)}`);
    if (message.id === undefined) return response.body?.cancel();
    const eventStream = (response.headers.get('content-type') ?? '').startsWith('text/event-stream');
    const answer = eventStream ? answerInEvents(await response.text(), message.id) : await response.json();
    if (answer.error) throw new Error(`${message.method}: ${answer.error.message} (${answer.error.code})`);
    return answer.result;
  }

  request(method, params = {}) { return this.#post({ jsonrpc: '2.0', id: this.#nextId++, method, params }); }
  notify(method, params = {}) { return this.#post({ jsonrpc: '2.0', method, params }); }

  async initialize() {
    const result = await this.request('initialize', {
      protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'authbridge-mcp-example', version: '1.0.0' },
    });
    this.#protocolVersion = result.protocolVersion;
    await this.notify('notifications/initialized');
    return result;
  }

  async listTools() { return (await this.request('tools/list')).tools; }
  callTool(name, args = {}) { return this.request('tools/call', { name, arguments: args }); }
}

async function main(argv) {
  const { values, positionals } = parseArgs({
    args: argv, allowPositionals: true, options: { tool: { type: 'string', default: 'echo' }, arg: { type: 'string', multiple: true, default: [] } },
  });
  if (positionals.length !== 1) throw new Error('usage: node Examples/mcp_client.mjs URL [--tool NAME] [--arg NAME=VALUE]...');
  const [url] = positionals;
  const bridge = await AuthBridge.start();
  try {
    const mcp = new McpClient(url, await bridge.fetchForUrl(url)); // a sign-in the first time only
    await mcp.initialize();
    console.log(`tools: ${(await mcp.listTools()).map((tool) => tool.name).sort().join(', ')}`);
    const args = Object.fromEntries(values.arg.map((pair) => [pair.slice(0, pair.indexOf('=')), pair.slice(pair.indexOf('=') + 1)]));
    const result = await mcp.callTool(values.tool, args);
    for (const part of result.content) console.log(`${values.tool}: ${part.type === 'text' ? part.text : `(${part.type})`}`);
  } finally {
    await bridge.close();
  }
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  main(process.argv.slice(2)).catch((error) => {
    console.error(error.message);
    process.exitCode = 1;
  });
}
