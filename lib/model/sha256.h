// sha256.h - SHA-256 as 64 lowercase hex digits (+ NUL).
#ifndef OSCAR_MODEL_SHA256_H
#define OSCAR_MODEL_SHA256_H

#include <stddef.h>

#include "util/error.h"

void osc_sha256_hex(const void * data, size_t n, char out[65]);
enum oscar_status osc_sha256_file(const char * path, char out[65]);

#endif
