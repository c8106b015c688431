/*
 * secret_abi.h — the few glib and libsecret types the keyring helper uses,
 * declared from their public, stable ABI (glib 2.x; libsecret-1 since 0.18)
 * because the helper opens libsecret with dlopen instead of linking it (see
 * keyring.c). Tests/Keyring/abi_check.c compares every declaration here with
 * the real headers, so a change upstream fails the tests, not a user's vault.
 */
#ifndef AUTHBRIDGE_SECRET_ABI_H
#define AUTHBRIDGE_SECRET_ABI_H
#include <stdint.h>

typedef int AB_gboolean;
typedef char AB_gchar;
typedef void *AB_gpointer;
typedef unsigned int (*AB_GHashFunc)(const void *);
typedef AB_gboolean (*AB_GEqualFunc)(const void *, const void *);
typedef void (*AB_GDestroyNotify)(AB_gpointer);
typedef struct AB_GHashTable AB_GHashTable; /* opaque */

typedef struct {
    uint32_t domain;
    int code;
    AB_gchar *message;
} AB_GError;

typedef struct AB_GList {
    AB_gpointer data;
    struct AB_GList *next;
    struct AB_GList *prev;
} AB_GList;

enum { AB_SECRET_SCHEMA_NONE = 0, AB_SECRET_SCHEMA_ATTRIBUTE_STRING = 0, AB_SECRET_SEARCH_ALL = 1 << 1 };

typedef struct {
    const AB_gchar *name;
    int type;
} AB_SecretSchemaAttribute;

typedef struct {
    const AB_gchar *name;
    int flags;
    AB_SecretSchemaAttribute attributes[32];
    int reserved;
    AB_gpointer reserved1, reserved2, reserved3, reserved4, reserved5, reserved6, reserved7;
} AB_SecretSchema;

#endif
