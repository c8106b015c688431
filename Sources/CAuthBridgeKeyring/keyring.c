#include "authbridge_keyring.h"
#include <libsecret/secret.h>
#include <string.h>

static const SecretSchema schema = {
    "org.authbridge.Secret", SECRET_SCHEMA_NONE,
    {
        { "application", SECRET_SCHEMA_ATTRIBUTE_STRING },
        { "kind", SECRET_SCHEMA_ATTRIBUTE_STRING },
        { "key", SECRET_SCHEMA_ATTRIBUTE_STRING },
        { NULL, 0 },
    },
    0, NULL, NULL, NULL, NULL, NULL, NULL, NULL
};

static GHashTable *attributes(const char *kind, const char *key)
{
    GHashTable *table = g_hash_table_new(g_str_hash, g_str_equal);
    g_hash_table_insert(table, (gpointer)"application", (gpointer)"authbridge");
    g_hash_table_insert(table, (gpointer)"kind", (gpointer)kind);
    if (key != NULL)
        g_hash_table_insert(table, (gpointer)"key", (gpointer)key);
    return table;
}

static int fail(GError *gerror, char **error, const char *fallback)
{
    if (error != NULL)
        *error = g_strdup(gerror != NULL ? gerror->message : fallback);
    if (gerror != NULL)
        g_error_free(gerror);
    return 1;
}

int ab_keyring_store(const char *kind, const char *key, const char *label, const char *secret, char **error)
{
    GError *gerror = NULL;
    GHashTable *table = attributes(kind, key);
    gboolean ok = secret_password_storev_sync(&schema, table, SECRET_COLLECTION_DEFAULT, label, secret, NULL, &gerror);
    g_hash_table_unref(table);
    return ok ? 0 : fail(gerror, error, "the keyring refused to store the item");
}

int ab_keyring_lookup(const char *kind, const char *key, char **secret, char **error)
{
    GError *gerror = NULL;
    GHashTable *table = attributes(kind, key);
    gchar *found = secret_password_lookupv_sync(&schema, table, NULL, &gerror);
    g_hash_table_unref(table);
    if (gerror != NULL)
        return fail(gerror, error, NULL);
    *secret = found; /* NULL when absent; released by ab_keyring_free */
    return 0;
}

int ab_keyring_clear(const char *kind, const char *key, char **error)
{
    GError *gerror = NULL;
    GHashTable *table = attributes(kind, key);
    secret_password_clearv_sync(&schema, table, NULL, &gerror);
    g_hash_table_unref(table);
    return gerror != NULL ? fail(gerror, error, NULL) : 0;
}

/* A JSON string literal: UTF-8 passes through, quotes, backslashes and
 * control characters are escaped. */
static void append_json_string(GString *json, const char *value)
{
    g_string_append_c(json, '"');
    for (const unsigned char *p = (const unsigned char *)value; *p != 0; p++) {
        if (*p == '"' || *p == '\\')
            g_string_append_printf(json, "\\%c", *p);
        else if (*p < 0x20)
            g_string_append_printf(json, "\\u%04x", *p);
        else
            g_string_append_c(json, (gchar)*p);
    }
    g_string_append_c(json, '"');
}

int ab_keyring_list(const char *kind, char **keys, char **error)
{
    GError *gerror = NULL;
    GHashTable *table = attributes(kind, NULL);
    GList *items = secret_password_searchv_sync(&schema, table, SECRET_SEARCH_ALL, NULL, &gerror);
    g_hash_table_unref(table);
    if (gerror != NULL)
        return fail(gerror, error, NULL);
    GString *json = g_string_new("[");
    int first = 1;
    for (GList *item = items; item != NULL; item = item->next) {
        GHashTable *attrs = secret_retrievable_get_attributes(SECRET_RETRIEVABLE(item->data));
        const char *value = attrs != NULL ? g_hash_table_lookup(attrs, "key") : NULL;
        if (value != NULL) {
            if (!first)
                g_string_append_c(json, ',');
            append_json_string(json, value);
            first = 0;
        }
        if (attrs != NULL)
            g_hash_table_unref(attrs);
    }
    g_list_free_full(items, g_object_unref);
    g_string_append_c(json, ']');
    *keys = g_string_free(json, FALSE);
    return 0;
}

void ab_keyring_free(char *value)
{
    if (value != NULL) {
        memset(value, 0, strlen(value)); /* secrets do not linger in freed memory */
        g_free(value);
    }
}
