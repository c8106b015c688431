/*
 * authbridge/plugin.h — the AuthBridge provider plugin ABI.
 *
 * This header is the single source of truth for the contract between the
 * `authbridge` host and a provider plugin (a shared library opened with
 * dlopen). It is installed for out-of-tree plugin authors; the Swift plugin
 * SDK is a thin layer over it.
 *
 * ── Versioning ─────────────────────────────────────────────────────────────
 * AB_ABI_MAJOR changes only when an existing entry changes meaning or a struct
 * loses or moves a field. AB_ABI_MINOR grows when entries are appended.
 * The host loads a plugin only when plugin.major == host.major and
 * plugin.minor <= host.minor (GStreamer's rule). Both tables below are
 * size-prefixed and append-only (sqlite3ext.h's rule): read an entry only when
 * `size` shows it is present, e.g. AB_HAS(host, http).
 *
 *   1.0  the tables as first published.
 *   1.1  ab_host_api gains fail (a Failure from its parts) and query_value
 *        (a URL's query read by the host's own rule), appended after
 *        is_cancelled; ab_plugin_info.version may be NULL (the manifest's).
 *   1.2  ab_plugin_vtable gains exchange_token (RFC 8693 token exchange),
 *        appended after classify_response (hook number 10).
 *
 * A plugin declares the ABI it was built for (ab_plugin_info, AB_DEFINE_PLUGIN
 * writes this header's) and its manifest the least ABI it needs: majors equal,
 * both minors at most the host's (a plugin rebuilt with a newer header of the
 * same major keeps its manifest, as GStreamer's plugins do). A plugin built for 1.0
 * keeps loading in 1.1 hosts unchanged; one built for 1.1 loads only in hosts
 * of 1.1 or later, so it may use 1.1's entries without AB_HAS (a plugin that
 * wants to run in 1.0 hosts too declares 1.0 and checks AB_HAS before use).
 *
 * ── Metadata: stated once, in the manifest ─────────────────────────────────
 * A plugin's id, version and description are the manifest's (NAME.json beside
 * the library). The library repeats only its id (ab_plugin_info.id: proof that
 * the manifest names the right library); its version may be NULL and describe
 * may leave out id, version and description: the host fills them in from the
 * manifest. An id or version the library does state must equal the manifest's,
 * or the plugin is refused (badEntry for the id, metadataMismatch for the
 * version); another description in describe is shown as the manifest's, with
 * a warning.
 *
 * ── Loading (PG_MODULE_MAGIC's rule: check the ABI before any init) ────────
 * 1. The host reads the manifest beside the library and checks its "abi".
 * 2. It reads the library file: a complete ELF shared object for this
 *    machine (program headers, dynamic section and notes within bounds).
 *    A Swift plugin (one whose DT_NEEDED lists libswiftCore.so) must carry
 *    the Swift runtime note naming the host's own Swift version, or it is
 *    refused (swiftRuntimeMismatch) before anything of it runs; the Swift
 *    SDK embeds the note (AuthBridgePluginABI's SwiftRuntimeNote). C plugins
 *    need no note: they use no Swift runtime.
 * 3. dlopen(RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE) of the very file checked
 *    (opened once, O_NOFOLLOW, and loaded as /proc/self/fd/N), in the host or
 *    in the plugin's own runner process (see Isolation below). The host never
 *    dlcloses. $ORIGIN in the library's RUNPATH therefore names /proc/self/fd:
 *    private libraries shipped beside a plugin are not found.
 * 4. dlsym(AB_ENTRY_SYMBOL) and calls it. The entry must only return a
 *    pointer to static, constant data: it runs before the ABI is checked.
 * 5. The host checks magic, major/minor (against its own and the manifest's),
 *    the plugin id and version against the manifest and the vtable size; only
 *    then it calls init(), then describe (whose id and version, when given,
 *    must be the manifest's).
 * 6. shutdown() is called once when the host exits; the library stays mapped.
 *
 * ── Isolation: the plugin may run in a process of its own ──────────────────
 * Plugins from the user's folders run in a runner process (`authbridge
 * plugin-runner`), one per plugin; bundled ones inside the host (the host's
 * --plugin-isolation and the manifest's "isolation" change this). Write every
 * plugin so that it works both ways: it must not rely on process state shared
 * with the host (globals, environment variables, file descriptors, signal
 * handlers, the host's libraries' state); everything it needs comes through
 * hook inputs and host services, which behave the same in both. A runner's
 * environment lacks the host's AUTHBRIDGE_* variables, any named like a secret
 * and the D-Bus session bus. A crash, abort or exit there answers the calls in
 * flight -32008 pluginCrashed and the runner is restarted; 3 faults within
 * 5 minutes get the plugin refused until the host restarts. Sessions are
 * never touched by a plugin's fault.
 *
 * ── Data across the boundary ───────────────────────────────────────────────
 * Every structured value crosses as UTF-8 JSON text with an explicit length
 * (ab_json). C plugins use jansson to read and write it. Shapes of the JSON
 * for each hook are specified in bridge-spec/README.md ("Plugin ABI").
 *
 * ── Ownership: each side frees only what it allocated ──────────────────────
 * - What the host passes to a plugin (arguments, results of host services)
 *   is BORROWED: valid until the hook returns, never freed by the plugin.
 * - What a plugin passes to the host (results, errors, events, requests) is
 *   COPIED by the host before the host function returns; the plugin keeps
 *   ownership of its buffers.
 * - No pointer allocated on one side is ever freed on the other.
 *
 * ── Threads ────────────────────────────────────────────────────────────────
 * - init() and shutdown() are called once, on one thread, with no hook running.
 * - Hooks are called on host worker threads (inline hooks: below);
 *   different hooks (and the same hook for different sessions) may run
 *   concurrently, so plugin-global state must be thread-safe. The host
 *   serialises hooks that change one session (exchange, refresh, revoke).
 * - A hook may block on host services (http); it should check
 *   host->is_cancelled(call) in long loops.
 * - Every hook has a deadline (10 s for describe and the pure hooks, 90 s for
 *   those that talk to the provider; the manifest's "deadlines" may set others).
 *   Its call is answered pluginTimeout by then whether or not the hook returns:
 *   in the host the thread is abandoned (its late answer is dropped), in a
 *   runner the process is killed 2 s later. A cancelled call is answered
 *   within 2 s; a hook that notices is_cancelled returns sooner and cleaner.
 * - Inline hooks (authorize_request, classify_response and those listed in
 *   describe's "inlineHooks") run on the caller's thread when the plugin runs
 *   in the host — an inline check_session may run on the thread that reads
 *   the protocol stream, to answer checkSignInStatus at once; one that takes
 *   over 50 ms loses the plugin its inline hooks (and the host moves its
 *   reading to a new thread). In a runner, an inline check_session's "valid"
 *   answers the session's checkSignInStatus for up to a second of the host's
 *   clock without asking again (any change to the session asks at once).
 * - Host services may be called from any thread while the hook's `call` is
 *   live; `call` is invalid once the hook returns. log/now_ms also accept
 *   call == NULL, from any thread, at any time between init and shutdown.
 * - A plugin must not write to stdout. Its fd 1 is the host's stderr either
 *   way (in the host, which keeps the protocol stream on a private descriptor,
 *   and in a runner), so the protocol stream cannot be corrupted.
 */
#ifndef AUTHBRIDGE_PLUGIN_H
#define AUTHBRIDGE_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define AB_ABI_MAJOR 1
#define AB_ABI_MINOR 2

/* 'ABPL' — first field of ab_plugin_info, guards against a wrong symbol. */
#define AB_PLUGIN_MAGIC 0x4142504Cu

/* The one symbol a plugin exports; its name carries the ABI major. */
#define AB_ENTRY_SYMBOL "authbridge_plugin_v1"

/* True when a size-prefixed table `t` contains the member `m` (and it is set).
 * `t` is evaluated several times: pass a plain pointer. */
#define AB_HAS(t, m) \
    ((t) != NULL && (size_t)(t)->size >= offsetof(__typeof__(*(t)), m) + sizeof((t)->m) && (t)->m != NULL)

/* ── Status codes returned by hooks and host services ───────────────────── */
typedef enum ab_status {
    AB_OK = 0,        /* a result was set with host->set_result          */
    AB_ERROR = 1,     /* an error was set with host->set_error            */
    AB_DEFAULT = 2,   /* "not mine": the host uses its standard behaviour;
                         * anything set with set_result/set_error is ignored */
    AB_CANCELLED = 3, /* the request was cancelled: a host service says so,
                         * and a hook returns it to stop (no answer needed)  */
    AB_INVALID = 4    /* a host service was called with bad arguments;
                         * its out-parameters are left untouched            */
} ab_status;

/* Log levels, as swift-log's. */
typedef enum ab_log_level {
    AB_LOG_TRACE = 0,
    AB_LOG_DEBUG = 1,
    AB_LOG_INFO = 2,
    AB_LOG_NOTICE = 3,
    AB_LOG_WARNING = 4,
    AB_LOG_ERROR = 5,
    AB_LOG_CRITICAL = 6
} ab_log_level;

/* The hooks, numbered for host->standard(). Values are fixed forever. */
typedef enum ab_hook {
    AB_HOOK_DESCRIBE = 1,
    AB_HOOK_CONFIGURE = 2,
    AB_HOOK_BEGIN_SIGN_IN = 3,
    AB_HOOK_COMPLETE_SIGN_IN = 4,
    AB_HOOK_REFRESH = 5,
    AB_HOOK_REVOKE = 6,
    AB_HOOK_CHECK_SESSION = 7,
    AB_HOOK_AUTHORIZE_REQUEST = 8,
    AB_HOOK_CLASSIFY_RESPONSE = 9,
    AB_HOOK_EXCHANGE_TOKEN = 10 /* ABI 1.2 */
} ab_hook;

/* Borrowed UTF-8 JSON text with its length. Use the length: the text is not
 * guaranteed to be NUL-terminated (the host's happen to be). */
typedef struct ab_json {
    const char *data;
    size_t length;
} ab_json;

/* Opaque: the plugin's own state (returned by init) and one hook invocation. */
typedef struct ab_plugin ab_plugin;
typedef struct ab_call ab_call;

/* ── Services the host offers a plugin (size-prefixed, append-only) ────── */
typedef struct ab_host_api {
    uint32_t size; /* sizeof(ab_host_api) as the host knows it */
    uint16_t abi_major;
    uint16_t abi_minor;
    const char *host_version; /* e.g. "0.1.0"; static */

    /* Logging to the host's stderr logger. Never log a token: the host
     * redacts what it recognises, but cannot recognise everything. */
    void (*log)(ab_call *call, ab_log_level level, const char *message, size_t length);

    /* The host's clock in milliseconds since the Unix epoch. Tests move it. */
    int64_t (*now_ms)(void);

    /* The answer of the running hook: exactly one of set_result / set_error,
     * then return AB_OK / AB_ERROR. A second call replaces the first.
     * error JSON: {"kind":"definitive"|"transient"|"configuration"|"internal"|
     *              "cancelled", "reason":"invalid_grant"|..., "message":"user-facing
     *              text, never a token", "status": provider HTTP status (optional)} */
    ab_status (*set_result)(ab_call *call, ab_json result);
    ab_status (*set_error)(ab_call *call, ab_json error);

    /* Emits a progress event (e.g. an extra step the user must take) from any
     * hook. JSON: {"stage":"...","message":"...", ...}. The host adds the
     * provider and the bridge request id and sends it as `signIn/progress`. */
    ab_status (*emit)(ab_call *call, ab_json event);

    /* Synchronous HTTP through the host: https is required except for
     * loopback IP literals; the host applies timeouts and cancellation and
     * never logs bodies. Request JSON:
     *   {"method":"POST","url":"...","headers":{...},
     *    "form":{...} | "json":{...} | "body":"...", "timeoutMs":15000}
     * "dpop":true asks for a DPoP proof (RFC 9449) of the session's key, which
     * the host keeps: where the session has one it adds the DPoP header ("ath"
     * when the Authorization is "DPoP ...") and sends the request once more
     * with the server's nonce if asked (use_dpop_nonce); elsewhere it is ignored.
     * On AB_OK *response is {"status":200,"headers":{lower-case names},
     * "body":"..."} whatever the status. On AB_ERROR it is a failure JSON
     * (a hook may pass it on as its own):
     *   {"kind":"transient","reason":"timeout"|"refused"|"reset"|"tls"|"dns"|
     *    "network"|..., "message":..} — the exchange failed on the way;
     *   {"kind":"configuration","reason":"insecureUrl", ...} — a URL the host
     *    will not contact (neither https nor a loopback IP literal);
     *   {"kind":"internal","reason":"invalidRequest", ...} — a request it
     *    cannot send (no absolute http(s) URL, a header with a line break, a
     *    form value that is not a string, number, boolean or null).
     * On AB_CANCELLED it is a failure of kind "cancelled"; on AB_INVALID it is
     * untouched. *response is borrowed until the hook returns (a hook that
     * polls many times keeps every response until then: poll sparingly). */
    ab_status (*http)(ab_call *call, ab_json request, ab_json *response);

    /* Runs the host's standard OAuth 2.0 / OIDC implementation of `hook` on
     * `input` (the same JSON the hook received, possibly changed) and lends
     * its result in *output (valid until the hook returns). A plugin that
     * differs from the standard in one detail calls this and edits the
     * result, instead of reimplementing the step. AB_ERROR / AB_CANCELLED:
     * *output is the failure JSON; AB_INVALID: untouched. */
    ab_status (*standard)(ab_call *call, ab_hook hook, ab_json input, ab_json *output);

    /* 1 when the frontend cancelled the request this hook serves. */
    int (*is_cancelled)(ab_call *call);

    /* ── ABI 1.1 ─────────────────────────────────────────────────────────── */

    /* Sets the running hook's error from its parts, as set_error would with
     * {"kind","reason","message","status"} (the host writes the JSON, so the
     * plugin needs no encoder for it), and returns the status the hook then
     * returns: AB_CANCELLED for kind "cancelled", else AB_ERROR. `message` is
     * user-facing text, never a token; `status` is the provider's HTTP status,
     * 0 for none. AB_INVALID (nothing set) when kind, reason or message is NULL:
     *     return host->fail(call, "definitive", "invalid_grant", "…", 400); */
    ab_status (*fail)(ab_call *call, const char *kind, const char *reason, const char *message, int status);

    /* Reads one parameter of the query of `url` (`url_length` bytes of UTF-8:
     * the text after its first '?', up to its '#') by name, never by position,
     * with the host's own rule, the one its standard steps and the Swift SDK use
     * (bridge-spec/README.md, "Reading a callback's query"): names and values
     * are form-decoded ('+' is a space, %XX a byte: RFC 6749 appendix B), and
     * the whole query must be well formed.
     * AB_OK: *value is the first occurrence's decoded text (NUL-terminated;
     * *length bytes; it may hold a NUL of its own), borrowed until the hook
     * returns, or NULL with *length 0 when the name does not occur; *count is
     * how many times it occurs. value, length and count may each be NULL.
     * AB_ERROR: some name or value holds a '%' not followed by two hex digits:
     * nothing is read (guessing would yield a value nobody sent); the outputs
     * are untouched and no error is set (the plugin reports its own, e.g.
     * definitive "invalidCallback"). AB_INVALID: call, url or name is NULL. */
    ab_status (*query_value)(ab_call *call, const char *url, size_t url_length, const char *name, const char **value,
                             size_t *length, size_t *count);
} ab_host_api;

/* ── Hooks a plugin implements (size-prefixed, append-only) ───────────────
 * Every hook has the same shape: it reads `input`, answers through
 * host->set_result / host->set_error and returns the matching status. A NULL
 * hook or a hook returning AB_DEFAULT means "use the host's standard
 * behaviour" (see host->standard). The JSON shapes are in bridge-spec/README.md.
 */
typedef ab_status (*ab_hook_fn)(ab_plugin *plugin, ab_call *call, ab_json input);

typedef struct ab_plugin_vtable {
    uint32_t size; /* sizeof(ab_plugin_vtable) as the plugin knows it */

    /* Called once after the ABI check. `host` stays valid until shutdown
     * returns. Stores the plugin's state in *plugin (may be NULL). Returns
     * AB_OK, or AB_ERROR with a NUL-terminated reason in *error, which the
     * host copies at once (use a static string). After a failed init the host
     * calls nothing else, not even shutdown: release what init took first. */
    ab_status (*init)(const ab_host_api *host, ab_plugin **plugin, const char **error);
    /* Called once when the host exits. No hook runs during or after it. */
    void (*shutdown)(ab_plugin *plugin);

    /* {"displayName","flows":[...],"settings":{JSON Schema of a profile's
     *  settings},"capabilities":[...]}; the host adds "id", "version" and
     *  "description" from the manifest (given, they must be the manifest's). */
    ab_hook_fn describe;
    /* settings → resolved provider configuration (endpoints, scopes, …). */
    ab_hook_fn configure;
    /* Starts an interactive sign-in: returns the URL to open (or a device
     * code, or "nothing to open" for a session grant). */
    ab_hook_fn begin_sign_in;
    /* Finishes a sign-in (authorization code, callback URL carrying tokens,
     * session id…) → a token set, or a classified failure. */
    ab_hook_fn complete_sign_in;
    /* token set → a new token set (rotated or not), or a classified failure. */
    ab_hook_fn refresh;
    /* token set → what was revoked. Best effort, bounded time. */
    ab_hook_fn revoke;
    /* token set → {"state":"valid"|"expired"|"revoked"|"licenseRevoked"|
     * "unknown", "message":...}. */
    ab_hook_fn check_session;
    /* token set + API request → request with credentials (headers, cookies,
     * base URL). Must not perform the request. */
    ab_hook_fn authorize_request;
    /* API response → {"outcome":"ok"|"sessionExpired"|"revoked"|
     * "licenseRevoked", "message":...}. */
    ab_hook_fn classify_response;
    /* ABI 1.2. token set + {subjectTokenType, audience?, resources?, scopes?,
     * requestedTokenType?} → a token set for another audience (RFC 8693), or
     * a classified failure. A table without it (size) gets the standard one. */
    ab_hook_fn exchange_token;
} ab_plugin_vtable;

/* What the entry symbol returns: static, constant data only. */
typedef struct ab_plugin_info {
    uint32_t magic;      /* AB_PLUGIN_MAGIC */
    uint16_t abi_major;  /* AB_ABI_MAJOR the plugin was built with */
    uint16_t abi_minor;  /* AB_ABI_MINOR the plugin was built with */
    const char *id;      /* must equal the manifest's "id" */
    const char *version; /* NULL: the manifest's "version"; given, it
                                 * must equal it (a 1.0 host takes NULL too) */
    const ab_plugin_vtable *vtable;
} ab_plugin_info;

typedef const ab_plugin_info *(*ab_entry_fn)(void);

/* The entry point every plugin defines (normally through AB_DEFINE_PLUGIN). */
__attribute__((visibility("default"))) const ab_plugin_info *authbridge_plugin_v1(void);

#ifdef __cplusplus
#define AB_EXTERN_C extern "C"
#else
#define AB_EXTERN_C
#endif

/* Declares the entry point in a C (or C++) plugin, built for this header's ABI
 * (its manifest's "abi" says the same); the version is the manifest's:
 *     static const ab_plugin_vtable vt = { sizeof vt, my_init, ... };
 *     AB_DEFINE_PLUGIN("duke", NULL, &vt)
 */
#define AB_DEFINE_PLUGIN(ID, VERSION, VTABLE)                                                                          \
    AB_EXTERN_C __attribute__((visibility("default"))) const ab_plugin_info *authbridge_plugin_v1(void)                \
    {                                                                                                                  \
        static const ab_plugin_info info = { AB_PLUGIN_MAGIC, AB_ABI_MAJOR, AB_ABI_MINOR, (ID), (VERSION), (VTABLE) }; \
        return &info;                                                                                                  \
    }

#ifdef __cplusplus
}
#endif

#endif /* AUTHBRIDGE_PLUGIN_H */
