#!/usr/bin/env node
// AuthBridge from a Node program: sign in with the browser flow, check the status, call the
// provider's userinfo endpoint through the host, react to session/changed, sign out.
//
//   node Examples/node_example.mjs [--scripted] [--host PATH] [--plugins DIR] [--issuer URL ...]
//
// The program never sees a refresh token, and prints no token or code: the host holds them.
// --scripted: a script plays the user at the bundled test server's login page (for the tests);
// without it, open the printed URL in your browser and sign in there.

import { AuthBridge, AuthBridgeError, NotSignedInError } from '../clients/node/src/index.js'; // in an app: from '@authbridge/client'
import { USAGE_OPTIONS, authorizationServer, bridgeOptions, parseCommandLine, userinfoEndpoint, where } from './example_setup.mjs';

const PROFILE = 'example';

/** An account for people: its name (or email), and the provider's id for it. */
const named = (account) => (account.name ?? account.email ? `${account.name ?? account.email} (${account.id})` : account.id);

async function main(argv) {
  const args = parseCommandLine(argv, { scripted: { type: 'boolean' } });
  if (args.help) {
    console.log(`Usage: node Examples/node_example.mjs [--scripted] [options]\n\n  --scripted         a script signs in as the test user (bundled test server only)\n${USAGE_OPTIONS}`);
    return 0;
  }
  const server = await authorizationServer(args, console.log);
  if (args.scripted && !server.testServer) throw new Error('--scripted plays the bundled test server\'s user: leave out --issuer');

  try {
    await signInAndOut(args, server);
  } finally {
    await server.stop();
  }
  return 0;
}

async function signInAndOut(args, server) {
  // 1. Start the host: `authbridge serve` as a child process, initialized.
  const bridge = await AuthBridge.start({ ...bridgeOptions(args), clientInfo: { name: 'node-example', version: '1.0.0' } });
  try {
    console.log(`Host: authbridge ${bridge.serverInfo.version}, tokens kept in ${bridge.storage.backend}`);

    // 2. Every change of the session arrives as an event, whoever caused it (this program, a
    //    background refresh, the provider revoking the grant).
    bridge.on('session/changed', ({ provider, state, reason, account }) => {
      console.log(`session/changed: ${provider} ${state} (${reason})${account ? ` account ${named(account)}` : ''}`);
    });

    // 3. A profile: the oidc plugin pointed at the issuer (or put it in the host's config file).
    await bridge.configureProfile({ name: PROFILE, plugin: 'oidc', settings: server.settings });
    const before = await bridge.checkSignInStatus(PROFILE);
    console.log(`Status: ${before.state} (${before.reason})`);

    // 4. Sign in with the browser flow. The host listens on 127.0.0.1 for the redirect; we open
    //    the page it names (signIn/progress, stage openUrl) and wait for the answer.
    let user = null;
    const signedIn = await bridge.requestOAuthTokens({ provider: PROFILE, flow: 'browser' }, {
      onProgress: (progress) => {
        if (progress.stage !== 'openUrl') return console.log(`Sign-in: ${progress.stage}`);
        if (args.scripted) {
          console.log(`Sign-in: the scripted user opens ${where(progress.url)}`);
          user = import('../Tests/support/dot.mjs').then(({ signInAsUser }) => signInAsUser(progress.url));
        } else {
          console.log(`Open this page in your browser to sign in:\n  ${progress.url}`);
        }
      },
    });
    await user;
    console.log(`Signed in: account ${signedIn.account ? named(signedIn.account) : '(unnamed)'}, access token valid for ${Math.round((signedIn.expiresAt - Date.now()) / 1000)} s`);

    const status = await bridge.checkSignInStatus(PROFILE);
    console.log(`Status: ${status.state} (${status.reason})`);

    // 5. An authorized call: the host adds the Authorization header (refreshing first if needed).
    const answer = await bridge.fetch({ provider: PROFILE, url: await userinfoEndpoint(server.issuer) });
    console.log(`userinfo: HTTP ${answer.status}, sub ${JSON.parse(answer.body).sub}`);

    // 6. Sign out: the host revokes at the provider, then forgets the tokens.
    const out = await bridge.signOut(PROFILE);
    console.log(`Signed out; revoked at the provider: ${out.revoked.join(', ') || 'nothing'}`);
    try {
      await bridge.getAccessToken(PROFILE);
    } catch (error) {
      if (!(error instanceof NotSignedInError)) throw error;
      console.log(`getAccessToken now: ${error.name} (${error.reason})`);
    }
  } finally {
    // 7. Stop the host cleanly (shutdown, exit; signals only if it does not go).
    const exit = await bridge.close();
    console.log(`Host exited with status ${exit.code}`);
  }
}

main(process.argv.slice(2)).then(
  (code) => { process.exitCode = code; },
  (error) => {
    const detail = error instanceof AuthBridgeError && error.reason ? ` [${error.name} ${error.reason}]` : '';
    console.error(`node_example: ${error.message}${detail}`);
    process.exitCode = 1;
  },
);
