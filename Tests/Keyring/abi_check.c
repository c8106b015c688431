/*
 * Compile-time proof that Sources/Helpers/Keyring/secret_abi.h (the types
 * the keyring helper declares itself, because it dlopens libsecret) matches
 * the real glib and libsecret headers. `make test` compiles it with
 * `pkg-config --cflags libsecret-1`; nothing runs.
 */
#include <libsecret/secret.h>
#include <stddef.h>
#include "../../Sources/Helpers/Keyring/secret_abi.h"

#define SAME_SIZE(ours, theirs) _Static_assert(sizeof(ours) == sizeof(theirs), #ours " differs from " #theirs)
#define SAME_FIELD(ours, theirs, ofield, tfield)                                                    \
    _Static_assert(offsetof(ours, ofield) == offsetof(theirs, tfield), #ours "." #ofield " moved"); \
    _Static_assert(sizeof(((ours *)0)->ofield) == sizeof(((theirs *)0)->tfield), #ours "." #ofield " resized")

SAME_SIZE(AB_gboolean, gboolean);
SAME_SIZE(AB_GError, GError);
SAME_FIELD(AB_GError, GError, domain, domain);
SAME_FIELD(AB_GError, GError, code, code);
SAME_FIELD(AB_GError, GError, message, message);
SAME_SIZE(AB_GList, GList);
SAME_FIELD(AB_GList, GList, data, data);
SAME_FIELD(AB_GList, GList, next, next);
SAME_FIELD(AB_GList, GList, prev, prev);
SAME_SIZE(AB_SecretSchemaAttribute, SecretSchemaAttribute);
SAME_FIELD(AB_SecretSchemaAttribute, SecretSchemaAttribute, name, name);
SAME_FIELD(AB_SecretSchemaAttribute, SecretSchemaAttribute, type, type);
SAME_SIZE(AB_SecretSchema, SecretSchema);
SAME_FIELD(AB_SecretSchema, SecretSchema, name, name);
SAME_FIELD(AB_SecretSchema, SecretSchema, flags, flags);
SAME_FIELD(AB_SecretSchema, SecretSchema, attributes, attributes);
SAME_FIELD(AB_SecretSchema, SecretSchema, reserved, reserved);
SAME_FIELD(AB_SecretSchema, SecretSchema, reserved7, reserved7);
_Static_assert((int)AB_SECRET_SCHEMA_NONE == (int)SECRET_SCHEMA_NONE, "SECRET_SCHEMA_NONE");
_Static_assert((int)AB_SECRET_SCHEMA_ATTRIBUTE_STRING == (int)SECRET_SCHEMA_ATTRIBUTE_STRING,
               "SECRET_SCHEMA_ATTRIBUTE_STRING");
_Static_assert((int)AB_SECRET_SEARCH_ALL == (int)SECRET_SEARCH_ALL, "SECRET_SEARCH_ALL");

/* The function types the helper resolves with dlsym, against the prototypes. */
static void check_prototypes(void)
{
    gboolean (*storev)(const SecretSchema *, GHashTable *, const gchar *, const gchar *, const gchar *, GCancellable *,
                       GError **) = secret_password_storev_sync;
    gchar *(*lookupv)(const SecretSchema *, GHashTable *, GCancellable *, GError **) = secret_password_lookupv_sync;
    gboolean (*clearv)(const SecretSchema *, GHashTable *, GCancellable *, GError **) = secret_password_clearv_sync;
    GList *(*searchv)(const SecretSchema *, GHashTable *, SecretSearchFlags, GCancellable *, GError **) =
        secret_password_searchv_sync;
    GHashTable *(*attributes)(SecretRetrievable *) = secret_retrievable_get_attributes;
    (void)storev, (void)lookupv, (void)clearv, (void)searchv, (void)attributes;
}
