/*
 * authbridge/plugin_jansson.h — the few lines every C plugin written with
 * jansson needs around the hook ABI: read a hook's input as an object (once
 * per distinct input for hooks on the hot path), answer with a jansson value,
 * log a C string.
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

#include <pthread.h>
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

/* The input ab_input_view parsed last, and the text it was parsed from. One
 * per file that includes this header (a plugin's own); guarded by its mutex,
 * since hooks run concurrently on worker threads. */
static struct {
    pthread_mutex_t lock;
    char *text;
    size_t length;
    json_t *value;
} ab__input_view_memo __attribute__((unused)) = { PTHREAD_MUTEX_INITIALIZER, NULL, 0, NULL };

/* Like ab_input_object, but for hooks the host calls again and again with
 * the same input (check_session on every checkSignInStatus of an unchanged
 * session): an input byte-for-byte equal to the last one this plugin viewed
 * is not parsed again; the call gets the same object (a new reference, to
 * json_decref as usual). The object is shared with other calls, on other
 * threads too: read it, never modify it (no json_object_set, no
 * json_object_del, no json_string_set on what it holds). A different input is
 * parsed and remembered in its place; a caller still holding the old object
 * keeps it until it lets go. */
static inline json_t *ab_input_view(const ab_host_api *host, ab_call *call, ab_json input)
{
    if (input.data == NULL)
        return ab_input_object(host, call, input);
    json_t *value = NULL;
    pthread_mutex_lock(&ab__input_view_memo.lock);
    if (ab__input_view_memo.value != NULL && ab__input_view_memo.length == input.length &&
        memcmp(ab__input_view_memo.text, input.data, input.length) == 0)
        value = json_incref(ab__input_view_memo.value);
    pthread_mutex_unlock(&ab__input_view_memo.lock);
    if (value != NULL)
        return value;
    value = ab_input_object(host, call, input);
    if (value == NULL)
        return NULL;
    char *text = (char *)malloc(input.length ? input.length : 1);
    if (text == NULL)
        return value; /* answered, just not remembered */
    memcpy(text, input.data, input.length);
    pthread_mutex_lock(&ab__input_view_memo.lock);
    char *old_text = ab__input_view_memo.text;
    json_t *old_value = ab__input_view_memo.value;
    ab__input_view_memo.text = text;
    ab__input_view_memo.length = input.length;
    ab__input_view_memo.value = json_incref(value);
    pthread_mutex_unlock(&ab__input_view_memo.lock);
    free(old_text);
    json_decref(old_value);
    return value;
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
