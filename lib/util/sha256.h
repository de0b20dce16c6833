// sha256.h - SHA-256 digests as 64 lowercase hex digits (+ NUL), through
// OpenSSL's libcrypto. Used for provenance (model files, corpora, tokenizers)
// and Hub transfers.
#ifndef OSCAR_UTIL_SHA256_H
#define OSCAR_UTIL_SHA256_H

#include <stddef.h>

#include "util/error.h"

void osc_sha256_hex(const void * data, size_t n, char out[65]);
// Streams the file in 1 MiB reads.
enum oscar_status osc_sha256_file(const char * path, char out[65]);

#endif
