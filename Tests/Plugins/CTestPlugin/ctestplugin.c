/*
 * ctestplugin.c — the AuthBridge C test provider ("ctest").
 *
 * A deterministic provider plugin written against the C ABI
 * (Sources/CAuthBridgePlugin/include/authbridge/plugin.h) with jansson. It
 * exercises every ABI entry from C — init, shutdown, the nine hooks — and every
 * host service (log, now_ms, set_result, set_error, emit, http, standard,
 * is_cancelled, and ABI 1.1's fail and query_value), so that the host's
 * contract tests can assert on its answers. Built for ABI 1.1; its id and
 * version are its manifest's (build.sh writes it).
 *
 * Build (or use build.sh beside this file):
 *   gcc -shared -fPIC -O2 -Wall -Wextra -I Sources/CAuthBridgePlugin/include \
 *       -o libauthbridge-ctest.so Tests/Plugins/CTestPlugin/ctestplugin.c -ljansson
 *
 * Compile-time variants for loader tests (-D...):
 *   CTEST_PRINT_STDOUT  init, shutdown and every hook printf to stdout (+ fflush)
 *   CTEST_INIT_FAILS    init returns AB_ERROR, reason "init refused by test"
 *   CTEST_ABI_MAJOR_2   the entry reports abi_major 2
 *   CTEST_VERSION=v     the entry reports version "v" (default: NULL, the manifest's)
 *   CTEST_NO_ENTRY      no authbridge_plugin_v1 symbol (another name is exported)
 *   CTEST_WRONG_ID      the entry reports id "other"
 *   CTEST_ID=name       the entry reports id "name" (a bare token, e.g. ctest2)
 *   CTEST_NO_FLOWS      describe lists no sign-in flow ("flows": [])
 *   CTEST_DESCRIBE_DESCRIPTION  describe states a description other than the manifest's
 *
 * Misbehaving variants for the isolation tests (Tests/contract/test_isolation.py).
 * Each misbehaves in check_session unless another hook is named, so a
 * session-flow sign-in works first; all but CTEST_INLINE_GATE leave
 * check_session out of inlineHooks, so the host runs it on a worker thread
 * (in-process) under its deadline. Data comes from profile settings, never
 * the environment (an isolated plugin's runner gets a filtered one):
 *   CTEST_CRASH_SEGV       writes through a null pointer (SIGSEGV)
 *   CTEST_CRASH_ABORT      abort() (SIGABRT)
 *   CTEST_CRASH_EXIT3      _exit(3)
 *   CTEST_CRASH_ON_BOOM    writes through a null pointer, only for session id "boom"
 *   CTEST_HANG             never returns (pause() in a loop; ignores cancellation)
 *   CTEST_HANG_IN_DESCRIBE describe never returns
 *   CTEST_HANG_IN_REFRESH  refresh never returns
 *   CTEST_CLOSE_STDOUT     closes fd 1, then printf's to stdout, then answers valid
 *   CTEST_OOM              allocates and touches 64 MiB blocks until the process is
 *                          stopped; when malloc fails it keeps retrying. Stops
 *                          allocating at CTEST_OOM_CAP_MB (default 1536) and then
 *                          hangs, so that a host without a memory limit cannot
 *                          take the test machine down
 *   CTEST_LINGERING_CHILD  fork()s a child named ctest-linger (its comm) that
 *                          pause()s for ever, holding every descriptor it
 *                          inherited, then answers valid (in a runner's sandbox
 *                          no file can be written: the tests find the child by name)
 *   CTEST_INLINE_GATE      check_session stays inline; for session id "gated" it
 *                          opens the FIFO settings.gate and reads one byte (blocks
 *                          until the test writes), then answers valid
 *   CTEST_ESCAPE           check_session tries to get out of the runner's sandbox
 *                          and logs (warning) one line per attempt, "sandbox probe
 *                          NAME: denied: <strerror>" or "sandbox probe NAME: allowed",
 *                          never what it read: read the files settings.keyFile,
 *                          settings.record and settings.sshKey; connect to the Unix
 *                          socket settings.agentSocket and to 127.0.0.1 port
 *                          settings.tcpPort; ptrace-attach settings.tracee (a pid);
 *                          fork a child (named ctest-escapee) that calls setsid()
 *                          and then lingers; then answers valid
 *
 * Ownership: everything the host lends (hook input, http/standard answers) is
 * borrowed and never freed here; every jansson value and string this file
 * creates is released before the hook returns (the host copies what it gets).
 * Thread safety: the only state is the immutable struct built by init.
 */
#define _GNU_SOURCE /* memmem, nanosleep, pause */

#include <authbridge/plugin.h>
#include <authbridge/plugin_jansson.h>
#include <jansson.h>

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define AB_XSTR_(x) #x
#define AB_XSTR(x) AB_XSTR_(x)

#if defined(CTEST_WRONG_ID)
#define CTEST_PLUGIN_ID "other"
#elif defined(CTEST_ID)
#define CTEST_PLUGIN_ID AB_XSTR(CTEST_ID)
#else
#define CTEST_PLUGIN_ID "ctest"
#endif
#ifdef CTEST_VERSION
#define CTEST_ENTRY_VERSION AB_XSTR(CTEST_VERSION)
#else
#define CTEST_ENTRY_VERSION NULL
#endif

#define HOUR_MS 3600000
#define SLOW_POLL_MS 10
#define SLOW_MAX_MS 30000

#ifdef CTEST_PRINT_STDOUT
#define TRACE(what)                                 \
    do {                                            \
        printf("ctest stdout noise: %s\n", (what)); \
        fflush(stdout);                             \
    } while (0)
#else
#define TRACE(what) ((void)0)
#endif

/* The variants that misbehave in check_session (or another hook) run it off
 * the caller's thread: only CTEST_INLINE_GATE keeps it inline. */
#if defined(CTEST_CRASH_SEGV) || defined(CTEST_CRASH_ABORT) || defined(CTEST_CRASH_EXIT3) ||  \
    defined(CTEST_CRASH_ON_BOOM) || defined(CTEST_HANG) || defined(CTEST_HANG_IN_DESCRIBE) || \
    defined(CTEST_HANG_IN_REFRESH) || defined(CTEST_CLOSE_STDOUT) || defined(CTEST_OOM) ||    \
    defined(CTEST_LINGERING_CHILD) || defined(CTEST_ESCAPE)
#define CTEST_NOT_INLINE
#endif

#ifndef CTEST_OOM_CAP_MB
#define CTEST_OOM_CAP_MB 1536
#endif

/* The plugin's state: set once by init, read-only afterwards. */
struct ab_plugin {
    const ab_host_api *host;
};

/* ── Answer helpers ─────────────────────────────────────────────────────── */

/* Sets a constant JSON text as the result (no allocation: hot paths). */
static ab_status reply_static(const ab_host_api *host, ab_call *call, const char *text)
{
    host->set_result(call, (ab_json){ text, strlen(text) });
    return AB_OK;
}

/* profile.config.KEY, falling back to profile.settings.KEY. */
static const char *profile_str(json_t *input, const char *key)
{
    json_t *profile = json_object_get(input, "profile");
    const char *v = ab_string_at(json_object_get(profile, "config"), key);
    return v ? v : ab_string_at(json_object_get(profile, "settings"), key);
}

static int starts_with(const char *s, const char *prefix)
{
    return s != NULL && strncmp(s, prefix, strlen(prefix)) == 0;
}

/* ── URL helpers ────────────────────────────────────────────────────────── */

/* The query parameter `name` of `url` read by the host (query_value: by name,
 * form-decoded, the whole query well formed) as a jansson string (new
 * reference), or NULL when absent, empty, not UTF-8 once decoded, or when the
 * query is malformed (*malformed is then set). */
static json_t *query_param(const ab_host_api *host, ab_call *call, const char *url, const char *name, int *malformed)
{
    const char *value = NULL;
    size_t length = 0;
    if (host->query_value(call, url, strlen(url), name, &value, &length, NULL) == AB_ERROR)
        *malformed = 1;
    return value != NULL && length > 0 ? json_stringn(value, length) : NULL;
}

/* Percent-encodes everything but RFC 3986 unreserved characters (malloc'd). */
static char *percent_encode(const char *s)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t n = strlen(s);
    char *out = malloc(3 * n + 1), *o = out;
    if (out == NULL)
        return NULL;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if ((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '-' ||
            *p == '.' || *p == '_' || *p == '~') {
            *o++ = (char)*p;
        } else {
            *o++ = '%';
            *o++ = hex[*p >> 4];
            *o++ = hex[*p & 15];
        }
    }
    *o = '\0';
    return out;
}

/* Length of `server` without trailing slashes (so "<server>/login" is clean). */
static int trimmed_len(const char *server)
{
    size_t n = strlen(server);
    while (n > 0 && server[n - 1] == '/')
        n--;
    return (int)n;
}

/* ── Misbehaviour (the isolation tests' variants) ───────────────────────── */

/* Never returns, whatever happens to the call (cancellation included). */
__attribute__((noreturn, unused)) static void hang_forever(void)
{
    for (;;)
        pause();
}

#ifdef CTEST_OOM
/* Allocates and touches 64 MiB at a time until the process is stopped; a
 * failed malloc is retried (a plugin that does not give up), up to a cap. */
static void allocate_until_stopped(void)
{
    const size_t block = (size_t)64 << 20;
    const struct timespec tick = { 0, 1000000L };
    size_t total = 0;
    while (total < (size_t)CTEST_OOM_CAP_MB << 20) {
        char *p = malloc(block);
        if (p == NULL) {
            nanosleep(&tick, NULL);
            continue;
        }
        memset(p, 0xA5, block); /* never freed: the point is to keep it */
        total += block;
    }
    hang_forever();
}
#endif

#ifdef CTEST_LINGERING_CHILD
/* Forks a child named ctest-linger that lingers (pause() for ever, every
 * inherited descriptor open). Returns 0, or -1 on failure. */
static int spawn_lingering_child(void)
{
    pid_t child = fork();
    if (child == 0) { /* only async-signal-safe calls after fork() in a threaded process */
        prctl(PR_SET_NAME, "ctest-linger", 0, 0, 0);
        for (;;)
            pause();
    }
    return child > 0 ? 0 : -1;
}
#endif

#ifdef CTEST_ESCAPE
/* Logs how one attempt went: `error` 0 means it worked. */
static void report(const ab_host_api *host, ab_call *call, const char *name, int error)
{
    char line[160];
    if (error == 0)
        snprintf(line, sizeof line, "sandbox probe %s: allowed", name);
    else
        snprintf(line, sizeof line, "sandbox probe %s: denied: %s", name, strerror(error));
    ab_log_text(host, call, AB_LOG_WARNING, line);
}

/* 0 when one byte of `path` could be read (the byte is dropped), else the errno. */
static int read_file(const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return errno;
    char byte;
    int error = read(fd, &byte, 1) == 1 ? 0 : (errno != 0 ? errno : EIO);
    close(fd);
    return error;
}

/* 0 when a socket of `family` connected to `address`, else the errno. */
static int connect_to(int family, const struct sockaddr *address, socklen_t length)
{
    int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return errno;
    int error = connect(fd, address, length) == 0 ? 0 : errno;
    close(fd);
    return error;
}

static void escape(const ab_host_api *host, ab_call *call, json_t *in)
{
    const char *files[][2] = { { "keyFile", NULL }, { "record", NULL }, { "sshKey", NULL } };
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        const char *path = profile_str(in, files[i][0]);
        if (path != NULL)
            report(host, call, files[i][0], read_file(path));
    }
    const char *agent = profile_str(in, "agentSocket");
    if (agent != NULL) {
        struct sockaddr_un address = { .sun_family = AF_UNIX };
        snprintf(address.sun_path, sizeof address.sun_path, "%s", agent);
        report(host, call, "agentSocket", connect_to(AF_UNIX, (struct sockaddr *)&address, sizeof address));
    }
    const char *port = profile_str(in, "tcpPort");
    if (port != NULL) {
        struct sockaddr_in address = { .sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(port)) };
        address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        report(host, call, "tcpPort", connect_to(AF_INET, (struct sockaddr *)&address, sizeof address));
    }
    const char *tracee = profile_str(in, "tracee");
    if (tracee != NULL) {
        pid_t target = (pid_t)atoi(tracee);
        int error = ptrace(PTRACE_ATTACH, target, NULL, NULL) == 0 ? 0 : errno;
        if (error == 0)
            ptrace(PTRACE_DETACH, target, NULL, NULL);
        report(host, call, "tracee", error);
    }
    /* The child says through a pipe how its setsid went, then lingers. */
    int pipe_fds[2];
    if (pipe2(pipe_fds, O_CLOEXEC) != 0) {
        report(host, call, "setsid", errno);
        return;
    }
    pid_t child = fork();
    if (child == 0) { /* only async-signal-safe calls after fork() in a threaded process */
        prctl(PR_SET_NAME, "ctest-escapee", 0, 0, 0);
        int error = setsid() < 0 ? errno : 0;
        if (write(pipe_fds[1], &error, sizeof error) != sizeof error)
            _exit(1);
        for (;;)
            pause();
    }
    close(pipe_fds[1]);
    int error = child < 0 ? errno : EIO;
    if (child > 0 && read(pipe_fds[0], &error, sizeof error) != sizeof error)
        error = EIO;
    close(pipe_fds[0]);
    report(host, call, "setsid", error);
}
#endif

#ifdef CTEST_INLINE_GATE
/* Blocks until a byte can be read from the FIFO `gate` (the test writes it). */
static int wait_at_gate(const char *gate)
{
    int fd = open(gate, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    char byte;
    ssize_t n = read(fd, &byte, 1);
    close(fd);
    return n == 1 ? 0 : -1;
}
#endif

/* ── Lifecycle ──────────────────────────────────────────────────────────── */

static ab_status ctest_init(const ab_host_api *host, ab_plugin **plugin, const char **error)
{
    TRACE("init");
#ifdef CTEST_INIT_FAILS
    ab_log_text(host, NULL, AB_LOG_WARNING, "ctest: refusing init (CTEST_INIT_FAILS)");
    *plugin = NULL;
    *error = "init refused by test";
    return AB_ERROR;
#else
    /* Seed jansson's hash function now, on the single init thread, so that
     * hooks running concurrently never race on its lazy initialisation
     * (a no-op when the host has already seeded the shared libjansson). */
    json_object_seed(0);
    ab_plugin *state = malloc(sizeof *state);
    if (state == NULL) {
        *error = "ctest: out of memory";
        return AB_ERROR;
    }
    state->host = host;
    *plugin = state;
    char msg[160];
    snprintf(msg, sizeof msg, "ctest initialised (host %s, ABI %u.%u)", host->host_version ? host->host_version : "?",
             (unsigned)host->abi_major, (unsigned)host->abi_minor);
    ab_log_text(host, NULL, AB_LOG_INFO, msg);
    return AB_OK;
#endif
}

static void ctest_shutdown(ab_plugin *plugin)
{
    TRACE("shutdown");
    if (plugin == NULL)
        return;
    ab_log_text(plugin->host, NULL, AB_LOG_DEBUG, "ctest shutting down");
    free(plugin);
}

/* ── Hooks ──────────────────────────────────────────────────────────────── */

/* The body of a hook that reads its input as a JSON object: `in` is owned by
 * with_input, borrowed until the body returns. */
typedef ab_status (*hook_body)(const ab_host_api *host, ab_call *call, json_t *in);

/* Runs the body of `hook` on its input, parsed (the host is answered badInput
 * when it is not an object), and releases the input once the body has
 * answered. The entry points, by the vtable, are one line each. */
static ab_status with_input(const char *hook, ab_plugin *plugin, ab_call *call, ab_json input, hook_body body)
{
    (void)hook; /* TRACE reads it only in the CTEST_PRINT_STDOUT variant */
    TRACE(hook);
    json_t *in = ab_input_object(plugin->host, call, input);
    if (in == NULL)
        return AB_ERROR;
    ab_status st = body(plugin->host, call, in);
    json_decref(in);
    return st;
}

static ab_status ctest_describe(ab_plugin *plugin, ab_call *call, ab_json input)
{
    (void)input;
    TRACE("describe");
#ifdef CTEST_HANG_IN_DESCRIBE
    hang_forever();
#endif
    json_t *d = json_pack("{s:s, s:[s,s], s:b, s:[s,s,s], s:[s], s:{s:s, s:{s:{s:s, s:s}, s:{s:s, s:s}}, s:[s]}}",
                          "displayName", "C test provider", "flows", "external", "session",
                          /* Like Duke's authorizer: the callback carries the tokens and no OAuth state. */
                          "callbackState", 0, "capabilities", "revoke", "checkSession", "fetch",
                          /* check_session is local here (no host->http): run it on the caller's thread */
                          "inlineHooks", "check_session", "settings", "type", "object", "properties", "server", "type",
                          "string", "description", "Base URL of the test server", "probeUrl", "type", "string",
                          "description", "URL fetched during the \"http\" session sign-in", "required", "server");
#ifdef CTEST_NO_FLOWS
    if (d != NULL)
        json_object_set_new(d, "flows", json_array());
#endif
#ifdef CTEST_NOT_INLINE
    if (d != NULL)
        json_object_del(d, "inlineHooks");
#endif
#ifdef CTEST_DESCRIBE_DESCRIPTION
    if (d != NULL)
        json_object_set_new(d, "description", json_string("not what the manifest says"));
#endif
    return ab_reply_json(plugin->host, call, d);
}

static ab_status configure(const ab_host_api *host, ab_call *call, json_t *in)
{
    json_t *settings = json_object_get(in, "settings");
    if (!json_is_string(json_object_get(settings, "server"))) {
        return host->fail(call, "configuration", "missingSetting", "setting \"server\" is required", 0);
    }
    json_t *config = json_deep_copy(settings);
    if (config == NULL)
        return host->fail(call, "internal", "outOfMemory", "out of memory", 0);
    json_object_set_new(config, "configuredBy", json_string("ctest"));
    return ab_reply_json(host, call, config);
}

static ab_status begin_sign_in(const ab_host_api *host, ab_call *call, json_t *in)
{
    const char *server = profile_str(in, "server");
    if (server == NULL) {
        return host->fail(call, "configuration", "missingSetting", "setting \"server\" is required", 0);
    }
    const char *state = ab_string_at(in, "state");
    char *enc = percent_encode(state ? state : "");
    if (enc == NULL) {
        return host->fail(call, "internal", "outOfMemory", "out of memory", 0);
    }
    int n = trimmed_len(server);
    json_t *url = json_sprintf("%.*s/login?state=%s", n, server, enc);
    json_t *prefix = json_sprintf("%.*s/callback", n, server);
    free(enc);
    json_t *out = NULL;
    if (url != NULL && prefix != NULL)
        out = json_pack("{s:O, s:O}", "url", url, "callbackPrefix", prefix);
    json_decref(url);
    json_decref(prefix);

    static const char event[] = "{\"stage\":\"plugin\",\"message\":\"C plugin began sign-in\"}";
    if (AB_HAS(host, emit))
        host->emit(call, (ab_json){ event, sizeof event - 1 });
    return ab_reply_json(host, call, out);
}

/* {tokens:{...}, account?:{...}} from the pieces (references are stolen). */
static json_t *token_result(json_t *access, json_t *refresh, int64_t expires_at, json_t *extras, json_t *account)
{
    json_t *tokens = json_object();
    json_object_set_new(tokens, "accessToken", access);
    if (refresh)
        json_object_set_new(tokens, "refreshToken", refresh);
    json_object_set_new(tokens, "tokenType", json_string("Bearer"));
    json_object_set_new(tokens, "expiresAt", expires_at ? json_integer(expires_at) : json_null());
    if (extras)
        json_object_set_new(tokens, "extras", extras);
    json_t *result = json_object();
    json_object_set_new(result, "tokens", tokens);
    if (account)
        json_object_set_new(result, "account", account);
    return result;
}

/* Fetches probeUrl through host->http and records the outcome in extras.
 * Returns AB_CANCELLED when the call was cancelled, else AB_OK. */
static ab_status probe(const ab_host_api *host, ab_call *call, const char *url, json_t *extras)
{
    if (!AB_HAS(host, http)) {
        json_object_set_new(extras, "probeError", json_string("unavailable"));
        return AB_OK;
    }
    json_t *req = json_pack("{s:s, s:s}", "method", "GET", "url", url);
    char *text = req ? json_dumps(req, JSON_COMPACT) : NULL;
    json_decref(req);
    if (text == NULL) {
        json_object_set_new(extras, "probeError", json_string("outOfMemory"));
        return AB_OK;
    }
    ab_json response = { NULL, 0 };
    ab_status st = host->http(call, (ab_json){ text, strlen(text) }, &response);
    free(text);
    if (st == AB_CANCELLED)
        return AB_CANCELLED;
    /* `response` is borrowed: parse it, never free it. */
    json_t *r = response.data ? json_loadb(response.data, response.length, 0, NULL) : NULL;
    if (st == AB_OK && json_is_integer(json_object_get(r, "status"))) {
        json_object_set(extras, "probeStatus", json_object_get(r, "status"));
    } else if (st == AB_ERROR) {
        const char *reason = ab_string_at(r, "reason");
        json_object_set_new(extras, "probeError", json_string(reason ? reason : "unknown"));
    } else {
        json_object_set_new(extras, "probeError", json_string(st == AB_OK ? "badResponse" : "invalid"));
    }
    json_decref(r);
    return AB_OK;
}

static ab_status complete_session(const ab_host_api *host, ab_call *call, json_t *in)
{
    const char *sid = ab_string_at(in, "sessionId");
    if (sid == NULL || *sid == '\0')
        return host->fail(call, "definitive", "missingSessionId", "a session id is required", 0);
    if (strcmp(sid, "bad") == 0)
        return host->fail(call, "definitive", "invalid_grant", "session id refused", 0);
    /* Failures that break the ABI's Failure schema: the host must not pass them on as they are. */
    if (strcmp(sid, "bad-reason") == 0)
        return host->fail(call, "definitive", "not a word!", "refused with a reason that is not a word", 0);
    if (strcmp(sid, "no-message") == 0)
        return host->fail(call, "definitive", "refusedQuietly", "", 0);

    if (strcmp(sid, "slow") == 0 && AB_HAS(host, is_cancelled)) {
        ab_log_text(host, call, AB_LOG_DEBUG, "ctest: slow sign-in, waiting for cancellation");
        const struct timespec tick = { 0, SLOW_POLL_MS * 1000000L };
        for (int waited = 0; waited < SLOW_MAX_MS; waited += SLOW_POLL_MS) {
            if (host->is_cancelled(call))
                return host->fail(call, "cancelled", "cancelled", "the request was cancelled", 0);
            nanosleep(&tick, NULL);
        }
        if (host->is_cancelled(call))
            return host->fail(call, "cancelled", "cancelled", "the request was cancelled", 0);
    }

    json_t *extras = json_pack("{s:s}", "sessionId", sid);
    if (strcmp(sid, "http") == 0) {
        const char *url = profile_str(in, "probeUrl");
        if (url != NULL && probe(host, call, url, extras) == AB_CANCELLED) {
            json_decref(extras);
            return host->fail(call, "cancelled", "cancelled", "the request was cancelled", 0);
        }
    }
    json_t *result = token_result(json_sprintf("at-%s", sid), json_sprintf("rt-%s", sid), host->now_ms() + HOUR_MS,
                                  extras, json_pack("{s:s, s:s}", "id", sid, "name", "C Test User"));
    return ab_reply_json(host, call, result);
}

static ab_status complete_external(const ab_host_api *host, ab_call *call, json_t *in)
{
    const char *url = ab_string_at(in, "callbackUrl");
    if (url == NULL)
        return host->fail(call, "definitive", "missingToken", "the callback URL is missing", 0);
    int malformed = 0;
    json_t *access = query_param(host, call, url, "access_token", &malformed);
    json_t *session = query_param(host, call, url, "session_token", &malformed);
    if (malformed) {
        json_decref(access);
        json_decref(session);
        return host->fail(call, "definitive", "invalidCallback", "the callback URL is not well formed", 0);
    }
    if (access == NULL || session == NULL) {
        json_decref(access);
        json_decref(session);
        return host->fail(call, "definitive", "missingToken", "the callback URL lacks access_token or session_token",
                          0);
    }
    return ab_reply_json(host, call, token_result(access, session, 0, NULL, NULL));
}

static ab_status complete_sign_in(const ab_host_api *host, ab_call *call, json_t *in)
{
    const char *flow = ab_string_at(in, "flow");
    ab_log_text(host, call, AB_LOG_DEBUG, "ctest: completing sign-in");
    ab_status st;
    if (flow != NULL && strcmp(flow, "session") == 0)
        st = complete_session(host, call, in);
    else if (flow != NULL && strcmp(flow, "external") == 0)
        st = complete_external(host, call, in);
    else
        st = host->fail(call, "definitive", "unsupportedFlow", "ctest supports the external and session flows", 0);
    return st;
}

static ab_status refresh(const ab_host_api *host, ab_call *call, json_t *in)
{
#ifdef CTEST_HANG_IN_REFRESH
    hang_forever();
#endif
    json_t *tokens = json_object_get(in, "tokens");
    const char *rt = ab_string_at(tokens, "refreshToken");
    ab_status st;
    if (rt == NULL) {
        st = host->fail(call, "definitive", "missingToken", "no refresh token", 0);
    } else if (starts_with(rt, "rt-revoked")) {
        st = host->fail(call, "definitive", "invalid_grant", "refresh token revoked", 0);
    } else if (starts_with(rt, "rt-transient")) {
        st = host->fail(call, "transient", "unavailable", "the test server is unavailable", 0);
    } else {
        const char *suffix = starts_with(rt, "rt-") ? rt + 3 : rt;
        json_t *extras = json_object_get(tokens, "extras");
        st = ab_reply_json(host, call,
                           token_result(json_sprintf("at2-%s", suffix), json_sprintf("%s+", rt),
                                        host->now_ms() + HOUR_MS,
                                        json_is_object(extras) ? json_deep_copy(extras) : NULL, NULL));
    }
    return st;
}

static ab_status ctest_revoke(ab_plugin *plugin, ab_call *call, ab_json input)
{
    (void)input;
    TRACE("revoke");
    return reply_static(plugin->host, call,
                        "{\"revoked\":[\"access_token\",\"refresh_token\"],"
                        "\"clearCookies\":[{\"name\":\"ctest_session\",\"domain\":\"ctest.example\"}]}");
}

static ab_status ctest_check_session(ab_plugin *plugin, ab_call *call, ab_json input)
{
    TRACE("check_session");
    const ab_host_api *host = plugin->host;
    /* Reads its input as a real plugin's hot-path hook should: through
     * ab_input_view, which parses an input once however often it repeats.
     * The benchmark measures that path. */
    json_t *in = ab_input_view(host, call, input);
    if (in == NULL)
        return AB_ERROR;
    const char *sid = ab_string_at(json_object_get(json_object_get(in, "tokens"), "extras"), "sessionId");
    int expired = sid != NULL && strcmp(sid, "expired") == 0;
#ifdef CTEST_CRASH_SEGV
    *(volatile int *)0 = 1;
#endif
#ifdef CTEST_CRASH_ON_BOOM
    if (sid != NULL && strcmp(sid, "boom") == 0)
        *(volatile int *)0 = 1;
#endif
#ifdef CTEST_CRASH_ABORT
    abort();
#endif
#ifdef CTEST_CRASH_EXIT3
    _exit(3);
#endif
#ifdef CTEST_HANG
    hang_forever();
#endif
#ifdef CTEST_OOM
    allocate_until_stopped();
#endif
#ifdef CTEST_CLOSE_STDOUT
    close(1);
    printf("ctest stdout noise after close: check_session\n");
    fflush(stdout);
#endif
#ifdef CTEST_LINGERING_CHILD
    if (spawn_lingering_child() != 0) {
        json_decref(in);
        return host->fail(call, "internal", "forkFailed", "could not start the lingering child", 0);
    }
#endif
#ifdef CTEST_ESCAPE
    escape(host, call, in);
#endif
#ifdef CTEST_INLINE_GATE
    const char *gate = profile_str(in, "gate");
    if (sid != NULL && strcmp(sid, "gated") == 0 && (gate == NULL || wait_at_gate(gate) != 0)) {
        json_decref(in);
        return host->fail(call, "internal", "gateFailed", "could not read the gate", 0);
    }
#endif
    json_decref(in);
    return reply_static(host, call, expired ? "{\"state\":\"expired\"}" : "{\"state\":\"valid\"}");
}

static ab_status ctest_authorize_request(ab_plugin *plugin, ab_call *call, ab_json input)
{
    TRACE("authorize_request");
    const ab_host_api *host = plugin->host;
    if (!AB_HAS(host, standard))
        return AB_DEFAULT;
    ab_json std_out = { NULL, 0 };
    ab_status st = host->standard(call, AB_HOOK_AUTHORIZE_REQUEST, input, &std_out);
    if (st == AB_ERROR && std_out.data != NULL) {
        host->set_error(call, std_out); /* borrowed → copied by the host */
        return AB_ERROR;
    }
    if (st == AB_CANCELLED)
        return host->fail(call, "cancelled", "cancelled", "the request was cancelled", 0);
    if (st != AB_OK || std_out.data == NULL)
        return host->fail(call, "internal", "standardFailed", "the standard authorize_request failed", 0);

    json_t *out = json_loadb(std_out.data, std_out.length, 0, NULL);
    json_t *request = json_object_get(out, "request");
    if (!json_is_object(request)) {
        json_decref(out);
        return host->fail(call, "internal", "standardFailed", "the standard result has no request", 0);
    }
    json_t *headers = json_object_get(request, "headers");
    if (!json_is_object(headers)) {
        headers = json_object();
        json_object_set_new(request, "headers", headers);
    }
    json_object_set_new(headers, "X-CTest", json_string("1"));
    return ab_reply_json(host, call, out);
}

static ab_status classify_response(const ab_host_api *host, ab_call *call, json_t *in)
{
    json_t *response = json_object_get(in, "response");
    json_int_t status = json_integer_value(json_object_get(response, "status"));
    const char *body = ab_string_at(response, "body");
    const char *answer = "{\"outcome\":\"ok\"}";
    if (status == 401)
        answer = "{\"outcome\":\"sessionExpired\"}";
    else if (status == 403 && body != NULL && strstr(body, "LICENSE") != NULL)
        answer = "{\"outcome\":\"licenseRevoked\",\"message\":\"license removed\"}";
    return reply_static(host, call, answer);
}

/* ── Entry ──────────────────────────────────────────────────────────────── */

/* The entry points of the hooks that read their input. */
static ab_status ctest_configure(ab_plugin *plugin, ab_call *call, ab_json input)
{
    return with_input("configure", plugin, call, input, configure);
}

static ab_status ctest_begin_sign_in(ab_plugin *plugin, ab_call *call, ab_json input)
{
    return with_input("begin_sign_in", plugin, call, input, begin_sign_in);
}

static ab_status ctest_complete_sign_in(ab_plugin *plugin, ab_call *call, ab_json input)
{
    return with_input("complete_sign_in", plugin, call, input, complete_sign_in);
}

static ab_status ctest_refresh(ab_plugin *plugin, ab_call *call, ab_json input)
{
    return with_input("refresh", plugin, call, input, refresh);
}

static ab_status ctest_classify_response(ab_plugin *plugin, ab_call *call, ab_json input)
{
    return with_input("classify_response", plugin, call, input, classify_response);
}

static const ab_plugin_vtable ctest_vtable = {
    .size = sizeof(ab_plugin_vtable),
    .init = ctest_init,
    .shutdown = ctest_shutdown,
    .describe = ctest_describe,
    .configure = ctest_configure,
    .begin_sign_in = ctest_begin_sign_in,
    .complete_sign_in = ctest_complete_sign_in,
    .refresh = ctest_refresh,
    .revoke = ctest_revoke,
    .check_session = ctest_check_session,
    .authorize_request = ctest_authorize_request,
    .classify_response = ctest_classify_response,
};

#if defined(CTEST_NO_ENTRY) || defined(CTEST_ABI_MAJOR_2)
#ifdef CTEST_ABI_MAJOR_2
#define CTEST_ABI_MAJOR 2
#else
#define CTEST_ABI_MAJOR AB_ABI_MAJOR
#endif
/* Written by hand (not AB_DEFINE_PLUGIN) to report a foreign ABI major, or to
 * export the table under a name the host does not look for. */
#ifdef CTEST_NO_ENTRY
#define CTEST_ENTRY_NAME ctest_not_the_entry
#else
#define CTEST_ENTRY_NAME authbridge_plugin_v1
#endif
const ab_plugin_info *CTEST_ENTRY_NAME(void);
__attribute__((visibility("default"))) const ab_plugin_info *CTEST_ENTRY_NAME(void)
{
    static const ab_plugin_info info = { AB_PLUGIN_MAGIC, CTEST_ABI_MAJOR,     AB_ABI_MINOR,
                                         CTEST_PLUGIN_ID, CTEST_ENTRY_VERSION, &ctest_vtable };
    return &info;
}
#else
const ab_plugin_info *authbridge_plugin_v1(void);
AB_DEFINE_PLUGIN(CTEST_PLUGIN_ID, CTEST_ENTRY_VERSION, &ctest_vtable)
#endif
