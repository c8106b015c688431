/*
 * authbridge/plugin_jansson.h — the few lines every C plugin written with
 * jansson needs around the hook ABI: read a hook's input as an object, answer
 * with a jansson value, log a C string.
 *
 * Header-only (static inline), so it adds no symbol and no ABI: the rules
 * (ownership, threads, when each host service may be called) are plugin.h's.
 * It calls host->fail, so a plugin that uses it needs a host of ABI 1.1 or
 * later (build against this plugin.h: AB_DEFINE_PLUGIN states 1.1, and the
 * loader refuses the plugin on an older host).
 */
#ifndef AUTHBRIDGE_PLUGIN_JANSSON_H
#define AUTHBRIDGE_PLUGIN_JANSSON_H

#include <authbridge/plugin.h>
#include <jansson.h>

#include <stdlib.h>
#include <string.h>

/* Logs a NUL-terminated message (never a token: the host scrubs known
 * secrets, but a plugin should not rely on it). */
static inline void ab_log_text(const ab_host_api *host, ab_call *call, ab_log_level level, const char *message)
{
    host->log(call, level, message, strlen(message));
}

/* Parses a hook's borrowed input. Returns a new reference to the object, or
 * NULL with the call's failure set (internal/badInput) when the input is not
 * a JSON object. */
static inline json_t *ab_input_object(const ab_host_api *host, ab_call *call, ab_json input)
{
    json_t *value = input.data ? json_loadb(input.data, input.length, 0, NULL) : NULL;
    if (json_is_object(value))
        return value;
    json_decref(value);
    host->fail(call, "internal", "badInput", "The plugin received a hook input that is not a JSON object.", 0);
    return NULL;
}

/* Sets `value` as the call's result and releases it (the reference is
 * stolen; NULL, e.g. after a failed json_pack, is accepted). Returns AB_OK, or
 * the failure set (internal/resultRefused) when the value cannot be encoded
 * or the host refuses it. */
static inline ab_status ab_reply_json(const ab_host_api *host, ab_call *call, json_t *value)
{
    char *text = value ? json_dumps(value, JSON_COMPACT) : NULL;
    json_decref(value);
    ab_status status = text ? host->set_result(call, (ab_json){ text, strlen(text) }) : AB_INVALID;
    free(text);
    if (status == AB_OK)
        return AB_OK;
    return host->fail(call, "internal", "resultRefused", "The plugin could not encode or set its answer.", 0);
}

/* A string member of `object` (borrowed from it), or NULL when absent or not a string. */
static inline const char *ab_string_at(json_t *object, const char *key)
{
    return json_string_value(json_object_get(object, key));
}

#endif /* AUTHBRIDGE_PLUGIN_JANSSON_H */
