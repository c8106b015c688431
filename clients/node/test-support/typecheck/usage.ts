// Typical uses of @authbridge/client, type-checked with `tsc --strict` by test/units.test.mjs:
// index.d.ts must accept these, and reject the lines marked @ts-expect-error.
import {
  AbortError, AccessTokenResult, AuthBridge, AuthorizedFetch, ErrorCodes, HostExitedError, HostNotFoundError, InitializeResult,
  InsecureUrlError, NotSignedInError, SignInStatus, SignOutResult, UnsupportedProtocolVersionError, openInBrowser, parseChallenges,
  profileNameForUrl,
} from '@authbridge/client';

export async function typicalUse(): Promise<void> {
  const bridge = await AuthBridge.start({ plugins: '/plugins', noDefaultPlugins: true, logLevel: 'debug', onFrame: (_frame, direction, line) => [direction, line.length] });
  bridge.on('session/changed', (change) => {
    const state: 'signedIn' | 'refreshed' | 'signedOut' | 'licenseRevoked' = change.state;
    console.log(state, change.account?.id);
  });
  bridge.on('signIn/progress', (progress) => { if (progress.stage === 'openUrl') console.log(progress.url); });
  bridge.on('profiles/changed', (change) => {
    const names: string[] = [...change.added, ...change.changed, ...change.removed];
    console.log(names, change.configurationProblem ?? bridge.initializeResult?.configurationProblem);
  });
  bridge.on('exit', (info) => console.log(info.code, info.signal, info.stderrTail.length));

  const status: SignInStatus = await bridge.requestOAuthTokens({ provider: 'corp', flow: 'browser', timeoutMs: 60_000 },
    { onProgress: (progress) => console.log(progress.stage), signal: new AbortController().signal, timeoutMs: 100_000 });
  console.log(status.account?.email, status.expiresAt);
  const token: AccessTokenResult = await bridge.getAccessToken('corp');
  console.log(token.headers['Authorization'], token.cookies.map((cookie) => cookie.domain));
  const narrow: AccessTokenResult = await bridge.getAccessToken({ provider: 'corp', scopes: ['read'], resource: 'https://api.example.com/' });
  const exchanged: AccessTokenResult = await bridge.exchangeToken({ provider: 'corp', audience: 'billing', resource: ['https://a.example/', 'https://b.example/'],
    scopes: ['read'], requestedTokenType: 'accessToken', subjectTokenType: 'idToken', minValidityMs: 30_000 });
  console.log(narrow.expiresAt, exchanged.tokenType, (await bridge.exchangeToken('corp')).accessToken);
  await bridge.requestOAuthTokens({ provider: 'corp', flow: 'clientCredentials', resource: 'https://api.example.com/' });
  await bridge.fetch({ provider: 'corp', url: '/me', scopes: ['read'], resource: ['https://api.example.com/'] });
  const answer = await bridge.fetch({ provider: 'corp', url: '/me', method: 'POST', headers: { 'Content-Type': 'application/json' }, body: '{}' });
  const code: number = answer.status;
  console.log(code, (await bridge.listAccounts()).accounts.map((account) => account.current));
  try {
    const out: SignOutResult = await bridge.signOut({ provider: 'corp', account: 'sub-1' });
    console.log(out.revoked);
  } catch (error) {
    if (error instanceof NotSignedInError) console.log(error.reason, error.retryable, error.data?.provider, error.data?.missingScopes?.length, error.missingScopes.join(' '));
    if (error instanceof HostNotFoundError) console.log(error.executable, error.message);
    if (error instanceof HostExitedError) console.log(error.exitCode, error.signal, error.stderrTail);
    if (error instanceof AbortError) console.log(error.cause);
    if (error instanceof UnsupportedProtocolVersionError) console.log(error.supported);
  }
  const api: AuthorizedFetch = bridge.authorizedFetch('corp', { account: 'sub-1', minValidityMs: 30_000, scopes: ['read'], resource: 'https://api.example.com/' });
  const me: Response = await api('https://api.example.com/me', { headers: { Accept: 'application/json' }, signal: new AbortController().signal });
  console.log(me.status, (await api(new URL('https://api.example.com/x'))).ok, (await bridge.authorizedFetch('corp')(new Request('https://a.example/'))).ok);
  try {
    await api('http://api.example.com/me');
  } catch (error) {
    if (error instanceof InsecureUrlError) console.log(error.url, error.reason);
  }
  const mcp: AuthorizedFetch = await bridge.fetchForUrl('https://mcp.example.com/mcp');
  const admin: AuthorizedFetch = await bridge.fetchForUrl(new URL('https://mcp.example.com/mcp'), { profile: 'mcp', flow: 'external',
    onProgress: (progress) => console.log(progress.url), stepUp: false, timeoutMs: 60_000 });
  const byUrl: SignInStatus = await bridge.signInToUrl('https://mcp.example.com/mcp', { onProgress: openInBrowser, scopes: ['mcp:tools'] });
  const stepping: AuthorizedFetch = bridge.authorizedFetch('mcp', { stepUp: true, flow: 'browser', onProgress: openInBrowser });
  console.log((await mcp('https://mcp.example.com/mcp')).status, admin, byUrl.provider, stepping, profileNameForUrl('http://127.0.0.1:1/'),
    parseChallenges('Bearer scope="a"').map((challenge) => challenge.params['scope'] ?? challenge.token68));
  const fresh: InitializeResult = await bridge.restart({ timeoutMs: 10_000 });
  console.log(fresh.warnings?.length);
  await AuthBridge.start({ env: { AUTHBRIDGE: '/opt/authbridge/bin/authbridge' }, onWarning: (warning) => console.warn(warning.length) });
  const notSignedIn: -32001 = ErrorCodes.NotSignedIn;
  console.log(notSignedIn, (await bridge.close({ timeoutMs: 1_000 })).code);

  // @ts-expect-error a param the spec does not have
  await bridge.checkSignInStatus({ provider: 'corp', bogus: 1 });
  // @ts-expect-error a flow the spec does not have
  await bridge.requestOAuthTokens({ provider: 'corp', flow: 'popup' });
  // @ts-expect-error a subject token type the spec does not have
  await bridge.exchangeToken({ provider: 'corp', subjectTokenType: 'refreshToken' });
  // @ts-expect-error fetch needs a url
  await bridge.fetch({ provider: 'corp' });
  // @ts-expect-error an event the bridge does not emit
  bridge.on('session/exploded', () => {});
  // @ts-expect-error authorizedFetch needs a profile name
  bridge.authorizedFetch();
  // @ts-expect-error an option authorizedFetch does not have
  bridge.authorizedFetch('corp', { forceRefresh: true });
  // @ts-expect-error fetchForUrl needs a URL
  await bridge.fetchForUrl();
  // @ts-expect-error a flow the spec does not have
  await bridge.signInToUrl('https://mcp.example.com/mcp', { flow: 'popup' });
  // @ts-expect-error warnings are text
  await AuthBridge.start({ onWarning: (warning: number) => warning });
}
