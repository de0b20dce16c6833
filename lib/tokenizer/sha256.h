// sha256.h - SHA-256 (FIPS 180-4), streaming, for corpus provenance records.
// Small and dependency-free so liboscar does not need libcrypto.
#ifndef OSCAR_TOKENIZER_SHA256_H
#define OSCAR_TOKENIZER_SHA256_H

#include <stddef.h>
#include <stdint.h>

struct osc_sha256 {
    uint32_t h[8];
    uint64_t n_bytes;
    uint8_t  buf[64];
    size_t   n_buf;
};

void osc_sha256_init(struct osc_sha256 * s);
void osc_sha256_update(struct osc_sha256 * s, const void * data, size_t len);
void osc_sha256_final(struct osc_sha256 * s, uint8_t digest[32]);
// digest -> 64 lowercase hex characters + NUL.
void osc_sha256_hex(const uint8_t digest[32], char hex[65]);

#endif
