#ifndef AUTHBRIDGE_CNETTLE_SHIM_H
#define AUTHBRIDGE_CNETTLE_SHIM_H
/* GNU Nettle (Debian's libnettle8, GnuTLS's own cryptography): AES-GCM, HKDF and HMAC for
   Sources/Helpers/Nettle. */
#include <nettle/gcm.h>
#include <nettle/hkdf.h>
#include <nettle/hmac.h>
#endif
