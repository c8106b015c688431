/*
 * http.c — the host's HTTP transport (libAuthBridgeHTTP.so), over libcurl.
 *
 * The host dlopens this library on its first request (libcurl and TLS stay off the start-up
 * path) and calls the three entry points of authbridge_http.h with requests it has already
 * vetted and encoded (https, or http to a loopback IP literal; headers without line breaks).
 * It replaced a URLSession transport that pulled ~55 MB of Foundation and ICU into every
 * distribution, created $XDG_DATA_HOME/bin on first use, spun a core while it waited on a
 * silent server and had only an idle timeout.
 *
 * Threads. One worker thread, started by the first perform and never joined (the library is
 * never unloaded), owns the curl multi handle and every transfer on it: it adds new transfers,
 * drives them, and waits in curl_multi_poll — woken by curl_multi_wakeup when a request arrives
 * or is cancelled, never spinning. `done` is called exactly once per perform: on the worker when
 * the transfer ends, or on the caller's thread before perform returns when the request cannot
 * be read. perform and cancel may be called from any thread; `lock` guards the queue of new
 * transfers and each request's `cancelled` and `refs`. A request is freed when both the worker
 * (after `done`) and the host (`release`, once, after `done`) have let it go, so a late cancel
 * never touches freed memory.
 *
 * Deadlines. timeoutMs bounds the whole exchange (CURLOPT_TIMEOUT_MS): a server that answers
 * headers and then drips its body cannot hold a request past it. Connecting has its own, shorter
 * bound. Bodies over 16 MiB are refused (reason `tooLarge`).
 *
 * Messages never contain the URL's path or query, a header or a body (they may hold codes or
 * tokens): only the scheme, host and port.
 */

#define _GNU_SOURCE /* asprintf */
#include "authbridge_http.h"

#include <curl/curl.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#define MAX_BODY_BYTES (16u * 1024u * 1024u)
#define DEFAULT_TIMEOUT_MS 30000L
#define MAX_CONNECT_TIMEOUT_MS 10000L

typedef struct {
    char *bytes;
    size_t length, capacity;
} Buffer;

typedef struct Request {
    struct Request *next; /* in the queue of new transfers, then in the worker's list */
    CURL *easy;
    struct curl_slist *header_list;
    char *body;
    Buffer response;
    json_t *headers; /* of the last response head read (a 100 Continue's are replaced) */
    int too_large;
    char origin[512]; /* scheme://host[:port]/path, for messages: no user information, query or fragment */
    void *context;
    authbridge_http_done done;
    /* Guarded by `lock`. */
    int cancelled;
    int refs;
} Request;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t start_once = PTHREAD_ONCE_INIT;
static CURLM *multi;
static Request *queued;     /* new transfers, for the worker to add (guarded by `lock`) */
static Request *active;     /* the worker's transfers (worker only) */
static char ca_bundle[256]; /* a CA file found where libcurl's default is missing, or "" */
static char start_problem[128];

/* ── Small helpers ───────────────────────────────────────────────────────────── */

static int append(Buffer *buffer, const char *bytes, size_t count)
{
    if (buffer->length + count + 1 > buffer->capacity) {
        size_t capacity = buffer->capacity ? buffer->capacity : 4096;
        while (capacity < buffer->length + count + 1)
            capacity *= 2;
        char *grown = realloc(buffer->bytes, capacity);
        if (grown == NULL)
            return 0;
        buffer->bytes = grown;
        buffer->capacity = capacity;
    }
    memcpy(buffer->bytes + buffer->length, bytes, count);
    buffer->length += count;
    buffer->bytes[buffer->length] = 0;
    return 1;
}

/* The bytes as UTF-8 text: every invalid sequence becomes U+FFFD (as Swift's
 * String(decoding:as:) does), since JSON strings must be valid UTF-8. */
static json_t *utf8_string(const unsigned char *bytes, size_t length)
{
    Buffer text = { 0 };
    size_t i = 0;
    while (i < length) {
        unsigned char c = bytes[i];
        size_t need = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
        int valid = need > 0 && i + need <= length;
        for (size_t k = 1; valid && k < need; k++)
            valid = (bytes[i + k] & 0xC0) == 0x80;
        if (valid && need == 2)
            valid = c >= 0xC2;
        if (valid && need == 3) {
            unsigned int point = ((c & 0x0Fu) << 12) | ((bytes[i + 1] & 0x3Fu) << 6) | (bytes[i + 2] & 0x3Fu);
            valid = point >= 0x800 && (point < 0xD800 || point > 0xDFFF);
        }
        if (valid && need == 4) {
            unsigned int point = ((c & 0x07u) << 18) | ((bytes[i + 1] & 0x3Fu) << 12) | ((bytes[i + 2] & 0x3Fu) << 6) |
                                 (bytes[i + 3] & 0x3Fu);
            valid = point >= 0x10000 && point <= 0x10FFFF;
        }
        if (!(valid ? append(&text, (const char *)bytes + i, need) : append(&text, "\xEF\xBF\xBD", 3))) {
            free(text.bytes);
            return NULL;
        }
        i += valid ? need : 1;
    }
    json_t *value = json_stringn(text.bytes ? text.bytes : "", text.length);
    free(text.bytes);
    return value;
}

static void answer(Request *request, json_t *value)
{
    char *text = value ? json_dumps(value, JSON_COMPACT) : NULL;
    if (text == NULL) {
        static const char fallback[] =
            "{\"error\":{\"reason\":\"network\",\"message\":\"the answer could not be encoded\"}}";
        request->done(request->context, (const uint8_t *)fallback, sizeof fallback - 1);
    } else {
        request->done(request->context, (const uint8_t *)text, strlen(text));
        free(text);
    }
    json_decref(value);
}

static void fail(Request *request, const char *reason, const char *message)
{
    answer(request, json_pack("{s:{s:s,s:s}}", "error", "reason", reason, "message", message));
}

static void unref(Request *request)
{
    pthread_mutex_lock(&lock);
    int remaining = --request->refs;
    pthread_mutex_unlock(&lock);
    if (remaining > 0)
        return;
    if (request->easy)
        curl_easy_cleanup(request->easy);
    curl_slist_free_all(request->header_list);
    free(request->body);
    free(request->response.bytes);
    json_decref(request->headers);
    free(request);
}

/* ── libcurl callbacks (on the worker) ────────────────────────────────────────── */

static size_t on_body(char *bytes, size_t size, size_t count, void *user)
{
    Request *request = user;
    size_t total = size * count;
    if (request->response.length + total > MAX_BODY_BYTES) {
        request->too_large = 1;
        return 0; /* CURLE_WRITE_ERROR */
    }
    return append(&request->response, bytes, total) ? total : 0;
}

static size_t on_header(char *bytes, size_t size, size_t count, void *user)
{
    Request *request = user;
    size_t total = size * count;
    if (total >= 5 && strncmp(bytes, "HTTP/", 5) == 0) { /* a new response head (after 100 Continue…) */
        json_object_clear(request->headers);
        return total;
    }
    const char *colon = memchr(bytes, ':', total);
    if (colon == NULL || colon == bytes)
        return total;
    char name[256];
    size_t name_length = (size_t)(colon - bytes);
    if (name_length >= sizeof name)
        return total;
    for (size_t i = 0; i < name_length; i++) {
        char c = bytes[i];
        name[i] = (c >= 'A' && c <= 'Z') ? (char)(c - 'A' + 'a') : c;
    }
    name[name_length] = 0;
    const char *value = colon + 1, *end = bytes + total;
    while (value < end && (*value == ' ' || *value == '\t'))
        value++;
    while (end > value && (end[-1] == '\r' || end[-1] == '\n' || end[-1] == ' ' || end[-1] == '\t'))
        end--;
    json_t *text = utf8_string((const unsigned char *)value, (size_t)(end - value));
    if (text == NULL)
        return 0;
    json_t *previous = json_object_get(request->headers, name);
    if (previous != NULL) { /* repeated fields are joined with ", " (bridge-spec: ResponseHeaders) */
        Buffer joined = { 0 };
        int ok = append(&joined, json_string_value(previous), json_string_length(previous)) &&
                 append(&joined, ", ", 2) && append(&joined, json_string_value(text), json_string_length(text));
        json_decref(text);
        text = ok ? json_stringn(joined.bytes, joined.length) : NULL;
        free(joined.bytes);
        if (text == NULL)
            return 0;
    }
    json_object_set_new(request->headers, name, text);
    return total;
}

/* ── Finishing a transfer ─────────────────────────────────────────────────────── */

static void finish(Request *request, CURLcode code)
{
    char message[512];
    const char *reason;
    switch (code) {
    case CURLE_OK: {
        long status = 0;
        curl_easy_getinfo(request->easy, CURLINFO_RESPONSE_CODE, &status);
        json_t *body = utf8_string((const unsigned char *)(request->response.bytes ? request->response.bytes : ""),
                                   request->response.length);
        if (body == NULL) {
            fail(request, "network", "out of memory reading the answer");
            return;
        }
        answer(request,
               json_pack("{s:I,s:O,s:o}", "status", (json_int_t)status, "headers", request->headers, "body", body));
        return;
    }
    case CURLE_OPERATION_TIMEDOUT:
        reason = "timeout";
        snprintf(message, sizeof message, "%s did not answer in time", request->origin);
        break;
    case CURLE_COULDNT_CONNECT:
        reason = "refused";
        snprintf(message, sizeof message, "%s refused the connection", request->origin);
        break;
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_RESOLVE_PROXY:
        reason = "dns";
        snprintf(message, sizeof message, "the name of %s could not be resolved", request->origin);
        break;
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CERTPROBLEM:
    case CURLE_SSL_CIPHER:
    case CURLE_SSL_CACERT_BADFILE:
    case CURLE_SSL_ISSUER_ERROR:
    case CURLE_SSL_CRL_BADFILE:
    case CURLE_SSL_PINNEDPUBKEYNOTMATCH:
    case CURLE_SSL_INVALIDCERTSTATUS:
    case CURLE_SSL_ENGINE_INITFAILED:
    case CURLE_SSL_SHUTDOWN_FAILED:
    case CURLE_USE_SSL_FAILED:
        reason = "tls";
        snprintf(message, sizeof message, "the TLS connection to %s failed (%s)", request->origin,
                 curl_easy_strerror(code));
        break;
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_PARTIAL_FILE:
        reason = "reset";
        snprintf(message, sizeof message, "the connection to %s was reset", request->origin);
        break;
    case CURLE_WEIRD_SERVER_REPLY:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
    case CURLE_BAD_CONTENT_ENCODING:
    case CURLE_UNSUPPORTED_PROTOCOL:
    case CURLE_TOO_MANY_REDIRECTS:
        reason = "protocol";
        snprintf(message, sizeof message, "%s did not answer in HTTP (%s)", request->origin, curl_easy_strerror(code));
        break;
    case CURLE_WRITE_ERROR:
    case CURLE_OUT_OF_MEMORY:
        if (request->too_large) {
            reason = "tooLarge";
            snprintf(message, sizeof message, "the answer from %s is larger than %u MiB", request->origin,
                     MAX_BODY_BYTES / (1024u * 1024u));
            break;
        }
        /* fall through */
    default:
        reason = "network";
        snprintf(message, sizeof message, "the request to %s failed (%s)", request->origin, curl_easy_strerror(code));
        break;
    }
    fail(request, reason, message);
}

/* ── The worker ───────────────────────────────────────────────────────────────── */

static void *worker(void *unused)
{
    (void)unused;
    pthread_setname_np(pthread_self(), "authbridge-http");
    for (;;) {
        pthread_mutex_lock(&lock);
        Request *incoming = queued;
        queued = NULL;
        pthread_mutex_unlock(&lock);
        while (incoming != NULL) {
            Request *request = incoming;
            incoming = incoming->next;
            request->next = active;
            active = request;
            curl_multi_add_handle(multi, request->easy);
        }

        /* Cancelled transfers end now, answered `cancelled`. */
        for (Request **link = &active; *link != NULL;) {
            Request *request = *link;
            pthread_mutex_lock(&lock);
            int cancelled = request->cancelled;
            pthread_mutex_unlock(&lock);
            if (cancelled) {
                *link = request->next;
                curl_multi_remove_handle(multi, request->easy);
                fail(request, "cancelled", "the request was cancelled");
                unref(request);
            } else {
                link = &request->next;
            }
        }

        int running = 0;
        curl_multi_perform(multi, &running);
        CURLMsg *message;
        int left;
        while ((message = curl_multi_info_read(multi, &left)) != NULL) {
            if (message->msg != CURLMSG_DONE)
                continue;
            for (Request **link = &active; *link != NULL; link = &(*link)->next) {
                Request *request = *link;
                if (request->easy == message->easy_handle) {
                    CURLcode code = message->data.result;
                    *link = request->next;
                    curl_multi_remove_handle(multi, request->easy);
                    finish(request, code);
                    unref(request);
                    break;
                }
            }
        }
        /* Sleeps until a socket is ready, curl's next timer, or curl_multi_wakeup. */
        curl_multi_poll(multi, NULL, 0, 60000, NULL);
    }
    return NULL;
}

static int file_exists(const char *path)
{
    return path != NULL && path[0] != 0 && access(path, R_OK) == 0;
}

/* libcurl's compiled-in CA file is Debian's; where this library runs on another distribution
 * (a wheel grafts Debian's libcurl), find the system's bundle in its usual places. */
static void find_ca_bundle(void)
{
    if (getenv("SSL_CERT_FILE") || getenv("SSL_CERT_DIR") || getenv("CURL_CA_BUNDLE"))
        return;
    CURL *probe = curl_easy_init();
    char *compiled = NULL;
    if (probe != NULL) {
        curl_easy_getinfo(probe, CURLINFO_CAINFO, &compiled);
        if (file_exists(compiled)) {
            curl_easy_cleanup(probe);
            return;
        }
        curl_easy_cleanup(probe);
    }
    static const char *const candidates[] = {
        "/etc/ssl/certs/ca-certificates.crt",                /* Debian, Ubuntu, Arch, Gentoo */
        "/etc/pki/tls/certs/ca-bundle.crt",                  /* Fedora, RHEL */
        "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem", /* Fedora, RHEL (newer) */
        "/etc/ssl/ca-bundle.pem",                            /* openSUSE */
        "/etc/ssl/cert.pem",                                 /* Alpine, others */
    };
    for (size_t i = 0; i < sizeof candidates / sizeof candidates[0]; i++) {
        if (file_exists(candidates[i])) {
            snprintf(ca_bundle, sizeof ca_bundle, "%s", candidates[i]);
            return;
        }
    }
}

static void start(void)
{
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK || (multi = curl_multi_init()) == NULL) {
        snprintf(start_problem, sizeof start_problem, "libcurl could not be initialised");
        return;
    }
    find_ca_bundle();
    pthread_t thread;
    pthread_attr_t attributes;
    pthread_attr_init(&attributes);
    pthread_attr_setdetachstate(&attributes, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&thread, &attributes, worker, NULL) != 0)
        snprintf(start_problem, sizeof start_problem, "the HTTP thread could not be started");
    pthread_attr_destroy(&attributes);
}

/* ── Building a transfer ──────────────────────────────────────────────────────── */

static int is_loopback_host(const char *host)
{
    return strncmp(host, "127.", 4) == 0 || strcmp(host, "[::1]") == 0 || strcmp(host, "::1") == 0;
}

/* origin = scheme://host[:port]/path of url, for messages: nothing of the user information, query or
 * fragment (a query may carry a code or a token). */
static void origin_of(const char *url, char *origin, size_t size, int *loopback)
{
    *loopback = 0;
    const char *authority = strstr(url, "://");
    if (authority == NULL) {
        snprintf(origin, size, "the server");
        return;
    }
    int scheme_length = (int)(authority - url) + 3;
    authority += 3;
    size_t length = strcspn(authority, "/?#");
    const char *at = memchr(authority, '@', length);
    if (at != NULL) {
        length -= (size_t)(at + 1 - authority);
        authority = at + 1;
    }
    snprintf(origin, size, "%.*s%.*s", scheme_length, url, (int)length, authority);
    size_t host_length = length;
    if (authority[0] == '[') {
        const char *close = memchr(authority, ']', length);
        host_length = close ? (size_t)(close - authority + 1) : length;
    } else {
        const char *colon = memchr(authority, ':', length);
        if (colon)
            host_length = (size_t)(colon - authority);
    }
    char host[300];
    if (host_length < sizeof host) {
        memcpy(host, authority, host_length);
        host[host_length] = 0;
        *loopback = is_loopback_host(host);
    }
    const char *path = authority + length;
    size_t path_length = strcspn(path, "?#");
    size_t used = strlen(origin);
    if (path_length > 0 && used < size - 1)
        snprintf(origin + used, size - used, "%.*s", (int)path_length, path);
}

static Request *build(const uint8_t *bytes, size_t length, void *context, authbridge_http_done done,
                      const char **problem)
{
    json_error_t error;
    json_t *spec = json_loadb((const char *)bytes, length, 0, &error);
    const char *method = NULL, *url = NULL, *body = NULL;
    json_t *headers = NULL;
    json_int_t timeout = DEFAULT_TIMEOUT_MS;
    size_t body_length = 0;
    if (spec == NULL || json_unpack(spec, "{s:s,s:s,s?o,s?s%,s?I}", "method", &method, "url", &url, "headers", &headers,
                                    "body", &body, &body_length, "timeoutMs", &timeout) != 0) {
        json_decref(spec);
        *problem = "the HTTP request could not be read";
        return NULL;
    }
    Request *request = calloc(1, sizeof *request);
    if (request == NULL || (request->easy = curl_easy_init()) == NULL || (request->headers = json_object()) == NULL) {
        if (request)
            free(request);
        json_decref(spec);
        *problem = "out of memory";
        return NULL;
    }
    request->refs = 2; /* the worker's and the host's */
    request->context = context;
    request->done = done;
    int loopback;
    origin_of(url, request->origin, sizeof request->origin, &loopback);

    CURL *easy = request->easy;
    curl_easy_setopt(easy, CURLOPT_URL, url);
    curl_easy_setopt(easy, CURLOPT_PRIVATE, request);
    curl_easy_setopt(easy, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(easy, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(easy, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(easy, CURLOPT_FOLLOWLOCATION, 0L); /* a 3xx is the answer: never followed */
    curl_easy_setopt(easy, CURLOPT_NETRC, (long)CURL_NETRC_IGNORED);
    curl_easy_setopt(easy, CURLOPT_ACCEPT_ENCODING, "");
    if (timeout < 1)
        timeout = 1;
    curl_easy_setopt(easy, CURLOPT_TIMEOUT_MS, (long)timeout);
    curl_easy_setopt(easy, CURLOPT_CONNECTTIMEOUT_MS,
                     (long)(timeout < MAX_CONNECT_TIMEOUT_MS ? timeout : MAX_CONNECT_TIMEOUT_MS));
    if (loopback)
        curl_easy_setopt(easy, CURLOPT_NOPROXY, "*"); /* loopback never goes through a proxy */
    if (ca_bundle[0] != 0)
        curl_easy_setopt(easy, CURLOPT_CAINFO, ca_bundle);
    curl_easy_setopt(easy, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(easy, CURLOPT_WRITEDATA, request);
    curl_easy_setopt(easy, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(easy, CURLOPT_HEADERDATA, request);

    if (strcmp(method, "GET") == 0 && body == NULL) {
        curl_easy_setopt(easy, CURLOPT_HTTPGET, 1L);
    } else if (strcmp(method, "HEAD") == 0) {
        curl_easy_setopt(easy, CURLOPT_NOBODY, 1L);
    } else if (strcmp(method, "POST") != 0) {
        curl_easy_setopt(easy, CURLOPT_CUSTOMREQUEST, method); /* POST follows from the body */
    }
    if (body != NULL || strcmp(method, "POST") == 0) {
        if (body == NULL)
            body = "";
        request->body = malloc(body_length + 1);
        if (request->body != NULL) {
            memcpy(request->body, body, body_length);
            request->body[body_length] = 0;
        }
        curl_easy_setopt(easy, CURLOPT_POSTFIELDS, request->body);
        curl_easy_setopt(easy, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)body_length);
    }
    int has_agent = 0, has_expect = 0;
    const char *name;
    json_t *value;
    json_object_foreach(headers, name, value)
    {
        if (!json_is_string(value))
            continue;
        has_agent |= strcasecmp(name, "User-Agent") == 0;
        has_expect |= strcasecmp(name, "Expect") == 0;
        char *line = NULL;
        /* "Name;" sends an empty value (curl drops "Name:" with nothing after it). */
        int printed = json_string_length(value) == 0 ? asprintf(&line, "%s;", name)
                                                     : asprintf(&line, "%s: %s", name, json_string_value(value));
        if (printed >= 0 && line != NULL) {
            request->header_list = curl_slist_append(request->header_list, line);
            free(line);
        }
    }
    if (!has_agent)
        request->header_list = curl_slist_append(request->header_list, "User-Agent: authbridge");
    if (!has_expect) /* no 100-continue round trip for the small bodies OAuth sends */
        request->header_list = curl_slist_append(request->header_list, "Expect:");
    curl_easy_setopt(easy, CURLOPT_HTTPHEADER, request->header_list);
    json_decref(spec);
    return request;
}

/* ── Entry points ─────────────────────────────────────────────────────────────── */

void *authbridge_http_perform_v1(const uint8_t *bytes, size_t length, void *context, authbridge_http_done done)
{
    pthread_once(&start_once, start);
    const char *problem = start_problem[0] ? start_problem : NULL;
    Request *request = problem ? NULL : build(bytes, length, context, done, &problem);
    if (request == NULL) {
        /* A handle for cancel/release all the same: a request that is already done. */
        Request *finished = calloc(1, sizeof *finished);
        Request stand_in = { .context = context, .done = done };
        fail(&stand_in, start_problem[0] ? "network" : "invalidRequest", problem ? problem : "out of memory");
        if (finished != NULL)
            finished->refs = 1;
        return finished;
    }
    pthread_mutex_lock(&lock);
    request->next = queued;
    queued = request;
    pthread_mutex_unlock(&lock);
    curl_multi_wakeup(multi);
    return request;
}

void authbridge_http_cancel_v1(void *handle)
{
    Request *request = handle;
    if (request == NULL)
        return;
    pthread_mutex_lock(&lock);
    request->cancelled = 1;
    pthread_mutex_unlock(&lock);
    if (multi != NULL)
        curl_multi_wakeup(multi);
}

void authbridge_http_release_v1(void *handle)
{
    if (handle != NULL)
        unref(handle);
}
