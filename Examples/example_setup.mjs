// What the Node examples share that is not about AuthBridge: their command line, and an
// authorization server to sign in to — yours (--issuer), or the bundled test server
// (django-oauth-toolkit, Tests/support/dot_server.py) when none is given.

import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';

export const USAGE_OPTIONS = `Options:
  --host PATH        the authbridge executable (default: $AUTHBRIDGE, else authbridge on PATH)
  --plugins DIR      a plugin folder holding the oidc plugin (default: $AUTHBRIDGE_PLUGINS, else
                     the host's own plugin folders)
  --issuer URL       an OpenID Connect issuer (default: start the bundled test server, which needs
                     the venv's Python: $AUTHBRIDGE_PYTHON or .venv/bin/python)
  --client-id ID     the app's client id at the issuer (default: authbridge-test)
  --scopes LIST      space-separated scopes (default: "openid read")`;

/**
 * The command line: {host, plugins, issuer, clientId, scopes, help, ...extra}.
 * @param {string[]} argv
 * @param {object} [extra] more parseArgs options
 */
export function parseCommandLine(argv, extra = {}) {
  const { values } = parseArgs({
    args: argv,
    options: {
      host: { type: 'string' },
      plugins: { type: 'string' },
      issuer: { type: 'string' },
      'client-id': { type: 'string', default: 'authbridge-test' },
      scopes: { type: 'string', default: 'openid read' },
      help: { type: 'boolean', short: 'h' },
      ...extra,
    },
  });
  return {
    ...values,
    host: values.host ?? process.env.AUTHBRIDGE,
    plugins: values.plugins ?? process.env.AUTHBRIDGE_PLUGINS,
    clientId: values['client-id'],
    scopes: values.scopes.split(/\s+/).filter(Boolean),
  };
}

/**
 * The AuthBridge.start options of the examples. Tokens are kept in memory, so a run leaves
 * nothing behind; a real app keeps the default encrypted vault, so its users stay signed in.
 */
export function bridgeOptions(args) {
  return {
    hostPath: args.host,
    ...(args.plugins ? { plugins: [args.plugins], noDefaultPlugins: true } : {}),
    vault: 'memory',
    logLevel: 'warning',
  };
}

/**
 * The `oidc` profile settings for the issuer given, or for the bundled test server, which is
 * started here (and stopped by `stop()`).
 * @returns {Promise<{settings: object, issuer: string, testServer: boolean, stop: () => Promise<void>}>}
 */
export async function authorizationServer(args, log) {
  if (args.issuer) {
    const settings = { issuer: args.issuer, clientId: args.clientId, scopes: args.scopes };
    return { settings, issuer: args.issuer, testServer: false, stop: async () => {} };
  }
  const { startDot, USER, PASSWORD } = await import('../Tests/support/dot.mjs');
  const state = fs.mkdtempSync(path.join(os.tmpdir(), 'authbridge-example-dot-'));
  log(`Starting the test authorization server (django-oauth-toolkit; user ${USER}, password ${PASSWORD})…`);
  const dot = await startDot({ state });
  return {
    settings: dot.settings(),
    issuer: dot.issuer,
    testServer: true,
    async stop() {
      await dot.stop();
      fs.rmSync(state, { recursive: true, force: true });
    },
  };
}

/** The issuer's userinfo endpoint, from its discovery document (OpenID Connect Discovery). */
export async function userinfoEndpoint(issuer) {
  const response = await fetch(`${issuer.replace(/\/$/, '')}/.well-known/openid-configuration`, { signal: AbortSignal.timeout(10_000) });
  const endpoint = (await response.json()).userinfo_endpoint;
  if (!endpoint) throw new Error(`${issuer} names no userinfo endpoint`);
  return endpoint;
}

/** host:port/path of a URL: never its query, where codes and state travel. */
export function where(url) {
  const parsed = new URL(url);
  return parsed.host + parsed.pathname;
}
