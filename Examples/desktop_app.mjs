#!/usr/bin/env node
// A desktop app's sign-in, the Electron way, without Electron: the main process owns the
// AuthBridge host and an AuthService; the window (the renderer) only sees a small view of the
// session and asks for sign-in / sign-out / API calls over IPC. When the host asks for a page to
// be opened (signIn/progress, stage openUrl) the service calls `openExternal(url)`: in Electron
// that is `shell.openExternal`, here it defaults to `xdg-open`, and the tests pass a function
// that plays the user.
//
//   node Examples/desktop_app.mjs [--host PATH] [--plugins DIR] [--issuer URL ...]
//
// In an Electron main process the same pieces read:
//
//   const bridge = await AuthBridge.start();
//   const auth = new AuthService({ bridge, provider: 'corp', openExternal: (url) => shell.openExternal(url) });
//   auth.on('changed', (view) => mainWindow.webContents.send('auth:changed', view));
//   auth.on('browserFailed', ({ url }) => mainWindow.webContents.send('auth:openThisYourself', url));
//   ipcMain.handle('auth:signIn', () => auth.signIn());
//   ipcMain.handle('auth:cancelSignIn', () => auth.cancelSignIn());
//   ipcMain.handle('auth:call', (event, url) => auth.call(url));
//   ipcMain.handle('auth:signOut', () => auth.signOut());
//   app.on('will-quit', () => bridge.close());

import { spawn } from 'node:child_process';
import { EventEmitter } from 'node:events';
import { pathToFileURL } from 'node:url';

import { AuthBridge, AuthBridgeError, NotSignedInError } from '../clients/node/src/index.js'; // in an app: from '@authbridge/client'
import { USAGE_OPTIONS, authorizationServer, bridgeOptions, parseCommandLine, userinfoEndpoint } from './example_setup.mjs';

/**
 * Opens a URL in the user's default browser, as `shell.openExternal` does in Electron: resolves
 * when xdg-open succeeded, rejects when there is none (ENOENT) or it failed. xdg-open starts fine
 * on a machine without a desktop and then exits 3 or 4, so its exit status is what tells.
 */
export function openWithSystemBrowser(url) {
  return new Promise((resolve, reject) => {
    // Detached and unref'd: a browser it starts outlives the app, and the app can quit first.
    const opener = spawn('xdg-open', [url], { stdio: 'ignore', detached: true });
    opener.unref();
    opener.once('error', reject);
    opener.once('exit', (code, signal) => {
      if (code === 0) resolve();
      else reject(new Error(`xdg-open ${signal ? `was killed by ${signal}` : `exited with status ${code}`}`));
    });
  });
}

/**
 * The main process's view of one provider's session. Emits `changed` with a view for the
 * window ({signedIn, state, account, message}) whenever the session changes, whatever caused it,
 * `progress` with the sign-in's stage, and `browserFailed` ({url, error}) when the sign-in page
 * could not be opened: the window then shows the address for the user to open themselves.
 */
export class AuthService extends EventEmitter {
  #signIn = null; // the AbortController of the sign-in in progress

  /**
   * @param {{bridge: AuthBridge, provider: string, openExternal?: (url: string) => unknown}} options
   */
  constructor({ bridge, provider, openExternal = openWithSystemBrowser }) {
    super();
    this.bridge = bridge;
    this.provider = provider;
    this.openExternal = openExternal;
    bridge.on('session/changed', (change) => {
      if (change.provider !== provider) return;
      const signedIn = change.state === 'signedIn' || change.state === 'refreshed';
      this.emit('changed', { signedIn, state: change.state, account: change.account ?? null, message: change.message ?? null });
    });
  }

  /** The session as the window shows it. */
  async view() {
    const status = await this.bridge.checkSignInStatus(this.provider);
    return { signedIn: status.state === 'signedIn', state: status.state, account: status.account, message: status.message ?? null };
  }

  /**
   * Signs in with the system browser. Resolves with the SignInStatus; rejects with
   * UserCancelledError / TimeoutError from the host, or AbortError when cancelSignIn() was called.
   */
  async signIn() {
    this.cancelSignIn(); // one at a time: a second click starts over
    const controller = new AbortController();
    this.#signIn = controller;
    try {
      return await this.bridge.requestOAuthTokens({ provider: this.provider, flow: 'browser' }, {
        signal: controller.signal,
        onProgress: ({ stage, url }) => {
          this.emit('progress', stage);
          if (stage !== 'openUrl') return;
          // Not awaited: the sign-in goes on while the browser shows the page. If the browser
          // cannot be opened (no xdg-open, no desktop), the window shows the address instead and
          // the sign-in keeps waiting: the user opens it elsewhere, or presses Cancel.
          Promise.resolve()
            .then(() => this.openExternal(url))
            .catch((error) => this.emit('browserFailed', { url, error }));
        },
      });
    } finally {
      if (this.#signIn === controller) this.#signIn = null;
    }
  }

  /** The window's Cancel button: the host stops waiting (its loopback listener closes). */
  cancelSignIn() {
    this.#signIn?.abort(new Error('cancelled in the app'));
  }

  /** An API call with the session's authorization; null when not signed in (the window shows the button). */
  async call(url) {
    try {
      return await this.bridge.fetch({ provider: this.provider, url });
    } catch (error) {
      if (error instanceof NotSignedInError) return null;
      throw error;
    }
  }

  /** Signs out (revoked at the provider, then forgotten). */
  signOut() {
    return this.bridge.signOut(this.provider);
  }
}

/**
 * The app: start the host, sign in through the browser, call userinfo, sign out, quit.
 * `openExternal` and `log` are injectable (the tests play the user and read the log).
 * @returns {Promise<number>} the exit status
 */
export async function main(argv, { openExternal = openWithSystemBrowser, log = console.log } = {}) {
  const args = parseCommandLine(argv);
  if (args.help) {
    log(`Usage: node Examples/desktop_app.mjs [options]\n\n${USAGE_OPTIONS}`);
    return 0;
  }
  const server = await authorizationServer(args, log);
  try {
    await runApp(args, server, { openExternal, log });
  } finally {
    await server.stop();
  }
  return 0;
}

/** What the app's main process does between start-up and quit. */
async function runApp(args, server, { openExternal, log }) {
  const bridge = await AuthBridge.start({ ...bridgeOptions(args), clientInfo: { name: 'desktop-app-example', version: '1.0.0' } });
  try {
    const auth = new AuthService({ bridge, provider: 'corp', openExternal });
    // The window: here, log lines.
    auth.on('changed', (view) => log(`[window] ${view.signedIn ? `signed in as ${view.account?.name ?? view.account?.id ?? '?'}` : `signed out (${view.state})`}`));
    auth.on('progress', (stage) => log(`[window] sign-in: ${stage === 'openUrl' ? 'continue in your browser…' : stage}`));
    auth.on('browserFailed', ({ url, error }) =>
      log(`[window] Your browser could not be opened (${error.message}). Open this address to sign in:\n  ${url}`));

    await bridge.configureProfile({ name: 'corp', plugin: 'oidc', settings: server.settings });
    log(`[window] ${(await auth.view()).signedIn ? 'signed in' : 'Sign in'} button shown`);
    const status = await auth.signIn();
    log(`[main] signed in: ${status.state}`);
    const userinfo = await auth.call(await userinfoEndpoint(server.issuer));
    log(`[main] userinfo: HTTP ${userinfo.status}, sub ${JSON.parse(userinfo.body).sub}`);
    const out = await auth.signOut();
    log(`[main] signed out; revoked ${out.revoked.length} tokens`);
    log(`[main] API call after sign-out: ${(await auth.call(await userinfoEndpoint(server.issuer))) === null ? 'not signed in' : 'answered'}`);
  } finally {
    const exit = await bridge.close();
    log(`[main] host exited with status ${exit.code}`);
  }
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  main(process.argv.slice(2)).then(
    (code) => { process.exitCode = code; },
    (error) => {
      const detail = error instanceof AuthBridgeError && error.reason ? ` [${error.name} ${error.reason}]` : '';
      console.error(`desktop_app: ${error.message}${detail}`);
      process.exitCode = 1;
    },
  );
}
