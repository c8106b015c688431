#ifndef AUTHBRIDGE_NETTLE_H
#define AUTHBRIDGE_NETTLE_H

#include <stddef.h>
#include <stdint.h>

/* libAuthBridgeNettle.so: what seals and opens vault records (AES-256-GCM, HKDF-SHA256),
   HMAC-SHA256, and the signature check of ID tokens (JWS), over GNU Nettle. Sources/AuthBridgeCrypto
   opens it on first use.

   Why Nettle and not swift-crypto for these: the encrypted-file vault seals at the first sign-in
   and opens at the first token, and swift-crypto's library (with the FoundationEssentials it
   needs) added 5.1 MB to the agent's resident memory there; Nettle adds 0.45 MB, and GnuTLS
   (which Debian's libcurl loads at the first HTTPS request) loads it anyway (bench/README,
   "The agent's memory"). swift-crypto still makes and uses the signing keys (DPoP,
   private_key_jwt): libAuthBridgeSwiftCrypto.so.

   The contract is libAuthBridgeSwiftCrypto.so's for the same operations, so records sealed by
   either open with the other: AES-GCM with a random 96-bit nonce, sealed bytes nonce ‖ ciphertext
   ‖ 128-bit tag (plain + 28 bytes); keys of 128, 192 or 256 bits. Every entry point is
   synchronous, may be called from any thread, and answers 0 (done), 1 (authentication failed:
   opening only) or 2 (invalid input: a key size, a length the output cannot hold, no randomness).
   Pointers may be NULL when their length is 0. Versioned by name. */

int authbridge_nettle_aes_gcm_seal_v1(const uint8_t *key, size_t key_count, const uint8_t *plain, size_t plain_count,
                                      const uint8_t *associated, size_t associated_count, uint8_t *output);

int authbridge_nettle_aes_gcm_open_v1(const uint8_t *key, size_t key_count, const uint8_t *sealed, size_t sealed_count,
                                      const uint8_t *associated, size_t associated_count, uint8_t *output);

/* HKDF-SHA256 (RFC 5869): output_count bytes, at most 255 × 32. */
int authbridge_nettle_hkdf_sha256_v1(const uint8_t *input_key_material, size_t input_count, const uint8_t *salt,
                                     size_t salt_count, const uint8_t *info, size_t info_count, uint8_t *output,
                                     size_t output_count);

/* HMAC-SHA256 (RFC 2104): 32 bytes to output. */
int authbridge_nettle_hmac_sha256_v1(const uint8_t *key, size_t key_count, const uint8_t *message, size_t message_count,
                                     uint8_t *output);

/* Verifies a JWS signature (RFC 7515 §5.2 step 8) of `algorithm`: RS256/384/512 (RSASSA-PKCS1-v1_5),
   PS256/384/512 (RSASSA-PSS, MGF1 with the same hash, salt as long as the hash: RFC 7518 §3.5),
   ES256/384/512 (ECDSA on P-256/384/521; the signature is r ‖ s of 32, 48 or 66 bytes each, RFC 7518
   §3.4: any other length, DER among them, is refused) or EdDSA (Ed25519, RFC 8037: 64 bytes).
   The public key is given by the decoded bytes of its JWK members: RSA `n` (first) and `e` (second),
   `curve` NULL; EC `crv` (curve), `x` (first), `y` (second); OKP `crv` (curve), `x` (first), no second.
   `signing_input` is ASCII(BASE64URL(header) ‖ '.' ‖ BASE64URL(payload)).

   Answers 0 (verified), 1 (refused: the signature does not verify, or is not of the algorithm's
   form), 2 (unusable key: an RSA modulus under 2048 or over 8192 bits, an even or out-of-range
   exponent, coordinates not of the curve's size, a point not on the curve, a `crv` that is not the
   algorithm's, an Ed25519 key not 32 bytes) or 3 (invalid request: an unknown algorithm, NULL with a
   length). Synchronous, any thread; nothing secret goes through it. */
int authbridge_nettle_jws_verify_v1(const char *algorithm, const char *curve, const uint8_t *first, size_t first_count,
                                    const uint8_t *second, size_t second_count, const uint8_t *signing_input,
                                    size_t signing_input_count, const uint8_t *signature, size_t signature_count);

#endif
