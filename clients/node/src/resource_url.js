// A protected resource by its URL alone (RFC 9728): the profile named after it, and how a person
// at this computer is shown a sign-in page.

import { spawn } from 'node:child_process';
import { isIPv6 } from 'node:net';

/**
 * The profile `signInToUrl` and `fetchForUrl` configure for a protected resource's URL: its host
 * in lower case, with `-PORT` when the URL names a port that is not the scheme's default
 * ("mcp.example.com", "127.0.0.1-8080"); any other character than a letter, digit, dot or hyphen
 * becomes a hyphen (an IPv6 address).
 * @param {string | URL} url
 */
export function profileNameForUrl(url) {
  const parsed = new URL(url);
  if (!['http:', 'https:'].includes(parsed.protocol) || !parsed.hostname) throw new TypeError(`not an http(s) URL with a host: ${parsed.origin}`);
  let host = parsed.hostname.toLowerCase();
  if (host.startsWith('[') && isIPv6(host.slice(1, -1))) host = host.slice(1, -1);
  const name = host.replace(/[^a-z0-9.-]/g, '-');
  return parsed.port ? `${name}-${parsed.port}` : name; // URL leaves the scheme's default port out
}

/**
 * A sign-in's progress for a person at this computer: at stage "openUrl" the page opens in their
 * browser (`$BROWSER` — the first of a `:`-separated list; `%s` in it is replaced by the URL, else
 * the URL is its argument — else `xdg-open`, `open` on macOS), or its address is printed on stderr
 * when none starts; at "deviceCode" the code and where to enter it are printed.
 * @param {{stage: string, url?: string, userCode?: string, verificationUri?: string}} event
 */
export function openInBrowser(event) {
  if (event.stage === 'deviceCode' && event.userCode) {
    process.stderr.write(`To sign in, open ${event.verificationUri} and enter the code ${event.userCode}\n`);
    return;
  }
  if (event.stage !== 'openUrl' || !event.url) return;
  const url = event.url;
  const chosen = (process.env.BROWSER ?? '').split(':').find((entry) => entry.trim());
  let argv;
  if (chosen) {
    const words = chosen.trim().split(/\s+/);
    argv = words.some((word) => word.includes('%s')) ? words.map((word) => word.replaceAll('%s', url)) : [...words, url];
  } else {
    argv = [process.platform === 'darwin' ? 'open' : 'xdg-open', url];
  }
  const show = () => process.stderr.write(`Open this page to sign in: ${url}\n`);
  try {
    const child = spawn(argv[0], argv.slice(1), { stdio: 'ignore', detached: true });
    child.on('error', show);
    child.on('exit', (code) => { if (code) show(); });
    child.unref();
  } catch {
    show();
  }
}
