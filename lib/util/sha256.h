// sha256.h - SHA-256 digests as 64 lowercase hex digits (+ NUL), through
// OpenSSL's libcrypto. Used for provenance (model files, corpora, tokenizers)
// and Hub transfers.
#ifndef OSCAR_UTIL_SHA256_H
#define OSCAR_UTIL_SHA256_H

#include <stddef.h>
#include <stdint.h>

#include "util/error.h"

// Streaming digest: init, update any number of times, final (which releases
// the context; init again to reuse).
struct osc_sha256 {
    void * ctx; // EVP_MD_CTX
};

void osc_sha256_init(struct osc_sha256 * s);
void osc_sha256_update(struct osc_sha256 * s, const void * data, size_t len);
void osc_sha256_final(struct osc_sha256 * s, uint8_t digest[32]);
void osc_sha256_digest_hex(const uint8_t digest[32], char hex[65]);
// n bytes as 2n lowercase hex digits + NUL (any digest: SHA-1, SHA-256).
void osc_hex_encode(const unsigned char * d, size_t n, char * out);

// One-shot digest of a buffer, as hex.
void osc_sha256_hex(const void * data, size_t n, char out[65]);
// Streams the file in 1 MiB reads.
enum oscar_status osc_sha256_file(const char * path, char out[65]);

#endif
