/* libAuthBridgeNettle.so: AES-GCM, HKDF-SHA256 and HMAC-SHA256 over GNU Nettle; the contract is
   in include/authbridge_nettle.h. */

#define _GNU_SOURCE
#include "authbridge_nettle.h"

#include <errno.h>
#include <nettle/gcm.h>
#include <nettle/hkdf.h>
#include <nettle/hmac.h>
#include <nettle/memops.h>
#include <string.h>
#include <sys/random.h>

enum { DONE = 0, AUTHENTICATION_FAILED = 1, INVALID_INPUT = 2 };
enum { NONCE = 12, TAG = GCM_DIGEST_SIZE };

/* What a zero-length input points at (Nettle may copy from it). */
static const uint8_t nothing[1];

static const uint8_t *or_nothing(const uint8_t *bytes, size_t count)
{
    return count > 0 && bytes != NULL ? bytes : nothing;
}

static int random_nonce(uint8_t nonce[NONCE])
{
    size_t filled = 0;
    while (filled < NONCE) {
        ssize_t count = getrandom(nonce + filled, NONCE - filled, 0);
        if (count < 0 && errno == EINTR) {
            continue;
        }
        if (count <= 0) {
            return INVALID_INPUT;
        }
        filled += (size_t)count;
    }
    return DONE;
}

/* One GCM pass for a key size: the associated data, then `count` bytes of `input` encrypted
   (`encrypting`) or decrypted into `output`, then the tag into `tag`. */
#define GCM_PASS(bits)                                                                                        \
    static void gcm_pass_##bits(const uint8_t *key, const uint8_t *nonce, const uint8_t *associated,          \
                                size_t associated_count, const uint8_t *input, size_t count, uint8_t *output, \
                                int encrypting, uint8_t *tag)                                                 \
    {                                                                                                         \
        struct gcm_aes##bits##_ctx context;                                                                   \
        gcm_aes##bits##_set_key(&context, key);                                                               \
        gcm_aes##bits##_set_iv(&context, NONCE, nonce);                                                       \
        gcm_aes##bits##_update(&context, associated_count, associated);                                       \
        if (encrypting) {                                                                                     \
            gcm_aes##bits##_encrypt(&context, count, output, input);                                          \
        } else {                                                                                              \
            gcm_aes##bits##_decrypt(&context, count, output, input);                                          \
        }                                                                                                     \
        gcm_aes##bits##_digest(&context, TAG, tag);                                                           \
        memset(&context, 0, sizeof context);                                                                  \
    }
GCM_PASS(128)
GCM_PASS(192)
GCM_PASS(256)

static int gcm_pass(const uint8_t *key, size_t key_count, const uint8_t *nonce, const uint8_t *associated,
                    size_t associated_count, const uint8_t *input, size_t count, uint8_t *output, int encrypting,
                    uint8_t *tag)
{
    associated = or_nothing(associated, associated_count);
    input = or_nothing(input, count);
    switch (key_count) {
    case 16: gcm_pass_128(key, nonce, associated, associated_count, input, count, output, encrypting, tag); break;
    case 24: gcm_pass_192(key, nonce, associated, associated_count, input, count, output, encrypting, tag); break;
    case 32: gcm_pass_256(key, nonce, associated, associated_count, input, count, output, encrypting, tag); break;
    default: return INVALID_INPUT;
    }
    return DONE;
}

int authbridge_nettle_aes_gcm_seal_v1(const uint8_t *key, size_t key_count, const uint8_t *plain, size_t plain_count,
                                      const uint8_t *associated, size_t associated_count, uint8_t *output)
{
    if (key == NULL || output == NULL || (key_count != 16 && key_count != 24 && key_count != 32)) {
        return INVALID_INPUT;
    }
    if (random_nonce(output) != DONE) {
        return INVALID_INPUT;
    }
    return gcm_pass(key, key_count, output, associated, associated_count, plain, plain_count, output + NONCE, 1,
                    output + NONCE + plain_count);
}

int authbridge_nettle_aes_gcm_open_v1(const uint8_t *key, size_t key_count, const uint8_t *sealed, size_t sealed_count,
                                      const uint8_t *associated, size_t associated_count, uint8_t *output)
{
    if (key == NULL || sealed == NULL || sealed_count < NONCE + TAG ||
        (key_count != 16 && key_count != 24 && key_count != 32)) {
        return INVALID_INPUT;
    }
    size_t count = sealed_count - NONCE - TAG;
    if (count > 0 && output == NULL) {
        return INVALID_INPUT;
    }
    uint8_t tag[TAG];
    uint8_t scratch[1];
    gcm_pass(key, key_count, sealed, associated, associated_count, sealed + NONCE, count, count > 0 ? output : scratch,
             0, tag);
    if (!memeql_sec(tag, sealed + NONCE + count, TAG)) {
        /* Nothing of an inauthentic text is handed out. */
        if (count > 0) {
            memset(output, 0, count);
        }
        return AUTHENTICATION_FAILED;
    }
    return DONE;
}

int authbridge_nettle_hkdf_sha256_v1(const uint8_t *input_key_material, size_t input_count, const uint8_t *salt,
                                     size_t salt_count, const uint8_t *info, size_t info_count, uint8_t *output,
                                     size_t output_count)
{
    if (output == NULL || output_count == 0 || output_count > 255 * SHA256_DIGEST_SIZE) {
        return INVALID_INPUT;
    }
    struct hmac_sha256_ctx context;
    uint8_t pseudorandom_key[SHA256_DIGEST_SIZE];
    /* An absent salt is HashLen zeros (RFC 5869 §2.2): HMAC pads a shorter key with zeros to the same key. */
    hmac_sha256_set_key(&context, salt_count, or_nothing(salt, salt_count));
    hkdf_extract(&context, (nettle_hash_update_func *)hmac_sha256_update, (nettle_hash_digest_func *)hmac_sha256_digest,
                 SHA256_DIGEST_SIZE, input_count, or_nothing(input_key_material, input_count), pseudorandom_key);
    hmac_sha256_set_key(&context, SHA256_DIGEST_SIZE, pseudorandom_key);
    hkdf_expand(&context, (nettle_hash_update_func *)hmac_sha256_update, (nettle_hash_digest_func *)hmac_sha256_digest,
                SHA256_DIGEST_SIZE, info_count, or_nothing(info, info_count), output_count, output);
    memset(&context, 0, sizeof context);
    memset(pseudorandom_key, 0, sizeof pseudorandom_key);
    return DONE;
}

int authbridge_nettle_hmac_sha256_v1(const uint8_t *key, size_t key_count, const uint8_t *message, size_t message_count,
                                     uint8_t *output)
{
    if (output == NULL) {
        return INVALID_INPUT;
    }
    struct hmac_sha256_ctx context;
    hmac_sha256_set_key(&context, key_count, or_nothing(key, key_count));
    hmac_sha256_update(&context, message_count, or_nothing(message, message_count));
    hmac_sha256_digest(&context, SHA256_DIGEST_SIZE, output);
    memset(&context, 0, sizeof context);
    return DONE;
}
