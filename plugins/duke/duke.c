/*
 * duke.c — AuthBridge provider plugin for Duke University's mobile authorizer.
 *
 * Written in C against the plugin ABI 1.1 (Sources/CAuthBridgePlugin/include/
 * authbridge/plugin.h) with jansson. What Duke's servers do, and the public
 * sources of it, is in README.md beside this file; in short:
 *
 *   base     test https://mobile-authorizer-test.oit.duke.edu/
 *            production https://mobile-authorizer.api.oit.duke.edu/
 *            (setting baseUrl overrides, e.g. a simulator on http://127.0.0.1)
 *   sign-in  a web page {base}{client}/ios/login (Shibboleth) that ends at
 *            {base}{client}/ios/token?access_token=..&session_token=..
 *   refresh  POST {base}{client}/ios/refresh, headers X-Access-Token and
 *            X-Session-Token, no body → {"data":{"access_token","session_token"}}
 *            400 = the session is dead, 5xx = try later
 *   logout   POST {base}{client}/ios/revoke with the same two headers
 *   API      Authorization: Bearer <access token> (the host's standard step)
 *
 * Hooks implemented: describe, configure, begin_sign_in, complete_sign_in,
 * refresh, revoke. check_session (expiry by expiresAt), authorize_request
 * (Bearer, relative URLs against apiBaseUrl) and classify_response (401 →
 * refresh and replay) are the host's standard steps: their vtable entries are
 * NULL. The id, version and description are the manifest's (duke.json).
 *
 * Host services of ABI 1.1 used: fail (failures without an encoder here) and
 * query_value (the token URL read by the host's own rule, the one the Swift
 * SDK and the host's standard steps use).
 *
 * The session token plays the part of a refresh token (TokenSet.refreshToken):
 * the host keeps it, never hands it to a frontend, and passes it back to
 * refresh and revoke.
 *
 * Ownership (plugin.h): hook inputs and the answers of host->http and
 * host->query_value are BORROWED — parsed with json_loadb or read in place,
 * never freed here. Everything this file allocates (jansson values, strings)
 * is released before the hook returns; the host copies what set_result /
 * fail / http receive.
 *
 * Threads: the only state is the immutable struct built by init; everything
 * else is local to a hook, so hooks may run concurrently.
 *
 * Tokens never appear in a log line or a message: messages name parameters
 * and HTTP statuses only.
 */
#include <authbridge/plugin.h>
#include <authbridge/plugin_jansson.h>
#include <jansson.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DUKE_ID "duke"

#define DUKE_TEST_BASE "https://mobile-authorizer-test.oit.duke.edu/"
#define DUKE_PRODUCTION_BASE "https://mobile-authorizer.api.oit.duke.edu/"

#define REFRESH_TIMEOUT_MS 15000
#define REVOKE_TIMEOUT_MS 10000
/* A call cancelled while it waited on the provider: the host's own words for it. */
#define CANCELLED_MESSAGE "The request was cancelled."

/* A callback whose query has a broken percent-escape (RFC 3986 §2.1). */
#define MALFORMED_CALLBACK                                                                                   \
    "The Duke sign-in ended at a token URL that is not well formed (a '%' not followed by two hex digits); " \
    "nothing was stored. Sign in again."

/* Latest `exp` accepted (year 9999): keeps exp * 1000 far from overflow. */
#define MAX_EXP_SECONDS INT64_C(253402300799)

struct ab_plugin {
    const ab_host_api *host;
};

/* ── JSON access (answers, input, logging: authbridge/plugin_jansson.h) ─── */

/* input.profile.config.KEY */
static const char *config_str(json_t *input, const char *key)
{
    return ab_string_at(json_object_get(json_object_get(input, "profile"), "config"), key);
}

/* ── Text helpers ───────────────────────────────────────────────────────── */

static int starts_with(const char *s, const char *prefix)
{
    return s != NULL && strncmp(s, prefix, strlen(prefix)) == 0;
}

/* A token is printable ASCII without spaces: it goes into HTTP headers, so a
 * control character (CR, LF, NUL) must never get through. */
static int is_token_text(const char *s, size_t n)
{
    if (n == 0)
        return 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c <= 0x20 || c >= 0x7f)
            return 0;
    }
    return 1;
}

/* RFC 3986 unreserved characters: what a client name may contain (it is a
 * path segment that must match the server's redirect byte for byte). */
static int is_path_segment(const char *s)
{
    if (s == NULL || *s == '\0')
        return 0;
    for (; *s; s++) {
        char c = *s;
        if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '.' ||
              c == '_' || c == '~'))
            return 0;
    }
    return 1;
}

/* Decodes base64url (RFC 4648 §5; padding optional) into a malloc'd buffer.
 * NULL when malformed or out of memory. */
static unsigned char *base64url_decode(const char *src, size_t n, size_t *outlen)
{
    while (n > 0 && src[n - 1] == '=')
        n--;
    if (n % 4 == 1)
        return NULL;
    unsigned char *out = malloc(n * 3 / 4 + 3);
    if (out == NULL)
        return NULL;
    uint32_t acc = 0;
    int bits = 0;
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        char c = src[i];
        int v;
        if (c >= 'A' && c <= 'Z')
            v = c - 'A';
        else if (c >= 'a' && c <= 'z')
            v = c - 'a' + 26;
        else if (c >= '0' && c <= '9')
            v = c - '0' + 52;
        else if (c == '-')
            v = 62;
        else if (c == '_')
            v = 63;
        else {
            free(out);
            return NULL;
        }
        acc = (acc << 6) | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out[o++] = (unsigned char)((acc >> bits) & 0xff);
        }
    }
    *outlen = o;
    return out;
}

/* The claims of a JWT (header.payload.signature) as a new jansson object, or
 * NULL when `token` is not a JWT with a JSON-object payload. The signature is
 * NOT checked: Duke's access token is an opaque bearer token to this client
 * (no key is published for it); its claims are hints, never trusted for
 * security decisions. */
static json_t *jwt_claims(const char *token)
{
    const char *dot1 = strchr(token, '.');
    if (dot1 == NULL)
        return NULL;
    const char *dot2 = strchr(dot1 + 1, '.');
    if (dot2 == NULL || strchr(dot2 + 1, '.') != NULL)
        return NULL;
    size_t len = 0;
    unsigned char *payload = base64url_decode(dot1 + 1, (size_t)(dot2 - dot1 - 1), &len);
    if (payload == NULL)
        return NULL;
    json_t *claims = json_loadb((const char *)payload, len, 0, NULL);
    free(payload);
    if (!json_is_object(claims)) {
        json_decref(claims);
        return NULL;
    }
    return claims;
}

/* expiresAt (ms) from the token's `exp` claim (s); 0 when unknown. */
static int64_t expiry_ms(json_t *claims)
{
    json_t *exp = json_object_get(claims, "exp");
    int64_t seconds;
    if (json_is_integer(exp))
        seconds = (int64_t)json_integer_value(exp);
    else if (json_is_real(exp) && json_real_value(exp) >= 1 && json_real_value(exp) <= (double)MAX_EXP_SECONDS)
        seconds = (int64_t)json_real_value(exp);
    else
        return 0;
    if (seconds <= 0 || seconds > MAX_EXP_SECONDS)
        return 0;
    return seconds * 1000;
}

/* The account named by the token's claims (sub, name, email), or NULL. */
static json_t *account_of(json_t *claims)
{
    json_t *account = json_object();
    static const char *const keys[] = { "sub", "name", "email" };
    static const char *const names[] = { "id", "name", "email" };
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        const char *value = ab_string_at(claims, keys[i]);
        if (value != NULL && *value != '\0')
            json_object_set_new(account, names[i], json_string(value));
    }
    if (json_object_size(account) == 0) {
        json_decref(account);
        return NULL;
    }
    return account;
}

/* TokenResult {tokens:{accessToken, refreshToken?, tokenType, expiresAt}, account?}.
 * expiresAt comes from the access token's `exp`; null when it has none (the
 * host then relies on a 401 from the API to refresh). NULL when out of memory. */
static json_t *token_result(const ab_host_api *host, ab_call *call, const char *access, const char *session)
{
    json_t *claims = jwt_claims(access);
    int64_t expires_at = expiry_ms(claims);
    if (expires_at == 0)
        ab_log_text(
            host, call, AB_LOG_NOTICE,
            "duke: the access token carries no readable exp claim; its expiry is unknown (a 401 will renew it)");
    json_t *tokens = json_pack("{s:s, s:s, s:o}", "accessToken", access, "tokenType", "Bearer", "expiresAt",
                               expires_at ? json_integer(expires_at) : json_null());
    if (tokens != NULL && session != NULL)
        json_object_set_new(tokens, "refreshToken", json_string(session));
    json_t *result = tokens ? json_pack("{s:o}", "tokens", tokens) : NULL;
    json_t *account = claims ? account_of(claims) : NULL;
    if (result != NULL && account != NULL)
        json_object_set_new(result, "account", account);
    else
        json_decref(account);
    json_decref(claims);
    return result;
}

/* ── URLs ───────────────────────────────────────────────────────────────── */

/* True when host[0..n) is an IPv4 loopback literal: four decimal octets, 127 first. */
static int is_loopback_ipv4(const char *host, size_t n)
{
    int octets = 0, value = -1;
    for (size_t i = 0; i <= n; i++) {
        if (i == n || host[i] == '.') {
            if (value < 0 || value > 255 || (octets == 0 && value != 127))
                return 0;
            octets++;
            value = -1;
        } else if (host[i] >= '0' && host[i] <= '9') {
            value = (value < 0 ? 0 : value * 10) + (host[i] - '0');
            if (value > 255)
                return 0;
        } else {
            return 0;
        }
    }
    return octets == 4;
}

/* https://<host>…, or http:// on a loopback IP literal (127.0.0.0/8, [::1])
 * — the host's own rule; checked here so that a bad setting is reported by
 * configure, naming the setting. No user info: in http://127.0.0.1:1@evil/
 * the host is evil, whatever comes before the '@'. */
static int is_secure_base(const char *url)
{
    const char *authority = starts_with(url, "https://") ? url + 8 : starts_with(url, "http://") ? url + 7 : NULL;
    if (authority == NULL || memchr(authority, '@', strcspn(authority, "/?#")) != NULL)
        return 0;
    if (authority == url + 8)
        return url[8] != '\0' && url[8] != '/' && url[8] != ':';
    const char *host = authority;
    if (starts_with(host, "[::1]"))
        return host[5] == '\0' || host[5] == ':' || host[5] == '/';
    size_t n = strcspn(host, ":/");
    return is_loopback_ipv4(host, n);
}

/* ── Lifecycle ──────────────────────────────────────────────────────────── */

static ab_status duke_init(const ab_host_api *host, ab_plugin **plugin, const char **error)
{
    /* Seeds jansson's hash function once, before hooks create objects on
     * several threads. */
    json_object_seed(0);
    /* Declared ABI 1.1 (duke.json), so a host that loads it has both; checked anyway. */
    if (!AB_HAS(host, fail) || !AB_HAS(host, query_value)) {
        *error = "duke: the host lacks ABI 1.1's fail and query_value";
        return AB_ERROR;
    }
    ab_plugin *state = malloc(sizeof *state);
    if (state == NULL) {
        *error = "duke: out of memory";
        return AB_ERROR;
    }
    state->host = host;
    *plugin = state;
    return AB_OK;
}

static void duke_shutdown(ab_plugin *plugin)
{
    free(plugin);
}

/* ── describe ───────────────────────────────────────────────────────────── */

static ab_status duke_describe(ab_plugin *plugin, ab_call *call, ab_json input)
{
    (void)input;
    json_t *d = json_pack(
        "{s:s, s:[s], s:b, s:[s,s],"
        " s:{s:s, s:[s], s:{"
        "   s:{s:s, s:s},"
        "   s:{s:s, s:[s,s], s:s, s:s},"
        "   s:{s:s, s:s},"
        "   s:{s:s, s:s}}}}",
        "displayName", "Duke University", "flows", "external",
        /* The authorizer's login page takes no state, so its callback carries none back. */
        "callbackState", 0, "capabilities", "revoke", "fetch", "settings", "type", "object", "required", "clientName",
        "properties", "clientName", "type", "string", "description",
        "The OAuth client name registered with the mobile authorizer (a path segment: {base}{client}/ios/…)",
        "environment", "type", "string", "enum", "production", "test", "default", "production", "description",
        "Which mobile authorizer: production (" DUKE_PRODUCTION_BASE ") or test (" DUKE_TEST_BASE ")", "baseUrl",
        "type", "string", "description",
        "Overrides the environment's base URL (https; http only on a loopback IP, e.g. a simulator)", "apiBaseUrl",
        "type", "string", "description", "Base for relative URLs given to fetch (the API that takes the Bearer token)");
    return ab_reply_json(plugin->host, call, d);
}

/* ── Hooks that read their input ────────────────────────────────────────── */

/* The body of a hook that reads its input as a JSON object: `in` is owned by
 * with_input, borrowed here until the body returns. */
typedef ab_status (*hook_body)(const ab_host_api *host, ab_call *call, json_t *in);

/* Runs a hook's body on its input, parsed (the host is answered badInput when
 * it is not an object), and lets go of the input once the body has answered.
 * The hooks' entry points, at the end, are one line each. */
static ab_status with_input(ab_plugin *plugin, ab_call *call, ab_json input, hook_body body)
{
    json_t *in = ab_input_object(plugin->host, call, input);
    if (in == NULL)
        return AB_ERROR;
    ab_status st = body(plugin->host, call, in);
    json_decref(in);
    return st;
}

/* ── configure ──────────────────────────────────────────────────────────── */

static ab_status configure(const ab_host_api *host, ab_call *call, json_t *in)
{
    json_t *settings = json_object_get(in, "settings");
    const char *client = ab_string_at(settings, "clientName");
    const char *environment = ab_string_at(settings, "environment");
    const char *base_setting = ab_string_at(settings, "baseUrl");
    json_t *api = json_object_get(settings, "apiBaseUrl");

    if (client == NULL) {
        return host->fail(call, "configuration", "missingSetting", "The duke profile needs the setting \"clientName\".",
                          0);
    }
    if (!is_path_segment(client)) {
        return host->fail(call, "configuration", "invalidSettings",
                          "The setting \"clientName\" must be a path segment: letters, digits, '-', '.', '_' or '~'.",
                          0);
    }
    if (json_object_get(settings, "environment") != NULL && environment == NULL) {
        return host->fail(call, "configuration", "invalidSettings", "The setting \"environment\" must be a string.", 0);
    }
    if (environment == NULL)
        environment = "production";
    const char *base;
    if (strcmp(environment, "production") == 0) {
        base = DUKE_PRODUCTION_BASE;
    } else if (strcmp(environment, "test") == 0) {
        base = DUKE_TEST_BASE;
    } else {
        return host->fail(call, "configuration", "invalidSettings",
                          "The setting \"environment\" must be \"production\" or \"test\".", 0);
    }
    if (base_setting != NULL) {
        if (!is_secure_base(base_setting) || strpbrk(base_setting, "?#") != NULL) {
            return host->fail(call, "configuration", "insecureUrl",
                              "The setting \"baseUrl\" must be an https URL without user name or query (http only on a "
                              "loopback IP address).",
                              0);
        }
        base = base_setting;
    }
    if (api != NULL && !json_is_string(api)) {
        return host->fail(call, "configuration", "invalidSettings", "The setting \"apiBaseUrl\" must be a string.", 0);
    }

    /* {base}{client}/ios/…: the base always ends with one '/'. */
    size_t n = strlen(base);
    while (n > 0 && base[n - 1] == '/')
        n--;
    int blen = (int)n;
    json_t *config = json_pack("{s:s, s:s, s:o, s:o, s:o, s:o, s:o}", "clientName", client, "environment",
                               base_setting ? "custom" : environment, "baseUrl", json_sprintf("%.*s/", blen, base),
                               "loginUrl", json_sprintf("%.*s/%s/ios/login", blen, base, client), "callbackPrefix",
                               json_sprintf("%.*s/%s/ios/token", blen, base, client), "refreshUrl",
                               json_sprintf("%.*s/%s/ios/refresh", blen, base, client), "revokeUrl",
                               json_sprintf("%.*s/%s/ios/revoke", blen, base, client));
    if (config != NULL && api != NULL)
        json_object_set(config, "apiBaseUrl", api); /* the host's standard authorize_request reads it */
    return ab_reply_json(host, call, config);
}

/* ── begin_sign_in ──────────────────────────────────────────────────────── */

/* The web view opens {base}{client}/ios/login and is caught when it reaches
 * {base}{client}/ios/token. Duke's login takes no state, PKCE or nonce. */
static ab_status begin_sign_in(const ab_host_api *host, ab_call *call, json_t *in)
{
    const char *flow = ab_string_at(in, "flow");
    const char *url = config_str(in, "loginUrl");
    const char *prefix = config_str(in, "callbackPrefix");
    if (flow == NULL || strcmp(flow, "external") != 0)
        return host->fail(call, "configuration", "unsupported",
                          "Duke's sign-in is a web page that ends at its own token URL: use the external flow.", 0);
    if (url == NULL || prefix == NULL)
        return host->fail(call, "configuration", "missingSetting", "The duke profile is not configured (no login URL).",
                          0);
    return ab_reply_json(host, call, json_pack("{s:s, s:s}", "url", url, "callbackPrefix", prefix));
}

/* ── complete_sign_in ───────────────────────────────────────────────────── */

/* Reads one token parameter of the callback through the host's query_value
 * (by name, form-decoded, the whole query well formed) into *value (borrowed
 * until the hook returns); on failure sets the error and returns it. */
static ab_status callback_token(const ab_host_api *host, ab_call *call, const char *url, const char *name,
                                const char **value)
{
    char message[160];
    size_t length = 0, count = 0;
    ab_status st = host->query_value(call, url, strlen(url), name, value, &length, &count);
    if (st == AB_ERROR)
        return host->fail(call, "definitive", "invalidCallback", MALFORMED_CALLBACK, 0);
    if (st != AB_OK)
        return host->fail(call, "internal", "hostError", "The host could not read the Duke token URL.", 0);
    if (count == 0 || length == 0) {
        snprintf(message, sizeof message,
                 "The Duke sign-in ended without %s in its token URL; nothing was stored. Sign in again.", name);
        return host->fail(call, "definitive", "missingToken", message, 0);
    }
    if (count > 1 || !is_token_text(*value, length)) {
        snprintf(message, sizeof message,
                 "The Duke sign-in ended with a malformed %s in its token URL (%s); nothing was stored.", name,
                 count > 1 ? "given more than once" : "not a token");
        return host->fail(call, "definitive", "invalidCallback", message, 0);
    }
    return AB_OK;
}

static ab_status complete_sign_in(const ab_host_api *host, ab_call *call, json_t *in)
{
    const char *url = ab_string_at(in, "callbackUrl");
    const char *prefix = config_str(in, "callbackPrefix");
    const char *access = NULL, *session = NULL;
    ab_status st;

    if (url == NULL) {
        return host->fail(call, "definitive", "missingToken", "The Duke sign-in ended without a token URL.", 0);
    }
    /* The host checked the prefix already; here the path must END there:
     * …/ios/token?… (not …/ios/tokenX). */
    if (prefix == NULL || !starts_with(url, prefix) || url[strlen(prefix)] != '?') {
        return host->fail(call, "definitive", "invalidCallback",
                          "The Duke sign-in did not end at the mobile authorizer's token URL.", 0);
    }
    /* query_value refuses a query broken anywhere, not only in the values
     * read: a URL broken anywhere is not the page Duke redirected to. */
    if ((st = callback_token(host, call, url, "access_token", &access)) != AB_OK)
        return st;
    if ((st = callback_token(host, call, url, "session_token", &session)) != AB_OK)
        return st;
    return ab_reply_json(host, call, token_result(host, call, access, session));
}

/* ── refresh and revoke: POST with X-Access-Token and X-Session-Token ───── */

/* POSTs to `url` with both token headers and no body. On AB_OK *response is
 * the parsed HTTPResponse (new reference, to release); on AB_ERROR or
 * AB_CANCELLED *failure is the host's Failure (new reference; may be NULL).
 * A cancelled request has answered the call already (cancelled): the hook
 * returns AB_CANCELLED as it is. */
static ab_status post_with_tokens(const ab_host_api *host, ab_call *call, const char *url, const char *access,
                                  const char *session, int timeout_ms, json_t **response, json_t **failure)
{
    *response = NULL;
    *failure = NULL;
    if (!AB_HAS(host, http))
        return AB_INVALID;
    json_t *request = json_pack("{s:s, s:s, s:{s:s, s:s}, s:i}", "method", "POST", "url", url, "headers",
                                "X-Access-Token", access, "X-Session-Token", session, "timeoutMs", timeout_ms);
    char *text = request ? json_dumps(request, JSON_COMPACT) : NULL;
    json_decref(request);
    if (text == NULL)
        return AB_INVALID;
    ab_json answer = { NULL, 0 };
    ab_status st = host->http(call, (ab_json){ text, strlen(text) }, &answer);
    free(text); /* the host copied the request */
    /* `answer` is borrowed until the hook returns: parse it, never free it. */
    json_t *parsed = answer.data ? json_loadb(answer.data, answer.length, 0, NULL) : NULL;
    if (st == AB_OK && json_is_integer(json_object_get(parsed, "status"))) {
        *response = parsed;
        return AB_OK;
    }
    if (st == AB_ERROR || st == AB_CANCELLED) {
        *failure = parsed;
        return st == AB_CANCELLED ? host->fail(call, "cancelled", "cancelled", CANCELLED_MESSAGE, 0) : st;
    }
    json_decref(parsed);
    return AB_INVALID;
}

/* Passes the host's HTTP failure on (kind transient, reason timeout/refused/
 * dns/…, or configuration insecureUrl), or a generic transient one. */
static ab_status http_failure(const ab_host_api *host, ab_call *call, json_t *failure, const char *what)
{
    const char *kind = ab_string_at(failure, "kind");
    const char *reason = ab_string_at(failure, "reason");
    char message[200];
    snprintf(message, sizeof message, "The Duke mobile authorizer could not be reached for %s (%s).", what,
             reason ? reason : "network");
    return host->fail(call, kind ? kind : "transient", reason ? reason : "network", message, 0);
}

static ab_status refresh(const ab_host_api *host, ab_call *call, json_t *in)
{
    json_t *tokens = json_object_get(in, "tokens");
    const char *access = ab_string_at(tokens, "accessToken");
    const char *session = ab_string_at(tokens, "refreshToken");
    const char *url = config_str(in, "refreshUrl");
    json_t *response = NULL, *failure = NULL;
    ab_status st;

    if (url == NULL) {
        st = host->fail(call, "configuration", "missingSetting", "The duke profile is not configured (no refresh URL).",
                        0);
        goto done;
    }
    if (access == NULL || session == NULL) {
        st = host->fail(call, "definitive", "noRefreshToken", "The Duke session has no session token; sign in again.",
                        0);
        goto done;
    }
    st = post_with_tokens(host, call, url, access, session, REFRESH_TIMEOUT_MS, &response, &failure);
    if (st == AB_CANCELLED)
        goto done;
    if (st == AB_ERROR) {
        st = http_failure(host, call, failure, "a refresh");
        goto done;
    }
    if (st != AB_OK) {
        st = host->fail(call, "internal", "hostError", "The host's HTTP service refused the refresh request.", 0);
        goto done;
    }

    int status = (int)json_integer_value(json_object_get(response, "status"));
    char note[96];
    snprintf(note, sizeof note, "duke: the refresh endpoint answered HTTP %d", status);
    ab_log_text(host, call, AB_LOG_DEBUG, note);
    if (status == 400 || status == 401) {
        /* The authorizer refuses this access/session token pair: the session
         * is over (ended by Duke, expired, or logged out elsewhere). */
        st = host->fail(call, "definitive", "invalid_grant",
                        "The Duke session has ended; sign in again with your NetID.", status);
    } else if (status >= 500 || status == 429) {
        char message[120];
        snprintf(message, sizeof message, "The Duke mobile authorizer is unavailable (HTTP %d); try again later.",
                 status);
        st = host->fail(call, "transient", status == 429 ? "rateLimited" : "serverError", message, status);
    } else if (status < 200 || status > 299) {
        char message[120];
        snprintf(message, sizeof message, "The Duke mobile authorizer answered the refresh with HTTP %d.", status);
        st = host->fail(call, "transient", "badResponse", message, status);
    } else {
        const char *body = ab_string_at(response, "body");
        json_t *answer = body ? json_loads(body, 0, NULL) : NULL;
        json_t *data = json_object_get(answer, "data");
        const char *new_access = ab_string_at(data, "access_token");
        const char *new_session = ab_string_at(data, "session_token");
        if (new_access == NULL || !is_token_text(new_access, strlen(new_access)) ||
            (new_session != NULL && !is_token_text(new_session, strlen(new_session)))) {
            st = host->fail(call, "transient", "badResponse",
                            "The Duke mobile authorizer answered the refresh without a usable access token.", status);
        } else {
            /* Both are replaced; a missing session_token keeps the old one
             * (the host keeps refreshToken when the answer has none). */
            st = ab_reply_json(host, call, token_result(host, call, new_access, new_session));
        }
        json_decref(answer);
    }
done:
    json_decref(response);
    json_decref(failure);
    return st;
}

/* revoke's answer when nothing was revoked: one failure for all tokens. */
static json_t *nothing_revoked(const char *reason, const char *message)
{
    return json_pack("{s:[], s:[{s:s, s:s, s:s}]}", "revoked", "failures", "token", "all", "reason", reason, "message",
                     message);
}

static ab_status revoke(const ab_host_api *host, ab_call *call, json_t *in)
{
    json_t *tokens = json_object_get(in, "tokens");
    const char *access = ab_string_at(tokens, "accessToken");
    const char *session = ab_string_at(tokens, "refreshToken");
    const char *url = config_str(in, "revokeUrl");
    json_t *response = NULL, *failure = NULL;
    json_t *result = NULL;
    char message[200];
    ab_status st;

    if (url == NULL || access == NULL || session == NULL) {
        result = url == NULL
                     ? nothing_revoked("missingSetting", "The duke profile is not configured (no revoke URL).")
                     : nothing_revoked("noRefreshToken", "The Duke session has no session token to log out with.");
        st = ab_reply_json(host, call, result);
        goto done;
    }
    st = post_with_tokens(host, call, url, access, session, REVOKE_TIMEOUT_MS, &response, &failure);
    if (st == AB_CANCELLED)
        goto done;
    if (st == AB_OK) {
        int status = (int)json_integer_value(json_object_get(response, "status"));
        if (status >= 200 && status <= 299) {
            result = json_pack("{s:[s,s]}", "revoked", "access_token", "session_token");
        } else {
            snprintf(message, sizeof message, "The Duke mobile authorizer answered the logout with HTTP %d.", status);
            result = nothing_revoked("httpStatus", message);
        }
    } else {
        const char *reason = st == AB_ERROR ? ab_string_at(failure, "reason") : NULL;
        snprintf(message, sizeof message, "The Duke mobile authorizer could not be reached for the logout (%s).",
                 reason ? reason : "network");
        result = nothing_revoked(reason ? reason : "network", message);
    }
    st = ab_reply_json(host, call, result);
done:
    json_decref(response);
    json_decref(failure);
    return st;
}

/* ── Entry ──────────────────────────────────────────────────────────────── */

/* The hooks' entry points: each runs its body through with_input. */
static ab_status duke_configure(ab_plugin *plugin, ab_call *call, ab_json input)
{
    return with_input(plugin, call, input, configure);
}

static ab_status duke_begin_sign_in(ab_plugin *plugin, ab_call *call, ab_json input)
{
    return with_input(plugin, call, input, begin_sign_in);
}

static ab_status duke_complete_sign_in(ab_plugin *plugin, ab_call *call, ab_json input)
{
    return with_input(plugin, call, input, complete_sign_in);
}

static ab_status duke_refresh(ab_plugin *plugin, ab_call *call, ab_json input)
{
    return with_input(plugin, call, input, refresh);
}

static ab_status duke_revoke(ab_plugin *plugin, ab_call *call, ab_json input)
{
    return with_input(plugin, call, input, revoke);
}

static const ab_plugin_vtable duke_vtable = {
    .size = sizeof(ab_plugin_vtable),
    .init = duke_init,
    .shutdown = duke_shutdown,
    .describe = duke_describe,
    .configure = duke_configure,
    .begin_sign_in = duke_begin_sign_in,
    .complete_sign_in = duke_complete_sign_in,
    .refresh = duke_refresh,
    .revoke = duke_revoke,
    /* check_session, authorize_request, classify_response: NULL = the host's
     * standard step (expiry by expiresAt; Bearer + apiBaseUrl; 401 → refresh). */
};

AB_DEFINE_PLUGIN(DUKE_ID, NULL, &duke_vtable)
