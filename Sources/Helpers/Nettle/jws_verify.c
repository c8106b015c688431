/* libAuthBridgeNettle.so: JWS signature verification (RFC 7518 §3.3–3.5, RFC 8037) over GNU Nettle's
   hogweed and GMP, for ID tokens; the contract is in include/authbridge_nettle.h.

   Why Nettle and not jwt-kit, measured: libAuthBridgeJWT.so (jwt-kit, swift-crypto and swift-certificates,
   linked statically: 3.5 MiB resident) and the FoundationEssentials it loaded (3.1 MiB, and 0.55 of Regex)
   were in the agent from its first ID token on; with this check the agent after its first refresh holds
   23.9-24.1 MiB where it held 31.0-31.3. Hogweed and GMP are mapped by then anyway (GnuTLS, which
   Debian's libcurl loads at the first HTTPS request, links both): 0.5 MiB of GMP's pages come in. An
   RS256 check takes 69 us where jwt-kit took 85-99, and no 4-5 ms of dlopen first; ES256 160 us where
   BoringSSL's P-256 took 110-121 (bench/README, "ID tokens by GNU Nettle"). The JOSE rules around the signature (header, key selection,
   claims) are Swift: Sources/AuthBridgeIDToken. */

#include "authbridge_nettle.h"

#include <gmp.h>
#include <nettle/ecc-curve.h>
#include <nettle/ecc.h>
#include <nettle/ecdsa.h>
#include <nettle/eddsa.h>
#include <nettle/rsa.h>
#include <nettle/sha2.h>
#include <string.h>

enum { VERIFIED = 0, REFUSED = 1, UNUSABLE_KEY = 2, INVALID_REQUEST = 3 };

/* Moduli below 2048 bits are refused as swift-crypto refuses them; above 8192, to bound the work an
   attacker-chosen JWKS can cause. Exponents: odd, at least 3, at most 33 bits (as BoringSSL). */
enum { RSA_MINIMUM_BITS = 2048, RSA_MAXIMUM_BITS = 8192, RSA_EXPONENT_MAXIMUM_BITS = 33 };

enum family { RSA_PKCS1, RSA_PSS, ECDSA, EDDSA };

/* DER DigestInfo prefixes of SHA-256, SHA-384 and SHA-512 (RFC 8017 §9.2, note 1). */
enum { DIGEST_INFO_PREFIX = 19 };
static const uint8_t sha256_info[DIGEST_INFO_PREFIX] = { 0x30, 0x31, 0x30, 0x0d, 0x06, 0x09, 0x60, 0x86, 0x48, 0x01,
                                                         0x65, 0x03, 0x04, 0x02, 0x01, 0x05, 0x00, 0x04, 0x20 };
static const uint8_t sha384_info[DIGEST_INFO_PREFIX] = { 0x30, 0x41, 0x30, 0x0d, 0x06, 0x09, 0x60, 0x86, 0x48, 0x01,
                                                         0x65, 0x03, 0x04, 0x02, 0x02, 0x05, 0x00, 0x04, 0x30 };
static const uint8_t sha512_info[DIGEST_INFO_PREFIX] = { 0x30, 0x51, 0x30, 0x0d, 0x06, 0x09, 0x60, 0x86, 0x48, 0x01,
                                                         0x65, 0x03, 0x04, 0x02, 0x03, 0x05, 0x00, 0x04, 0x40 };

struct algorithm {
    const char *name;
    enum family family;
    /* The SHA-2 digest of the signing input: 32, 48 or 64 bytes (EdDSA: none, it hashes the input itself). */
    size_t digest_size;
    /* EC and OKP: the JWK `crv` the algorithm needs, and the size of a coordinate (and of r and s). */
    const char *curve;
    size_t coordinate_size;
};

static const struct algorithm algorithms[] = {
    { "RS256", RSA_PKCS1, SHA256_DIGEST_SIZE, NULL, 0 }, { "RS384", RSA_PKCS1, SHA384_DIGEST_SIZE, NULL, 0 },
    { "RS512", RSA_PKCS1, SHA512_DIGEST_SIZE, NULL, 0 }, { "PS256", RSA_PSS, SHA256_DIGEST_SIZE, NULL, 0 },
    { "PS384", RSA_PSS, SHA384_DIGEST_SIZE, NULL, 0 },   { "PS512", RSA_PSS, SHA512_DIGEST_SIZE, NULL, 0 },
    { "ES256", ECDSA, SHA256_DIGEST_SIZE, "P-256", 32 }, { "ES384", ECDSA, SHA384_DIGEST_SIZE, "P-384", 48 },
    { "ES512", ECDSA, SHA512_DIGEST_SIZE, "P-521", 66 }, { "EdDSA", EDDSA, 0, "Ed25519", ED25519_KEY_SIZE },
};

static const struct algorithm *algorithm_named(const char *name)
{
    for (size_t index = 0; index < sizeof algorithms / sizeof algorithms[0]; index++) {
        if (strcmp(algorithms[index].name, name) == 0) {
            return &algorithms[index];
        }
    }
    return NULL;
}

/* What a zero-length input points at. */
static const uint8_t nothing[1];

static const uint8_t *or_nothing(const uint8_t *bytes, size_t count)
{
    return count > 0 && bytes != NULL ? bytes : nothing;
}

/* An unsigned big-endian integer (a JWK member, r or s) into `value` (mpz_init'ed). */
static void import_unsigned(mpz_t value, const uint8_t *bytes, size_t count)
{
    mpz_import(value, count, 1, 1, 1, 0, or_nothing(bytes, count));
}

/* The SHA-2 digest of `size` bytes (32, 48 or 64) of `input`. */
static void digest_of(size_t size, const uint8_t *input, size_t count, uint8_t *digest)
{
    if (size == SHA256_DIGEST_SIZE) {
        struct sha256_ctx context;
        sha256_init(&context);
        sha256_update(&context, count, input);
        sha256_digest(&context, size, digest);
    } else {
        struct sha512_ctx context;
        if (size == SHA384_DIGEST_SIZE) {
            sha384_init(&context);
            sha384_update(&context, count, input);
            sha384_digest(&context, size, digest);
        } else {
            sha512_init(&context);
            sha512_update(&context, count, input);
            sha512_digest(&context, size, digest);
        }
    }
}

static int rsa_usable(struct rsa_public_key *key)
{
    size_t bits = mpz_sizeinbase(key->n, 2);
    if (bits < RSA_MINIMUM_BITS || bits > RSA_MAXIMUM_BITS) {
        return 0;
    }
    if (mpz_even_p(key->e) || mpz_cmp_ui(key->e, 3) < 0 || mpz_sizeinbase(key->e, 2) > RSA_EXPONENT_MAXIMUM_BITS) {
        return 0;
    }
    /* Refuses an even modulus, and sets the signature size. */
    return rsa_public_key_prepare(key);
}

static int rsa_check(const struct rsa_public_key *key, const struct algorithm *algorithm, const uint8_t *digest,
                     const mpz_t signature)
{
    if (algorithm->family == RSA_PSS) {
        /* Salt as long as the hash (RFC 7518 §3.5). */
        switch (algorithm->digest_size) {
        case SHA256_DIGEST_SIZE: return rsa_pss_sha256_verify_digest(key, SHA256_DIGEST_SIZE, digest, signature);
        case SHA384_DIGEST_SIZE: return rsa_pss_sha384_verify_digest(key, SHA384_DIGEST_SIZE, digest, signature);
        default: return rsa_pss_sha512_verify_digest(key, SHA512_DIGEST_SIZE, digest, signature);
        }
    }
    /* Nettle has rsa_sha256/512_verify_digest but no SHA-384 one: the DigestInfo of each, the same way. */
    uint8_t info[DIGEST_INFO_PREFIX + SHA512_DIGEST_SIZE];
    const uint8_t *prefix = algorithm->digest_size == SHA256_DIGEST_SIZE   ? sha256_info
                            : algorithm->digest_size == SHA384_DIGEST_SIZE ? sha384_info
                                                                           : sha512_info;
    memcpy(info, prefix, DIGEST_INFO_PREFIX);
    memcpy(info + DIGEST_INFO_PREFIX, digest, algorithm->digest_size);
    return rsa_pkcs1_verify(key, DIGEST_INFO_PREFIX + algorithm->digest_size, info, signature);
}

static int verify_rsa(const struct algorithm *algorithm, const uint8_t *modulus, size_t modulus_count,
                      const uint8_t *exponent, size_t exponent_count, const uint8_t *input, size_t input_count,
                      const uint8_t *signature, size_t signature_count)
{
    struct rsa_public_key key;
    rsa_public_key_init(&key);
    import_unsigned(key.n, modulus, modulus_count);
    import_unsigned(key.e, exponent, exponent_count);
    int result;
    if (!rsa_usable(&key)) {
        result = UNUSABLE_KEY;
    } else if (signature_count != key.size) {
        /* RFC 8017 §8.2.2 step 1: a signature is exactly as long as the modulus. */
        result = REFUSED;
    } else {
        uint8_t digest[SHA512_DIGEST_SIZE];
        digest_of(algorithm->digest_size, input, input_count, digest);
        mpz_t value;
        mpz_init(value);
        import_unsigned(value, signature, signature_count);
        result = rsa_check(&key, algorithm, digest, value) ? VERIFIED : REFUSED;
        mpz_clear(value);
    }
    rsa_public_key_clear(&key);
    return result;
}

static const struct ecc_curve *curve_of(const struct algorithm *algorithm)
{
    switch (algorithm->coordinate_size) {
    case 32: return nettle_get_secp_256r1();
    case 48: return nettle_get_secp_384r1();
    default: return nettle_get_secp_521r1();
    }
}

static int verify_ecdsa(const struct algorithm *algorithm, const uint8_t *x, size_t x_count, const uint8_t *y,
                        size_t y_count, const uint8_t *input, size_t input_count, const uint8_t *signature,
                        size_t signature_count)
{
    size_t size = algorithm->coordinate_size;
    /* RFC 7518 §6.2.1.2: coordinates are exactly the curve's size (as swift-crypto reads them). */
    if (x_count != size || y_count != size) {
        return UNUSABLE_KEY;
    }
    struct ecc_point point;
    ecc_point_init(&point, curve_of(algorithm));
    mpz_t px, py;
    mpz_init(px);
    mpz_init(py);
    import_unsigned(px, x, x_count);
    import_unsigned(py, y, y_count);
    /* Fails for coordinates outside the field and for a point off the curve. */
    int on_curve = ecc_point_set(&point, px, py);
    mpz_clear(px);
    mpz_clear(py);
    int result;
    if (!on_curve) {
        result = UNUSABLE_KEY;
    } else if (signature_count != 2 * size) {
        /* RFC 7518 §3.4: r ‖ s, each exactly the curve's size; a DER signature is refused. */
        result = REFUSED;
    } else {
        uint8_t digest[SHA512_DIGEST_SIZE];
        digest_of(algorithm->digest_size, input, input_count, digest);
        struct dsa_signature rs;
        dsa_signature_init(&rs);
        import_unsigned(rs.r, signature, size);
        import_unsigned(rs.s, signature + size, size);
        /* Refuses r or s outside 1 … q − 1. */
        result = ecdsa_verify(&point, algorithm->digest_size, digest, &rs) ? VERIFIED : REFUSED;
        dsa_signature_clear(&rs);
    }
    ecc_point_clear(&point);
    return result;
}

static int verify_eddsa(const uint8_t *x, size_t x_count, const uint8_t *input, size_t input_count,
                        const uint8_t *signature, size_t signature_count)
{
    if (x_count != ED25519_KEY_SIZE) {
        return UNUSABLE_KEY;
    }
    if (signature_count != ED25519_SIGNATURE_SIZE) {
        return REFUSED;
    }
    /* A key that is no point of the curve fails here too (refused, as swift-crypto refuses it). */
    return ed25519_sha512_verify(x, input_count, or_nothing(input, input_count), signature) ? VERIFIED : REFUSED;
}

int authbridge_nettle_jws_verify_v1(const char *algorithm_name, const char *curve, const uint8_t *first,
                                    size_t first_count, const uint8_t *second, size_t second_count,
                                    const uint8_t *signing_input, size_t signing_input_count, const uint8_t *signature,
                                    size_t signature_count)
{
    if (algorithm_name == NULL || (first == NULL && first_count > 0) || (second == NULL && second_count > 0) ||
        (signing_input == NULL && signing_input_count > 0) || (signature == NULL && signature_count > 0)) {
        return INVALID_REQUEST;
    }
    const struct algorithm *algorithm = algorithm_named(algorithm_name);
    if (algorithm == NULL) {
        return INVALID_REQUEST;
    }
    if (algorithm->curve != NULL && (curve == NULL || strcmp(curve, algorithm->curve) != 0)) {
        return UNUSABLE_KEY;
    }
    signing_input = or_nothing(signing_input, signing_input_count);
    signature = or_nothing(signature, signature_count);
    switch (algorithm->family) {
    case RSA_PKCS1:
    case RSA_PSS:
        return verify_rsa(algorithm, first, first_count, second, second_count, signing_input, signing_input_count,
                          signature, signature_count);
    case ECDSA:
        return verify_ecdsa(algorithm, first, first_count, second, second_count, signing_input, signing_input_count,
                            signature, signature_count);
    default: return verify_eddsa(first, first_count, signing_input, signing_input_count, signature, signature_count);
    }
}
