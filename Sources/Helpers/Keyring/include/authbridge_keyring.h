/*
 * authbridge_keyring.h — the host's bridge to the Secret Service (libsecret).
 *
 * Built as its own shared library (libAuthBridgeKeyring.so) and dlopen'ed on
 * first use, so that glib, gio and D-Bus stay off the host's start-up path.
 * It links nothing but glibc: libsecret-1.so.0 is itself dlopen'ed by the
 * first call, and a machine without it gets an error naming the package.
 * Items carry the attributes {application: "authbridge", kind, key}.
 *
 * Ownership: strings returned through out-parameters are allocated here and
 * must be released with ab_keyring_free (secrets are wiped first).
 * Threads: every call blocks on D-Bus; call from a thread that may block.
 */
#ifndef AUTHBRIDGE_KEYRING_H
#define AUTHBRIDGE_KEYRING_H
#include <stddef.h>

/* 0 on success; otherwise 1 and *error holds a message. */
int ab_keyring_store(const char *kind, const char *key, const char *label, const char *secret, char **error);
/* 0 with *secret = NULL when there is no such item. */
int ab_keyring_lookup(const char *kind, const char *key, char **secret, char **error);
int ab_keyring_clear(const char *kind, const char *key, char **error);
/* *keys is a JSON array of the keys of every item of `kind`. */
int ab_keyring_list(const char *kind, char **keys, char **error);
void ab_keyring_free(char *value);

#endif
