// django-oauth-toolkit (DOT) from Node: the Node counterpart of Tests/contract/dot_auth.py.
//
// - startDot() runs Tests/support/dot_server.py with the venv's Python and waits for its
//   `READY <port>` line;
// - browse(url) is the user in a browser: authorize → DOT's login page → log in as ada →
//   authorize again → the redirect to the app's callback, whose URL it returns (never followed);
// - signInAsUser(url) is browse() plus the browser following that redirect to the host's
//   loopback listener (browser flow), which answers once the sign-in is stored.
//
// Used by the Node client's tests and by the examples' --scripted mode. Node 20 built-ins only;
// every wait is bounded. Codes and tokens are never printed.

import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const REPO = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const SERVER = path.join(REPO, 'Tests', 'support', 'dot_server.py');

export const USER = 'ada';
export const PASSWORD = 'lovelace-test';
/** DOT's public client: authorization code + PKCE, any loopback redirect port, consent skipped. */
export const CLIENT_ID = 'authbridge-test';

/** The Python that has Django and DOT: $AUTHBRIDGE_PYTHON, else the repository's venv. */
export function dotPython() {
  return process.env.AUTHBRIDGE_PYTHON || path.join(REPO, '.venv', 'bin', 'python');
}

/**
 * Starts DOT on 127.0.0.1 (an ephemeral port) with its database in `state`.
 * @param {{state: string, accessLifetime?: number, python?: string, timeoutMs?: number}} options
 *   timeoutMs bounds the start (the first one migrates a SQLite database: a few seconds).
 * @returns {Promise<{port: number, base: string, issuer: string, settings: (extra?: object) => object,
 *   stats: () => Promise<object>, secrets: () => Promise<string[]>, isIssued: (token: string) => Promise<boolean>,
 *   revoke: (token: string) => Promise<void>, endAccessToken: (token: string) => Promise<void>,
 *   adminRevoke: (user?: string) => Promise<number>, stop: () => Promise<void>}>}
 */
export async function startDot({ state, accessLifetime = 3600, python = dotPython(), timeoutMs = 120_000 }) {
  fs.mkdirSync(state, { recursive: true });
  const log = fs.openSync(path.join(state, 'server.log'), 'w');
  const child = spawn(python, [SERVER, '--state', state, '--access-lifetime', String(accessLifetime)], {
    stdio: ['ignore', 'pipe', log],
  });
  fs.closeSync(log);
  const port = await new Promise((resolve, reject) => {
    let text = '';
    const onError = (error) => fail(error.message);
    const onExit = (code, signal) => fail(`exited with ${signal ?? code}`);
    const onData = (chunk) => {
      text += chunk;
      const ready = /^READY (\d+)\r?\n/m.exec(text); // a whole line: the port may arrive in two chunks
      if (!ready) return;
      stopWatching();
      resolve(Number(ready[1]));
    };
    const stopWatching = () => {
      clearTimeout(timer);
      child.off('error', onError);
      child.off('exit', onExit);
      child.stdout.off('data', onData);
      child.stdout.resume(); // anything it prints later is read and dropped
    };
    const fail = (why) => {
      stopWatching();
      child.kill('SIGKILL');
      const logged = fs.readFileSync(path.join(state, 'server.log'), 'utf8').slice(-2000);
      reject(new Error(`django-oauth-toolkit did not start (${why}):\n${logged}`));
    };
    const timer = setTimeout(() => fail(`no READY line within ${timeoutMs} ms`), timeoutMs);
    child.once('error', onError);
    child.once('exit', onExit);
    child.stdout.setEncoding('utf8');
    child.stdout.on('data', onData);
  });
  const exited = new Promise((resolve) => child.once('exit', resolve));
  const base = `http://127.0.0.1:${port}`;
  const getJson = async (target) => (await fetch(base + target, { signal: AbortSignal.timeout(10_000) })).json();
  return {
    port,
    base,
    issuer: `${base}/o`,
    /** Settings of an `oidc` profile for DOT: discovery from the issuer, userinfo as the API base. */
    settings: (extra = {}) => ({ issuer: `${base}/o`, clientId: CLIENT_ID, scopes: ['openid', 'read'], apiBaseUrl: `${base}/o`, ...extra }),
    stats: () => getJson('/test/stats'),
    /** Every code and token DOT handed out (for leak scans). */
    secrets: async () => (await getJson('/test/secrets')).secrets,
    isIssued: async (token) => (await getJson(`/test/issued?${new URLSearchParams({ token })}`)).issued,
    /**
     * RFC 7009 at DOT's revocation endpoint: the token stops working at once, and so does the rest
     * of its grant (DOT revokes an access token's refresh token too, as §2.1 allows).
     */
    async revoke(token) {
      const response = await fetch(`${base}/o/revoke_token/`, {
        method: 'POST', body: new URLSearchParams({ token, client_id: CLIENT_ID }), signal: AbortSignal.timeout(10_000),
      });
      if (response.status !== 200) throw new Error(`DOT's revocation endpoint answered ${response.status}`);
    },
    /**
     * The access token stops working now, at the server only (as a server does that ends sessions
     * early); its refresh token still works.
     */
    async endAccessToken(token) {
      const { ended } = await getJson(`/test/end-access?${new URLSearchParams({ token })}`);
      if (ended !== 1) throw new Error(`DOT ended ${ended} access tokens, not 1`);
    },
    /** What an administrator does in DOT's admin: revoke every refresh token (and access token) of `user`. */
    adminRevoke: async (user = USER) => (await getJson(`/test/admin-revoke?${new URLSearchParams({ user })}`)).revoked,
    async stop() {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
      await exited;
    },
  };
}

/**
 * A browser with a cookie jar that never follows redirects by itself, so each step can check
 * where DOT sends it. All requests are bounded by `timeoutMs`.
 */
class ScriptedBrowser {
  constructor(timeoutMs = 10_000) {
    this.timeoutMs = timeoutMs;
    this.cookies = new Map(); // one site (DOT on 127.0.0.1:port): name → value is enough
  }

  async request(target, { method = 'GET', form } = {}) {
    const headers = {};
    if (this.cookies.size) headers.Cookie = [...this.cookies].map(([name, value]) => `${name}=${value}`).join('; ');
    let body;
    if (form) {
      body = new URLSearchParams(form).toString();
      headers['Content-Type'] = 'application/x-www-form-urlencoded';
      headers.Referer = target;
    }
    const response = await fetch(target, { method, headers, body, redirect: 'manual', signal: AbortSignal.timeout(this.timeoutMs) });
    for (const cookie of response.headers.getSetCookie()) {
      const [pair] = cookie.split(';');
      const at = pair.indexOf('=');
      this.cookies.set(pair.slice(0, at).trim(), pair.slice(at + 1).trim());
    }
    const location = response.headers.get('location') ?? '';
    return { status: response.status, location: location && new URL(location, target).href, text: await response.text() };
  }

  /** GETs a page with a form, then POSTs the form with its CSRF token and `fields`. */
  async submit(page, fields) {
    const { status, text } = await this.request(page);
    const token = /name="csrfmiddlewaretoken" value="([^"]+)"/.exec(text);
    if (status !== 200 || !token) throw new Error(`no form at ${new URL(page).pathname} (${status})`);
    return this.request(page, { method: 'POST', form: { ...fields, csrfmiddlewaretoken: token[1] } });
  }
}

/**
 * The user signing in at DOT in a browser, from the authorization URL the host handed out.
 * Returns the URL DOT redirects to (the app's callback, with the code): not followed.
 */
export async function browse(url, { user = USER, password = PASSWORD, timeoutMs } = {}) {
  const browser = new ScriptedBrowser(timeoutMs);
  let step = await browser.request(url);
  if (step.status !== 302 || !step.location.includes('/accounts/login/')) {
    throw new Error(`DOT's authorize answered ${step.status}, not a redirect to its login page`);
  }
  const login = step.location;
  const next = new URL(login).searchParams.get('next');
  step = await browser.submit(login, { username: user, password, next });
  if (step.status !== 302) throw new Error(`DOT's login answered ${step.status} (wrong user or password?)`);
  step = await browser.request(step.location);
  if (step.status !== 302 || !step.location.startsWith('http://127.0.0.1:')) {
    throw new Error(`DOT's authorize after login answered ${step.status}, not a redirect to the app`);
  }
  return step.location;
}

/**
 * browse() and then what the browser does next: follow the redirect to the host's loopback
 * listener (browser flow). Resolves with that page ({status, text}) once the host answered it,
 * which it does when the sign-in is stored.
 */
export async function signInAsUser(url, options = {}) {
  const callback = await browse(url, options);
  const response = await fetch(callback, { redirect: 'manual', signal: AbortSignal.timeout(options.timeoutMs ?? 30_000) });
  return { status: response.status, text: await response.text() };
}
