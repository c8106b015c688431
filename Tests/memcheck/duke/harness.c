/*
 * harness.c — runs every hook of the duke plugin, on its success and failure
 * paths, through a stand-in host, so that valgrind can check the plugin's
 * memory handling (run.sh). Also checks each answer's status and kind.
 *
 * The stand-in host keeps plugin.h's ownership rules: what it lends (hook
 * input, http answers) lives until the hook returns and is freed then, by the
 * host; what the plugin passes (results, errors, requests) is copied at once.
 * A plugin that freed a lent buffer, kept one past the hook, or leaked its own
 * allocations is reported by valgrind.
 */
#define _POSIX_C_SOURCE 200809L
#include <authbridge/plugin.h>
#include <jansson.h>

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_LENT 8

struct ab_call {
    char *answer; /* copy of set_result / set_error */
    int is_error;
    char *lent[MAX_LENT]; /* buffers lent to the plugin during this hook */
    int nlent;
    int cancelled;
    /* the canned http answer for this hook: status, body; status 0 = network
     * failure; -1 = cancelled */
    int http_status;
    const char *http_body;
    char *last_request; /* copy of the last http request */
};

static int failures;
static int checks;

static void host_log(ab_call *call, ab_log_level level, const char *message, size_t length)
{
    (void)call;
    (void)level;
    if (getenv("DUKE_HARNESS_VERBOSE"))
        fprintf(stderr, "log: %.*s\n", (int)length, message);
}

static int64_t host_now(void)
{
    return INT64_C(1767225600000);
} /* 2026-01-01 */

static char *copy(ab_json j)
{
    char *s = malloc(j.length + 1);
    memcpy(s, j.data, j.length);
    s[j.length] = '\0';
    return s;
}

static ab_status host_set_result(ab_call *call, ab_json result)
{
    free(call->answer);
    call->answer = copy(result);
    call->is_error = 0;
    return AB_OK;
}

static ab_status host_set_error(ab_call *call, ab_json error)
{
    free(call->answer);
    call->answer = copy(error);
    call->is_error = 1;
    return AB_OK;
}

static ab_status host_emit(ab_call *call, ab_json event)
{
    (void)call;
    (void)event;
    return AB_OK;
}

static ab_status lend(ab_call *call, const char *text, ab_json *out)
{
    char *buf = strdup(text);
    call->lent[call->nlent++] = buf;
    out->data = buf;
    out->length = strlen(buf);
    return AB_OK;
}

static ab_status host_http(ab_call *call, ab_json request, ab_json *response)
{
    json_t *req = json_loadb(request.data, request.length, 0, NULL);
    if (req == NULL)
        return AB_INVALID;
    json_decref(req);
    free(call->last_request);
    call->last_request = copy(request);
    if (call->http_status == -1) {
        lend(call, "{\"kind\":\"cancelled\",\"reason\":\"cancelled\",\"message\":\"cancelled\"}", response);
        return AB_CANCELLED;
    }
    if (call->http_status == 0) {
        lend(call, "{\"kind\":\"transient\",\"reason\":\"refused\",\"message\":\"connection refused\"}", response);
        return AB_ERROR;
    }
    json_t *answer = json_pack("{s:i, s:{}, s:s}", "status", call->http_status, "headers", "body",
                               call->http_body ? call->http_body : "");
    char *text = json_dumps(answer, JSON_COMPACT);
    json_decref(answer);
    lend(call, text, response);
    free(text);
    return AB_OK;
}

static ab_status host_standard(ab_call *call, ab_hook hook, ab_json input, ab_json *output)
{
    (void)call;
    (void)hook;
    (void)input;
    (void)output;
    return AB_INVALID;
}

static int host_is_cancelled(ab_call *call)
{
    return call->cancelled;
}

static ab_status host_fail(ab_call *call, const char *kind, const char *reason, const char *message, int status)
{
    if (kind == NULL || reason == NULL || message == NULL)
        return AB_INVALID;
    json_t *failure = json_pack("{s:s, s:s, s:s}", "kind", kind, "reason", reason, "message", message);
    if (status != 0)
        json_object_set_new(failure, "status", json_integer(status));
    char *text = json_dumps(failure, JSON_COMPACT);
    json_decref(failure);
    host_set_error(call, (ab_json){ text, strlen(text) });
    free(text);
    return strcmp(kind, "cancelled") == 0 ? AB_CANCELLED : AB_ERROR;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* Form-decodes src[0..n) into dst; (size_t)-1 for a broken escape. A stand-in
 * for the host's URLQuery (AuthBridgeURL), which the contract tests check. */
static size_t form_decode(const char *src, size_t n, char *dst)
{
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        if (src[i] == '%') {
            if (i + 2 >= n || hexval(src[i + 1]) < 0 || hexval(src[i + 2]) < 0)
                return (size_t)-1;
            dst[o++] = (char)(hexval(src[i + 1]) * 16 + hexval(src[i + 2]));
            i += 2;
        } else {
            dst[o++] = src[i] == '+' ? ' ' : src[i];
        }
    }
    return o;
}

/* The host's query_value: the query from the first '?' to the '#', every pair
 * decoded (a broken escape anywhere: AB_ERROR), the first `name` lent. */
static ab_status host_query_value(ab_call *call, const char *url, size_t url_length, const char *name,
                                  const char **value, size_t *length, size_t *count)
{
    if (call == NULL || url == NULL || name == NULL)
        return AB_INVALID;
    const char *end = url + url_length;
    const char *q = memchr(url, '?', url_length);
    const char *hash = memchr(url, '#', url_length);
    if (hash != NULL && (q == NULL || hash < q))
        q = NULL;
    if (hash != NULL)
        end = hash;
    char *buf = malloc(url_length + 1);
    char *found = NULL;
    size_t found_length = 0, n = 0;
    for (const char *p = q ? q + 1 : end; p < end;) {
        const char *amp = memchr(p, '&', (size_t)(end - p));
        const char *seg = amp ? amp : end;
        const char *eq = memchr(p, '=', (size_t)(seg - p));
        size_t klen = form_decode(p, (size_t)((eq ? eq : seg) - p), buf);
        size_t vlen = eq ? form_decode(eq + 1, (size_t)(seg - eq - 1), buf + (klen == (size_t)-1 ? 0 : klen)) : 0;
        if (klen == (size_t)-1 || vlen == (size_t)-1) {
            free(buf);
            free(found);
            return AB_ERROR;
        }
        if (klen == strlen(name) && memcmp(buf, name, klen) == 0 && n++ == 0) {
            found = malloc(vlen + 1);
            memcpy(found, buf + klen, vlen);
            found[vlen] = '\0';
            found_length = vlen;
        }
        p = seg + 1;
    }
    free(buf);
    if (found != NULL)
        call->lent[call->nlent++] = found;
    if (value)
        *value = found;
    if (length)
        *length = found_length;
    if (count)
        *count = n;
    return AB_OK;
}

static const ab_host_api host = {
    .size = sizeof(ab_host_api),
    .abi_major = AB_ABI_MAJOR,
    .abi_minor = AB_ABI_MINOR,
    .host_version = "harness",
    .log = host_log,
    .now_ms = host_now,
    .set_result = host_set_result,
    .set_error = host_set_error,
    .emit = host_emit,
    .http = host_http,
    .standard = host_standard,
    .is_cancelled = host_is_cancelled,
    .fail = host_fail,
    .query_value = host_query_value,
};

static const ab_plugin_vtable *vt;
static ab_plugin *plugin;

/* Runs one hook on `input` (lent, freed afterwards) and returns its status;
 * *answer receives a parsed copy of the answer (or NULL). */
static ab_status run(ab_hook_fn hook, const char *input, int http_status, const char *http_body, json_t **answer,
                     json_t **request)
{
    ab_call call = { .http_status = http_status, .http_body = http_body };
    ab_json in;
    lend(&call, input, &in);
    ab_status st = hook(plugin, &call, in);
    for (int i = 0; i < call.nlent; i++)
        free(call.lent[i]); /* the host releases what it lent, once the hook returned */
    *answer = call.answer ? json_loads(call.answer, 0, NULL) : NULL;
    if (request)
        *request = call.last_request ? json_loads(call.last_request, 0, NULL) : NULL;
    free(call.answer);
    free(call.last_request);
    return st;
}

static void expect(int ok, const char *what)
{
    checks++;
    if (!ok) {
        failures++;
        fprintf(stderr, "FAILED: %s\n", what);
    }
}

/* Runs a hook and checks its status and, for errors, the Failure's kind and reason. */
static json_t *check(const char *what, ab_hook_fn hook, const char *input, int http_status, const char *http_body,
                     ab_status want, const char *kind, const char *reason)
{
    json_t *answer = NULL, *request = NULL;
    ab_status st = run(hook, input, http_status, http_body, &answer, &request);
    char label[256];
    snprintf(label, sizeof label, "%s: status %d (wanted %d)", what, (int)st, (int)want);
    expect(st == want, label);
    if (kind != NULL) {
        snprintf(label, sizeof label, "%s: kind %s", what, kind);
        expect(json_is_string(json_object_get(answer, "kind")) &&
                   strcmp(json_string_value(json_object_get(answer, "kind")), kind) == 0,
               label);
    }
    if (reason != NULL) {
        snprintf(label, sizeof label, "%s: reason %s", what, reason);
        expect(json_is_string(json_object_get(answer, "reason")) &&
                   strcmp(json_string_value(json_object_get(answer, "reason")), reason) == 0,
               label);
    }
    if (request != NULL) {
        /* refresh/revoke: both headers, no body. */
        json_t *headers = json_object_get(request, "headers");
        snprintf(label, sizeof label, "%s: request carries both token headers and no body", what);
        expect(json_object_get(headers, "X-Access-Token") && json_object_get(headers, "X-Session-Token") &&
                   !json_object_get(request, "body") && !json_object_get(request, "form") &&
                   !json_object_get(request, "json"),
               label);
    }
    json_decref(request);
    return answer;
}

static char *b64url(const char *text)
{
    static const char alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    size_t n = strlen(text);
    char *out = malloc(n * 4 / 3 + 4), *o = out;
    const unsigned char *p = (const unsigned char *)text;
    size_t i = 0;
    for (; i + 2 < n; i += 3) {
        *o++ = alphabet[p[i] >> 2];
        *o++ = alphabet[((p[i] & 3) << 4) | (p[i + 1] >> 4)];
        *o++ = alphabet[((p[i + 1] & 15) << 2) | (p[i + 2] >> 6)];
        *o++ = alphabet[p[i + 2] & 63];
    }
    if (n - i == 1) {
        *o++ = alphabet[p[i] >> 2];
        *o++ = alphabet[(p[i] & 3) << 4];
    } else if (n - i == 2) {
        *o++ = alphabet[p[i] >> 2];
        *o++ = alphabet[((p[i] & 3) << 4) | (p[i + 1] >> 4)];
        *o++ = alphabet[(p[i + 1] & 15) << 2];
    }
    *o = '\0';
    return out;
}

static char *jwt(const char *payload)
{
    char *h = b64url("{\"alg\":\"HS256\",\"typ\":\"JWT\"}"), *p = b64url(payload);
    size_t n = strlen(h) + strlen(p) + 16;
    char *t = malloc(n);
    snprintf(t, n, "%s.%s.c2lnbmF0dXJl", h, p);
    free(h);
    free(p);
    return t;
}

static char *hook_input(json_t *config, const char *extra_json)
{
    json_t *in = json_loads(extra_json, 0, NULL);
    json_object_set_new(in, "profile", json_pack("{s:s, s:{}, s:O}", "name", "duke", "settings", "config", config));
    json_object_set_new(in, "installation", json_pack("{s:s, s:s}", "id", "i", "name", "harness"));
    char *text = json_dumps(in, JSON_COMPACT);
    json_decref(in);
    return text;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s libauthbridge-duke.so\n", argv[0]);
        return 2;
    }
    void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL) {
        fprintf(stderr, "dlopen: %s\n", dlerror());
        return 2;
    }
    ab_entry_fn entry = (ab_entry_fn)(uintptr_t)dlsym(lib, AB_ENTRY_SYMBOL);
    const ab_plugin_info *info = entry ? entry() : NULL;
    if (info == NULL || info->magic != AB_PLUGIN_MAGIC || strcmp(info->id, "duke") != 0) {
        fprintf(stderr, "not the duke plugin\n");
        return 2;
    }
    vt = info->vtable;
    const char *error = NULL;
    if (vt->init(&host, &plugin, &error) != AB_OK) {
        fprintf(stderr, "init failed: %s\n", error);
        return 2;
    }

    json_t *a;
    a = check("describe", vt->describe, "{}", 200, NULL, AB_OK, NULL, NULL);
    expect(json_is_object(json_object_get(a, "settings")), "describe has settings");
    json_decref(a);

    /* configure */
    json_decref(check("configure without clientName", vt->configure, "{\"profile\":\"duke\",\"settings\":{}}", 200,
                      NULL, AB_ERROR, "configuration", "missingSetting"));
    json_decref(check("configure bad client", vt->configure,
                      "{\"profile\":\"duke\",\"settings\":{\"clientName\":\"a b\"}}", 200, NULL, AB_ERROR,
                      "configuration", "invalidSettings"));
    json_decref(check("configure bad environment", vt->configure,
                      "{\"profile\":\"duke\",\"settings\":{\"clientName\":\"app\",\"environment\":\"dev\"}}", 200, NULL,
                      AB_ERROR, "configuration", "invalidSettings"));
    json_decref(check("configure environment not a string", vt->configure,
                      "{\"profile\":\"duke\",\"settings\":{\"clientName\":\"app\",\"environment\":1}}", 200, NULL,
                      AB_ERROR, "configuration", "invalidSettings"));
    json_decref(
        check("configure insecure base", vt->configure,
              "{\"profile\":\"duke\",\"settings\":{\"clientName\":\"app\",\"baseUrl\":\"http://duke.example/\"}}", 200,
              NULL, AB_ERROR, "configuration", "insecureUrl"));
    static const char *const bad_bases[] = { "http://127.evil.example/",
                                             "http://127.0.0.1.evil.example/",
                                             "http://[::1].example/",
                                             "ftp://127.0.0.1/",
                                             "https:///x",
                                             "http://127.0.0.1:1@evil.example/",
                                             "http://127.0.0.1@evil.example",
                                             "https://user:pw@duke.example/",
                                             "http://[::1]@evil.example/" };
    for (size_t i = 0; i < sizeof bad_bases / sizeof bad_bases[0]; i++) {
        json_t *x = json_pack("{s:s, s:{s:s, s:s}}", "profile", "duke", "settings", "clientName", "app", "baseUrl",
                              bad_bases[i]);
        char *xs = json_dumps(x, JSON_COMPACT);
        json_decref(x);
        json_decref(check(bad_bases[i], vt->configure, xs, 200, NULL, AB_ERROR, "configuration", "insecureUrl"));
        free(xs);
    }
    json_decref(check("configure IPv6 loopback", vt->configure,
                      "{\"profile\":\"duke\",\"settings\":{\"clientName\":\"app\",\"baseUrl\":\"http://[::1]:8080\"}}",
                      200, NULL, AB_OK, NULL, NULL));
    json_decref(check("configure apiBaseUrl not a string", vt->configure,
                      "{\"profile\":\"duke\",\"settings\":{\"clientName\":\"app\",\"apiBaseUrl\":[]}}", 200, NULL,
                      AB_ERROR, "configuration", "invalidSettings"));
    a = check("configure test", vt->configure,
              "{\"profile\":\"duke\",\"settings\":{\"clientName\":\"app\",\"environment\":\"test\"}}", 200, NULL, AB_OK,
              NULL, NULL);
    expect(strcmp(json_string_value(json_object_get(a, "loginUrl")),
                  "https://mobile-authorizer-test.oit.duke.edu/app/ios/login") == 0,
           "test login URL");
    json_decref(a);
    json_t *config =
        check("configure local", vt->configure,
              "{\"profile\":\"duke\",\"settings\":{\"clientName\":\"app\",\"baseUrl\":\"http://127.0.0.1:9/\","
              "\"apiBaseUrl\":\"http://127.0.0.1:9/api\"}}",
              200, NULL, AB_OK, NULL, NULL);
    expect(strcmp(json_string_value(json_object_get(config, "refreshUrl")), "http://127.0.0.1:9/app/ios/refresh") == 0,
           "refresh URL");
    expect(json_object_get(config, "apiBaseUrl") != NULL, "apiBaseUrl kept");

    /* begin_sign_in */
    char *in = hook_input(config, "{\"flow\":\"external\",\"state\":\"s\"}");
    a = check("begin", vt->begin_sign_in, in, 200, NULL, AB_OK, NULL, NULL);
    expect(strcmp(json_string_value(json_object_get(a, "callbackPrefix")), "http://127.0.0.1:9/app/ios/token") == 0,
           "callback prefix");
    json_decref(a);
    free(in);
    in = hook_input(config, "{\"flow\":\"device\",\"state\":\"s\"}");
    json_decref(check("begin device", vt->begin_sign_in, in, 200, NULL, AB_ERROR, "configuration", "unsupported"));
    free(in);
    json_t *empty = json_object();
    in = hook_input(empty, "{\"flow\":\"external\",\"state\":\"s\"}");
    json_decref(
        check("begin unconfigured", vt->begin_sign_in, in, 200, NULL, AB_ERROR, "configuration", "missingSetting"));
    free(in);

    /* complete_sign_in */
    char *token = jwt("{\"sub\":\"ab123\",\"name\":\"Alex\",\"exp\":1767229200}");
    char *token_noexp = jwt("{\"sub\":\"ab123\"}");
    char extra[2048];
    json_t *cases =
        json_pack("[[s,i,s,s], [s,i,s,s], [s,i,s,s], [s,i,s,s], [s,i,s,s], [s,i,s,s], [s,i,s,s], [s,i,s,s],"
                  " [s,i,s,s], [s,i,s,s], [s,i,s,s], [s,i,s,s]]",
                  /* url suffix after the prefix, status, kind, reason */
                  "?lang=en&session_token=s%2Bx%2F%3D&access_token={T}#frag", AB_OK, "", "", "?access_token={T}",
                  AB_ERROR, "definitive", "missingToken", "?session_token=abc", AB_ERROR, "definitive", "missingToken",
                  "?access_token={T}&session_token=", AB_ERROR, "definitive", "missingToken",
                  "?access_token={T}&session_token=a&session_token=b", AB_ERROR, "definitive", "invalidCallback",
                  "?access_token={T}&session_token=a%0Ab", AB_ERROR, "definitive", "invalidCallback",
                  "X?access_token={T}&session_token=a", AB_ERROR, "definitive", "invalidCallback",
                  "?access_token=not-a-jwt&session_token=a%25", AB_OK, "", "",
                  /* malformed escapes: refused, not kept as written */
                  "?access_token={T}&session_token=ab%ZZcd", AB_ERROR, "definitive", "invalidCallback",
                  "?access_token={T}&session_token=abc%4", AB_ERROR, "definitive", "invalidCallback",
                  "?x=%&access_token={T}&session_token=a", AB_ERROR, "definitive", "invalidCallback",
                  /* form encoding: a raw '+' is a space, which no token holds */
                  "?access_token={T}&session_token=a+b", AB_ERROR, "definitive", "invalidCallback");
    for (size_t i = 0; i < json_array_size(cases); i++) {
        json_t *c = json_array_get(cases, i);
        char url[1024];
        snprintf(url, sizeof url, "http://127.0.0.1:9/app/ios/token");
        /* the suffix with {T} replaced by the JWT (no printf: the suffixes hold '%' escapes) */
        const char *suffix = json_string_value(json_array_get(c, 0));
        const char *mark = strstr(suffix, "{T}");
        size_t used = strlen(url);
        size_t head = mark ? (size_t)(mark - suffix) : strlen(suffix);
        snprintf(url + used, sizeof url - used, "%.*s%s%s", (int)head, suffix, mark ? token : "", mark ? mark + 3 : "");
        json_t *x = json_pack("{s:s, s:s, s:s}", "flow", "external", "callbackUrl", url, "state", "s");
        char *xs = json_dumps(x, JSON_COMPACT);
        json_decref(x);
        snprintf(extra, sizeof extra, "%s", xs);
        free(xs);
        in = hook_input(config, extra);
        const char *kind = json_string_value(json_array_get(c, 2));
        const char *reason = json_string_value(json_array_get(c, 3));
        char what[64];
        snprintf(what, sizeof what, "complete case %zu", i);
        a = check(what, vt->complete_sign_in, in, 200, NULL, (ab_status)json_integer_value(json_array_get(c, 1)),
                  *kind ? kind : NULL, *reason ? reason : NULL);
        if (i == 0) {
            json_t *tokens = json_object_get(a, "tokens");
            expect(json_integer_value(json_object_get(tokens, "expiresAt")) == INT64_C(1767229200000),
                   "expiresAt from exp");
            expect(strcmp(json_string_value(json_object_get(tokens, "refreshToken")), "s+x/=") == 0,
                   "session token percent-decoded (%2B is a '+')");
            expect(strcmp(json_string_value(json_object_get(json_object_get(a, "account"), "id")), "ab123") == 0,
                   "account from sub");
        }
        if (i == 7) {
            expect(json_is_null(json_object_get(json_object_get(a, "tokens"), "expiresAt")), "no exp → null");
            expect(strcmp(json_string_value(json_object_get(json_object_get(a, "tokens"), "refreshToken")), "a%") == 0,
                   "an escaped '%' decoded");
        }
        json_decref(a);
        free(in);
    }
    json_decref(cases);
    in = hook_input(config, "{\"flow\":\"external\"}");
    json_decref(
        check("complete without URL", vt->complete_sign_in, in, 200, NULL, AB_ERROR, "definitive", "missingToken"));
    free(in);
    json_decref(check("complete with garbage input", vt->complete_sign_in, "not json", 200, NULL, AB_ERROR, "internal",
                      "badInput"));

    /* refresh */
    json_t *tokens = json_pack("{s:{s:s, s:s, s:s}}", "tokens", "accessToken", token, "refreshToken",
                               "s+x/=", "tokenType", "Bearer");
    char *tokens_text = json_dumps(tokens, JSON_COMPACT);
    json_decref(tokens);
    in = hook_input(config, tokens_text);
    char ok_body[2048];
    snprintf(ok_body, sizeof ok_body, "{\"data\":{\"access_token\":\"%s\",\"session_token\":\"new-session\"}}",
             token_noexp);
    a = check("refresh 200", vt->refresh, in, 200, ok_body, AB_OK, NULL, NULL);
    expect(strcmp(json_string_value(json_object_get(json_object_get(a, "tokens"), "refreshToken")), "new-session") == 0,
           "session token replaced");
    json_decref(a);
    json_decref(check("refresh 200 without data", vt->refresh, in, 200, "{\"access_token\":\"x\"}", AB_ERROR,
                      "transient", "badResponse"));
    json_decref(check("refresh 200 not JSON", vt->refresh, in, 200, "<html>", AB_ERROR, "transient", "badResponse"));
    json_decref(
        check("refresh 400", vt->refresh, in, 400, "{\"error\":\"x\"}", AB_ERROR, "definitive", "invalid_grant"));
    json_decref(check("refresh 401", vt->refresh, in, 401, "", AB_ERROR, "definitive", "invalid_grant"));
    json_decref(check("refresh 503", vt->refresh, in, 503, "<html>", AB_ERROR, "transient", "serverError"));
    json_decref(check("refresh 429", vt->refresh, in, 429, "", AB_ERROR, "transient", "rateLimited"));
    json_decref(check("refresh 404", vt->refresh, in, 404, "", AB_ERROR, "transient", "badResponse"));
    json_decref(check("refresh network", vt->refresh, in, 0, NULL, AB_ERROR, "transient", "refused"));
    json_decref(check("refresh cancelled", vt->refresh, in, -1, NULL, AB_CANCELLED, "cancelled", "cancelled"));

    /* revoke */
    a = check("revoke 200", vt->revoke, in, 200, "{}", AB_OK, NULL, NULL);
    expect(json_array_size(json_object_get(a, "revoked")) == 2, "both revoked");
    json_decref(a);
    a = check("revoke 500", vt->revoke, in, 500, "", AB_OK, NULL, NULL);
    expect(json_array_size(json_object_get(a, "failures")) == 1, "revoke failure listed");
    json_decref(a);
    json_decref(check("revoke network", vt->revoke, in, 0, NULL, AB_OK, NULL, NULL));
    json_decref(check("revoke cancelled", vt->revoke, in, -1, NULL, AB_CANCELLED, "cancelled", "cancelled"));
    free(in);
    in = hook_input(config, "{\"tokens\":{\"accessToken\":\"a\"}}");
    json_decref(
        check("refresh without session token", vt->refresh, in, 200, NULL, AB_ERROR, "definitive", "noRefreshToken"));
    a = check("revoke without session token", vt->revoke, in, 200, NULL, AB_OK, NULL, NULL);
    expect(json_array_size(json_object_get(a, "failures")) == 1, "revoke without a session token is a failure");
    json_decref(a);
    free(in);
    in = hook_input(empty, tokens_text);
    json_decref(check("refresh unconfigured", vt->refresh, in, 200, NULL, AB_ERROR, "configuration", "missingSetting"));
    free(in);

    free(tokens_text);
    free(token);
    free(token_noexp);
    json_decref(empty);
    json_decref(config);
    vt->shutdown(plugin);
    dlclose(lib);
    printf("%d checks, %d failed\n", checks, failures);
    return failures == 0 ? 0 : 1;
}
