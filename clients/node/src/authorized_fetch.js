// bridge.authorizedFetch(profile): a function with fetch's signature that authorizes every request
// with the session's access token, as the Python client's auth objects do for requests and httpx.
//
// Why it asks the host for every request instead of keeping the token: the host answers a valid
// session's getAccessToken from its cache, so it costs one local round trip and never hands out a
// token the user has since signed out of, or that another process has since refreshed.

import { isIPv4 } from 'node:net';
import { AuthBridgeError, InsecureUrlError, NotSignedInError, errorClasses } from './protocol.js';

/**
 * Throws InsecureUrlError unless a token may be sent to `url`: https, or plain http to a
 * loopback IP address (the host's rule for provider endpoints; a name such as `localhost` may
 * resolve anywhere).
 * @param {URL} url
 */
export function checkUrl(url) {
  if (url.protocol === 'https:') return;
  const host = url.hostname;
  if (url.protocol === 'http:' && ((isIPv4(host) && host.startsWith('127.')) || host === '[::1]')) return;
  throw new InsecureUrlError(url.origin === 'null' ? `${url.protocol}//${url.host}` : url.origin);
}

/** RFC 6265 §5.1.4. */
function pathMatches(requestPath, cookiePath) {
  if (requestPath === cookiePath) return true;
  return requestPath.startsWith(cookiePath) && (cookiePath.endsWith('/') || requestPath[cookiePath.length] === '/');
}

/**
 * Whether a cookie of getAccessToken goes with a request to `url`. Its `domain` is the host it is
 * for (bridge-spec: no leading dot), so it goes to that host only, as a host-only cookie; within
 * its `path`; over https only when `secure`.
 * @param {{domain: string, path: string, secure?: boolean, maxAge?: number}} cookie
 * @param {URL} url
 */
function applies(cookie, url) {
  if (url.hostname.toLowerCase() !== cookie.domain.toLowerCase().replace(/^\./, '')) return false;
  if (cookie.secure && url.protocol !== 'https:') return false;
  if (cookie.maxAge === 0) return false;
  return pathMatches(url.pathname || '/', cookie.path || '/');
}

/**
 * `request` with getAccessToken's headers (replacing fields of the same name) and its cookies
 * for the request's URL in the Cookie field (replacing cookies of the same name, keeping others).
 * @param {Request} request
 * @param {{headers: Record<string, string>, cookies: Array<{name: string, value: string, domain: string, path: string}>}} token
 */
export function authorize(request, token) {
  const url = new URL(request.url);
  const headers = new Headers(request.headers);
  for (const [name, value] of Object.entries(token.headers ?? {})) headers.set(name, value);
  const cookies = (token.cookies ?? []).filter((cookie) => applies(cookie, url));
  if (cookies.length) {
    const names = new Set(cookies.map((cookie) => cookie.name));
    const kept = (headers.get('cookie') ?? '').split(';').map((pair) => pair.trim())
      .filter((pair) => pair && !names.has(pair.split('=', 1)[0].trim()));
    headers.set('cookie', [...kept, ...cookies.map((cookie) => `${cookie.name}=${cookie.value}`)].join('; '));
  }
  return new Request(request, { headers });
}

/**
 * Whether fetch can send the request of (input, init) twice: a body of text, bytes, a Blob, a
 * form or URLSearchParams can be given again; a stream (a ReadableStream, an async iterable, the
 * body of a Request object) is read once.
 */
function replayable(input, init) {
  const body = init && init.body !== undefined ? init.body : input instanceof Request ? input.body : null;
  if (body === null || body === undefined) return true;
  return typeof body === 'string' || body instanceof ArrayBuffer || ArrayBuffer.isView(body) || body instanceof Blob
    || body instanceof URLSearchParams || body instanceof FormData;
}

/**
 * The bridge's error after a failed renewal, of the same class and data, with a message that says
 * what happened to which request (the host's alone may be the provider's bare `invalid_grant`);
 * the bridge's error is its `cause`. Errors the client made itself (host exited, aborted) are
 * thrown as they are.
 * @param {unknown} error
 * @param {string} profile
 * @param {Request} request
 */
function renewalFailed(error, profile, request) {
  const Class = error?.constructor;
  if (!(error instanceof AuthBridgeError) || (Class !== AuthBridgeError && errorClasses[error.code] !== Class)) return error;
  const url = new URL(request.url);
  const advice = error instanceof NotSignedInError ? `; sign in to "${profile}" again` : '';
  return new Class(`${request.method} ${url.origin}${url.pathname} answered 401 (the access token was refused) and the session `
    + `could not be renewed: ${error.message}${advice}`, { code: error.code, data: error.data, method: error.method, requestId: error.requestId, cause: error });
}

/**
 * The server's nonce when a 401 asks for one (RFC 9449 §9: `WWW-Authenticate: DPoP
 * error="use_dpop_nonce"` with a `DPoP-Nonce`), else undefined.
 * @param {Response} response
 */
function dpopNonceRequested(response) {
  const nonce = response.headers.get('dpop-nonce');
  return nonce && /use_dpop_nonce/.test(response.headers.get('www-authenticate') ?? '') ? nonce : undefined;
}

// ── WWW-Authenticate (RFC 9110 §11.6.1) ──────────────────────────────────────

const TCHAR = /[!#$%&'*+\-.^_`|~0-9A-Za-z]/;
const TOKEN68 = /[\-._~+/0-9A-Za-z]/;

/**
 * The challenges of a `WWW-Authenticate` field value (fetch joins several fields with ", "):
 * `challenge = auth-scheme [ 1*SP ( token68 / #auth-param ) ]`, comma separated, an auth-param's
 * value a token or a quoted string (`\` escapes the next character). Param names are lower case;
 * the first of a repeated name wins. What cannot be parsed ends the list.
 * @param {string} value
 * @returns {Array<{scheme: string, params: Record<string, string>, token68?: string}>}
 */
export function parseChallenges(value) {
  const challenges = [];
  const n = value.length;
  const skip = (i, chars = ' \t') => { while (i < n && chars.includes(value[i])) i += 1; return i; };
  const token = (i) => { const start = i; while (i < n && TCHAR.test(value[i])) i += 1; return [value.slice(start, i), i]; };
  const paramAt = (i) => {
    const [name, after] = token(i);
    let j = skip(after);
    if (!name || j >= n || value[j] !== '=') return false;
    j = skip(j + 1);
    return j < n && value[j] !== ',' && value[j] !== '=';
  };
  let i = 0;
  for (;;) {
    i = skip(i, ' \t,');
    if (i >= n) return challenges;
    const [scheme, afterScheme] = token(i);
    if (!scheme) return challenges;
    const params = Object.create(null);
    i = skip(afterScheme);
    if (i === afterScheme && i < n && value[i] !== ',') return challenges; // a scheme is followed by SP, a comma or the end
    if (i < n && value[i] !== ',' && !paramAt(i)) {
      const start = i;
      while (i < n && TOKEN68.test(value[i])) i += 1;
      if (i === start) return challenges;
      while (i < n && value[i] === '=') i += 1;
      challenges.push({ scheme, params, token68: value.slice(start, i) });
      i = skip(i);
      if (i < n && value[i] !== ',') return challenges;
      continue;
    }
    while (i < n && paramAt(i)) {
      let name;
      [name, i] = token(i);
      i = skip(skip(i) + 1);
      let text;
      if (value[i] === '"') {
        i += 1;
        text = '';
        while (i < n && value[i] !== '"') {
          if (value[i] === '\\' && i + 1 < n) i += 1;
          text += value[i];
          i += 1;
        }
        if (i >= n) return challenges; // an unterminated quoted string
        i += 1;
      } else {
        [text, i] = token(i);
      }
      const key = name.toLowerCase();
      if (!(key in params)) params[key] = text;
      i = skip(i);
      if (i < n && value[i] !== ',') {
        challenges.push({ scheme, params });
        return challenges;
      }
      i = skip(i, ' \t,');
    }
    challenges.push({ scheme, params });
  }
}

/**
 * The scopes a 403 asks for (RFC 6750 §3.1: a `Bearer` — or, for a DPoP-bound token, `DPoP` —
 * challenge with `error="insufficient_scope"` and a `scope`), in its order; else undefined.
 * @param {Response} response
 */
export function insufficientScope(response) {
  if (response.status !== 403) return undefined;
  for (const { scheme, params } of parseChallenges(response.headers.get('www-authenticate') ?? '')) {
    if (!['bearer', 'dpop'].includes(scheme.toLowerCase()) || params.error !== 'insufficient_scope') continue;
    const scopes = [...new Set((params.scope ?? '').split(/[ \t]+/).filter(Boolean))];
    if (scopes.length) return scopes;
  }
  return undefined;
}

/**
 * The bridge's error after a failed step-up (see renewalFailed).
 * @param {unknown} error
 * @param {string} profile
 * @param {Request} request
 * @param {string[]} scopes
 */
function stepUpFailed(error, profile, request, scopes) {
  const Class = error?.constructor;
  if (!(error instanceof AuthBridgeError) || (Class !== AuthBridgeError && errorClasses[error.code] !== Class)) return error;
  const url = new URL(request.url);
  return new Class(`${request.method} ${url.origin}${url.pathname} answered 403 (insufficient_scope: it needs ${scopes.join(' ')}) `
    + `and signing in to "${profile}" with those scopes failed: ${error.message}`,
  { code: error.code, data: error.data, method: error.method, requestId: error.requestId, cause: error });
}

/**
 * The function behind `bridge.authorizedFetch(profile, options)` (see index.d.ts and the README).
 * @param {import('./client.js').AuthBridge} bridge
 * @param {string} profile
 * @param {{account?: string, minValidityMs?: number, scopes?: string[], resource?: string | string[]}} [options]
 */
export function authorizedFetch(bridge, profile, { account, minValidityMs, scopes, resource, stepUp = true, flow, onProgress } = {}) {
  if (typeof profile !== 'string' || profile === '') throw new TypeError('authorizedFetch(profile): a profile name is needed');
  // The request's method and URL: a DPoP-bound session's answer carries the proof for exactly
  // that request (RFC 9449); a bearer session's ignores them. `added`: the scopes a step-up asked
  // for, which a token for `scopes` must then carry too.
  const params = (forceRefresh, request, dpopNonce, added = []) => ({
    provider: profile,
    ...(account !== undefined && { account }),
    ...(minValidityMs !== undefined && { minValidityMs }),
    ...(scopes !== undefined && { scopes: [...new Set([...scopes, ...added])] }),
    ...(resource !== undefined && { resource: typeof resource === 'string' ? resource : [...resource] }),
    ...(forceRefresh && { forceRefresh: true }),
    method: request.method,
    url: request.url,
    ...(dpopNonce && { dpopNonce }),
  });
  // Renewals take turns, and each first asks for the current token: when 401s for one token come
  // back at once, the first renewal forces the refresh and the others find the new token.
  let renewals = Promise.resolve();
  const renewed = (rejected, request) => {
    const signal = request.signal;
    const turn = renewals.then(async () => {
      try {
        const current = await bridge.getAccessToken(params(false, request), { signal });
        if (current.accessToken !== rejected.accessToken) return current;
        return await bridge.getAccessToken(params(true, request), { signal });
      } catch (error) {
        throw renewalFailed(error, profile, request);
      }
    });
    renewals = turn.catch(() => {});
    return turn;
  };
  // A step-up takes its turn with the renewals: the user is asked for the scopes once (incremental
  // consent, keeping the account), unless another request stepped up meanwhile.
  const steppedUp = (rejected, request, added) => {
    const signal = request.signal;
    const turn = renewals.then(async () => {
      try {
        const current = await bridge.getAccessToken(params(false, request, undefined, added), { signal });
        if (current.accessToken !== rejected.accessToken) return current;
        await bridge.requestOAuthTokens({ provider: profile, ...(flow !== undefined && { flow }), scopes: added },
          { signal, ...(onProgress && { onProgress }) });
        return await bridge.getAccessToken(params(false, request, undefined, added), { signal });
      } catch (error) {
        throw stepUpFailed(error, profile, request, added);
      }
    });
    renewals = turn.catch(() => {});
    return turn;
  };

  return async function fetchAuthorized(input, init) {
    const request = new Request(input, init);
    const url = new URL(request.url);
    checkUrl(url);
    const again = replayable(input, init);
    // A dispatcher (undici's, e.g. a proxy) is not part of a Request: it is handed on as it came.
    const extra = init?.dispatcher === undefined ? undefined : { dispatcher: init.dispatcher };
    const token = await bridge.getAccessToken(params(false, request), { signal: request.signal });
    const response = await fetch(authorize(request, token), extra);
    if (new URL(response.url || url.href).origin !== url.origin) return response;
    const wanted = stepUp ? insufficientScope(response) : undefined;
    if (wanted) {
      // A 403 insufficient_scope (RFC 6750 §3.1, an MCP server's step-up): the user is asked for
      // the scopes once, then the request goes again; a second 403 is the answer.
      const stepped = await steppedUp(token, request, wanted);
      if (!again) return response;
      await response.body?.cancel();
      return fetch(authorize(new Request(input, init), stepped), extra);
    }
    if (response.status !== 401) return response;
    const nonce = dpopNonceRequested(response);
    if (nonce && again) {
      // The token is fine; the server wants its nonce in the proof (RFC 9449 §9): once more with it.
      await response.body?.cancel();
      const proved = await bridge.getAccessToken(params(false, request, nonce), { signal: request.signal });
      return fetch(authorize(new Request(input, init), proved), extra);
    }
    const fresh = await renewed(token, request);
    if (!again) return response; // the body was a stream: the 401 is the answer; the token is renewed for a retry
    await response.body?.cancel();
    return fetch(authorize(new Request(input, init), fresh), extra);
  };
}
