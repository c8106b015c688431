/*
 * hook-cost: what a plugin's check_session costs by itself, for `make bench`.
 *
 * The hot path's checkSignInStatus runs the plugin's inline check_session on
 * every call, so the plugin's cost is part of every answer's: ctest's, which
 * reads its input through ab_input_view, parses a repeated input once. This
 * loads the plugin library with dlopen, initialises it with a minimal host
 * table (set_result keeps nothing, log is silent, the clock is the real one),
 * and calls check_session N times with the input read from a file (the JSON
 * the host passes: profile, tokens, installation). It prints one line:
 *
 *   HOOK_COST {"calls":N,"seconds":S,"usPerCall":U}
 *
 * Usage: hook-cost LIBRARY INPUT_FILE N
 * Build: gcc -O2 -o hook-cost bench/hook-cost.c -ISources/CAuthBridgePlugin/include -ldl
 */
#include <authbridge/plugin.h>

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int64_t now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

static double seconds(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void log_nothing(ab_call *call, ab_log_level level, const char *message, size_t length)
{
    (void)call, (void)level, (void)message, (void)length;
}

static int answered;

static ab_status keep_nothing(ab_call *call, ab_json value)
{
    (void)call, (void)value;
    answered++;
    return AB_OK;
}

static ab_status refuse(ab_call *call, ab_json value)
{
    (void)call, (void)value;
    return AB_INVALID;
}

static ab_status fail(ab_call *call, const char *kind, const char *reason, const char *message, int status)
{
    (void)call, (void)kind, (void)status;
    fprintf(stderr, "hook-cost: the plugin failed: %s: %s\n", reason ? reason : "?", message ? message : "");
    return AB_ERROR;
}

static int not_cancelled(ab_call *call)
{
    (void)call;
    return 0;
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: %s LIBRARY INPUT_FILE N\n", argv[0]);
        return 2;
    }
    long calls = atol(argv[3]);
    FILE *file = fopen(argv[2], "rb");
    static char input[1 << 16];
    size_t length = file ? fread(input, 1, sizeof input, file) : 0;
    if (file)
        fclose(file);
    void *library = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    ab_entry_fn entry = library ? (ab_entry_fn)dlsym(library, "authbridge_plugin_v1") : NULL;
    if (length == 0 || calls <= 0 || entry == NULL) {
        fprintf(stderr, "hook-cost: cannot read %s or load %s (%s)\n", argv[2], argv[1], dlerror());
        return 2;
    }
    static const ab_host_api host = {
        .size = sizeof(ab_host_api),
        .abi_major = AB_ABI_MAJOR,
        .abi_minor = AB_ABI_MINOR,
        .host_version = "bench",
        .log = log_nothing,
        .now_ms = now_ms,
        .set_result = keep_nothing,
        .set_error = refuse,
        .emit = refuse,
        .is_cancelled = not_cancelled,
        .fail = fail,
    };
    const ab_plugin_vtable *vtable = entry()->vtable;
    ab_plugin *plugin = NULL;
    const char *error = NULL;
    if (vtable->init(&host, &plugin, &error) != AB_OK || vtable->check_session == NULL) {
        fprintf(stderr, "hook-cost: init failed or no check_session (%s)\n", error ? error : "");
        return 2;
    }
    ab_json json = { input, length };
    double start = seconds();
    for (long i = 0; i < calls; i++) {
        if (vtable->check_session(plugin, (ab_call *)&json, json) != AB_OK)
            return 1;
    }
    double elapsed = seconds() - start;
    if (vtable->shutdown)
        vtable->shutdown(plugin);
    if (answered != calls) {
        fprintf(stderr, "hook-cost: %d answers for %ld calls\n", answered, calls);
        return 1;
    }
    printf("HOOK_COST {\"calls\":%ld,\"seconds\":%.6f,\"usPerCall\":%.3f}\n", calls, elapsed,
           elapsed / (double)calls * 1e6);
    return 0;
}
