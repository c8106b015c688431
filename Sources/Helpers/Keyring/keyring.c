#include "authbridge_keyring.h"
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/*
 * libsecret is opened with dlopen on first use rather than linked, so that
 * this helper (and every package that carries it: the tarball, the Python
 * wheel, the npm package) needs no library beyond glibc to load: the desktop
 * keyring is optional, and where it exists libsecret-1-0 is installed with it.
 * A wheel that linked libsecret would have to graft it and gio, whose modules
 * must match the system's glib; linking nothing keeps the wheel's manylinux
 * tag honest.
 */
#include "secret_abi.h"

static const AB_SecretSchema schema = { "org.authbridge.Secret",
                                        AB_SECRET_SCHEMA_NONE,
                                        {
                                            { "application", AB_SECRET_SCHEMA_ATTRIBUTE_STRING },
                                            { "kind", AB_SECRET_SCHEMA_ATTRIBUTE_STRING },
                                            { "key", AB_SECRET_SCHEMA_ATTRIBUTE_STRING },
                                            { NULL, 0 },
                                        },
                                        0,
                                        NULL,
                                        NULL,
                                        NULL,
                                        NULL,
                                        NULL,
                                        NULL,
                                        NULL };

/* The functions this helper calls, resolved once from libsecret-1.so.0 (and
 * the glib libraries it brings along). */
static struct {
    AB_gboolean (*storev_sync)(const AB_SecretSchema *, AB_GHashTable *, const AB_gchar *, const AB_gchar *,
                               const AB_gchar *, AB_gpointer, AB_GError **);
    AB_gchar *(*lookupv_sync)(const AB_SecretSchema *, AB_GHashTable *, AB_gpointer, AB_GError **);
    AB_gboolean (*clearv_sync)(const AB_SecretSchema *, AB_GHashTable *, AB_gpointer, AB_GError **);
    AB_GList *(*searchv_sync)(const AB_SecretSchema *, AB_GHashTable *, int, AB_gpointer, AB_GError **);
    AB_GHashTable *(*retrievable_get_attributes)(AB_gpointer);
    void (*password_free)(AB_gchar *);
    AB_GHashTable *(*hash_table_new)(AB_GHashFunc, AB_GEqualFunc);
    AB_gboolean (*hash_table_insert)(AB_GHashTable *, AB_gpointer, AB_gpointer);
    AB_gpointer (*hash_table_lookup)(AB_GHashTable *, const void *);
    void (*hash_table_unref)(AB_GHashTable *);
    AB_GHashFunc str_hash;
    AB_GEqualFunc str_equal;
    void (*error_free)(AB_GError *);
    void (*list_free_full)(AB_GList *, AB_GDestroyNotify);
    AB_GDestroyNotify object_unref;
} lib;

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static char load_problem[512];

static void load_libsecret(void)
{
    void *handle = dlopen("libsecret-1.so.0", RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
    if (handle == NULL) {
        snprintf(load_problem, sizeof load_problem,
                 "libsecret-1.so.0 is not installed (Debian/Ubuntu: apt install libsecret-1-0; Fedora: dnf install "
                 "libsecret)");
        return;
    }
    const char *missing = NULL;
#define RESOLVE(field, symbol)                        \
    do {                                              \
        *(void **)&lib.field = dlsym(handle, symbol); \
        if (lib.field == NULL && missing == NULL)     \
            missing = symbol;                         \
    } while (0)
    RESOLVE(storev_sync, "secret_password_storev_sync");
    RESOLVE(lookupv_sync, "secret_password_lookupv_sync");
    RESOLVE(clearv_sync, "secret_password_clearv_sync");
    RESOLVE(searchv_sync, "secret_password_searchv_sync");
    RESOLVE(retrievable_get_attributes, "secret_retrievable_get_attributes");
    RESOLVE(password_free, "secret_password_free");
    RESOLVE(hash_table_new, "g_hash_table_new");
    RESOLVE(hash_table_insert, "g_hash_table_insert");
    RESOLVE(hash_table_lookup, "g_hash_table_lookup");
    RESOLVE(hash_table_unref, "g_hash_table_unref");
    RESOLVE(str_hash, "g_str_hash");
    RESOLVE(str_equal, "g_str_equal");
    RESOLVE(error_free, "g_error_free");
    RESOLVE(list_free_full, "g_list_free_full");
    RESOLVE(object_unref, "g_object_unref");
#undef RESOLVE
    if (missing != NULL)
        snprintf(load_problem, sizeof load_problem,
                 "the installed libsecret is too old (it lacks %s; version 0.19 or later is needed)", missing);
}

/* Sets *error and answers 1 when libsecret cannot be used. */
static int unavailable(char **error)
{
    pthread_once(&load_once, load_libsecret);
    if (load_problem[0] == 0)
        return 0;
    if (error != NULL)
        *error = strdup(load_problem);
    return 1;
}

static AB_GHashTable *attributes(const char *kind, const char *key)
{
    AB_GHashTable *table = lib.hash_table_new(lib.str_hash, lib.str_equal);
    lib.hash_table_insert(table, (AB_gpointer) "application", (AB_gpointer) "authbridge");
    lib.hash_table_insert(table, (AB_gpointer) "kind", (AB_gpointer)kind);
    if (key != NULL)
        lib.hash_table_insert(table, (AB_gpointer) "key", (AB_gpointer)key);
    return table;
}

static int fail(AB_GError *gerror, char **error, const char *fallback)
{
    if (error != NULL)
        *error = strdup(gerror != NULL && gerror->message != NULL ? gerror->message : fallback);
    if (gerror != NULL)
        lib.error_free(gerror);
    return 1;
}

/* A copy in memory this helper owns, so that ab_keyring_free needs to know
 * only one allocator. */
static char *own(const char *text)
{
    return text != NULL ? strdup(text) : NULL;
}

int ab_keyring_store(const char *kind, const char *key, const char *label, const char *secret, char **error)
{
    if (unavailable(error))
        return 1;
    AB_GError *gerror = NULL;
    AB_GHashTable *table = attributes(kind, key);
    AB_gboolean ok = lib.storev_sync(&schema, table, "default", label, secret, NULL, &gerror);
    lib.hash_table_unref(table);
    return ok ? 0 : fail(gerror, error, "the keyring refused to store the item");
}

int ab_keyring_lookup(const char *kind, const char *key, char **secret, char **error)
{
    if (unavailable(error))
        return 1;
    AB_GError *gerror = NULL;
    AB_GHashTable *table = attributes(kind, key);
    AB_gchar *found = lib.lookupv_sync(&schema, table, NULL, &gerror);
    lib.hash_table_unref(table);
    if (gerror != NULL)
        return fail(gerror, error, "the keyring lookup failed");
    *secret = own(found); /* NULL when absent; released by ab_keyring_free */
    if (found != NULL)
        lib.password_free(found); /* libsecret wipes it */
    return 0;
}

int ab_keyring_clear(const char *kind, const char *key, char **error)
{
    if (unavailable(error))
        return 1;
    AB_GError *gerror = NULL;
    AB_GHashTable *table = attributes(kind, key);
    lib.clearv_sync(&schema, table, NULL, &gerror);
    lib.hash_table_unref(table);
    return gerror != NULL ? fail(gerror, error, "the keyring could not delete the item") : 0;
}

/* A growing byte buffer; `failed` once an allocation failed. */
typedef struct {
    char *bytes;
    size_t length, capacity;
    int failed;
} Buffer;

static void append(Buffer *buffer, const char *bytes, size_t count)
{
    if (buffer->failed)
        return;
    if (buffer->length + count + 1 > buffer->capacity) {
        size_t capacity = buffer->capacity * 2 + count + 64;
        char *grown = realloc(buffer->bytes, capacity);
        if (grown == NULL) {
            buffer->failed = 1;
            return;
        }
        buffer->bytes = grown;
        buffer->capacity = capacity;
    }
    memcpy(buffer->bytes + buffer->length, bytes, count);
    buffer->length += count;
    buffer->bytes[buffer->length] = 0;
}

/* A JSON string literal: UTF-8 passes through, quotes, backslashes and
 * control characters are escaped. */
static void append_json_string(Buffer *json, const char *value)
{
    append(json, "\"", 1);
    for (const unsigned char *p = (const unsigned char *)value; *p != 0; p++) {
        char escaped[8];
        if (*p == '"' || *p == '\\') {
            snprintf(escaped, sizeof escaped, "\\%c", *p);
            append(json, escaped, 2);
        } else if (*p < 0x20) {
            snprintf(escaped, sizeof escaped, "\\u%04x", *p);
            append(json, escaped, 6);
        } else {
            append(json, (const char *)p, 1);
        }
    }
    append(json, "\"", 1);
}

int ab_keyring_list(const char *kind, char **keys, char **error)
{
    if (unavailable(error))
        return 1;
    AB_GError *gerror = NULL;
    AB_GHashTable *table = attributes(kind, NULL);
    AB_GList *items = lib.searchv_sync(&schema, table, AB_SECRET_SEARCH_ALL, NULL, &gerror);
    lib.hash_table_unref(table);
    if (gerror != NULL)
        return fail(gerror, error, "the keyring search failed");
    Buffer json = { 0 };
    append(&json, "[", 1);
    int first = 1;
    for (AB_GList *item = items; item != NULL; item = item->next) {
        AB_GHashTable *attrs = lib.retrievable_get_attributes(item->data);
        const char *value = attrs != NULL ? lib.hash_table_lookup(attrs, "key") : NULL;
        if (value != NULL) {
            if (!first)
                append(&json, ",", 1);
            append_json_string(&json, value);
            first = 0;
        }
        if (attrs != NULL)
            lib.hash_table_unref(attrs);
    }
    lib.list_free_full(items, lib.object_unref);
    append(&json, "]", 1);
    if (json.failed) {
        free(json.bytes);
        return fail(NULL, error, "out of memory");
    }
    *keys = json.bytes;
    return 0;
}

void ab_keyring_free(char *value)
{
    if (value != NULL) {
        /* Secrets do not linger in freed memory. */
        explicit_bzero(value, strlen(value));
        free(value);
    }
}
