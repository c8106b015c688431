#ifndef AUTHBRIDGE_CNETTLE_SHIM_H
#define AUTHBRIDGE_CNETTLE_SHIM_H
/* GNU Nettle (Debian's libnettle8, GnuTLS's own cryptography): AES-GCM, HKDF and HMAC, and hogweed's
   RSA, ECDSA and Ed25519 over GMP (libhogweed6, libgmp10: GnuTLS links both too), for
   Sources/Helpers/Nettle. */
#include <nettle/gcm.h>
#include <nettle/hkdf.h>
#include <nettle/hmac.h>
#include <nettle/rsa.h>
#include <nettle/ecdsa.h>
#include <nettle/eddsa.h>
#endif
